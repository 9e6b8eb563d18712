"""One 3DGAN training step, written once for both backends, in ``keras.ops`` only.

Read it top to bottom: the losses of the discriminator's three heads, the random draws of a step,
:func:`gan_step` - the reference trainer's (``svalleco/3Dgan``, ``Energy-gan``) four updates in
their order - and :class:`Step`, what the step of every backend holds: the two networks, their
RMSprop optimisers, the state a checkpoint saves and the seeds of every epoch.

A backend adds only how ONE update is done - take the gradient of the loss, average it over the
workers (the all-reduce, marked ``# DISTRIBUTED``), apply it:

* ``train.backend: horovod`` - :class:`gan3d.gan.horovod.HorovodStep`: a TensorFlow gradient
  tape, Horovod's ring all-reduce, RMSprop;
* ``train.backend: jax`` - :class:`gan3d.gan.jax.step.JaxStep`: ``jax.value_and_grad``,
  ``lax.pmean`` over every device of every process, RMSprop, the whole step compiled at once.

The step (:func:`gan_step`): D on a real batch (labels 1, each flipped with p = ``label_flip``;
targets E/100 and the ECAL sums), D on fakes ``G(E' z)`` made by G in inference mode (the
reference's ``generator.predict``; labels 0, targets E' ~ U(0.1, 5) and the published ECAL fit
of E'), then G twice through D (targets "real", E', fit(E'); D's weights not trained, its
BatchNorm on batch statistics as in the Keras 1 original). Loss of each update:
``w0 * BCE + w1 * MAPE(energy) + w2 * MAPE(ECAL sum)`` with ``cfg.train.loss_weights``
(reference [2, 0.1, 0.1]; the paper's Horovod scripts [8, 0.2, 0.1]).
Every rank computes its gradients on its own batch; averaged before every update, they make every
rank apply the same update to the same weights. All randomness of a step (label flips, E', z) is
drawn by :func:`draws` from a per-rank seed, or passed in (how tests fix the noise per sample).

Nothing here imports TensorFlow (the JAX backend runs without it) and Keras is imported when a
step is built: the loop can be imported before the backend has chosen Keras' backend.
"""

from __future__ import annotations

import importlib
from typing import Callable, Sequence

import numpy as np

from ..data.calorimeter import NETWORK_SCALE, SAMPLING_FIT_PERCENT

__all__ = ["E_RANGE", "DRAW_NAMES", "ecal_target", "bce", "mape", "parts", "flip", "is_seed",
           "weighted", "draws", "gan_step", "eval_sums", "Step", "get", "BACKENDS"]

E_RANGE = (0.1, 5.0)  # primary energies of fakes, in units of 100 GeV
# The random inputs of one step, in the order they are drawn (the order fixes the numbers).
DRAW_NAMES = ("flip_real", "flip_fake", "e_fake", "z_fake", "e_gen", "z_gen")
_EPS = 1e-7  # Keras' clipping constant for BCE and MAPE


def _ops():
    import keras  # here, not at import: the JAX backend chooses Keras' backend first

    return keras.ops


# ---------------------------------------------------------------------------------------------
# The losses


def ecal_target(e):
    """ECAL-sum target of a fake shower, in network units (GeV x 100), for e = E/100 (tensor)."""
    ops = _ops()
    e = ops.cast(e, "float32")
    poly = ops.zeros_like(e)
    for c in SAMPLING_FIT_PERCENT:  # Horner's rule on the published fit, in %
        poly = poly * e + c
    # E_GeV x poly/100 = e x poly GeV deposited; the network sees GeV x 100.
    return e * poly * NETWORK_SCALE


def bce(y, p):
    """Binary cross-entropy per sample, p clipped to [eps, 1 - eps] as Keras does."""
    ops = _ops()
    p = ops.clip(p, _EPS, 1.0 - _EPS)
    return -(y * ops.log(p) + (1.0 - y) * ops.log(1.0 - p))


