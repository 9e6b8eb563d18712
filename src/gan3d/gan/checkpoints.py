"""Training checkpoints: everything needed to continue a run exactly, in one atomic file.

A checkpoint ``checkpoints/epoch-0003.npz`` (written after epoch index 3 finished) holds

* every model and optimiser variable (weights, BatchNorm statistics, RMSprop velocities and step
  counters, learning rate), as ``v00000 ... vNNNNN`` in :meth:`gan3d.gan.step.Step.state_variables` order;
* ``meta``: a JSON document with the resolved configuration, the epoch, the world size, the history
  so far, the variables' paths and shapes (checked on restore), and provenance.

Random state is not stored: every seed is derived from (seed, rank, epoch) at the start of each
epoch (:meth:`gan3d.gan.horovod.HorovodStep.reseed`), and the data order from (seed, epoch), so the epoch
number is all a resumed run needs to draw exactly what the uninterrupted run would have drawn.

:func:`start` says on rank 0 where a run starts (a resume, a fork or from scratch) before any
model exists; :func:`restore` then loads that checkpoint into the new step. A checkpoint can also
start a *new* run (:func:`fork`, ``train.fork_from``): the warm start of
the convergence studies and of a 2-worker run continuing a 1-worker one. Unlike a resume, a fork
may change the worker count, the learning-rate rule, the precision, the seed or the data; what it
changed, the parent's file (with its SHA-256), epoch, configuration and provenance are recorded in
the fork's ``config.json`` and in every checkpoint it writes, so a fork of a fork stays traceable.

Files are written through :func:`gan3d.io.atomic_path`: a crash leaves the previous checkpoint
intact and never a half-written one. The newest ``keep`` checkpoints are kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from .. import console
from ..config import Config, lr_factor, to_dict
from ..exceptions import CheckpointError
from ..io import atomic_path, ensure_dir, provenance, repository_of, resolve_path, write_json

__all__ = ["save_checkpoint", "latest_checkpoint", "all_checkpoints", "load_checkpoint",
           "load_latest", "restore_variables", "check_compatible", "fork", "fork_source",
           "Start", "start", "restore", "lineage", "TRAJECTORY_KEYS"]

log = console.get_logger(__name__)

_NAME = re.compile(r"^epoch-(\d{4,})\.npz$")
# Settings that change what training computes: a resumed run must not differ in them.
TRAJECTORY_KEYS = (
    "data.source", "data.n_showers", "data.n_files", "data.energy_min", "data.energy_max",
    "data.seed", "data.test_fraction", "train.batch_size", "train.learning_rate", "train.rho",
    "train.scale_lr", "train.lr_rule", "train.lr_warmup_epochs", "train.sync_every",
    "train.loss_weights", "train.label_flip", "train.precision", "train.cpu_layers",
    "train.steps_per_epoch", "train.seed", "train.data_order",
)


def save_checkpoint(folder: str | Path, epoch: int, variables: list, cfg: Config,
                    history: list[dict], workers: int, keep: int = 2,
                    fork: dict | None = None) -> Path:
    """Write the checkpoint after ``epoch`` (0-based) atomically; keep the newest ``keep``.
    ``fork``: what :func:`fork` recorded, when the run started from another run's checkpoint."""
    folder = ensure_dir(folder)
    meta = {
        "epoch": epoch,
        "workers": workers,
        "config": to_dict(cfg),
        "history": history,
        "variables": [[v.path, list(v.shape), str(v.dtype)] for v in variables],
        "provenance": provenance(),
    }
    if fork:
        meta["fork"] = fork
    arrays = {f"v{i:05d}": np.asarray(v.numpy()) for i, v in enumerate(variables)}
    path = folder / f"epoch-{epoch:04d}.npz"
    # Zipped in memory, then written in one go: a full disk fails that one write (a named
    # error from atomic_path), not a zip file half-closed that complains again when collected.
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.array(json.dumps(meta, default=str)), **arrays)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getbuffer())
    for old in _checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def _checkpoints(folder: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in folder.glob("epoch-*.npz") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def all_checkpoints(folder: str | Path) -> list[Path]:
    """The checkpoints in ``folder``, oldest first."""
    folder = Path(folder)
    return _checkpoints(folder) if folder.is_dir() else []


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The newest checkpoint in ``folder``, or None."""
    folder = Path(folder)
    found = _checkpoints(folder) if folder.is_dir() else []
    return found[-1] if found else None


def load_checkpoint(path: str | Path) -> tuple[dict[str, Any], list[np.ndarray]]:
    """(meta, arrays) of a checkpoint; :class:`CheckpointError` if it is missing or damaged."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            arrays = [data[f"v{i:05d}"] for i in range(len(meta["variables"]))]
    except Exception as exc:  # noqa: BLE001 - zip, JSON and key errors all mean "damaged"
        raise CheckpointError(f"checkpoint {path} is damaged ({type(exc).__name__}: {exc}); "
                              "delete it to resume from the one before") from None
    return meta, arrays


def load_latest(folder: str | Path, warn=None
                ) -> tuple[Path, dict[str, Any], list[np.ndarray]] | None:
    """The newest checkpoint of ``folder`` that loads: ``(path, meta, arrays)``, or None if there
    is none. A damaged newer one (a disk error, a copy cut short) is reported through ``warn``
    and skipped, so that a run resumes from the one before instead of not at all."""
    found = all_checkpoints(folder)
    for older, path in reversed(list(enumerate(found))):
        try:
            meta, arrays = load_checkpoint(path)
        except CheckpointError as exc:
            if warn:
                warn(f"{exc}; " + ("trying the checkpoint before it" if older else
                                   "it was the oldest: no checkpoint of this run loads"))
            continue
        return path, meta, arrays
    return None


def restore_variables(variables: list, meta: dict, arrays: list[np.ndarray], path: str | Path) -> None:
    """Assign ``arrays`` to ``variables`` after checking that count and shapes match."""
    saved = meta["variables"]
    if len(saved) != len(variables):
        raise CheckpointError(f"checkpoint {path} holds {len(saved)} variables, the model has "
                              f"{len(variables)}: it was written by a different model")
    for v, (name, shape, _), a in zip(variables, saved, arrays):
        if tuple(shape) != tuple(v.shape):
            raise CheckpointError(f"checkpoint {path}: variable {name} has shape {tuple(shape)}, "
                                  f"the model's {v.path} has {tuple(v.shape)}")
        v.assign(a)


def _changes(saved: dict, cfg: Config) -> dict[str, list[Any]]:
    """``{key: [saved value, cfg's value]}`` for each of :data:`TRAJECTORY_KEYS` in which ``cfg``
    differs from a saved configuration (:func:`~gan3d.config.to_dict` form). A key added since it
    was saved counts with its default, which keeps the old behaviour."""
    default, now = dataclasses.asdict(Config()), dataclasses.asdict(cfg)
    found = {}
    for key in TRAJECTORY_KEYS:
        old, new = _at(saved, key), _at(now, key)
        old = _at(default, key) if old is _ABSENT else old
        if _as_json(old) != _as_json(new):
            found[key] = [old, new]
    return found


_ABSENT = object()


def _at(tree: dict, key: str) -> Any:
    """The value at the dotted ``key`` of nested dicts, or ``_ABSENT``."""
    for part in key.split("."):
        tree = tree.get(part, _ABSENT) if isinstance(tree, dict) else _ABSENT
    return tree


def _as_json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value  # JSON has lists, not tuples


def check_compatible(meta: dict, cfg: Config, path: str | Path, workers: int | None = None) -> None:
    """Refuse to resume under settings that would change the trajectory (epochs may grow),
    including another number of ``workers``: with it the learning rate (x workers) and every
    rank's shard of the data would change silently."""
    # Keys added since the checkpoint was written had their default then.
    differ = _changes(meta["config"], cfg)
    was = int(meta.get("workers", workers or 1))
    lr_old, lr_new = (cfg.train.learning_rate * lr_factor(cfg.train, n)
                      for n in (was, workers or was))
    if workers is not None and workers != was:
        raise CheckpointError(
            f"cannot resume from {path}: it was written by {was} worker(s), this run has "
            f"{workers}. The learning rate would change from {lr_old:g} to {lr_new:g} and each "
            f"rank's shard of the showers would change; resume with {was} worker(s), or start a "
            "new train.output")
    if differ:
        detail = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in differ.items())
        raise CheckpointError(f"cannot resume from {path}: settings differ ({detail}); use the "
                              "checkpoint's settings or a new train.output")


