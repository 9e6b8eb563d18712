"""The Horovod backend: one 3DGAN training step on TensorFlow, gradients all-reduced by Horovod.

The step is the reference trainer's (``svalleco/3Dgan``, ``Energy-gan``), one compiled function;
its order, losses and draws are :mod:`gan3d.gan.losses`' (shared with the JAX backend), the
optimisers and the state order :class:`gan3d.gan.backend.Step`'s. This module adds the gradient
tapes, the all-reduces and float16's loss scaling, and :class:`HorovodBackend`, which the
training loop (:mod:`gan3d.gan.training`) plugs in for ``train.backend: horovod``:

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

import keras
import numpy as np
import tensorflow as tf

from ..config import Config, resolved_precision
from ..parallel import devices, distributed
from . import losses
from .backend import Step
from .history import LOSSES as LOSS_NAMES

__all__ = ["LOSS_NAMES", "EVAL_NAMES", "GanStep", "HorovodBackend", "BACKEND"]

EVAL_NAMES = tuple("test_" + n for n in LOSS_NAMES)


class GanStep(Step):
    """The models, their two RMSprop optimisers, and the compiled step of one rank."""

    def __init__(self, generator: keras.Model, discriminator: keras.Model, *,
                 loss_scale: bool = False, **settings):
        # float16: small gradients would underflow to zero unscaled. Dynamic loss scaling: the
        # loss is multiplied by the scale before the gradients, which are divided by it after
        # the all-reduce; a step whose gradients are not finite is skipped and the scale halved
        # (every rank sees the same all-reduced gradients, so every rank skips alike); it
        # doubles after 2,000 finite steps.
        self.loss_scale = bool(loss_scale)
        super().__init__(generator, discriminator, **settings)
        self.noise = keras.random.SeedGenerator(settings.get("seed", 0))
        self._train = tf.function(self._train_step, reduce_retracing=True)
        self._train_local = tf.function(functools.partial(self._train_step, local=True),
                                        reduce_retracing=True)
        self._eval = tf.function(self._eval_sums, reduce_retracing=True)
        self._grads = tf.function(self._gradients, reduce_retracing=True)

    def wrap_optimizer(self, optimizer):
        return keras.optimizers.LossScaleOptimizer(optimizer) if self.loss_scale else optimizer

    # -- state ------------------------------------------------------------------------------
    def seed_variables(self) -> list:
        """Seed-generator states (step noise, D's dropout): per rank, never broadcast."""
        return [self.noise.state] + [v for v in self.g.variables + self.d.variables
                                     if losses.is_seed(v)]

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
        variables = self.seed_variables()
        for v, words in zip(variables, self.seed_words(seed, rank, epoch, len(variables))):
            v.assign(words.astype(v.dtype))

    def set_learning_rate(self, lr: float) -> None:
        for opt in (self.g_opt, self.d_opt):
            getattr(opt, "inner_optimizer", opt).learning_rate = lr

    # -- the step ---------------------------------------------------------------------------
    def draw(self, batch_size: int) -> dict:
        """The random inputs of one step for a batch of ``batch_size`` (tensors)."""
        sg = self.noise
        return self.draws_from(lambda shape, lo, hi: keras.random.uniform(shape, lo, hi, seed=sg),
                               lambda shape: keras.random.normal(shape, seed=sg), batch_size)

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
        image, energy, ecal = _inputs(batch)
        if draws is None:
            draws = self.draw(keras.ops.shape(image)[0])
        step_losses = losses.gan_step(
            image, energy, ecal, draws,
            d_update=lambda x, labels, e, ec: self._d_update(x, labels, e, ec, training, local),
            g_update=lambda z, e: self._g_update(z, e, training, local),
            generate=lambda latent: self.g(latent, training=False))
        if local:
            return step_losses
        return distributed.allreduce(step_losses, "mean", name="step_losses")  # DISTRIBUTED

    def _d_grads(self, image, labels, energy, ecal, training, local=False):
        variables = self.d.trainable_variables
        with tf.GradientTape() as tape:
            total, record = self.weighted_losses(
                losses.parts(self.d(image, training=training), labels, energy, ecal))
            if self.loss_scale:
                total = self.d_opt.scale_loss(total)
        grads = tape.gradient(total, variables)
        if local:
            return grads, record
        return distributed.average(grads), record  # DISTRIBUTED: ring all-reduce, mean over ranks

    def _g_grads(self, z, e, training, local=False):
        e = keras.ops.cast(e, "float32")
        with tf.GradientTape() as tape:
            fake = self.g(e[:, None] * z, training=training)
            out = self.d(fake, training=training)
            total, record = self.weighted_losses(
                losses.parts(out, keras.ops.ones_like(e), e, losses.ecal_target(e)))
            if self.loss_scale:
                total = self.g_opt.scale_loss(total)
        grads = tape.gradient(total, self.g.trainable_variables)
        if local:
            return grads, record
        return distributed.average(grads), record  # DISTRIBUTED: ring all-reduce, mean over ranks

    def _d_update(self, image, labels, energy, ecal, training, local):
        grads, record = self._d_grads(image, labels, energy, ecal, training, local)
        self.d_opt.apply(grads, self.d.trainable_variables)
        return record

    def _g_update(self, z, e, training, local):
        grads, record = self._g_grads(z, e, training, local)
        self.g_opt.apply(grads, self.g.trainable_variables)
        return record

    def gradients(self, batch: dict, draws: dict, *, training: bool = True):
        """Rank-averaged gradients of the step's first D update (real batch) and first G update,
        without applying them: ``(d_grads, g_grads)``. For tests of data parallelism."""
        return self._grads(batch, draws, training)

    def _gradients(self, batch, draws, training):
        image, energy, ecal = _inputs(batch)
        labels = losses.flip(keras.ops.ones_like(energy), draws["flip_real"])
        d_grads, _ = self._d_grads(image, labels, energy, ecal, training)
        g_grads, _ = self._g_grads(draws["z_gen"][0], draws["e_gen"][0], training)
        return d_grads, g_grads

    # -- evaluation -------------------------------------------------------------------------
    def eval_sums(self, batch: dict, draws: dict):
        """Summed test losses of one batch, in inference mode (:func:`gan3d.gan.losses.eval_sums`):
        (8,) sums, D's over 2b samples then G's over 2b; divide by the sample counts after summing
        over batches and ranks."""
        return self._eval(batch, draws)

    def _eval_sums(self, batch, draws):
        image, energy, ecal = _inputs(batch)
        return losses.eval_sums(self.weights, lambda x: self.g(x, training=False),
                                lambda x: self.d(x, training=False), image, energy, ecal, draws,
                                self.latent_size)


def _inputs(batch):
    """(image, energy, ecal_sum) of a batch as float32 tensors, energies and sums flat (b,)."""
    image = keras.ops.cast(batch["image"], "float32")
    energy = keras.ops.cast(keras.ops.reshape(batch["energy"], (-1,)), "float32")
    ecal = keras.ops.cast(keras.ops.reshape(batch["ecal_sum"], (-1,)), "float32")
    return image, energy, ecal


# ---------------------------------------------------------------------------------------------
# The Horovod backend (train.backend: horovod)


class HorovodBackend:
    """TensorFlow with Horovod's all-reduce (:mod:`gan3d.gan.backend`'s contract)."""

    name = "horovod"

    def prepare(self) -> None:
        pass

    def check(self, cfg: Config) -> None:
        pass

    def init(self):
        return distributed.init()  # DISTRIBUTED: first thing, before TensorFlow runs an op

    def resolve(self, cfg: Config) -> Config:
        return resolved_precision(cfg, _gpu())

    def build_step(self, cfg: Config) -> GanStep:
        from .model import build_discriminator, build_generator

        keras.utils.set_random_seed(cfg.train.seed)  # rank 0's initial weights; then broadcast
        gpu = _gpu()
        precision = resolved_precision(cfg, gpu).train.precision
        policy = None if precision == "float32" else f"mixed_{precision}"
        # On a CPU the memory-bound LeakyReLU, BatchNorm and Dropout run faster in float32 under
        # a mixed policy, and the discriminator's CPU layers (gan/cpu_layers.py) in fewer passes.
        ew = "float32" if policy and gpu is None else None
        fast = cfg.train.cpu_layers == "fast" or (
            cfg.train.cpu_layers == "auto" and policy is not None and gpu is None)
        t = cfg.train
        return GanStep(build_generator(dtype=policy, elementwise=ew),
                       build_discriminator(dtype=policy, elementwise=ew, fast_cpu=fast),
                       loss_weights=t.loss_weights, label_flip=t.label_flip,
                       learning_rate=t.learning_rate, rho=t.rho, seed=t.seed,
                       loss_scale=precision == "float16")


def _gpu() -> tuple[int, int] | None:
    """Compute capability of the GPU this rank was pinned to (None: CPU)."""
    gpu = devices.pinned()
    return gpu["compute_capability"] if gpu else None


BACKEND = HorovodBackend()