def mape(y, p):
    """Mean absolute percentage error per sample (%)."""
    ops = _ops()
    return 100.0 * ops.abs(y - p) / ops.maximum(ops.abs(y), _EPS)


def parts(outputs, labels, energy, ecal):
    """Per-sample losses (each (b,)) of the discriminator's three heads against their targets:
    BCE of the real/fake output, MAPE of the energy and of the ECAL sum."""
    p, aux, total = (_ops().cast(o[:, 0], "float32") for o in outputs)
    return [bce(labels, p), mape(energy, aux), mape(ecal, total)]


def weighted(weights: Sequence[float], per_sample):
    """The loss of one update: ``w0 * BCE + w1 * MAPE(energy) + w2 * MAPE(ECAL sum)`` over the
    batch means, and the (4,) record ``[total, bce, aux, ecal]`` the history keeps."""
    ops = _ops()
    means = [ops.mean(p) for p in per_sample]
    total = sum(w * m for w, m in zip(weights, means))
    return total, ops.stack([total, *means])


def flip(labels, flips):
    """Labels with the selected entries flipped (0 <-> 1)."""
    return _ops().where(flips, 1.0 - labels, labels)


def is_seed(v) -> bool:
    """A random-number state variable (Dropout's), not a weight."""
    return v.path.endswith("seed_generator_state")


# ---------------------------------------------------------------------------------------------
# The step


def draws(uniform: Callable, normal: Callable, batch_size, latent_size: int,
          label_flip: float) -> dict:
    """The random inputs of one step for a batch, drawn in :data:`DRAW_NAMES` order from the
    backend's samplers ``uniform(shape, low, high)`` and ``normal(shape)``: label flips with
    probability ``label_flip``, primary energies E' ~ U(E_RANGE) and latent vectors z ~ N(0, 1)
    for the fakes of D's second update (b) and of G's two updates (2, b)."""
    b, n = batch_size, latent_size
    return {
        "flip_real": uniform((b,), 0.0, 1.0) < label_flip,
        "flip_fake": uniform((b,), 0.0, 1.0) < label_flip,
        "e_fake": uniform((b,), *E_RANGE),
        "z_fake": normal((b, n)),
        "e_gen": uniform((2, b), *E_RANGE),
        "z_gen": normal((2, b, n)),
    }


def gan_step(image, energy, ecal, draws: dict, update_d: Callable, update_g: Callable,
             generate: Callable):
    """The reference trainer's step in order; the backend does each update.

    ``update_d(x, labels, energy, ecal)`` and ``update_g(z, e)`` each take one update of D or G
    (gradient, all-reduce, apply) and return its (4,) losses; ``generate(latent)`` is G in
    inference mode. Returns the step's (8,) losses: D's mean over its two updates, then G's.
    """
    ops = _ops()
    ones = ops.ones_like(energy)
    # 1. D on real showers, 5 % of the labels flipped.
    d_real = update_d(image, flip(ones, draws["flip_real"]), energy, ecal)
    # 2. D on fakes made by G in inference mode (the reference's generator.predict).
    e_fake = ops.cast(draws["e_fake"], "float32")
    fake = generate(e_fake[:, None] * draws["z_fake"])
    d_fake = update_d(fake, flip(0.0 * ones, draws["flip_fake"]), e_fake, ecal_target(e_fake))
    # 3. G twice through D, which it tries to convince that its showers are real.
    g = [update_g(draws["z_gen"][i], ops.cast(draws["e_gen"][i], "float32")) for i in range(2)]
    return ops.concatenate([(d_real + d_fake) / 2.0, (g[0] + g[1]) / 2.0])