def fork_source(path: str | Path) -> Path:
    """The checkpoint file ``train.fork_from`` names: the file itself, or a run's folder's newest
    (``FOLDER/checkpoints/epoch-*.npz`` or ``FOLDER/epoch-*.npz``)."""
    p = Path(path)
    if p.is_dir():
        found = latest_checkpoint(p / "checkpoints") or latest_checkpoint(p)
        if found is None:
            raise CheckpointError(f"train.fork_from = {path}: the folder holds no checkpoint "
                                  "(epoch-NNNN.npz, or checkpoints/epoch-NNNN.npz); name a file")
        return found
    if not p.is_file():
        raise CheckpointError(f"train.fork_from = {path}: no such checkpoint file or run folder")
    return p


def _named(path: Path) -> str:
    """``path`` as a fork record names it: relative to its git checkout where it lies in one (a
    committed checkpoint, ``studies/warm-start/epoch-0026.npz``: no folder of the machine that
    trained it), else as given."""
    repo = repository_of(path)
    try:
        return str(path.resolve().relative_to(repo)) if repo else str(path)
    except ValueError:  # a link out of the checkout
        return str(path)


def fork(path: str | Path, cfg: Config, workers: int) -> Start:
    """Where a run forked from the checkpoint ``path`` (a file or a run's folder) starts: its
    epoch, its history, the file to restore (:func:`restore`) and the fork record - the file
    (relative to its checkout, if in one) and its SHA-256, its epoch, workers, configuration and
    provenance, and every trajectory setting this run changes (``changed``: ``{key: [parent's,
    this run's]}``, the worker count included) - which goes into the new run's config.json and
    checkpoints. ``cfg.train.epochs`` counts from the parent's start, so it must exceed the
    checkpoint's epoch."""
    source = fork_source(path)
    meta, _ = load_checkpoint(source)
    done = int(meta["epoch"])
    if cfg.train.epochs <= done:
        raise CheckpointError(
            f"train.fork_from = {source} has trained {done} epochs and train.epochs = "
            f"{cfg.train.epochs}: a fork continues the count, so set train.epochs above {done} "
            f"(e.g. --epochs {done + 10} for 10 more)")
    changed = _changes(meta["config"], cfg)
    was = int(meta.get("workers", 1))
    if was != workers:
        changed["workers"] = [was, workers]
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    record = {"from": _named(source), "sha256": digest, "epoch": done, "workers": was,
              "showers_seen": (meta["history"][-1].get("showers_seen") if meta["history"]
                               else None),
              "changed": changed, "config": meta["config"],
              "provenance": meta.get("provenance"), "parent_fork": meta.get("fork")}
    return Start(done, list(meta["history"]), str(source), False, record)


