"""The generator for inference, with its upsampling folded into the convolutions: same showers,
about 2.6x fewer FLOPs.

The 3DGAN generator upsamples by repetition (nearest neighbour), pads with zeros and convolves,
twice: ``UpSampling3D(2,2,2) -> ZeroPadding3D(2,2,0) -> Conv3D(6, (6,5,8))`` and
``UpSampling3D(2,2,3) -> ZeroPadding3D(1,0,3) -> Conv3D(6, (3,3,8))``. A convolution over
repeated values multiplies each source value by the sum of the kernel taps that fall on its
copies. So every output position of phase ``r`` (its index modulo the upsampling factor ``s``,
per axis) is a convolution of the *small*, un-upsampled tensor with a folded kernel: tap ``k``
of the original kernel lands on source offset ``floor((r + k - p) / s)`` (``p``: the padding),
and the folded kernel sums the taps landing on the same offset. The ``s1 s2 s3`` phase outputs
are then interleaved. Exact up to float rounding, since only the order of additions changes:
conv2 goes from 240 to 47 taps per output on average (5.1x), conv3 from 72 to 13 (5.4x), the
whole forward pass from 0.512 to about 0.195 GFLOP per shower.

:func:`folded_generator` builds this network from a trained generator's weights (any Keras
backend, any dtype policy); ``gan3d simulate`` and ``bench/bench_inference.py`` use it. Training
keeps the original layers (:mod:`gan3d.gan.model`): their gradients and saved files stay those of
the published model.
"""

from __future__ import annotations

import math

import keras
import numpy as np

from .model import exact_conv1

__all__ = ["phase_taps", "fold_kernel", "FoldedUpConv3D", "folded_generator", "inference_network",
           "folded_flops"]


def phase_taps(size: int, up: int, pad: int) -> list[tuple[int, list[int]]]:
    """Per phase ``r`` (0..up-1) along one axis: (first source offset, offset of each tap)."""
    out = []
    for r in range(up):
        offsets = [(r + k - pad) // up for k in range(size)]
        out.append((min(offsets), offsets))
    return out


def fold_kernel(kernel: np.ndarray, up, pad) -> dict[tuple[int, int, int], tuple]:
    """Folded kernels of a (K1, K2, K3, Cin, Cout) kernel, per phase (r1, r2, r3): (first source
    offset per axis, folded kernel (L1, L2, L3, Cin, Cout))."""
    taps = [phase_taps(kernel.shape[a], up[a], pad[a]) for a in range(3)]
    folded = {}
    for r1 in range(up[0]):
        for r2 in range(up[1]):
            for r3 in range(up[2]):
                w = kernel.astype(np.float64)
                starts = []
                for axis, r in enumerate((r1, r2, r3)):
                    start, offsets = taps[axis][r]
                    fold = np.zeros((max(offsets) - start + 1, len(offsets)))
                    fold[np.asarray(offsets) - start, np.arange(len(offsets))] = 1.0
                    w = np.moveaxis(np.tensordot(fold, w, axes=([1], [axis])), 0, axis)
                    starts.append(start)
                folded[(r1, r2, r3)] = (tuple(starts), w.astype(np.float32))
    return folded


class FoldedUpConv3D(keras.layers.Layer):
    """``UpSampling3D(up) -> ZeroPadding3D(pad) -> Conv3D(kernel, valid)`` computed on the
    un-upsampled input: one convolution per phase with a folded kernel, then interleaved."""

    def __init__(self, kernel: np.ndarray, bias: np.ndarray | None, up, pad, in_shape, **kwargs):
        super().__init__(**kwargs)
        self.up, self.pad = tuple(int(u) for u in up), tuple(int(p) for p in pad)
        self.in_shape = tuple(int(n) for n in in_shape)  # (n1, n2, n3) before upsampling
        ks = kernel.shape[:3]
        self.out_shape = tuple(s * n + 2 * p - k + 1 for s, n, p, k in
                               zip(self.up, self.in_shape, self.pad, ks))
        self.q = tuple(math.ceil(m / s) for m, s in zip(self.out_shape, self.up))
        folded = fold_kernel(np.asarray(kernel), self.up, self.pad)
        lo = [min(start[a] for start, _ in folded.values()) for a in range(3)]
        self.left = tuple(max(0, -x) for x in lo)  # zeros before the source, per axis
        hi = [max(start[a] + w.shape[a] + self.q[a] - 1 for start, w in folded.values())
              for a in range(3)]
        self.right = tuple(max(0, h - n + 1) for h, n in zip(hi, self.in_shape))
        self.phases = sorted(folded)
        self._starts = {r: folded[r][0] for r in self.phases}
        self._init = {r: folded[r][1] for r in self.phases}
        self._bias = None if bias is None else np.asarray(bias, np.float32)
        self.cout = int(kernel.shape[-1])

    def build(self, input_shape):
        self.kernels = {r: self.add_weight(
            shape=w.shape, initializer=keras.initializers.Constant(w), trainable=False,
            name=f"kernel_{''.join(map(str, r))}") for r, w in self._init.items()}
        self.bias = None if self._bias is None else self.add_weight(
            shape=self._bias.shape, initializer=keras.initializers.Constant(self._bias),
            trainable=False, name="bias")

    def call(self, x):
        ops = keras.ops
        x = ops.pad(x, [(0, 0), *zip(self.left, self.right), (0, 0)])
        outs = {}
        for r in self.phases:
            s = [start + left for start, left in zip(self._starts[r], self.left)]
            k = self.kernels[r]
            part = x[:, s[0]:s[0] + self.q[0] + k.shape[0] - 1,
                     s[1]:s[1] + self.q[1] + k.shape[1] - 1,
                     s[2]:s[2] + self.q[2] + k.shape[2] - 1, :]
            outs[r] = ops.conv(part, ops.cast(k, x.dtype), padding="valid")
        u1, u2, u3 = self.up
        # interleave: out[s*q + r] = phase r's output q, along each axis, then crop
        z = ops.stack([ops.stack([ops.stack([outs[(a, b, c)] for c in range(u3)], axis=4)
                                  for b in range(u2)], axis=3) for a in range(u1)], axis=2)
        q1, q2, q3 = self.q
        z = ops.reshape(z, (-1, q1 * u1, q2 * u2, q3 * u3, self.cout))
        m1, m2, m3 = self.out_shape
        z = z[:, :m1, :m2, :m3, :]
        return z if self.bias is None else z + ops.cast(self.bias, z.dtype)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], *self.out_shape, self.cout)