def eval_sums(weights: Sequence[float], g: Callable, d: Callable, image, energy, ecal,
              draws: dict, latent_size: int):
    """Summed test losses of one batch in inference mode, as the reference evaluated them.

    ``g`` and ``d`` are the networks in inference mode. D on the real batch and as many fakes;
    the combined model (G then D, target "real") on twice as many fresh fakes. ``draws`` needs
    ``e_fake``, ``z_fake`` and ``e_gen``/``z_gen`` of shape (2, b[, latent]). Returns (8,) sums:
    D total, bce, aux, ecal over 2b samples, then the same for G over 2b samples.
    """
    ops = _ops()
    e_f = ops.cast(draws["e_fake"], "float32")
    fake = g(e_f[:, None] * draws["z_fake"])
    d_real = parts(d(image), ops.ones_like(energy), energy, ecal)
    d_fake = parts(d(fake), ops.zeros_like(e_f), e_f, ecal_target(e_f))
    d_parts = [ops.concatenate([a, b]) for a, b in zip(d_real, d_fake)]
    e_g = ops.cast(ops.reshape(draws["e_gen"], (-1,)), "float32")
    z_g = ops.reshape(draws["z_gen"], (-1, latent_size))
    g_parts = parts(d(g(e_g[:, None] * z_g)), ops.ones_like(e_g), e_g, ecal_target(e_g))
    sums = []
    for per_sample in (d_parts, g_parts):
        s = [ops.sum(p) for p in per_sample]
        sums += [sum(w * x for w, x in zip(weights, s)), *s]
    return ops.stack(sums)


# ---------------------------------------------------------------------------------------------
# What the step of every backend holds


class Step:
    """The models, their two RMSprop optimisers and the step of one rank.

    A backend's step adds ``train_step(batch, draws=None, *, training=True, local=False)``
    (calling :func:`gan_step` with its ``update_d``/``update_g``), ``eval_sums(batch, draws)``,
    ``broadcast_state()``, ``average_batch_statistics()``, ``reseed(seed, rank, epoch)`` and
    ``set_learning_rate(lr)``; ``average_state()`` (local SGD) where it has it.
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
        return sum(is_seed(v) for v in self.g.variables + self.d.variables)

    @staticmethod
    def seed_words(seed: int, stream: int, epoch: int, n: int) -> list[np.ndarray]:
        """``n`` seed states, (2,) uint32 each, for random stream ``stream`` (a rank, or a
        device) in ``epoch``: different per stream, the same on a resume."""
        words = np.random.SeedSequence([seed, stream, epoch]).generate_state(n)
        return [np.array([int(w) & 0x7FFFFFFF, 0], dtype=np.uint32) for w in words]

    # -- what every backend computes alike --------------------------------------------------
    def weighted_losses(self, per_sample):
        """(total, [total, bce, aux, ecal]) of one update (:func:`weighted`)."""
        return weighted(self.weights, per_sample)

    def draws_from(self, uniform, normal, batch_size) -> dict:
        """The step's per-sample random inputs from the backend's samplers (:func:`draws`)."""
        return draws(uniform, normal, batch_size, self.latent_size, self.label_flip)

    def average_state(self) -> int:
        """Local SGD's synchronisation (:mod:`gan3d.gan.local_sgd`), where a backend has it."""
        raise NotImplementedError(f"{type(self).__name__} has no local SGD")


# train.backend -> the module whose BACKEND (how processes join, how ``auto`` precision resolves,
# what it refuses, its step) implements it; imported on demand: the JAX backend must set
# KERAS_BACKEND before keras is first imported.
BACKENDS = {"horovod": "gan3d.gan.horovod", "jax": "gan3d.gan.jax.backend"}


def get(name: str):
    """The backend called ``name`` (``train.backend``): ``prepare()``, ``check(cfg)``,
    ``init()``, ``resolve(cfg)`` and ``build_step(cfg)``."""
    if name not in BACKENDS:
        from ..exceptions import ConfigError

        raise ConfigError(f"train.backend = {name!r}: choose one of {', '.join(BACKENDS)}")
    return importlib.import_module(BACKENDS[name]).BACKEND
