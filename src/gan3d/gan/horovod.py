"""The Horovod backend (``train.backend: horovod``): the 3DGAN step on TensorFlow, every gradient
all-reduced by Horovod before it is applied.

:func:`gan3d.gan.step.gan_step` gives the order of the four updates, the losses and the draws;
this module gives one update (:meth:`HorovodStep._train_step`'s ``update_d`` and ``update_g``):

    with tf.GradientTape() as tape:           # the gradient on this rank's batch
        loss, record = self.d_loss(...)
    grads = tape.gradient(loss, weights)
    grads = distributed.average(grads)        # DISTRIBUTED: ring all-reduce, mean over ranks
    optimizer.apply(grads, weights)           # every rank applies the same update

The step's losses are averaged too, so a NaN on any rank stops every rank at the same step. With
``local=True`` (local SGD, :mod:`gan3d.gan.local_sgd`) the step skips both all-reduces and
:meth:`HorovodStep.average_state` averages the whole state every k steps. float16 scales the
loss dynamically (a step whose all-reduced gradients are not finite is skipped on every rank).
:class:`HorovodBackend` is what the training loop (:mod:`gan3d.gan.training`) plugs in.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
import tensorflow as tf

from ..config import Config, resolved_precision
from ..parallel import devices, distributed
from .history import LOSSES as LOSS_NAMES
from .step import Step, ecal_target, flip, gan_step, eval_sums, is_seed, parts

__all__ = ["LOSS_NAMES", "HorovodStep", "HorovodBackend", "BACKEND"]


class HorovodStep(Step):
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

    # -- the step ---------------------------------------------------------------------------
    def train_step(self, batch: dict, draws: dict | None = None, *, training: bool = True,
                   local: bool = False):
        """One full step on this rank's ``batch`` (image, energy, ecal_sum); mean losses over ranks.

        ``training=False`` runs BatchNorm on moving statistics and disables Dropout (the exact
        equality test of data parallelism). ``local=True`` is a step of local SGD: this rank's
        gradients and losses only, no communication. Returns a float32 tensor of
        :data:`LOSS_NAMES`.
        """
        return (self._train_local if local else self._train)(batch, draws, training)

    def _train_step(self, batch, draws, training, local=False):
        image, energy, ecal = _inputs(batch)
        if draws is None:
            draws = self.draw(keras.ops.shape(image)[0])

        def update_d(x, labels, e, ec):  # one update of D: tape, loss, all-reduce, apply
            with tf.GradientTape() as tape:
                loss, record = self.d_loss(x, labels, e, ec, training)
            grads = tape.gradient(loss, self.d.trainable_variables)
            if not local:
                grads = distributed.average(grads)  # DISTRIBUTED: ring all-reduce, mean over ranks
            self.d_opt.apply(grads, self.d.trainable_variables)
            return record

        def update_g(z, e):  # one update of G through D: tape, loss, all-reduce, apply
            with tf.GradientTape() as tape:
                loss, record = self.g_loss(z, e, training)
            grads = tape.gradient(loss, self.g.trainable_variables)
            if not local:
                grads = distributed.average(grads)  # DISTRIBUTED: ring all-reduce, mean over ranks
            self.g_opt.apply(grads, self.g.trainable_variables)
            return record

        losses = gan_step(image, energy, ecal, draws, update_d, update_g,
                          generate=lambda latent: self.g(latent, training=False))
        if local:
            return losses
        return distributed.allreduce(losses, "mean", name="step_losses")  # DISTRIBUTED

    def d_loss(self, image, labels, energy, ecal, training):
        """D's loss (scaled under float16) and its (4,) record, on ``image`` against the targets."""
        loss, record = self.weighted_losses(parts(self.d(image, training=training), labels,
                                                  energy, ecal))
        return (self.d_opt.scale_loss(loss) if self.loss_scale else loss), record

    def g_loss(self, z, e, training):
        """G's loss through D (target "real", E', fit(E')) for latents ``z`` at energies ``e``."""
        e = keras.ops.cast(e, "float32")
        out = self.d(self.g(e[:, None] * z, training=training), training=training)
        loss, record = self.weighted_losses(parts(out, keras.ops.ones_like(e), e, ecal_target(e)))
        return (self.g_opt.scale_loss(loss) if self.loss_scale else loss), record

    def draw(self, batch_size: int) -> dict:
        """The random inputs of one step for a batch of ``batch_size`` (tensors)."""
        sg = self.noise
        return self.draws_from(lambda shape, lo, hi: keras.random.uniform(shape, lo, hi, seed=sg),
                               lambda shape: keras.random.normal(shape, seed=sg), batch_size)

    def gradients(self, batch: dict, draws: dict, *, training: bool = True):
        """Rank-averaged gradients of the step's first D update (real batch) and first G update,
        without applying them: ``(d_grads, g_grads)``. For tests of data parallelism."""
        return self._grads(batch, draws, training)

    def _gradients(self, batch, draws, training):
        image, energy, ecal = _inputs(batch)
        labels = flip(keras.ops.ones_like(energy), draws["flip_real"])
        with tf.GradientTape() as tape:
            loss, _ = self.d_loss(image, labels, energy, ecal, training)
        d_grads = distributed.average(tape.gradient(loss, self.d.trainable_variables))  # DISTRIBUTED
        with tf.GradientTape() as tape:
            loss, _ = self.g_loss(draws["z_gen"][0], draws["e_gen"][0], training)
        g_grads = distributed.average(tape.gradient(loss, self.g.trainable_variables))  # DISTRIBUTED
        return d_grads, g_grads

    # -- evaluation -------------------------------------------------------------------------
    def eval_sums(self, batch: dict, draws: dict):
        """Summed test losses of one batch, in inference mode (:func:`gan3d.gan.step.eval_sums`):
        (8,) sums, D's over 2b samples then G's over 2b; divide by the sample counts after summing
        over batches and ranks."""
        return self._eval(batch, draws)

    def _eval_sums(self, batch, draws):
        image, energy, ecal = _inputs(batch)
        return eval_sums(self.weights, lambda x: self.g(x, training=False),
                         lambda x: self.d(x, training=False), image, energy, ecal, draws,
                         self.latent_size)

    # -- state across ranks -----------------------------------------------------------------
    def seed_variables(self) -> list:
        """Seed-generator states (step noise, D's dropout): per rank, never broadcast."""
        return [self.noise.state] + [v for v in self.g.variables + self.d.variables
                                     if is_seed(v)]

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


