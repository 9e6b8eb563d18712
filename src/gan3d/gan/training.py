"""Data-parallel training of 3DGAN: one ``train(config)`` for every launcher and both backends.

One process per worker, all running the same function; world size 1 is the same code path::

    gan3d train --profile quick --workers 2          # the CLI launches 2 MPI ranks itself
    mpirun -np 4 python -m gan3d train --profile paper
    horovodrun -np 4 python -m gan3d train --profile paper
    gan3d train --workers 2 --backend jax            # Keras on JAX, jax.distributed
    train_on_engines(cfg, workers=2)                 # ipyparallel MPI engines (parallel.cluster)

The backend (``train.backend``: Horovod on TensorFlow, or JAX) plugs in how the processes join,
how ``auto`` precision resolves and the step itself (:mod:`gan3d.gan.step`); everything else
here - data shards, learning-rate rules, evaluation, monitors, history, checkpoints - is one code
for both. This module imports neither TensorFlow nor Keras at import time: the JAX backend sets
Keras' backend first.

:func:`train` reads in the order of Horovod's examples: 1. ``init`` (threads = cores / local
ranks, MPI yielding, one GPU per rank); 2. rank 0 checks and prepares everything a user can get
wrong - settings, output folder, data, the checkpoint to start from - in one collective, so every
rank stops with the same named error; 3. the networks and optimisers (learning rate x workers, or
x sqrt(workers), optionally warmed up: :func:`learning_rate`, set at every step); 4. models AND
optimiser state broadcast from rank 0; 5. the loop: a disjoint data shard per rank
(:class:`gan3d.data.sharding.ShardedShowers`), per-rank seeds, the step (gradients averaged before
every update: :mod:`gan3d.gan.step`), evaluation, monitors, and logging and files from rank 0
only. Lines that talk to other ranks are marked ``DISTRIBUTED``.

Outputs in ``resolve_path(cfg.train.output)`` (rank 0 writes; every file atomically):

* ``history.jsonl`` - one JSON object per epoch, fields :data:`HISTORY_FIELDS`:
  ``epoch`` (1-based), ``lr``, the train losses ``d_loss d_bce d_aux d_ecal g_loss g_bce g_aux
  g_ecal`` (means over the epoch's steps and all ranks; ``*_loss`` is the weighted total, the
  others the unweighted BCE / energy MAPE / ECAL-sum MAPE), the test losses ``test_*`` (None when
  ``eval_mode`` is ``none``), ``eval_mode``, ``time_train_s``, ``time_eval_s``, ``time_epoch_s``
  (wall seconds on rank 0), ``timed`` (False for the ``timing_warmup_epochs`` first epochs, which
  the paper excluded), ``showers_per_s`` (training showers of all ranks / time_train_s),
  ``workers``, ``steps``, ``batch_size`` (per worker), ``precision``, ``threads`` (TensorFlow
  intra-op threads of each worker), ``showers_seen`` (training showers of all ranks since the
  start), ``time_monitor_s``, and local SGD's ``sync_every``, ``syncs`` and ``time_sync_s``
  (:mod:`gan3d.gan.local_sgd`; 0 syncs when k = 1); ``time_epoch_s`` is
  training plus evaluation (rank 0's bookkeeping, history and checkpoint writing, not included);
  then, with ``train.monitor_showers`` > 0, the physics monitors ``mon_*`` of rank 0's generator
  (:func:`gan3d.validation.monitors.history_row`: deviations from the reference showers at
  50-400 GeV), computed after the evaluation while the other ranks wait;
* ``tb/`` TensorBoard scalars of the same numbers (event files are append-only streams);
* ``checkpoints/epoch-NNNN.npz`` after every epoch (:mod:`gan3d.gan.checkpoints`);
  ``--resume`` continues from the newest under the same settings; ``train.fork_from`` (``gan3d
  train --fork-from CHECKPOINT``) starts a new run from another run's checkpoint - weights,
  optimiser states, BatchNorm statistics, history - under other workers, lr rule, precision, seed
  or data, recorded under ``fork`` in ``config.json`` and in every checkpoint it writes;
* ``generator.keras``, ``discriminator.keras`` at the end; ``config.json`` (config + provenance).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import console
from ..config import Config, lr_factor, to_dict
from ..data import files, sharding
from ..data.generate import generate_dataset
from ..exceptions import Gan3dError, NonFiniteLoss, OutputExists
from ..io import ensure_dir, lock_run, provenance, remove_temporaries, unlock_run, write_json
from ..parallel import distributed
from ..io import resolve_path
from ..validation import monitors
from . import checkpoints
from .history import (HISTORY_FIELDS, HISTORY_SCHEMA, HistoryRow, Progress, TensorBoard,
                      read_history, write_history)
from .history import LOSSES as _LOSSES
from .local_sgd import LocalSync
from .step import E_RANGE
from .step import get as backend_named

log = console.get_logger(__name__)

_KEYED = 0x9E3779B9  # the epoch word of draws keyed by the global batch (data_order global)
_MONITOR_SEED = 2024  # the monitors' latent vectors: the same every epoch and every run

__all__ = ["TrainResult", "HISTORY_FIELDS", "train", "learning_rate", "read_history",
           "build_step", "collective", "data_files"]


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` made: paths (strings) and numbers. ``epoch_times`` has one dict per
    epoch of this run with ``epoch``, ``time_train_s``, ``time_eval_s``, ``time_epoch_s``,
    ``timed`` and ``showers_per_s``; ``final`` is the last history row."""

    output: str
    history: str
    checkpoint: str | None
    generator: str
    discriminator: str
    config: str
    tensorboard: str
    workers: int
    epochs: int
    resumed_from: int | None
    epoch_times: list[dict]
    final: dict
    forked_from: str | None = None  # the checkpoint this run was forked from (train.fork_from)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def learning_rate(cfg: Config, workers: int, epoch: float) -> float:
    """RMSprop learning rate at (fractional, 0-based) ``epoch``: lr x workers (``lr_rule``
    linear) or lr x sqrt(workers) (sqrt) if scale_lr, reached linearly from lr over
    ``lr_warmup_epochs`` when that is > 0."""
    t = cfg.train
    factor = lr_factor(t, workers)
    ramp = 1.0 if t.lr_warmup_epochs == 0 else min(1.0, epoch / t.lr_warmup_epochs)
    return t.learning_rate * (1.0 + (factor - 1) * ramp)