def lineage(record: dict | None) -> list[dict]:
    """The forks a run descends through, oldest first, from the fork record its checkpoints hold
    (each record names its parent's as ``parent_fork``): ``[]`` for a run from scratch. A long run
    forked from the learning curve and forked again to change its learning rate has two: the
    first says where it left the learning curve, the last what it changed most recently."""
    chain = []
    while record:
        chain.append(record)
        record = record.get("parent_fork")
    return chain[::-1]


@dataclasses.dataclass
class Start:
    """Where a run starts: after ``epoch`` epochs (0: from scratch) with their ``history``,
    restoring the checkpoint ``source`` (None: nothing to restore); ``resumed`` for
    ``--resume``; ``fork``: the fork record of a forked run (a resumed fork keeps its own)."""

    epoch: int = 0
    history: list = dataclasses.field(default_factory=list)
    source: str | None = None
    resumed: bool = False
    fork: dict | None = None


def start(cfg: Config, out: Path, workers: int, resume: bool, say) -> Start:
    """On rank 0, before any model exists: where this run starts. ``--resume``: the newest
    checkpoint of ``out`` that loads, under the same settings and worker count; else
    ``train.fork_from`` (:func:`fork`, recorded in ``out/config.json``); else from scratch.
    ``say`` reports what is done (rank 0's log)."""
    if resume:
        found = load_latest(out / "checkpoints", warn=log.warning)
        if found is not None:
            path, meta, _ = found
            check_compatible(meta, cfg, path, workers)
            if meta["epoch"] > cfg.train.epochs:
                raise CheckpointError(f"{path} has {meta['epoch']} epochs, more than "
                                      f"train.epochs = {cfg.train.epochs}; raise train.epochs "
                                      "to continue")
            say(f"resuming after epoch {meta['epoch']} from {path}")
            return Start(meta["epoch"], meta["history"], str(path), True, meta.get("fork"))
        first = f"forking {cfg.train.fork_from}" if cfg.train.fork_from else "starting from scratch"
        say(f"no usable checkpoint in {out / 'checkpoints'}: {first}")
    if not cfg.train.fork_from:
        return Start()
    forked = fork(resolve_path(cfg.train.fork_from), cfg, workers)
    changes = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in forked.fork["changed"].items())
    say(f"forked from {forked.fork['from']} after epoch {forked.epoch} "
        f"(changed: {changes or 'nothing'})")
    write_json(out / "config.json", {"config": to_dict(cfg), "fork": forked.fork,
                                     "provenance": provenance()})
    return forked


def restore(variables: list, path: str | Path) -> None:
    """Load the checkpoint ``path`` into ``variables`` (count and shapes checked)."""
    meta, arrays = load_checkpoint(path)
    restore_variables(variables, meta, arrays, path)
