"""The seam between the training loop and a backend: the step's base class and the backends.

:func:`gan3d.gan.training.train` is written once. What it needs of a backend is small:

* :class:`Backend` - how the processes join (Horovod or ``jax.distributed``), how ``auto``
  precision resolves on this device, which settings the backend refuses, and how it builds its
  step; :func:`get` returns the one ``train.backend`` names;
* :class:`Step` - the models and optimisers of one rank. This base class owns what must be the
  same on every backend: the two RMSprop optimisers, the loss composition
  (:func:`gan3d.gan.losses.weighted`), the per-sample draws (:func:`gan3d.gan.losses.draws`), the
  seeds of every epoch, and the order of the state a checkpoint holds
  (:meth:`Step.state_variables`: a checkpoint or a ``generator.keras`` moves between backends).
  A backend's step adds how gradients are taken, averaged over workers and applied:
  :class:`gan3d.gan.step.GanStep` (TensorFlow + Horovod), :class:`gan3d.gan.jax.step.JaxStep`.

This module imports Keras only when a step is built (:mod:`gan3d.gan.losses` with it), and never
TensorFlow: the loop can be imported before the backend has chosen Keras' backend.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, Sequence

import numpy as np

from ..config import Config

__all__ = ["Step", "Backend", "get", "BACKENDS"]

# train.backend -> the module whose BACKEND attribute implements it (imported on demand: the
# JAX backend must set KERAS_BACKEND before keras is first imported).
BACKENDS = {"horovod": "gan3d.gan.step", "jax": "gan3d.gan.jax.backend"}


class Backend(Protocol):
    """What :func:`gan3d.gan.training.train` asks of a backend."""

    name: str

    def prepare(self) -> None:
        """Ready this process before anything else (e.g. Keras on JAX); refuse if it cannot."""

    def check(self, cfg: Config) -> None:
        """Raise ConfigError for settings this backend does not support."""

    def init(self) -> Any:
        """Join the other processes; the :class:`gan3d.parallel.distributed.World`."""

    def resolve(self, cfg: Config) -> Config:
        """``cfg`` with ``train.precision: auto`` resolved for this process's device."""

    def build_step(self, cfg: Config) -> "Step":
        """The models (rank 0's initial weights, then broadcast) and the step of this rank."""


def get(name: str) -> Backend:
    """The backend called ``name`` (``train.backend``)."""
    if name not in BACKENDS:
        from ..exceptions import ConfigError

        raise ConfigError(f"train.backend = {name!r}: choose one of {', '.join(BACKENDS)}")
    return importlib.import_module(BACKENDS[name]).BACKEND


class Step:
    """The models, their two RMSprop optimisers and the step of one rank (see the module).

    Subclasses implement :meth:`train_step`, :meth:`eval_sums`, :meth:`broadcast_state`,
    :meth:`average_batch_statistics`, :meth:`reseed` and :meth:`set_learning_rate` for their
    backend; ``average_state`` (local SGD) where the backend has it.
    """

    def __init__(self, generator, discriminator, *, loss_weights: Sequence[float] = (2.0, 0.1, 0.1),
                 label_flip: float = 0.05, learning_rate: float = 1e-3, rho: float = 0.9,
                 seed: int = 0):
        import keras

        self.g, self.d = generator, discriminator
        self.latent_size = int(generator.input_shape[-1])
        self.weights = [float(w) for w in loss_weights]
        self.label_flip = float(label_flip)
        self.g_opt = self.wrap_optimizer(keras.optimizers.RMSprop(learning_rate, rho=rho))
        self.d_opt = self.wrap_optimizer(keras.optimizers.RMSprop(learning_rate, rho=rho))
        # Built now, so their state exists before it is broadcast from rank 0.
        self.g_opt.build(self.g.trainable_variables)
        self.d_opt.build(self.d.trainable_variables)

    def wrap_optimizer(self, optimizer):
        """The optimiser as the backend uses it (float16's loss scaling wraps it)."""
        return optimizer

    # -- the state a checkpoint holds, in its one order -------------------------------------
    def model_variables(self) -> list:
        """Every weight and BatchNorm statistic of G, then of D (no seed states)."""
        from .losses import is_seed

        return [v for v in self.g.variables + self.d.variables if not is_seed(v)]

    def optimizer_variables(self) -> list:
        """G's optimiser's variables, then D's."""
        return list(self.g_opt.variables) + list(self.d_opt.variables)

    def state_variables(self) -> list:
        """What makes two ranks (or a resumed run) identical: models, then optimisers."""
        self.sync_variables()
        return self.model_variables() + self.optimizer_variables()

    def sync_variables(self) -> None:
        """Bring the Keras variables up to date (a backend that keeps the state elsewhere)."""

    def dropout_seeds(self) -> int:
        """How many Dropout seed states the two networks hold."""
        from .losses import is_seed

        return sum(is_seed(v) for v in self.g.variables + self.d.variables)

    @staticmethod
    def seed_words(seed: int, stream: int, epoch: int, n: int) -> list[np.ndarray]:
        """``n`` seed states, (2,) uint32 each, for random stream ``stream`` (a rank, or a
        device) in ``epoch``: different per stream, the same on a resume."""
        words = np.random.SeedSequence([seed, stream, epoch]).generate_state(n)
        return [np.array([int(w) & 0x7FFFFFFF, 0], dtype=np.uint32) for w in words]

    # -- what every backend computes alike --------------------------------------------------
    def weighted_losses(self, per_sample):
        """(total, [total, bce, aux, ecal]) of one update (:func:`gan3d.gan.losses.weighted`)."""
        from .losses import weighted

        return weighted(self.weights, per_sample)

    def draws_from(self, uniform, normal, batch_size) -> dict:
        """The step's per-sample random inputs from the backend's samplers."""
        from .losses import draws

        return draws(uniform, normal, batch_size, self.latent_size, self.label_flip)

    # -- the backend's part -----------------------------------------------------------------
    def train_step(self, batch: dict, draws: dict | None = None, *, training: bool = True,
                   local: bool = False):
        raise NotImplementedError

    def eval_sums(self, batch: dict, draws: dict):
        raise NotImplementedError

    def broadcast_state(self) -> None:
        raise NotImplementedError

    def average_batch_statistics(self) -> None:
        raise NotImplementedError

    def average_state(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} has no local SGD")

    def reseed(self, seed: int, rank: int, epoch: int) -> None:
        raise NotImplementedError

    def set_learning_rate(self, lr: float) -> None:
        raise NotImplementedError