# ---------------------------------------------------------------------------------------------
# Set-up shared by train() and the step-rate probe (gan3d.scaling.probes.measure_step_rate)


def collective(world, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on rank 0 and give its result - or its error - to every rank.

    So a user error found by rank 0 (bad folder, missing data) stops all ranks at the same point
    with the same message, instead of leaving the others waiting in a collective.
    """
    outcome, error = None, None
    if world.is_root:
        try:
            outcome = (True, fn())
        except Exception as exc:  # noqa: BLE001 - every rank must learn that rank 0 failed
            error = exc
            outcome = (False, exc if isinstance(exc, Gan3dError) else f"{type(exc).__name__}: {exc}")
    ok, value = distributed.broadcast_object(outcome)  # DISTRIBUTED
    if ok:
        return value
    if error is not None:
        raise error
    raise value if isinstance(value, Gan3dError) else RuntimeError(f"rank 0 failed: {value}")


def data_files(cfg: Config, workers: int = 1) -> tuple[list[str], list[str]]:
    if cfg.data.source == "synthetic":
        # Idempotent: reuses intact files. Inside an MPI job rank 0 is bound to its own cores,
        # so it writes alone (make large sets beforehand with `gan3d data generate`).
        generate_dataset(cfg.data, workers=1 if workers > 1 else None)
    folder = resolve_path(cfg.data.path)
    found = files.list_files(folder)
    train_files, test_files = files.split_files(found, cfg.data.test_fraction)
    for path in found:  # bad data stops here, named, before any rank builds a model
        for note in files.screen(path, cfg.data.theta_window or None):
            log.warning("%s", note)
    return [str(f) for f in train_files], [str(f) for f in test_files]


def build_step(cfg: Config):
    """The step of ``cfg.train.backend`` with rank 0's initial weights (before the broadcast)."""
    return backend_named(cfg.train.backend).build_step(cfg)


def _prepare_output(cfg: Config, resume: bool, force: bool,
                    held: contextlib.ExitStack) -> Path:
    """Lock the output folder for this run (``held`` frees it when :func:`train` ends) and create
    it (an unwritable one fails here). A folder holding another run is refused unless the run resumes it or
    ``force`` replaces it; a fresh run forgets old epochs."""
    out = lock_run(cfg.train.output)
    held.callback(unlock_run, out)
    held = sorted((out / "checkpoints").glob("epoch-*.npz"))
    if not (resume or force) and (held or (out / "history.jsonl").is_file()
                                  or (out / "generator.keras").is_file()):
        last = f", the newest {held[-1].name}" if held else ""
        raise OutputExists(f"{out} holds another run ({len(held)} checkpoint(s){last}): "
                           "--resume continues it; --force or another --output replaces it")
    ensure_dir(out)
    ensure_dir(out / "checkpoints")
    for folder in (out, out / "checkpoints"):  # what a writer killed mid-write left behind
        for left in remove_temporaries(folder):
            log.warning("removed %s, left by a run that was stopped while writing it", left)
    write_json(out / "config.json", {"config": to_dict(cfg), "provenance": provenance()})
    if not resume:  # nothing of an earlier run in this folder may pass for this run's
        stale = [*(out / "checkpoints").glob("epoch-*.npz"), *(out / "tb").glob("events.*"),
                 *(out / n for n in ("history.jsonl", "generator.keras", "discriminator.keras"))]
        for old in stale:
            old.unlink(missing_ok=True)
    return out


def _say(text: str) -> None:
    log.info("%s", text)  # rank 0 only: the others log warnings alone (gan3d.console)


@dataclasses.dataclass
class _SetUp:
    """What rank 0 decided before the first step, for every rank."""

    cfg: Config                  # with train.precision auto resolved
    output: Path
    train_files: list[str]
    test_files: list[str]
    start: checkpoints.Start     # from scratch, a resume or a fork


def _set_up(be, cfg: Config, workers: int, resume: bool, force: bool,
            held: contextlib.ExitStack) -> _SetUp:
    """Rank 0: everything a user can get wrong, checked before any model is built - the settings
    the backend refuses (``auto`` precision resolved on rank 0's device first), the output folder
    (locked for this run: a second run into it refuses at once), the data, and the checkpoint a
    resume or a fork starts from."""
    cfg = be.resolve(cfg)
    be.check(cfg)
    out = _prepare_output(cfg, resume, force, held)
    train_files, test_files = data_files(cfg, workers)
    if workers != cfg.train.workers:
        _say(f"running on {workers} worker(s); train.workers = {cfg.train.workers} only tells "
             "launchers how many to start")
    return _SetUp(cfg, out, train_files, test_files,
                  checkpoints.start(cfg, out, workers, resume, _say))


# ---------------------------------------------------------------------------------------------
# The run


def train(cfg: Config, *, resume: bool = False, force: bool = False) -> TrainResult:
    """Train 3DGAN as configured, as one rank of however many were launched; see module doc.
    ``resume`` continues the run in ``train.output``; without it a folder holding another run is
    refused unless ``force`` replaces that run.

    Raises OutputExists (OutputBusy: another run writes the folder now), OutputNotWritable,
    DataFileMissing (and the other data errors), CheckpointError or ConfigError before the first
    step, NonFiniteLoss at the step whose loss is NaN/inf (the last
    good checkpoint stays in place). Returns the same :class:`TrainResult` on every rank.
    """
    be = backend_named(cfg.train.backend)
    be.prepare()  # the JAX backend: Keras on JAX, before keras is imported
    # 1. Join the other ranks; each takes its GPU (if any) and its share of the cores.
    world = be.init()  # DISTRIBUTED: first thing, before TensorFlow or JAX runs an op
    # 2. Rank 0 checks and prepares (and locks the output folder: `held` frees it however the
    #    run ends); every rank gets its decisions, or the same error.
    with contextlib.ExitStack() as held:
        run = collective(world,  # DISTRIBUTED
                         lambda: _set_up(be, cfg, world.size, resume, force, held))
        cfg, out, start = run.cfg, run.output, run.start
        # 3. The networks and their optimisers (the learning rate is scaled with the workers at
        #    every step: learning_rate), restored on rank 0 where the run resumes or forks.
        step = be.build_step(cfg)
        if start.source:
            collective(world, lambda: checkpoints.restore(step.state_variables(),  # DISTRIBUTED
                                                          start.source))
        # 4. Rank 0's weights and optimiser state on every rank.
        step.broadcast_state()  # DISTRIBUTED
        # 5. The loop: each rank its shard of the showers; every epoch trains, evaluates, monitors,
        #    and rank 0 writes the checkpoint, the history and TensorBoard.
        loop = _Loop(cfg, world, step, out, run.train_files, run.test_files, start)
        try:
            epoch_times = [loop.run_epoch(epoch) for epoch in range(start.epoch, cfg.train.epochs)]
        finally:
            loop.close()
        paths = collective(world, loop.export)  # DISTRIBUTED
        return TrainResult(
            output=str(out), history=str(out / "history.jsonl"), checkpoint=paths["checkpoint"],
            generator=paths["generator"], discriminator=paths["discriminator"],
            config=str(out / "config.json"), tensorboard=str(out / "tb"), workers=world.size,
            epochs=cfg.train.epochs, resumed_from=start.epoch if start.resumed else None,
            epoch_times=epoch_times, final=dict(loop.history[-1]) if loop.history else {},
            forked_from=start.fork["from"] if start.fork else None,
        )


class _Loop:
    """State of one training run on one rank; :meth:`run_epoch` is one epoch."""

    def __init__(self, cfg, world, step, out, train_files, test_files,
                 start: checkpoints.Start):
        self.cfg, self.world, self.step, self.out = cfg, world, step, out
        # A fork's learning-rate warm-up starts at the fork, not at its parent's first epoch.
        self.fork = start.fork
        self.origin = start.fork["epoch"] if start.fork else 0
        t = cfg.train
        kind, extra = ((sharding.GlobalOrder, {"origin": self.origin})
                       if t.data_order == "global" else (sharding.ShardedShowers, {}))
        self.data = kind(train_files, world.rank, world.size, t.batch_size, seed=t.seed,
                         max_batches=t.steps_per_epoch or None,
                         theta_window=cfg.data.theta_window or None, **extra)
        self.keyed = t.data_order == "global"  # draws keyed by the global batch, not the rank
        self.steps = len(self.data)
        self.test_files = test_files
        self.history = list(start.history)
        self.eval_noise = _EvalNoise(cfg, world, test_files) if t.eval_mode != "none" else None
        self.sync = LocalSync(step, world, t.sync_every, str(out / "checkpoints"))
        self.tb = TensorBoard(out / "tb") if world.is_root else None
        self.progress = (Progress(t.epochs, self.steps, t.batch_size * world.size, start.epoch)
                         if world.is_root else None)

    def close(self) -> None:
        if self.progress:
            self.progress.close()

    def run_epoch(self, epoch: int) -> dict:
        t = self.cfg.train
        self.step.reseed(t.seed, self.world.rank, epoch)
        t0 = time.perf_counter()
        train_losses, lr = self._train(epoch)
        t1 = time.perf_counter()
        self.step.average_batch_statistics()  # DISTRIBUTED: one set of BN statistics to save
        test_losses = self._evaluate()
        t2 = time.perf_counter()
        row = self._row(epoch, lr, train_losses, test_losses, t1 - t0, t2 - t1)
        monitors = self._monitors()
        row["time_monitor_s"] = time.perf_counter() - t2
        row.update(self.sync.take_stats())
        row.update(monitors)
        self.history.append(row)
        if self.world.is_root:
            self._write(epoch, row)
        if self.progress:
            self.progress.epoch_done(row)
        keys = ("epoch", "time_train_s", "time_eval_s", "time_epoch_s", "timed", "showers_per_s")
        return {k: row[k] for k in keys}

    def _train(self, epoch: int) -> tuple[np.ndarray, float]:
        sums, lr = np.zeros(len(_LOSSES)), 0.0
        t_prev = time.perf_counter()
        for i, batch in enumerate(self.data.epoch(epoch)):
            t_batch = time.perf_counter()  # the input pipeline's share ends here
            lr = learning_rate(self.cfg, self.world.size, epoch - self.origin + i / self.steps)
            self.step.set_learning_rate(lr)
            if self.keyed:
                self.step.reseed(self.cfg.train.seed, self.data.batch_index(epoch, i), _KEYED)
            losses = np.asarray(self.step.train_step(batch, local=self.sync.active),
                                dtype=np.float64)
            t_step = time.perf_counter()
            log.debug("epoch %d step %d: %.3f s waiting for the batch, %.3f s in the step",
                      epoch + 1, i + 1, t_batch - t_prev, t_step - t_batch)
            t_prev = t_step
            if not self.sync.active and not np.isfinite(losses).all():
                bad = ", ".join(f"{n}={v}" for n, v in zip(_LOSSES, losses) if not math.isfinite(v))
                raise NonFiniteLoss(
                    f"epoch {epoch + 1}, step {i + 1}: non-finite loss ({bad}); the last good "
                    f"checkpoint in {self.out / 'checkpoints'} is kept - lower "
                    f"train.learning_rate (now {lr:g}) or check the data")
            sums += losses
            self.sync.after_step(epoch * self.steps + i + 1, losses)  # DISTRIBUTED every k steps
            if self.progress:
                self.progress.step_done(epoch, i, losses)
        sums = self.sync.epoch_end(sums, (epoch + 1) * self.steps,  # DISTRIBUTED (local SGD)
                                   last=epoch == self.cfg.train.epochs - 1)
        return sums / self.steps, lr

    def _evaluate(self) -> np.ndarray | None:
        """Test losses (8,), or None. Serial: rank 0 evaluates, the others wait in the all-reduce."""
        t = self.cfg.train
        if t.eval_mode == "none":
            return None
        sums, count = np.zeros(len(_LOSSES)), 0
        batches = sharding.test_batches(self.test_files, self.world.rank, self.world.size,
                                        t.batch_size, mode=t.eval_mode, fraction=t.eval_fraction,
                                        theta_window=self.cfg.data.theta_window or None)
        for batch in batches:
            n = int(batch["energy"].shape[0])
            sums += np.asarray(self.step.eval_sums(batch, self.eval_noise.take(count, n)))
            count += n
        total = distributed.allreduce(np.append(sums, count), "sum",  # DISTRIBUTED
                                      name="test_losses")
        total = np.asarray(total, dtype=np.float64)
        losses = total[:-1] / (2.0 * total[-1])  # D saw real + fake, G 2 fakes per test shower
        if not np.isfinite(losses).all():
            bad = ", ".join(f"test_{n}={v}" for n, v in zip(_LOSSES, losses)
                            if not math.isfinite(v))
            raise NonFiniteLoss(f"non-finite test loss after the training of this epoch ({bad}); "
                                f"the last good checkpoint in {self.out / 'checkpoints'} is kept - "
                                "lower train.learning_rate or check the test data")
        return losses

    def _monitors(self) -> dict:
        """Rank 0: the physics monitors of its generator; every rank leaves together."""
        n, out = self.cfg.train.monitor_showers, {}
        if n and self.world.is_root:
            from .model import generate_showers

            energies = monitors.MONITOR_ENERGIES
            e = np.repeat(np.asarray(energies), n)
            showers = generate_showers(self.step.g, e, seed=_MONITOR_SEED, batch_size=4 * n)
            out = monitors.history_row(monitors.compare(
                {energy: showers[i * n:(i + 1) * n] for i, energy in enumerate(energies)},
                n_reference=max(n, 64)))
        if n and self.world.size > 1:
            distributed.barrier()  # DISTRIBUTED: the others wait here, not in the next epoch
        return out

    def _row(self, epoch, lr, train_losses, test_losses, time_train, time_eval) -> HistoryRow:
        t = self.cfg.train
        row: HistoryRow = {"epoch": epoch + 1, "lr": lr}
        row.update({n: float(v) for n, v in zip(_LOSSES, train_losses)})
        tests = test_losses if test_losses is not None else [None] * len(_LOSSES)
        row.update({"test_" + n: (None if v is None else float(v)) for n, v in zip(_LOSSES, tests)})
        row.update(eval_mode=t.eval_mode, time_train_s=time_train, time_eval_s=time_eval,
                   time_epoch_s=time_train + time_eval, timed=epoch >= t.timing_warmup_epochs,
                   showers_per_s=self.steps * t.batch_size * self.world.size / time_train,
                   workers=self.world.size, steps=self.steps, batch_size=t.batch_size,
                   precision=t.precision, threads=_threads(),
                   showers_seen=(self.history[-1].get("showers_seen", 0) if self.history else 0)
                   + self.steps * t.batch_size * self.world.size, time_monitor_s=0.0,
                   schema=HISTORY_SCHEMA)
        return row

    def _write(self, epoch: int, row: dict) -> None:
        """Rank 0: the checkpoint, then the history (whole file) and TensorBoard scalars, each
        durable before the next: the history never shows an epoch that no checkpoint holds."""
        checkpoints.save_checkpoint(self.out / "checkpoints", epoch + 1,
                                    self.step.state_variables(), self.cfg, self.history,
                                    self.world.size, fork=self.fork)
        write_history(self.out / "history.jsonl", self.history)
        self.tb.write(row)

    def export(self) -> dict[str, str | None]:
        """Rank 0: write the trained networks; returns their paths (run via collective)."""
        from .model import save_discriminator, save_generator

        gen = save_generator(self.step.g, self.out / "generator.keras")
        disc = save_discriminator(self.step.d, self.out / "discriminator.keras")
        ckpt = checkpoints.latest_checkpoint(self.out / "checkpoints")
        return {"generator": str(gen), "discriminator": str(disc),
                "checkpoint": str(ckpt) if ckpt else None}


def _threads() -> int:
    """TensorFlow's intra-op threads in this process (the input pipeline's, on JAX too)."""
    try:
        import tensorflow as tf
    except ImportError:  # a JAX-only machine
        from ..parallel.runtime import cpu_count

        return cpu_count()
    return tf.config.threading.get_intra_op_parallelism_threads()


class _EvalNoise:
    """Fixed latent noise per TEST SHOWER (not per rank): serial and distributed evaluation and
    every epoch see the same fakes, so their test losses are comparable."""

    def __init__(self, cfg: Config, world, test_files):
        from .step import E_RANGE

        t = cfg.train
        window = cfg.data.theta_window or None
        total = int(round(sum(files.count_showers(f, window) for f in test_files)
                          * t.eval_fraction))
        lo, hi = sharding.eval_bounds(total, world.rank, world.size, t.eval_mode)
        rng = np.random.default_rng([t.seed, 0xE7A1])
        n = 200
        self.e_fake = rng.uniform(*E_RANGE, total).astype(np.float32)[lo:hi]
        self.z_fake = rng.standard_normal((total, n), dtype=np.float32)[lo:hi]
        self.e_gen = rng.uniform(*E_RANGE, (total, 2)).astype(np.float32)[lo:hi]
        self.z_gen = rng.standard_normal((total, 2, n), dtype=np.float32)[lo:hi]

    def take(self, start: int, n: int) -> dict[str, np.ndarray]:
        s = slice(start, start + n)
        return {"e_fake": self.e_fake[s], "z_fake": self.z_fake[s],
                "e_gen": self.e_gen[s].T.copy(), "z_gen": self.z_gen[s].transpose(1, 0, 2).copy()}
