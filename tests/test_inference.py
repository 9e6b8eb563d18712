"""The folded generator (gan3d.gan.inference): the same function as the generator's own layers."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest

from gan3d.gan import inference, model


def test_phase_taps_of_the_generators_second_convolution():
    # conv2 along x: kernel 6 over 2x upsampled values padded by 2
    assert inference.phase_taps(6, 2, 2) == [(-1, [-1, -1, 0, 0, 1, 1]), (-1, [-1, 0, 0, 1, 1, 2])]
    # conv3 along z: kernel 8 over 3x upsampled values padded by 3
    assert inference.phase_taps(8, 3, 3)[2] == (-1, [-1, 0, 0, 0, 1, 1, 1, 2])
    # no upsampling: every tap its own offset
    assert inference.phase_taps(3, 1, 1) == [(-1, [-1, 0, 1])]


@pytest.mark.parametrize("up, pad, ksize, n", [
    ((2, 2, 2), (2, 2, 0), (6, 5, 8), (4, 3, 5)),
    ((2, 2, 3), (1, 0, 3), (3, 3, 8), (3, 4, 3)),
    ((3, 1, 2), (0, 1, 2), (2, 4, 3), (2, 5, 3)),
    ((1, 1, 1), (1, 0, 0), (3, 2, 1), (4, 4, 4)),
])
def test_a_folded_upsample_pad_convolution_is_the_three_layers(up, pad, ksize, n):
    rng = np.random.default_rng(sum(ksize))
    cin, cout = 3, 2
    kernel = rng.normal(size=(*ksize, cin, cout)).astype("float32")
    bias = rng.normal(size=cout).astype("float32")
    x = rng.normal(size=(2, *n, cin)).astype("float32")
    L = keras.layers
    conv = L.Conv3D(cout, ksize, padding="valid")
    ref_in = L.ZeroPadding3D([(p, p) for p in pad])(L.UpSampling3D(up)(x))
    conv(ref_in)  # builds the layer
    conv.set_weights([kernel, bias])
    want = keras.ops.convert_to_numpy(conv(ref_in))
    got = keras.ops.convert_to_numpy(inference.FoldedUpConv3D(kernel, bias, up, pad, n)(x))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _generators():
    from gan3d.gan import reference

    keras.utils.set_random_seed(3)
    g = model.build_generator()
    rng = np.random.default_rng(1)
    for name in ("bn1", "bn2"):  # statistics away from the identity, as after training
        w = g.get_layer(name).get_weights()
        g.get_layer(name).set_weights([rng.uniform(0.5, 1.5, w[0].shape),
                                       rng.normal(0, 0.1, w[1].shape),
                                       rng.normal(0, 0.1, w[2].shape),
                                       rng.uniform(0.5, 1.5, w[3].shape)])
    return {"random": g, "reference": reference.load()}


@pytest.mark.parametrize("which", ["random", "reference"])
def test_the_folded_generator_makes_the_same_showers(which):
    g = _generators()[which]
    folded = inference.folded_generator(g)
    z = np.random.default_rng(0).normal(size=(6, 200)).astype("float32")
    z *= np.linspace(0.1, 5, 6, dtype="float32")[:, None]  # E/100 x noise, 10-500 GeV
    want = keras.ops.convert_to_numpy(g(z, training=False))
    got = keras.ops.convert_to_numpy(folded(z, training=False))
    assert got.shape == want.shape == (6, 25, 25, 25, 1) and want.max() > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    # every cell that is on in one is on in the other (ReLU's zeros are not moved)
    assert np.mean((got > 1e-6 * want.max()) == (want > 1e-6 * want.max())) > 0.999


def test_the_folded_generator_needs_under_half_the_flops():
    g = model.build_generator()
    full, folded = model.forward_flops(g), inference.folded_flops(g)
    assert 0.3 < folded / full < 0.45, (full, folded)  # 0.512 -> 0.207 GFLOP per shower


def test_a_bfloat16_folded_generator_keeps_float32_output():
    net = inference.folded_generator(model.build_generator(), dtype="mixed_bfloat16")
    out = net(np.ones((1, 200), "float32"), training=False)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    assert net.get_layer("conv2_folded").compute_dtype == "bfloat16"


@pytest.mark.parametrize("fold", [True, False])
def test_bfloat16_inference_makes_the_float32_showers(fold):
    """``gan3d simulate``'s bfloat16 network makes the float32 generator's showers within
    bfloat16's rounding (measured: 0.3 %). On a CPU with AMX, TF 2.18.1's oneDNN computed the
    first convolution wrongly in bfloat16 and the showers held 8 % of their energy, until that
    layer computed in float32 there (``model.exact_conv1``)."""
    g = _generators()["reference"]
    e = np.linspace(10.0, 500.0, 8)
    want = model.generate_showers(g, e, seed=3)
    got = model.generate_showers(inference.inference_network(g, "bfloat16", fold=fold), e, seed=3)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.03
    assert got.sum() / want.sum() == pytest.approx(1.0, abs=0.03)
