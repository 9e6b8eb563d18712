"""One 3DGAN training step, data-parallel: the losses, the four updates, the evaluation.

The step is the reference trainer's (``svalleco/3Dgan``, ``Energy-gan``), one compiled function:

1. D on a real batch: labels 1 (each flipped with p = ``label_flip``), targets E/100 and the
   batch's ECAL sums; one RMSprop update of D.
2. D on a fake batch ``G(E' z)``, E' ~ U(0.1, 5) (10-500 GeV), G in inference mode as the
   reference's ``generator.predict``: labels 0 (flipped likewise), targets E' and the published
   ECAL fit of E'; a second update of D.
3. Twice: G through D with fresh z and E', targets "real", E', fit(E'); one update of G each.
   D's weights are not trained here; as in the Keras 1 original it runs with batch statistics.

Loss of each update: ``w0 * BCE + w1 * MAPE(energy) + w2 * MAPE(ECAL sum)`` with
``cfg.train.loss_weights`` (reference [2, 0.1, 0.1]; the paper's Horovod scripts [8, 0.2, 0.1]).

Data parallelism (every distributed line is marked ``DISTRIBUTED``): each rank computes gradients
on its own batch, :func:`gan3d.parallel.distributed.average` all-reduces them (mean over ranks)
before every one of the four updates, so all ranks apply the same update to the same weights; the step's
losses are averaged too, so a NaN on any rank stops every rank at the same step.

All randomness of a step (label flips, E', z) is drawn by :meth:`GanStep.draw` from a per-rank
seed generator, or passed in explicitly (:meth:`GanStep.train_step` takes ``draws``), which is
how the tests control noise per sample rather than per rank.
"""

from __future__ import annotations

import functools
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from ..data.calorimeter import NETWORK_SCALE, SAMPLING_FIT_PERCENT
from ..parallel import distributed
from .history import LOSSES as LOSS_NAMES

__all__ = ["E_RANGE", "LOSS_NAMES", "EVAL_NAMES", "ecal_target", "GanStep"]

E_RANGE = (0.1, 5.0)  # primary energies of fakes, in units of 100 GeV
EVAL_NAMES = tuple("test_" + n for n in LOSS_NAMES)
_EPS = 1e-7  # Keras' clipping constant for BCE and MAPE


def ecal_target(e):
    """ECAL-sum target of a fake shower, in network units (GeV x 100), for e = E/100 (tensor)."""
    e = keras.ops.cast(e, "float32")
    poly = keras.ops.zeros_like(e)
    for c in SAMPLING_FIT_PERCENT:  # Horner's rule on the published fit, in %
        poly = poly * e + c
    # E_GeV x poly/100 = e x poly GeV deposited; the network sees GeV x 100.
    return e * poly * NETWORK_SCALE


def _bce(y, p):
    p = keras.ops.clip(p, _EPS, 1.0 - _EPS)
    return -(y * keras.ops.log(p) + (1.0 - y) * keras.ops.log(1.0 - p))


def _mape(y, p):
    return 100.0 * keras.ops.abs(y - p) / keras.ops.maximum(keras.ops.abs(y), _EPS)


def _parts(outputs, labels, energy, ecal):
    """Per-sample losses (each (b,)) of the three heads against their targets."""
    p, aux, total = (keras.ops.cast(o[:, 0], "float32") for o in outputs)
    return [_bce(labels, p), _mape(energy, aux), _mape(ecal, total)]


