"""Training on Keras 3's JAX backend (``train.backend: jax``): the Horovod loop, another step.

Everything but the step and the collectives is :mod:`gan3d.gan.training`'s: the configuration,
the data shards (one per process, :class:`gan3d.data.sharding.ShardedShowers`), the learning
rate rules, history, checkpoints (the same variables in the same order, so a checkpoint or a
``generator.keras`` moves between backends), evaluation, physics monitors and progress. What
differs:

* the processes join ``jax.distributed`` instead of Horovod (:func:`gan3d.parallel.distributed.init_jax`);
* the step is :class:`gan3d.gan.jax_step.JaxStep`, one compiled function whose all-reduces are
  ``lax.pmean`` over the mesh of every process's devices;
* local SGD (``train.sync_every`` > 1) and float16 loss scaling are the Horovod backend's only.

Launch::

    gan3d train --backend jax --workers 2             # mpirun with a coordinator address
    GAN3D_JAX_COORDINATOR=node0:7777 mpirun -np 8 gan3d train --backend jax
    srun -n 8 gan3d train --backend jax               # JAX reads the Slurm job

The process must run Keras on JAX: ``KERAS_BACKEND=jax`` before ``keras`` is imported (the CLI
sets it; :func:`ensure_backend` says so otherwise).
"""

from __future__ import annotations

import os

from ..config import Config, resolved_precision
from ..exceptions import ConfigError, EnvironmentProblem
from ..parallel import distributed
from ..paths import resolve_path

__all__ = ["train", "build_step", "ensure_backend"]


def ensure_backend() -> None:
    """Refuse to start when Keras runs on another backend than JAX in this process."""
    import sys

    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "jax"
    import keras

    if keras.backend.backend() != "jax":
        raise EnvironmentProblem(
            f"train.backend jax needs Keras on JAX, but this process already runs Keras on "
            f"{keras.backend.backend()}: set KERAS_BACKEND=jax before Python starts (the "
            "`gan3d train --backend jax` command does)")


def _check(cfg: Config) -> None:
    t = cfg.train
    if t.sync_every > 1:
        raise ConfigError(f"train.sync_every = {t.sync_every} (local SGD) runs on train.backend "
                          "horovod only; use sync_every 1 with the jax backend")
    if t.precision == "float16":
        raise ConfigError("train.precision float16 (loss scaling) runs on train.backend horovod "
                          "only; use bfloat16 or float32 with the jax backend")


def _gpu() -> tuple[int, int] | None:
    """Compute capability of this process's first GPU (None: CPU or TPU)."""
    import jax

    device = jax.local_devices()[0]
    capability = getattr(device, "compute_capability", None) if device.platform == "gpu" else None
    return tuple(int(x) for x in str(capability).split(".")[:2]) if capability else None


def _precision(cfg: Config) -> Config:
    """``auto`` resolved as on the Horovod backend, except that a GPU without bfloat16 (which
    would get float16 with loss scaling there) trains in float32 here."""
    out = resolved_precision(cfg, _gpu())
    if cfg.train.precision == "auto" and out.train.precision == "float16":
        out = out.replace(**{"train.precision": "float32"})
    return out


def build_step(cfg: Config):
    import keras

    from .jax_step import JaxStep
    from .model import build_discriminator, build_generator

    keras.utils.set_random_seed(cfg.train.seed)  # rank 0's initial weights; then broadcast
    precision = cfg.train.precision
    policy = None if precision == "float32" else f"mixed_{precision}"
    t = cfg.train
    return JaxStep(build_generator(dtype=policy), build_discriminator(dtype=policy),
                   loss_weights=t.loss_weights, label_flip=t.label_flip,
                   learning_rate=t.learning_rate, rho=t.rho, seed=t.seed)


def train(cfg: Config, *, resume: bool = False):
    """As :func:`gan3d.gan.training.train`, on the JAX backend; the same :class:`TrainResult`."""
    ensure_backend()
    _check(cfg)
    from . import training as tr  # the loop, the set-up and the result are the Horovod backend's

    world = distributed.init_jax()  # DISTRIBUTED: jax.distributed, before any computation
    cfg = tr.collective(world, lambda: _precision(cfg))  # process 0's device decides "auto"
    _check(cfg)
    out = resolve_path(cfg.train.output)
    tr.collective(world, lambda: tr._prepare_output(cfg, out, resume))
    train_files, test_files = tr.collective(world, lambda: tr.data_files(cfg, world.size))
    step = build_step(cfg)
    start, history, resumed = 0, [], None
    if resume:
        start, history, resumed = tr.collective(
            world, lambda: tr._resume_state(step, cfg, out, world.size))
    step.broadcast_state()  # DISTRIBUTED: models and optimiser state of process 0 everywhere
    loop = tr._Loop(cfg, world, step, out, train_files, test_files, history, start)
    try:
        epoch_times = [loop.run_epoch(epoch) for epoch in range(start, cfg.train.epochs)]
    finally:
        loop.close()
    paths = tr.collective(world, loop.export)
    return tr.TrainResult(
        output=str(out), history=str(out / "history.jsonl"), checkpoint=paths["checkpoint"],
        generator=paths["generator"], discriminator=paths["discriminator"],
        config=str(out / "config.json"), tensorboard=str(out / "tb"), workers=world.size,
        epochs=cfg.train.epochs, resumed_from=start if resumed else None,
        epoch_times=epoch_times, final=dict(loop.history[-1]) if loop.history else {},
    )
