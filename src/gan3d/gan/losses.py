"""The 3DGAN step's per-sample losses and label flips, in ``keras.ops`` only (no TensorFlow).

The JAX backend (:mod:`gan3d.gan.jax_step`) computes its losses with these functions, so that it
runs where TensorFlow is not installed (accelerator machines with JAX alone,
``bench/device_check.py``). :mod:`gan3d.gan.step` holds the same definitions for the Horovod
backend; ``tests/test_backends.py`` checks that both give the same numbers on the same inputs.
They stay two copies until the convergence study is next re-run: ``gan/step.py``'s bytes are part
of that study's code hash (:data:`gan3d.convergence.plan.COMPONENTS`), so moving its functions
here would mark the committed results stale although no number changed.
"""

from __future__ import annotations

import keras

from ..data.calorimeter import NETWORK_SCALE, SAMPLING_FIT_PERCENT

__all__ = ["E_RANGE", "ecal_target", "parts", "flip", "is_seed"]

E_RANGE = (0.1, 5.0)  # primary energies of fakes, in units of 100 GeV
_EPS = 1e-7  # Keras' clipping constant for BCE and MAPE


def ecal_target(e):
    """ECAL-sum target of a fake shower, in network units (GeV x 100), for e = E/100 (tensor)."""
    e = keras.ops.cast(e, "float32")
    poly = keras.ops.zeros_like(e)
    for c in SAMPLING_FIT_PERCENT:  # Horner's rule on the published fit, in %
        poly = poly * e + c
    return e * poly * NETWORK_SCALE  # E_GeV x poly/100 = e x poly GeV; the network sees GeV x 100


def _bce(y, p):
    p = keras.ops.clip(p, _EPS, 1.0 - _EPS)
    return -(y * keras.ops.log(p) + (1.0 - y) * keras.ops.log(1.0 - p))


def _mape(y, p):
    return 100.0 * keras.ops.abs(y - p) / keras.ops.maximum(keras.ops.abs(y), _EPS)


def parts(outputs, labels, energy, ecal):
    """Per-sample losses (each (b,)) of the discriminator's three heads against their targets:
    BCE of the real/fake output, MAPE of the energy and of the ECAL sum."""
    p, aux, total = (keras.ops.cast(o[:, 0], "float32") for o in outputs)
    return [_bce(labels, p), _mape(energy, aux), _mape(ecal, total)]


def flip(labels, flips):
    """Labels with the selected entries flipped (0 <-> 1)."""
    return keras.ops.where(flips, 1.0 - labels, labels)


def is_seed(v) -> bool:
    """A random-number state variable (Dropout's), not a weight."""
    return v.path.endswith("seed_generator_state")
