"""Shower features on showers whose answers are known by hand, and the test distortions."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d.validation import physics

SHAPE = (25, 25, 25)


def single_cell(x: int, y: int, z: int, e: float = 2.0) -> np.ndarray:
    a = np.zeros((1, *SHAPE), np.float32)
    a[0, x, y, z] = e
    return a


def gaussian_showers(n: int, sigma: float = 2.0, seed: int = 0) -> np.ndarray:
    """Smooth showers: Gaussian in x and y (sigma cells) about the grid centre, gamma-like in z."""
    rng = np.random.default_rng(seed)
    i = np.arange(25)
    tx = np.exp(-0.5 * ((i - 12) / sigma) ** 2)
    tz = i ** 2 * np.exp(-i / 3.0)
    base = tx[:, None, None] * tx[None, :, None] * tz[None, None, :]
    base /= base.sum()
    return (base[None] * rng.uniform(1.0, 5.0, (n, 1, 1, 1))).astype(np.float32)


def test_sums_and_sampling_fraction():
    a = gaussian_showers(4)
    e = np.array([100.0, 200.0, 50.0, 10.0])
    np.testing.assert_allclose(physics.ecal_sum(a), a.sum(axis=(1, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(physics.sampling_fraction(a, e), a.sum(axis=(1, 2, 3)) / e, rtol=1e-6)


def test_single_cell_features():
    a = single_cell(3, 7, 11)
    m = physics.moments(a)
    np.testing.assert_allclose(m["x"][0], [3, 0, 0], atol=1e-12)
    np.testing.assert_allclose(m["y"][0], [7, 0, 0], atol=1e-12)
    np.testing.assert_allclose(m["z"][0], [11, 0, 0], atol=1e-12)
    assert physics.max_position(a).tolist() == [[3, 7, 11]]
    assert physics.hits(a).tolist() == [1]
    p = physics.profiles(a)
    assert p["x"][0, 3] == pytest.approx(2.0) and p["x"].sum() == pytest.approx(2.0)
    assert p["z"][0, 11] == pytest.approx(2.0)


def test_two_cell_moments():
    a = np.zeros((1, *SHAPE), np.float32)
    a[0, 10, 12, 5] = a[0, 14, 12, 5] = 1.0  # symmetric pair 4 cells apart
    a[0, 12, 12, 9] = 0.0
    m = physics.moments(a)["x"][0]
    np.testing.assert_allclose(m, [12.0, 4.0, 0.0], atol=1e-12)
    b = np.zeros((1, *SHAPE), np.float32)
    b[0, 12, 12, 2], b[0, 12, 12, 5] = 2.0, 1.0  # third central moment of a skewed pair
    mean = (2 * 2 + 5) / 3
    skew = (2 * (2 - mean) ** 3 + (5 - mean) ** 3) / 3
    np.testing.assert_allclose(physics.moments(b)["z"][0], [mean, 2.0, skew], rtol=1e-12)


def test_hits_threshold_is_strict():
    a = np.zeros((1, *SHAPE), np.float32)
    a[0, 0, 0, 0] = 3e-4
    a[0, 1, 0, 0] = 1e-4
    assert physics.hits(a).tolist() == [1]
    assert physics.hits(a, threshold=5e-5).tolist() == [2]


def test_layer_centres_widths_sparsity():
    a = single_cell(3, 20, 4)
    c = physics.layer_centres(a)
    assert c[0, 4].tolist() == [3 - 12, 20 - 12]  # relative to the grid centre
    assert np.all(c[0, np.arange(25) != 4] == 0)  # empty layers: 0 by convention
    assert np.all(physics.layer_widths(a) == 0)
    g = gaussian_showers(1, sigma=2.0)
    w = physics.layer_widths(g)[0, 10]
    assert w == pytest.approx([2.0, 2.0], rel=0.02)  # a well-sampled Gaussian keeps its sigma
    s = physics.layer_sparsity(a)
    assert s[0, 4] == pytest.approx(1 / 625) and s[0].sum() == pytest.approx(1 / 625)


def test_high_and_low_level_vectors():
    a = gaussian_showers(3)
    e = np.array([50.0, 100.0, 400.0])
    x, names = physics.high_level_features(a, e)
    assert x.shape == (3, 151) and len(names) == 151 and np.all(np.isfinite(x))
    e_layer = x[:, [n.startswith("e_layer") for n in names]]
    np.testing.assert_allclose(e_layer.sum(axis=1), x[:, names.index("e_total")], rtol=1e-9)
    np.testing.assert_allclose(x[:, names.index("e_total")], a.sum(axis=(1, 2, 3)) / e, rtol=1e-6)
    low = physics.low_level_features(a, e)
    assert low.shape == (3, 25 ** 3 + 1)
    np.testing.assert_allclose(low[:, -1], np.log10(e), rtol=1e-6)


def test_empty_shower_moments_are_nan_but_vectors_finite():
    a = np.zeros((2, *SHAPE), np.float32)
    a[1] = gaussian_showers(1)[0]
    m = physics.moments(a)
    assert np.all(np.isnan(m["z"][0])) and np.all(np.isfinite(m["z"][1]))
    assert np.all(np.isfinite(physics.high_level_features(a, np.array([10.0, 10.0]))[0]))


def test_cell_spectrum_counts_cells_per_shower():
    a = gaussian_showers(2)
    counts, edges = physics.cell_spectrum(a)
    assert len(edges) == len(counts) + 1 and np.all(np.diff(edges) > 0)
    inside = ((a > physics.ZERO_THRESHOLD) & (a < edges[-1])).sum() / 2
    assert counts.sum() == pytest.approx(inside)


def test_channel_axis_and_bad_shapes():
    a = gaussian_showers(2)
    np.testing.assert_allclose(physics.ecal_sum(a[..., None]), physics.ecal_sum(a))
    with pytest.raises(ValueError, match=r"\(N, X, Y, Z\)"):
        physics.ecal_sum(np.zeros((25, 25, 25)))


def test_scale_energy_shifts_sampling_fraction_exactly():
    a, e = gaussian_showers(3), np.array([10.0, 100.0, 300.0])
    ratio = physics.sampling_fraction(physics.scale_energy(a, 1.05), e) / physics.sampling_fraction(a, e)
    np.testing.assert_allclose(ratio, 1.05, rtol=1e-6)


def test_widen_transverse():
    a = gaussian_showers(2, sigma=2.0)
    assert np.allclose(physics.widen_transverse(a, 1.0), a, atol=1e-7)  # factor 1: identity
    w = physics.widen_transverse(a, 1.2)
    np.testing.assert_allclose(physics.ecal_sum(w), physics.ecal_sum(a), rtol=1e-5)  # no leak
    mx, mw = physics.moments(a)["x"], physics.moments(w)["x"]
    np.testing.assert_allclose(mw[:, 0], 12.0, atol=1e-5)  # centre kept
    # variance f^2 sigma^2, plus f^2/12 from spreading each cell over its stretched width and
    # about 1/12 from binning that spread back into cells
    np.testing.assert_allclose(mw[:, 1], 1.44 * mx[:, 1] + (1.44 + 1) / 12, rtol=0.01)
    np.testing.assert_allclose(physics.moments(w)["z"], physics.moments(a)["z"], rtol=1e-5)


def test_shift_layers():
    a = gaussian_showers(2)
    a[..., -1] = 0.0  # nothing to leak
    s = physics.shift_layers(a, 1)
    np.testing.assert_allclose(physics.ecal_sum(s), physics.ecal_sum(a), rtol=1e-6)
    np.testing.assert_allclose(physics.moments(s)["z"][:, 0], physics.moments(a)["z"][:, 0] + 1,
                               rtol=1e-6)
    assert np.all(s[..., 0] == 0)
    back = physics.shift_layers(s, -1)
    np.testing.assert_allclose(back, a)
