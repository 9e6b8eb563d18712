"""The reference generator shipped with the package: a 3DGAN trained longer than a quick run can.

``gan3d/gan/reference/`` holds the weights of the generator and discriminator of one training run
(``generator.weights.h5``, ``discriminator.weights.h5``: the exact 3DGAN of
:mod:`gan3d.gan.model`, float32) and ``reference.json``: how it was trained (configuration,
provenance, showers seen), its learning curve (the physics monitors of every epoch,
:mod:`gan3d.validation.monitors`) and its final monitors against the targets. It is installed
with the package, so notebooks 02 and 04, ``gan3d validate reference`` and
``gan3d simulate --generator reference`` can use it without training anything.

Beside it, in folders of the same form, the package ships the long runs (:data:`SHIPPED`:
``long-1w``, ``long-2w``, ``long-2w-none``): the 1-worker and the 2-worker generator of
``studies/long-*-bf16/`` (lr x 2) and the 2-worker one at the plain lr, exported from their newest
committed checkpoints, so notebook 04 and ``gan3d validate long-1w long-2w long-2w-none``
validate them without the training checkpoints (weights and optimiser states).
Their ``reference.json`` also names the checkpoint they came from (its sha256) and the forks
the run descends through.

:func:`export` (``gan3d export``) makes such a folder from a training output folder or one of its
checkpoints; any folder it wrote can be passed where a training folder is expected.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import console
from ..exceptions import CheckpointError
from ..io import atomic_path, check_not_busy, check_output, write_json
from ..validation import monitors
from .history import read_history

log = console.get_logger(__name__)

__all__ = ["NAME", "FOLDER", "SHIPPED", "available", "folder_of", "info", "label", "load",
           "record", "networks_from_checkpoint", "export", "portable", "best"]

NAME = "reference"  # what users pass where a training folder is expected
FOLDER = Path(str(resources.files("gan3d.gan").joinpath("reference")))
# The generators shipped with the package, by the name users pass: the reference generator and
# the long runs' pair (studies/long-1w-bf16, studies/long-2w-bf16) and the third long run (2
# workers at the plain lr, studies/long-2w-none-bf16).
SHIPPED = {NAME: FOLDER, "long-1w": FOLDER / "long-1w", "long-2w": FOLDER / "long-2w",
           "long-2w-none": FOLDER / "long-2w-none"}
_G, _D, _INFO = "generator.weights.h5", "discriminator.weights.h5", "reference.json"


def best() -> str:
    """The shipped generator a user reaches first (``gan3d simulate``'s default): the one of
    :data:`SHIPPED` that met the most physics targets when it was exported (its
    ``reference.json``; ties: the one trained on more showers)."""
    ranked = [(info(f)["final_monitors"]["targets_met"], info(f)["showers_seen"], name)
              for name, f in SHIPPED.items() if available(f)]
    if not ranked:
        _check(FOLDER)  # names what is missing
    return max(ranked)[2]


def available(folder: Path = FOLDER) -> bool:
    return all((Path(folder) / f).is_file() for f in (_G, _D, _INFO))


def folder_of(where) -> Path | None:
    """The folder of exported weights ``where`` names: a shipped generator's name
    (:data:`SHIPPED`) or a folder :func:`export` wrote; None for anything else (a training
    output folder, a checkpoint)."""
    folder = SHIPPED.get(str(where), Path(where))
    return folder if available(folder) else None


def _check(folder: Path) -> None:
    if not available(folder):
        raise CheckpointError(f"no reference generator in {folder} (this installation lacks the "
                              "package data); train one with `gan3d train` and pass its folder")


def info(folder: Path = FOLDER) -> dict:
    """``reference.json``: training settings, showers seen, learning curve, final monitors."""
    _check(folder)
    return json.loads((folder / _INFO).read_text())


def label(folder: Path = FOLDER) -> str:
    """``"reference generator (24,000 showers of training)"``."""
    return f"reference generator ({info(folder)['showers_seen']:,} showers of training)"


def record(folder: Path = FOLDER) -> dict:
    """What an exported generator says of its run, in the form of
    :func:`gan3d.validation.study.checkpoint_record` (epoch, workers, showers seen, precision,
    the learning curve up to the shipped epoch as ``history``, the configuration, provenance,
    ``fork``, ``forks``),
    and ``exported_from``: the checkpoint it was exported from, with its sha256."""
    meta = info(folder)
    curve = meta["learning_curve"]
    return {"path": str(folder), "epoch": meta["epoch"], "workers": meta.get("workers", 1),
            "showers_seen": meta["showers_seen"], "precision": meta.get("precision"),
            "history": [r for r in curve if r.get("epoch", 0) <= meta["epoch"]],
            "config": meta.get("config"), "provenance": meta.get("provenance"), "fork": meta.get("fork"),
            "forks": meta.get("forks", []), "exported_from": meta.get("source")}


def load(folder: Path = FOLDER, *, discriminator: bool = False):
    """The generator exported into ``folder`` (the reference generator by default; with
    ``discriminator=True``, ``(generator, discriminator)``)."""
    from .model import build_discriminator, build_generator

    _check(folder)
    gen = build_generator()
    gen.load_weights(folder / _G)
    if not discriminator:
        return gen
    disc = build_discriminator()
    disc.load_weights(folder / _D)
    return gen, disc


def networks_from_checkpoint(path, loaded: tuple[dict, list] | None = None
                             ) -> tuple[object, object]:
    """G and D (float32) with the weights and BatchNorm statistics of a training checkpoint
    (:mod:`gan3d.gan.checkpoints`: G's variables, then D's, then the optimisers'), shapes
    checked, without building the training step. ``loaded``: its ``(meta, arrays)`` when the
    caller has read it already."""
    from . import model  # imports TensorFlow
    from .checkpoints import load_checkpoint
    from .step import is_seed

    meta, arrays = loaded or load_checkpoint(path)
    g, d = model.build_generator(), model.build_discriminator()
    variables = [v for net in (g, d) for v in net.variables if not is_seed(v)]
    if len(arrays) < len(variables):
        raise CheckpointError(f"checkpoint {path} holds {len(arrays)} variables, fewer than the "
                              f"3DGAN's {len(variables)}: it was written by another model")
    for v, (name, shape, _), a in zip(variables, meta["variables"], arrays):
        if tuple(shape) != tuple(v.shape):
            raise CheckpointError(f"checkpoint {path}: variable {name} has shape {tuple(shape)}, "
                                  f"the 3DGAN's {v.path} has {tuple(v.shape)}")
        v.assign(a)
    return g, d


def _networks(run: Path, checkpoint: Path | None = None):
    """(generator, discriminator, history rows, config, provenance, ``(checkpoint, its meta)``
    or None) of a finished run, or of the newest checkpoint of a run still training (or
    stopped), or of the given ``checkpoint``."""
    from . import checkpoints
    from .model import load_discriminator, load_generator

    if checkpoint is None and (run / "generator.keras").is_file() \
            and (run / "discriminator.keras").is_file():
        written = json.loads((run / "config.json").read_text())
        return (load_generator(run / "generator.keras"),
                load_discriminator(run / "discriminator.keras"), read_history(run),
                written.get("config"), written.get("provenance"), None)
    if checkpoint is None:
        found = checkpoints.load_latest(run / "checkpoints", warn=log.warning)
        if found is None:
            raise CheckpointError(f"{run} has no generator.keras and no checkpoint: export a "
                                  "training run (finished, or with at least one epoch done)")
        checkpoint, meta, arrays = found
    else:
        meta, arrays = checkpoints.load_checkpoint(checkpoint)
    # float32, whatever it trained in; the checkpoint read once
    gen, disc = networks_from_checkpoint(checkpoint, (meta, arrays))
    return gen, disc, meta["history"], meta["config"], meta["provenance"], (checkpoint, meta)


def export(run: str | Path, folder: Path = FOLDER, *, note: str = "",
           monitor_showers: int = 256, checkpoint: str | Path | None = None,
           force: bool = False) -> dict:
    """Ship the networks of the training output folder ``run`` (weights only, float32) into
    ``folder``: its ``generator.keras`` and ``discriminator.keras`` when it finished, else its
    newest checkpoint, or the epoch ``checkpoint`` (e.g. the one whose monitors were best: GAN
    training wanders); ``run`` may be a checkpoint file itself. The final monitors are measured
    again on ``monitor_showers`` showers per energy; the learning curve is the run's whole
    history (``history.jsonl`` when it is there: the monitors it recorded every epoch),
    ``epoch`` says which epoch was shipped. From a checkpoint, ``source`` names it (with its
    sha256) and ``forks`` the forks its run descends through (:func:`~.checkpoints.lineage`).
    A ``folder`` that holds another export (its ``reference.json``) is refused before any work
    unless ``force``; a file there is refused; so is a ``run`` that a training writes now."""
    from .checkpoints import lineage
    from .model import generate_showers

    folder = check_output(folder, folder=True, holds=_INFO, force=force)

    run = Path(run)
    if checkpoint is None and run.is_file():
        run, checkpoint = run.parent, run
    for place in (run, run.parent):  # a run folder, or its checkpoints/ folder
        check_not_busy(place)  # a run still writing it: refused at once, naming the holder
    with console.signals_at_checkpoints():  # a SIGTERM ends it here, before any file is written
        gen, disc, rows, run_config, run_provenance, ckpt = _networks(
            run, Path(checkpoint) if checkpoint else None)
        if not rows or "showers_seen" not in rows[-1]:
            raise CheckpointError(f"{run}: its history has no showers_seen (made by gan3d < 0.3)")
        shipped = rows[-1]
        if (run / "history.jsonl").is_file():  # the run's own history, if it goes further
            full = read_history(run)
            rows = full if len(full) >= len(rows) else rows
        n, energies = monitor_showers, monitors.MONITOR_ENERGIES
        showers = generate_showers(gen, np.repeat(energies, n), seed=4242)
    final = monitors.compare({e: showers[i * n:(i + 1) * n] for i, e in enumerate(energies)},
                             n_reference=n)
    curve = [{k: v for k, v in r.items() if k.startswith("mon_") or k in _CURVE_KEYS} for r in rows]
    meta = {"showers_seen": int(shipped["showers_seen"]), "epoch": int(shipped["epoch"]),
            "epochs": len(rows), "workers": int(shipped.get("workers") or 1),
            "precision": shipped.get("precision"),
            "note": note, "config": portable(run_config), "provenance": run_provenance,
            "final_monitors": final,
            "targets": {name: {"kind": k, "tolerance": t} for name, (k, t) in monitors.TARGETS.items()},
            "showers_needed": monitors.showers_needed(curve, energies), "learning_curve": curve}
    if ckpt is not None:
        path, ck = ckpt
        meta.update(workers=int(ck.get("workers", meta["workers"])),
                    source={"checkpoint": _portable_path(path),
                            "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()},
                    fork=_portable_fork(ck.get("fork")),
                    forks=[_portable_fork(f) for f in lineage(ck.get("fork"))])
    folder.mkdir(parents=True, exist_ok=True)
    for net, name in ((gen, _G), (disc, _D)):
        with atomic_path(folder / name, suffix=".weights.h5") as tmp:
            net.save_weights(tmp)
    write_json(folder / _INFO, meta)
    return meta


def _portable_path(path) -> str:
    """A file's path from its ``studies/`` or ``results/`` folder on, else its name: no folder of
    the machine it was made on."""
    parts = Path(path).parts
    for under in ("studies", "results"):
        if under in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(under) - 1:])
    return Path(path).name


def _portable_fork(fork: dict | None) -> dict | None:
    """A fork record without its parent's (:func:`export` lists them in turn), paths portable."""
    if not fork:
        return fork
    out = {k: v for k, v in fork.items() if k != "parent_fork"}
    out["from"] = _portable_path(out.get("from", ""))
    out["config"] = portable(out.get("config"))
    return out


def portable(config: dict | None) -> dict | None:
    """A run's configuration without the folders of the machine it ran on: ``data.path`` and
    ``train.output`` keep their last name only (under ``data/`` and ``results/``),
    ``train.fork_from`` its path from ``studies/`` or ``results/`` on (the command line gave it
    as an absolute path before it recorded paths inside the checkout from its root)."""
    if not config:
        return config
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for section, key, under in (("data", "path", "data"), ("train", "output", "results")):
        if isinstance(out.get(section), dict) and out[section].get(key):
            out[section][key] = f"{under}/{Path(out[section][key]).name}"
    train = out.get("train")
    if isinstance(train, dict) and Path(train.get("fork_from") or "").is_absolute():
        train["fork_from"] = _portable_path(train["fork_from"])
    return out


_CURVE_KEYS: Sequence[str] = ("epoch", "showers_seen", "d_loss", "g_loss", "test_d_loss",
                              "test_g_loss", "time_train_s", "time_epoch_s", "showers_per_s",
                              "lr", "batch_size", "workers", "precision")
