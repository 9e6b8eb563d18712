"""The JAX backend's part of the training loop: processes, precision, refusals, the step.

:func:`gan3d.gan.training.train` is the loop of both backends; with ``train.backend: jax`` it
plugs in :data:`BACKEND`:

* the processes join ``jax.distributed`` instead of Horovod (:func:`gan3d.parallel.distributed.init_jax`);
* the step is :class:`gan3d.gan.jax.step.JaxStep`, one compiled function whose all-reduces are
  ``lax.pmean`` over the mesh of every process's devices;
* local SGD (``train.sync_every`` > 1) and float16 loss scaling are the Horovod backend's only.

Launch::

    gan3d train --backend jax --workers 2             # mpirun with a coordinator address
    GAN3D_JAX_COORDINATOR=node0:7777 mpirun -np 8 gan3d train --backend jax
    srun -n 8 gan3d train --backend jax               # JAX reads the Slurm job

The process must run Keras on JAX: ``KERAS_BACKEND=jax`` before ``keras`` is imported (the CLI
sets it; :meth:`JaxBackend.prepare` does when it can and says so otherwise).
"""

from __future__ import annotations

import os
import sys

from ...config import Config, resolved_precision
from ...exceptions import ConfigError, EnvironmentProblem
from ...parallel import distributed

__all__ = ["JaxBackend", "BACKEND", "ensure_backend"]


def ensure_backend() -> None:
    """Refuse to start when Keras runs on another backend than JAX in this process."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "jax"
    import keras

    if keras.backend.backend() != "jax":
        raise EnvironmentProblem(
            f"train.backend jax needs Keras on JAX, but this process already runs Keras on "
            f"{keras.backend.backend()}: set KERAS_BACKEND=jax before Python starts (the "
            "`gan3d train --backend jax` command does)")


def _gpu() -> tuple[int, int] | None:
    """Compute capability of this process's first GPU (None: CPU or TPU)."""
    import jax

    device = jax.local_devices()[0]
    capability = getattr(device, "compute_capability", None) if device.platform == "gpu" else None
    return tuple(int(x) for x in str(capability).split(".")[:2]) if capability else None


class JaxBackend:
    """Keras 3 on JAX with ``lax.pmean`` all-reduces (the five methods of :class:`gan3d.gan.horovod.HorovodBackend`)."""

    name = "jax"

    def prepare(self) -> None:
        ensure_backend()

    def check(self, cfg: Config) -> None:
        t = cfg.train
        if t.sync_every > 1:
            raise ConfigError(f"train.sync_every = {t.sync_every} (local SGD) runs on "
                              "train.backend horovod only; use sync_every 1 with the jax backend")
        if t.precision == "float16":
            raise ConfigError("train.precision float16 (loss scaling) runs on train.backend "
                              "horovod only; use bfloat16 or float32 with the jax backend")

    def init(self):
        return distributed.init_jax()  # DISTRIBUTED: jax.distributed, before any computation

    def resolve(self, cfg: Config) -> Config:
        """``auto`` resolved by :func:`gan3d.parallel.runtime.training_auto`: float32 with JAX."""
        return resolved_precision(cfg, _gpu())

    def build_step(self, cfg: Config):
        import keras

        from ..model import build_discriminator, build_generator
        from .step import JaxStep

        keras.utils.set_random_seed(cfg.train.seed)  # rank 0's initial weights; then broadcast
        precision = cfg.train.precision
        policy = None if precision == "float32" else f"mixed_{precision}"
        t = cfg.train
        return JaxStep(build_generator(dtype=policy), build_discriminator(dtype=policy),
                       loss_weights=t.loss_weights, label_flip=t.label_flip,
                       learning_rate=t.learning_rate, rho=t.rho, seed=t.seed)


BACKEND = JaxBackend()