class GanStep:
    """The models, their two RMSprop optimisers, and the compiled step of one rank."""

    def __init__(self, generator: keras.Model, discriminator: keras.Model, *,
                 loss_weights: Sequence[float] = (2.0, 0.1, 0.1), label_flip: float = 0.05,
                 learning_rate: float = 1e-3, rho: float = 0.9, seed: int = 0,
                 loss_scale: bool = False):
        self.g, self.d = generator, discriminator
        self.latent_size = int(generator.input_shape[-1])
        self.weights = [float(w) for w in loss_weights]
        self.label_flip = float(label_flip)
        self.g_opt = keras.optimizers.RMSprop(learning_rate, rho=rho)
        self.d_opt = keras.optimizers.RMSprop(learning_rate, rho=rho)
        self.loss_scale = bool(loss_scale)
        if self.loss_scale:  # float16: small gradients would underflow to zero unscaled
            # Dynamic loss scaling: the loss is multiplied by the scale before the gradients,
            # which are divided by it after the all-reduce; a step whose gradients are not finite
            # is skipped and the scale halved (every rank sees the same all-reduced gradients,
            # so every rank skips alike); it doubles after 2,000 finite steps.
            self.g_opt = keras.optimizers.LossScaleOptimizer(self.g_opt)
            self.d_opt = keras.optimizers.LossScaleOptimizer(self.d_opt)
        # Built now, so their state exists before it is broadcast from rank 0.
        self.g_opt.build(self.g.trainable_variables)
        self.d_opt.build(self.d.trainable_variables)
        self.noise = keras.random.SeedGenerator(seed)
        self._train = tf.function(self._train_step, reduce_retracing=True)
        self._train_local = tf.function(functools.partial(self._train_step, local=True),
                                        reduce_retracing=True)
        self._eval = tf.function(self._eval_sums, reduce_retracing=True)
        self._grads = tf.function(self._gradients, reduce_retracing=True)

    # -- state ------------------------------------------------------------------------------
    def seed_variables(self) -> list:
        """Seed-generator states (step noise, D's dropout): per rank, never broadcast."""
        return [self.noise.state] + [v for v in self.d.variables if _is_seed(v)]

    def model_variables(self) -> list:
        """Every weight and BatchNorm statistic of G and D (no seed states)."""
        return [v for v in self.g.variables + self.d.variables if not _is_seed(v)]

    def optimizer_variables(self) -> list:
        return list(self.g_opt.variables) + list(self.d_opt.variables)

    def state_variables(self) -> list:
        """What makes two ranks (or a resumed run) identical: models and optimisers."""
        return self.model_variables() + self.optimizer_variables()

    def broadcast_state(self) -> None:
        distributed.broadcast(self.state_variables(), root_rank=0)  # DISTRIBUTED

    def average_batch_statistics(self) -> None:
        """Mean of BatchNorm moving statistics over ranks (each rank saw its own batches)."""
        stats = [v for v in self.model_variables() if not v.trainable]
        if distributed.world().size > 1 and stats:
            for v, mean in zip(stats, distributed.average([v.value for v in stats])):  # DISTRIBUTED
                v.assign(mean)

    def average_state(self) -> int:
        """Local SGD's synchronisation: every floating-point state variable (weights, BatchNorm
        statistics, RMSprop's mean squares) becomes its mean over ranks; step counters are equal
        on every rank already. Returns the bytes each rank contributed."""
        state = [v for v in self.state_variables() if "float" in str(v.dtype)]
        if distributed.world().size > 1:
            for v, mean in zip(state, distributed.average([v.value for v in state],  # DISTRIBUTED
                                                          name="local_sgd_sync")):
                v.assign(mean)
        return sum(int(np.prod(v.shape)) * 4 for v in state)

    def reseed(self, seed: int, rank: int, epoch: int) -> None:
        """Set every seed state from (seed, rank, epoch): different per rank, exact on resume."""
        seeds = np.random.SeedSequence([seed, rank, epoch]).generate_state(len(self.seed_variables()))
        for v, s in zip(self.seed_variables(), seeds):
            v.assign(np.array([int(s) & 0x7FFFFFFF, 0], dtype=v.dtype))

    def set_learning_rate(self, lr: float) -> None:
        for opt in (self.g_opt, self.d_opt):
            getattr(opt, "inner_optimizer", opt).learning_rate = lr

    # -- the step ---------------------------------------------------------------------------
    def draw(self, batch_size: int) -> dict:
        """The random inputs of one step for a batch of ``batch_size`` (tensors)."""
        b, n, sg = batch_size, self.latent_size, self.noise
        return {
            "flip_real": keras.random.uniform((b,), seed=sg) < self.label_flip,
            "flip_fake": keras.random.uniform((b,), seed=sg) < self.label_flip,
            "e_fake": keras.random.uniform((b,), *E_RANGE, seed=sg),
            "z_fake": keras.random.normal((b, n), seed=sg),
            "e_gen": keras.random.uniform((2, b), *E_RANGE, seed=sg),
            "z_gen": keras.random.normal((2, b, n), seed=sg),
        }

    def train_step(self, batch: dict, draws: dict | None = None, *, training: bool = True,
                   local: bool = False):
        """One full step on this rank's ``batch`` (image, energy, ecal_sum); mean losses over ranks.

        ``training=False`` runs BatchNorm on moving statistics and disables Dropout (the exact
        equality test of data parallelism). ``local=True`` is a step of local SGD: this rank's
        gradients and losses only, no communication (:meth:`average_state` synchronises).
        Returns a float32 tensor of :data:`LOSS_NAMES`.
        """
        return (self._train_local if local else self._train)(batch, draws, training)

    def _train_step(self, batch, draws, training, local=False):
        image = keras.ops.cast(batch["image"], "float32")
        energy = keras.ops.cast(keras.ops.reshape(batch["energy"], (-1,)), "float32")
        ecal = keras.ops.cast(keras.ops.reshape(batch["ecal_sum"], (-1,)), "float32")
        if draws is None:
            draws = self.draw(keras.ops.shape(image)[0])
        ones = keras.ops.ones_like(energy)
        # 1. D on real showers, 5 % of the labels flipped.
        real = self._d_update(image, _flip(ones, draws["flip_real"]), energy, ecal, training, local)
        # 2. D on fakes made by G in inference mode (the reference's generator.predict).
        e_f = keras.ops.cast(draws["e_fake"], "float32")
        fake = self.g(e_f[:, None] * draws["z_fake"], training=False)
        fake_l = self._d_update(fake, _flip(0.0 * ones, draws["flip_fake"]), e_f, ecal_target(e_f),
                                training, local)
        # 3. G twice through D, which it tries to convince that its showers are real.
        gen = [self._g_update(draws["z_gen"][i], draws["e_gen"][i], training, local)
               for i in range(2)]
        losses = keras.ops.concatenate([(real + fake_l) / 2.0, (gen[0] + gen[1]) / 2.0])
        if local:
            return losses
        return distributed.allreduce(losses, "mean", name="step_losses")  # DISTRIBUTED

    def _total(self, parts):
        means = [keras.ops.mean(p) for p in parts]
        total = sum(w * m for w, m in zip(self.weights, means))
        return total, keras.ops.stack([total, *means])

    def _d_grads(self, image, labels, energy, ecal, training, local=False):
        variables = self.d.trainable_variables
        with tf.GradientTape() as tape:
            total, losses = self._total(_parts(self.d(image, training=training), labels, energy, ecal))
            if self.loss_scale:
                total = self.d_opt.scale_loss(total)
        grads = tape.gradient(total, variables)
        if local:
            return grads, losses
        return distributed.average(grads), losses  # DISTRIBUTED: ring all-reduce, mean over ranks

    def _g_grads(self, z, e, training, local=False):
        e = keras.ops.cast(e, "float32")
        with tf.GradientTape() as tape:
            fake = self.g(e[:, None] * z, training=training)
            out = self.d(fake, training=training)
            total, losses = self._total(_parts(out, keras.ops.ones_like(e), e, ecal_target(e)))
            if self.loss_scale:
                total = self.g_opt.scale_loss(total)
        grads = tape.gradient(total, self.g.trainable_variables)
        if local:
            return grads, losses
        return distributed.average(grads), losses  # DISTRIBUTED: ring all-reduce, mean over ranks

    def _d_update(self, image, labels, energy, ecal, training, local):
        grads, losses = self._d_grads(image, labels, energy, ecal, training, local)
        self.d_opt.apply(grads, self.d.trainable_variables)
        return losses

    def _g_update(self, z, e, training, local):
        grads, losses = self._g_grads(z, e, training, local)
        self.g_opt.apply(grads, self.g.trainable_variables)
        return losses

    def gradients(self, batch: dict, draws: dict, *, training: bool = True):
        """Rank-averaged gradients of the step's first D update (real batch) and first G update,
        without applying them: ``(d_grads, g_grads)``. For tests of data parallelism."""
        return self._grads(batch, draws, training)

    def _gradients(self, batch, draws, training):
        image = keras.ops.cast(batch["image"], "float32")
        energy = keras.ops.cast(keras.ops.reshape(batch["energy"], (-1,)), "float32")
        ecal = keras.ops.cast(keras.ops.reshape(batch["ecal_sum"], (-1,)), "float32")
        labels = _flip(keras.ops.ones_like(energy), draws["flip_real"])
        d_grads, _ = self._d_grads(image, labels, energy, ecal, training)
        g_grads, _ = self._g_grads(draws["z_gen"][0], draws["e_gen"][0], training)
        return d_grads, g_grads

    # -- evaluation -------------------------------------------------------------------------
    def eval_sums(self, batch: dict, draws: dict):
        """Summed test losses of one batch, in inference mode, as the reference evaluated them.

        D on the real batch and as many fakes; the combined model (G then D, target "real") on
        twice as many fresh fakes. ``draws`` needs ``e_fake``, ``z_fake`` and ``e_gen``/``z_gen``
        of shape (2, b[, 200]). Returns (8,) sums: D total, bce, aux, ecal over 2b samples, then the
        same for G over 2b samples; divide by the sample counts after summing over batches/ranks.
        """
        return self._eval(batch, draws)

    def _eval_sums(self, batch, draws):
        image = keras.ops.cast(batch["image"], "float32")
        energy = keras.ops.cast(keras.ops.reshape(batch["energy"], (-1,)), "float32")
        ecal = keras.ops.cast(keras.ops.reshape(batch["ecal_sum"], (-1,)), "float32")
        e_f = keras.ops.cast(draws["e_fake"], "float32")
        fake = self.g(e_f[:, None] * draws["z_fake"], training=False)
        d_real = _parts(self.d(image, training=False), keras.ops.ones_like(energy), energy, ecal)
        d_fake = _parts(self.d(fake, training=False), keras.ops.zeros_like(e_f), e_f, ecal_target(e_f))
        d = [keras.ops.concatenate([a, b]) for a, b in zip(d_real, d_fake)]
        e_g = keras.ops.cast(keras.ops.reshape(draws["e_gen"], (-1,)), "float32")
        z_g = keras.ops.reshape(draws["z_gen"], (-1, self.latent_size))
        out = self.d(self.g(e_g[:, None] * z_g, training=False), training=False)
        g = _parts(out, keras.ops.ones_like(e_g), e_g, ecal_target(e_g))
        sums = []
        for parts in (d, g):
            s = [keras.ops.sum(p) for p in parts]
            sums += [sum(w * x for w, x in zip(self.weights, s)), *s]
        return keras.ops.stack(sums)


def _flip(labels, flips):
    """Labels with the selected entries flipped (0 <-> 1)."""
    return keras.ops.where(flips, 1.0 - labels, labels)


def _is_seed(v) -> bool:
    return v.path.endswith("seed_generator_state")