def folded_generator(generator: keras.Model, *, dtype: str | None = None) -> keras.Model:
    """The inference network of a trained 3DGAN ``generator`` (:func:`gan3d.gan.model.
    build_generator`'s layers) with both upsample-pad-convolutions folded; same input and
    output. ``dtype``: a Keras dtype policy such as ``"mixed_bfloat16"``."""
    L = keras.layers
    kw = {"dtype": dtype} if dtype else {}
    get = generator.get_layer
    latent = keras.Input(generator.input_shape[1:], name="latent")
    x = L.Dense(get("dense").units, name="dense", **kw)(latent)
    x = L.Reshape(get("reshape").target_shape, name="reshape")(x)
    c1 = get("conv1")
    first = {"dtype": "float32"} if exact_conv1(dtype) else kw  # oneDNN's AMX kernel: model.py
    x = L.Conv3D(c1.filters, c1.kernel_size, padding="same", name="conv1", **first)(x)
    x = L.LeakyReLU(get("lrelu1").negative_slope, name="lrelu1", **kw)(x)
    x = _bn(get("bn1"), kw)(x)
    folds = []
    for conv, up, pad in (("conv2", "up1", "pad2"), ("conv3", "up2", "pad3")):
        c, u, p = get(conv), get(up), get(pad)
        if tuple(c.strides) != (1, 1, 1) or c.padding != "valid" or \
                tuple(c.dilation_rate) != (1, 1, 1):
            raise ValueError(f"{conv}: only stride 1, valid padding, no dilation can be folded")
        pads = [lo for lo, hi in p.padding]
        if any(lo != hi for lo, hi in p.padding):
            raise ValueError(f"{pad}: only symmetric padding can be folded")
        kernel = keras.ops.convert_to_numpy(c.kernel)
        bias = keras.ops.convert_to_numpy(c.bias) if c.use_bias else None
        fold = FoldedUpConv3D(kernel, bias, u.size, pads, x.shape[1:4], name=f"{conv}_folded",
                              **kw)
        x = fold(x)
        folds.append(fold)
        if conv == "conv2":
            x = L.LeakyReLU(get("lrelu2").negative_slope, name="lrelu2", **kw)(x)
            x = _bn(get("bn2"), kw)(x)
    x = L.LeakyReLU(get("lrelu3").negative_slope, name="lrelu3", **kw)(x)
    c4 = get("conv4")
    x = L.Conv3D(c4.filters, c4.kernel_size, padding="valid", use_bias=c4.use_bias,
                 name="conv4", **kw)(x)
    shower = L.Activation("relu", name="relu", dtype="float32")(x)
    net = keras.Model(latent, shower, name="generator_folded")
    for name in ("dense", "conv1", "bn1", "bn2", "conv4"):
        net.get_layer(name).set_weights(get(name).get_weights())
    return net


def inference_network(generator: keras.Model, precision: str = "float32", *,
                      fold: bool = True) -> keras.Model:
    """A trained ``generator`` ready for inference in ``precision`` (``float32``, or
    ``bfloat16``/``float16`` as a Keras ``mixed_`` policy with the same weights): the folded
    network (:func:`folded_generator`) or, with ``fold=False``, the generator's own layers."""
    policy = None if precision == "float32" else "mixed_" + precision
    if fold:
        return folded_generator(generator, dtype=policy)
    if policy is None:
        return generator
    from .model import build_generator

    own = build_generator(int(generator.input_shape[-1]), dtype=policy)
    own.set_weights(generator.get_weights())
    return own


def _bn(layer, kw):
    return keras.layers.BatchNormalization(axis=layer.axis, momentum=layer.momentum,
                                           epsilon=layer.epsilon, center=layer.center,
                                           scale=layer.scale, name=layer.name, **kw)


def folded_flops(generator: keras.Model) -> int:
    """FLOPs of one shower through :func:`folded_generator`'s network, by the conventions of
    :func:`gan3d.gan.model.layer_flops` (the interleaving, like padding, costs nothing)."""
    from .model import layer_flops

    total = 0
    for layer in folded_generator(generator).layers:
        if isinstance(layer, FoldedUpConv3D):
            total += sum(2 * int(np.prod(layer.q)) * int(np.prod(w.shape))
                         for w in layer._init.values())
            total += int(np.prod(layer.out_shape)) * layer.cout if layer._bias is not None else 0
        elif not isinstance(layer, keras.layers.InputLayer):
            total += layer_flops(layer, layer.input.shape, layer.output.shape)
    return total
