"""What one 3DGAN step computes, written once for every backend, in ``keras.ops`` only.

The losses of the discriminator's three heads, the label flips, the ECAL-sum target of a fake
shower, the weighted total of one update, the per-sample random draws of a step, the order of its
four updates (:func:`gan_step`) and the test-loss sums (:func:`eval_sums`). The Horovod backend
(:mod:`gan3d.gan.step`) and the JAX backend (:mod:`gan3d.gan.jax.step`) both call these; what
each backend adds is only how gradients are taken, averaged over workers and applied. Nothing here
imports TensorFlow, so the JAX backend runs where TensorFlow is not installed.
"""

from __future__ import annotations

from typing import Callable, Sequence

import keras

from ..data.calorimeter import NETWORK_SCALE, SAMPLING_FIT_PERCENT

__all__ = ["E_RANGE", "DRAW_NAMES", "ecal_target", "bce", "mape", "parts", "flip", "is_seed",
           "weighted", "draws", "gan_step", "eval_sums"]

E_RANGE = (0.1, 5.0)  # primary energies of fakes, in units of 100 GeV
# The random inputs of one step, in the order they are drawn (the order fixes the numbers).
DRAW_NAMES = ("flip_real", "flip_fake", "e_fake", "z_fake", "e_gen", "z_gen")
_EPS = 1e-7  # Keras' clipping constant for BCE and MAPE


def ecal_target(e):
    """ECAL-sum target of a fake shower, in network units (GeV x 100), for e = E/100 (tensor)."""
    e = keras.ops.cast(e, "float32")
    poly = keras.ops.zeros_like(e)
    for c in SAMPLING_FIT_PERCENT:  # Horner's rule on the published fit, in %
        poly = poly * e + c
    # E_GeV x poly/100 = e x poly GeV deposited; the network sees GeV x 100.
    return e * poly * NETWORK_SCALE


def bce(y, p):
    """Binary cross-entropy per sample, p clipped to [eps, 1 - eps] as Keras does."""
    p = keras.ops.clip(p, _EPS, 1.0 - _EPS)
    return -(y * keras.ops.log(p) + (1.0 - y) * keras.ops.log(1.0 - p))


def mape(y, p):
    """Mean absolute percentage error per sample (%)."""
    return 100.0 * keras.ops.abs(y - p) / keras.ops.maximum(keras.ops.abs(y), _EPS)


def parts(outputs, labels, energy, ecal):
    """Per-sample losses (each (b,)) of the discriminator's three heads against their targets:
    BCE of the real/fake output, MAPE of the energy and of the ECAL sum."""
    p, aux, total = (keras.ops.cast(o[:, 0], "float32") for o in outputs)
    return [bce(labels, p), mape(energy, aux), mape(ecal, total)]


def flip(labels, flips):
    """Labels with the selected entries flipped (0 <-> 1)."""
    return keras.ops.where(flips, 1.0 - labels, labels)


def is_seed(v) -> bool:
    """A random-number state variable (Dropout's), not a weight."""
    return v.path.endswith("seed_generator_state")


def weighted(weights: Sequence[float], per_sample):
    """The loss of one update: ``w0 * BCE + w1 * MAPE(energy) + w2 * MAPE(ECAL sum)`` over the
    batch means, and the (4,) record ``[total, bce, aux, ecal]`` the history keeps."""
    means = [keras.ops.mean(p) for p in per_sample]
    total = sum(w * m for w, m in zip(weights, means))
    return total, keras.ops.stack([total, *means])


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


def gan_step(image, energy, ecal, draws: dict, d_update: Callable, g_update: Callable,
             generate: Callable):
    """The reference trainer's step in order, each update done by the backend.

    ``d_update(x, labels, energy, ecal)`` and ``g_update(z, e)`` take one update of D or G and
    return its (4,) losses; ``generate(latent)`` is G in inference mode. Returns the step's (8,)
    losses: D's mean over its two updates, then G's over its two.
    """
    ones = keras.ops.ones_like(energy)
    # 1. D on real showers, 5 % of the labels flipped.
    real = d_update(image, flip(ones, draws["flip_real"]), energy, ecal)
    # 2. D on fakes made by G in inference mode (the reference's generator.predict).
    e_f = keras.ops.cast(draws["e_fake"], "float32")
    fake = generate(e_f[:, None] * draws["z_fake"])
    fake_l = d_update(fake, flip(0.0 * ones, draws["flip_fake"]), e_f, ecal_target(e_f))
    # 3. G twice through D, which it tries to convince that its showers are real.
    gen = [g_update(draws["z_gen"][i], keras.ops.cast(draws["e_gen"][i], "float32"))
           for i in range(2)]
    return keras.ops.concatenate([(real + fake_l) / 2.0, (gen[0] + gen[1]) / 2.0])


def eval_sums(weights: Sequence[float], g: Callable, d: Callable, image, energy, ecal,
              draws: dict, latent_size: int):
    """Summed test losses of one batch in inference mode, as the reference evaluated them.

    ``g`` and ``d`` are the networks in inference mode. D on the real batch and as many fakes;
    the combined model (G then D, target "real") on twice as many fresh fakes. ``draws`` needs
    ``e_fake``, ``z_fake`` and ``e_gen``/``z_gen`` of shape (2, b[, latent]). Returns (8,) sums:
    D total, bce, aux, ecal over 2b samples, then the same for G over 2b samples.
    """
    e_f = keras.ops.cast(draws["e_fake"], "float32")
    fake = g(e_f[:, None] * draws["z_fake"])
    d_real = parts(d(image), keras.ops.ones_like(energy), energy, ecal)
    d_fake = parts(d(fake), keras.ops.zeros_like(e_f), e_f, ecal_target(e_f))
    d_parts = [keras.ops.concatenate([a, b]) for a, b in zip(d_real, d_fake)]
    e_g = keras.ops.cast(keras.ops.reshape(draws["e_gen"], (-1,)), "float32")
    z_g = keras.ops.reshape(draws["z_gen"], (-1, latent_size))
    g_parts = parts(d(g(e_g[:, None] * z_g)), keras.ops.ones_like(e_g), e_g, ecal_target(e_g))
    sums = []
    for per_sample in (d_parts, g_parts):
        s = [keras.ops.sum(p) for p in per_sample]
        sums += [sum(w * x for w, x in zip(weights, s)), *s]
    return keras.ops.stack(sums)