def _inputs(batch):
    """(image, energy, ecal_sum) of a batch as float32 tensors, energies and sums flat (b,)."""
    image = keras.ops.cast(batch["image"], "float32")
    energy = keras.ops.cast(keras.ops.reshape(batch["energy"], (-1,)), "float32")
    ecal = keras.ops.cast(keras.ops.reshape(batch["ecal_sum"], (-1,)), "float32")
    return image, energy, ecal


class HorovodBackend:
    """TensorFlow with Horovod's all-reduce: how the processes join, how ``auto`` precision
    resolves, and the step (the JAX backend, :mod:`gan3d.gan.jax.backend`, has the same five)."""

    name = "horovod"

    def prepare(self) -> None:
        pass

    def check(self, cfg: Config) -> None:
        pass

    def init(self):
        return distributed.init()  # DISTRIBUTED: first thing, before TensorFlow runs an op

    def resolve(self, cfg: Config) -> Config:
        return resolved_precision(cfg, _gpu())

    def build_step(self, cfg: Config) -> HorovodStep:
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
        return HorovodStep(build_generator(dtype=policy, elementwise=ew),
                           build_discriminator(dtype=policy, elementwise=ew, fast_cpu=fast),
                           loss_weights=t.loss_weights, label_flip=t.label_flip,
                           learning_rate=t.learning_rate, rho=t.rho, seed=t.seed,
                           loss_scale=precision == "float16")


def _gpu() -> tuple[int, int] | None:
    """Compute capability of the GPU this rank was pinned to (None: CPU)."""
    gpu = devices.pinned()
    return gpu["compute_capability"] if gpu else None


BACKEND = HorovodBackend()
