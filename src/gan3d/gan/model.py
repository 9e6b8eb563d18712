"""The energy-conditioned 3DGAN: generator, discriminator, their cost, and how to use them.

Both networks follow the public CERN reference trainer (``svalleco/3Dgan``, branch
``Energy-gan``) layer by layer, in Keras 3, channels-last, with the Keras 1 defaults of the time
made explicit (LeakyReLU slope 0.3, BatchNorm momentum 0.99 and epsilon 1e-3, Dropout 0.2):

* generator: latent ``(E/100) * z`` of size 200 -> shower ``(25, 25, 25, 1)`` in units of
  ``100 x GeV`` (the training data are scaled by 100); 872,948 parameters;
* discriminator: shower -> ``[p_real, E/100, ECAL sum]``, the last a weightless sum of the input
  (:class:`EcalSum`); 73,450 parameters.

Only Keras layers and ``keras.ops`` are used inside the models, so a saved model loads under any
Keras backend (TensorFlow here; JAX on an accelerator machine).

Cost: :func:`forward_flops` counts the arithmetic of one forward pass per shower exactly from the
layer shapes; :func:`step_flops` that of one full training step (see its docstring for the
convention).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import keras
import numpy as np

from ..data.calorimeter import NETWORK_SCALE as ECAL_SCALE
from ..data.calorimeter import SHAPE
from ..exceptions import CheckpointError
from ..io import atomic_path
from . import cpu_layers

__all__ = [
    "LATENT_SIZE",
    "SHAPE",
    "ECAL_SCALE",
    "exact_conv1",
    "EcalSum",
    "build_generator",
    "build_discriminator",
    "layer_flops",
    "forward_flops",
    "step_flops",
    "save_generator",
    "load_generator",
    "save_discriminator",
    "load_discriminator",
    "latent_vectors",
    "generate_showers",
    "discriminate",
]

LATENT_SIZE = 200
_SLOPE = 0.3  # Keras 1 LeakyReLU default, kept by the reference
_BN = dict(momentum=0.99, epsilon=1e-3)  # Keras 1 defaults
_DROPOUT = 0.2


@keras.saving.register_keras_serializable(package="gan3d")
class EcalSum(keras.layers.Layer):
    """The discriminator's weightless third head: total energy of the input, shape (N, 1).

    Always computed in float32: a bfloat16 sum of 15,625 cells would lose about three digits.
    """

    def __init__(self, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, image):
        return keras.ops.sum(keras.ops.cast(image, "float32"), axis=(1, 2, 3))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])


def _policies(dtype: str | None, elementwise: str | None) -> tuple[dict, dict]:
    """Keyword arguments of the convolution/dense layers and of the element-wise ones."""
    kw = {"dtype": dtype} if dtype else {}
    return kw, ({"dtype": elementwise} if elementwise else kw)


def exact_conv1(dtype: str | None) -> bool:
    """Whether the generator's ``conv1`` computes in float32 under the bfloat16 policy ``dtype``:
    where TensorFlow's oneDNN computes bfloat16 on AMX tiles (:func:`gan3d.parallel.runtime.
    onednn_uses_amx`). There the AMX kernel it picks for this one shape - a (6, 6, 8) kernel "same"
    over the 7 x 7 x 8 x 8 latent image - returns wrong sums (relative error 1.1 against float32,
    TF 2.18.1 on a Xeon with AMX, where every other convolution of the 3DGAN, forward and
    backward, is within bfloat16's 0.3 %); with its first layer wrong the generator trains no
    shower. Elsewhere (AVX512_BF16 without AMX, GPUs, float32) every layer keeps ``dtype``."""
    if not dtype or "bfloat16" not in dtype or keras.backend.backend() != "tensorflow":
        return False
    from ..parallel.runtime import onednn_uses_amx
    return onednn_uses_amx()


def build_generator(latent_size: int = LATENT_SIZE, *, dtype: str | None = None,
                    elementwise: str | None = None) -> keras.Model:
    """The 3DGAN generator: ``(N, latent_size)`` -> ``(N, 25, 25, 25, 1)`` (cell energy x 100).

    ``dtype`` is a Keras dtype policy for the layers (``"mixed_bfloat16"``); the output is float32.
    ``elementwise`` overrides it for the memory-bound LeakyReLU, BatchNorm and Dropout layers
    (``"float32"`` on CPUs, whose kernels for them are slower in bfloat16 than in float32).
    ``conv1`` computes in float32 where oneDNN's AMX kernel gets it wrong (:func:`exact_conv1`).
    """
    L = keras.layers
    kw, ew = _policies(dtype, elementwise)
    first = {"dtype": "float32"} if exact_conv1(dtype) else kw
    latent = keras.Input((latent_size,), name="latent")
    x = L.Dense(7 * 7 * 8 * 8, name="dense", **kw)(latent)
    x = L.Reshape((7, 7, 8, 8), name="reshape")(x)
    x = L.Conv3D(64, (6, 6, 8), padding="same", kernel_initializer="he_uniform", name="conv1",
                 **first)(x)
    x = L.LeakyReLU(_SLOPE, name="lrelu1", **ew)(x)
    x = L.BatchNormalization(name="bn1", **_BN, **ew)(x)
    x = L.UpSampling3D((2, 2, 2), name="up1", **kw)(x)  # 14 x 14 x 16
    x = L.ZeroPadding3D((2, 2, 0), name="pad2", **kw)(x)
    x = L.Conv3D(6, (6, 5, 8), padding="valid", kernel_initializer="he_uniform", name="conv2", **kw)(x)
    x = L.LeakyReLU(_SLOPE, name="lrelu2", **ew)(x)
    x = L.BatchNormalization(name="bn2", **_BN, **ew)(x)
    x = L.UpSampling3D((2, 2, 3), name="up2", **kw)(x)  # 26 x 28 x 27
    x = L.ZeroPadding3D((1, 0, 3), name="pad3", **kw)(x)
    x = L.Conv3D(6, (3, 3, 8), padding="valid", kernel_initializer="he_uniform", name="conv3", **kw)(x)
    x = L.LeakyReLU(_SLOPE, name="lrelu3", **ew)(x)  # 26 x 26 x 26
    x = L.Conv3D(1, (2, 2, 2), padding="valid", use_bias=False, kernel_initializer="glorot_normal",
                 name="conv4", **kw)(x)
    shower = L.Activation("relu", name="relu", dtype="float32")(x)  # 25 x 25 x 25 x 1
    return keras.Model(latent, shower, name="generator")


def build_discriminator(*, dtype: str | None = None, elementwise: str | None = None,
                        fast_cpu: bool = False) -> keras.Model:
    """The 3DGAN discriminator: ``(N, 25, 25, 25, 1)`` -> ``[p_real, E/100, ECAL sum]``, each
    (N, 1). ``dtype`` and ``elementwise`` as for :func:`build_generator`.

    ``fast_cpu=True`` computes the same function with the same weights in fewer passes over
    memory (:mod:`gan3d.gan.cpu_layers`; ``conv2``/``conv3`` pad inside the convolution instead of
    in a ``ZeroPadding3D`` layer); it rounds differently, so float32 training uses it only when
    asked (``train.cpu_layers: fast``).
    """
    L = keras.layers
    kw, ew = _policies(dtype, elementwise)
    conv1 = cpu_layers.FoldedConv3D if fast_cpu else L.Conv3D
    norm = cpu_layers.FusedBatchNormalization if fast_cpu else L.BatchNormalization
    drop = cpu_layers.MaskDropout if fast_cpu else L.Dropout
    image = keras.Input((*SHAPE, 1), name="image")
    x = conv1(32, 5, padding="same", name="conv1", **kw)(image)
    x = L.LeakyReLU(_SLOPE, name="lrelu1", **ew)(x)
    x = drop(_DROPOUT, name="drop1", **ew)(x)
    for i, pad in ((2, 2), (3, 2), (4, 1)):
        if fast_cpu and pad == 2:  # ZeroPadding3D(2) + a valid 5^3 convolution = "same"
            x = L.Conv3D(8, 5, padding="same", name=f"conv{i}", **kw)(x)
        else:
            x = L.ZeroPadding3D(pad, name=f"pad{i}", **kw)(x)
            x = L.Conv3D(8, 5, padding="valid", name=f"conv{i}", **kw)(x)
        x = L.LeakyReLU(_SLOPE, name=f"lrelu{i}", **ew)(x)
        x = norm(name=f"bn{i}", **_BN, **ew)(x)
        x = drop(_DROPOUT, name=f"drop{i}", **ew)(x)  # 25, 25, then 23 cubed
    x = L.AveragePooling3D(2, name="pool", **kw)(x)
    features = L.Flatten(name="flatten", **kw)(x)  # 11**3 * 8 = 10,648
    fake = L.Dense(1, activation="sigmoid", name="generation", dtype="float32")(features)
    aux = L.Dense(1, activation="linear", name="auxiliary", dtype="float32")(features)
    ecal = EcalSum(name="ecal")(image)
    return keras.Model(image, [fake, aux, ecal], name="discriminator")


# ---------------------------------------------------------------------------------------------
# Cost in floating-point operations


def _volume(shape) -> int:
    return int(np.prod([d for d in shape[1:]]))


def layer_flops(layer, input_shape, output_shape) -> int:
    """FLOPs of one layer's forward pass for ONE sample (inference mode).

    Convention: a multiply-add is 2 FLOPs; a bias add, an activation (ReLU, LeakyReLU, sigmoid)
    1 FLOP per output element; BatchNorm 2 per element (scale and shift folded); average pooling
    k FLOPs per output (k-1 adds, 1 multiply); the ECAL sum one add per input cell. Data movement
    (reshape, padding, up-sampling, flatten) and Dropout at inference cost nothing.
    """
    L = keras.layers
    out = _volume(output_shape)
    if isinstance(layer, (L.Conv3D, L.Dense)):
        fan_in = int(np.prod(layer.kernel.shape[:-1]))  # kernel volume x input channels
        flops = 2 * fan_in * out + (out if layer.use_bias else 0)
        act = getattr(layer, "activation", None)
        if act is not None and act is not keras.activations.linear:
            flops += out
        return flops
    if isinstance(layer, L.BatchNormalization):
        return 2 * out
    if isinstance(layer, (L.LeakyReLU, L.ReLU, L.Activation)):
        return out
    if isinstance(layer, L.AveragePooling3D):
        return int(np.prod(layer.pool_size)) * out
    if isinstance(layer, EcalSum):
        return _volume(input_shape)
    return 0


def forward_flops(model: keras.Model, *, by_layer: bool = False) -> int | dict[str, int]:
    """Exact FLOPs of one forward pass per sample, from the layer shapes (see :func:`layer_flops`).

    With ``by_layer=True`` returns ``{layer name: FLOPs}`` instead of the total. For the 3DGAN the
    convolutions dominate: discriminator about 1.57 GFLOP, generator about 0.51 GFLOP.
    """
    counts = {}
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        node = layer._inbound_nodes[0]
        in_shape = node.input_tensors[0].shape
        out_shape = node.output_tensors[0].shape
        counts[layer.name] = layer_flops(layer, in_shape, out_shape)
    return counts if by_layer else int(sum(counts.values()))


def step_flops(generator: keras.Model | None = None, discriminator: keras.Model | None = None,
               *, frozen_weight_grads: bool = False) -> int:
    """FLOPs of one full 3DGAN training step per shower of the per-worker batch.

    The step (:mod:`gan3d.gan.training`): D on a real batch, G forward then D on a fake batch, and
    twice G through the frozen D. Convention: a trained network costs 3 x forward (forward, the
    gradient with respect to its inputs, the gradient with respect to its weights); the frozen D in
    the generator passes costs 2 x forward (its weight gradients are not needed and TensorFlow's
    graph pruning drops them). ``frozen_weight_grads=True`` counts them anyway (3 x), the
    convention of the prototype notes (about 22.4 GFLOP instead of about 19.3).
    Cost: D_real 3D + D_fake (G + 3D) + 2 x (3G + kD) = (6 + 2k) D + 7 G, k = 2 or 3.
    """
    g = forward_flops(generator or build_generator())
    d = forward_flops(discriminator or build_discriminator())
    k = 3 if frozen_weight_grads else 2
    return int((6 + 2 * k) * d + 7 * g)


# ---------------------------------------------------------------------------------------------
# Saving, loading and using trained networks


def _save(model: keras.Model, path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.suffix != ".keras":
        raise CheckpointError(f"model file {path} must end in .keras (the Keras 3 format)")
    with atomic_path(path) as tmp:
        model.save(tmp)
    return path


def _load(path: str | os.PathLike) -> keras.Model:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"model file {path} does not exist; train first (`gan3d train`)")
    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as exc:  # noqa: BLE001 - Keras raises many types for a damaged file
        raise CheckpointError(f"cannot load model {path}: {type(exc).__name__}: {exc}") from None


def save_generator(generator: keras.Model, path: str | os.PathLike) -> Path:
    """Write the generator atomically as a ``.keras`` file."""
    return _save(generator, path)


def load_generator(path: str | os.PathLike) -> keras.Model:
    """Load a generator written by :func:`save_generator` (any Keras backend)."""
    return _load(path)


def save_discriminator(discriminator: keras.Model, path: str | os.PathLike) -> Path:
    """Write the discriminator atomically as a ``.keras`` file."""
    return _save(discriminator, path)


def load_discriminator(path: str | os.PathLike) -> keras.Model:
    """Load a discriminator written by :func:`save_discriminator` (any Keras backend)."""
    return _load(path)


def latent_vectors(energies_gev: np.ndarray, seed: int = 0, latent_size: int = LATENT_SIZE) -> np.ndarray:
    """The conditioned latent ``(E/100) * z``, z ~ N(0, 1): shape (N, latent_size), float32."""
    e = np.asarray(energies_gev, dtype=np.float64).reshape(-1, 1) / ECAL_SCALE
    z = np.random.default_rng(seed).standard_normal((e.shape[0], latent_size))
    return (e * z).astype(np.float32)


def generate_showers(generator: keras.Model, energies_gev: Any, seed: int = 0,
                     batch_size: int = 64) -> np.ndarray:
    """Showers for primary energies ``energies_gev`` (N,): float32 (N, 25, 25, 25) cell energies in GeV.

    The latent is ``(E/100) * z`` with z ~ N(0, 1)^200 drawn from ``seed``; the generator runs in
    inference mode and its ``x 100`` output scale is undone.
    """
    latent = latent_vectors(energies_gev, seed, int(generator.input_shape[-1]))
    out = np.empty((latent.shape[0], *SHAPE), dtype=np.float32)
    for i in range(0, latent.shape[0], batch_size):
        part = generator(latent[i:i + batch_size], training=False)
        out[i:i + batch_size] = keras.ops.convert_to_numpy(part)[..., 0] / ECAL_SCALE
    return out


def discriminate(discriminator: keras.Model, ecal_gev: Any, batch_size: int = 64) -> dict[str, np.ndarray]:
    """Run the discriminator on showers (N, 25, 25, 25) in GeV, in inference mode.

    Returns float64 arrays of shape (N,): ``p_real`` (probability that the shower is real),
    ``energy_gev`` (regressed primary energy, GeV), ``ecal_sum_gev`` (total deposit, GeV).
    """
    ecal = np.asarray(ecal_gev, dtype=np.float32)
    if ecal.ndim != 4 or ecal.shape[1:] != SHAPE:
        raise ValueError(f"expected showers of shape (N, 25, 25, 25), got {ecal.shape}")
    parts: dict[str, list[np.ndarray]] = {"p_real": [], "energy_gev": [], "ecal_sum_gev": []}
    for i in range(0, ecal.shape[0], batch_size):
        image = ecal[i:i + batch_size, ..., None] * np.float32(ECAL_SCALE)
        p, aux, total = (keras.ops.convert_to_numpy(t)[:, 0].astype(np.float64)
                         for t in discriminator(image, training=False))
        parts["p_real"].append(p)
        parts["energy_gev"].append(aux * ECAL_SCALE)
        parts["ecal_sum_gev"].append(total / ECAL_SCALE)
    return {k: np.concatenate(v) if v else np.empty(0) for k, v in parts.items()}
