"""The synthetic calorimeter obeys the physics it claims (physics.md), and writes honest files.

Tolerances are set from sample sizes: with n showers, a mean has a relative standard error of
(spread / sqrt n), a standard deviation one of 1 / sqrt(2 n). Bounds are at least 4 of these.
"""

from __future__ import annotations

import numpy as np
import pytest

from gan3d.data import calorimeter, showers
from gan3d.validation import physics

ENERGIES = (10.0, 20.0, 50.0, 100.0, 200.0, 500.0)
N_PER_ENERGY = 500


@pytest.fixture(scope="module")
def sample():
    """{E: showers (500, 25, 25, 25) float64 GeV} at fixed primary energies."""
    return {e: showers.generate(np.full(N_PER_ENERGY, e), seed=int(e)).astype(np.float64)
            for e in ENERGIES}


def test_effective_medium_matches_the_reference_values():
    front = showers.effective_medium(2.4)
    assert front.x0_mm == pytest.approx(4.20, rel=0.01)
    assert front.rm_mm == pytest.approx(9.5, rel=0.01)
    assert front.ec_mev == pytest.approx(9.4, rel=0.01)
    assert front.fs == pytest.approx(1.45, rel=0.01)
    assert front.ehat == pytest.approx(0.70, rel=0.01)
    assert showers.effective_medium(4.8).x0_mm == pytest.approx(3.85, rel=0.01)
    assert showers.layer_table()["edges"][-1] == pytest.approx(22.7, abs=0.1)  # ~23 X0 deep


def test_published_fit_values():
    fit = calorimeter.sampling_fraction_fit([10.0, 100.0, 500.0])
    np.testing.assert_allclose(fit, [0.021831, 0.020188, 0.0181], rtol=1e-4)


def test_layer_fractions_and_leakage_conserve_energy():
    e = np.geomspace(10, 500, 400)
    p = showers.profile_parameters(e, np.random.default_rng(0))
    frac, leak = showers.layer_fractions(p["alpha"], p["beta"])
    assert frac.shape == (400, 25) and np.all(frac >= 0) and np.all(leak >= 0)
    np.testing.assert_allclose(frac.sum(axis=1) + leak, 1.0, atol=1e-12)


def test_deposits_plus_leakage_equal_the_primary_energy():
    e = np.repeat([10.0, 500.0], 300)
    d = showers.mean_deposits(e, np.random.default_rng(1))
    total = d["cells"].sum(axis=(1, 2, 3), dtype=np.float64) + d["leak_back"] + d["leak_side"]
    np.testing.assert_allclose(total, e, rtol=1e-5)
    assert np.all(d["leak_side"] > -1e-4 * e)
    back = d["leak_back"] / e
    # physics.md: ~0.3 % out of the back at 10 GeV, ~2.5 % at 500 GeV.
    assert back[:300].mean() < 0.01
    assert 0.015 < back[300:].mean() < 0.04


def test_cell_fractions_match_a_monte_carlo_of_the_radial_profile():
    radius = 1.7  # cells
    rng = np.random.default_rng(2)
    n = 1_000_000
    r = radius * np.sqrt((u := rng.random(n)) / (1 - u))  # inverse CDF r^2 / (r^2 + R^2)
    phi = rng.random(n) * 2 * np.pi
    ix = np.floor(r * np.cos(phi) + 12.5).astype(int)
    iy = np.floor(r * np.sin(phi) + 12.5).astype(int)
    inside = (ix >= 0) & (ix < 25) & (iy >= 0) & (iy < 25)
    counts = np.zeros((25, 25))
    np.add.at(counts, (ix[inside], iy[inside]), 1)
    table = showers.cell_fractions(np.array(radius))
    sigma = np.sqrt(counts / n + 1e-12) / np.sqrt(n)
    assert table.sum() == pytest.approx(inside.mean(), abs=5 * np.sqrt(0.1 / n))
    assert np.all(np.abs(table - counts / n) < 5 * sigma + 2e-4)  # 2e-4: interpolation in ln R


def test_poisson_sampler_is_exact():
    rng = np.random.default_rng(3)
    for lam in (0.003, 0.4, 1.9, 2.1, 40.0):  # both sides of the switch to NumPy's sampler
        where, counts = showers._poisson(np.full(400_000, lam, dtype=np.float32), rng)
        assert np.all(counts > 0)
        n = np.zeros(400_000, int)
        n[where] = counts
        assert n.mean() == pytest.approx(lam, abs=5 * np.sqrt(lam / 400_000))
        assert n.var() == pytest.approx(lam, rel=5 * np.sqrt(2 / 400_000) + 5 / np.sqrt(lam * 4e5))
        p0 = np.exp(-lam)
        assert (n == 0).mean() == pytest.approx(p0, abs=5 * np.sqrt(p0 * (1 - p0) / 400_000) + 1e-6)


def test_generate_is_deterministic_and_well_formed():
    e = np.linspace(10, 500, 150)
    a, b = showers.generate(e, seed=5), showers.generate(e, seed=5)
    assert a.shape == (150, 25, 25, 25) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, showers.generate(e, seed=6))
    assert np.all(np.isfinite(a)) and a.min() >= 0
    assert np.all((a == 0) | (a >= calorimeter.CELL_THRESHOLD_GEV))
    for bad in ([np.nan], [-5.0], [[10.0, 20.0]]):
        with pytest.raises(ValueError, match="energies"):
            showers.generate(bad, seed=0)


def test_mean_sampling_fraction_follows_the_published_fit(sample):
    for e, x in sample.items():
        frac = x.sum(axis=(1, 2, 3)) / e
        stderr = frac.std() / np.sqrt(len(frac)) / frac.mean()  # ~0.3 %
        ratio = frac.mean() / calorimeter.sampling_fraction_fit(e)
        assert abs(ratio - 1) < 0.03 + 4 * stderr, f"{e} GeV: {ratio:.4f} of the fit"


def test_shower_maximum_moves_deeper_with_log_energy(sample):
    profiles = {e: x.sum(axis=(1, 2)).mean(axis=0) for e, x in sample.items()}
    max_layer = [int(np.argmax(p)) for p in profiles.values()]
    assert max_layer == sorted(max_layer)
    assert 6 <= max_layer[0] <= 9 and 11 <= max_layer[-1] <= 15  # physics.md: 8 -> 13
    layers = np.arange(25)
    depth = [p @ layers / p.sum() for p in profiles.values()]  # mean depth, in layers
    slope, intercept = np.polyfit(np.log(ENERGIES), depth, 1)
    residual = np.array(depth) - (slope * np.log(ENERGIES) + intercept)
    assert 0.5 < slope < 2.5  # layers per e-fold of energy
    assert np.abs(residual).max() < 0.15  # linear in ln E


def test_transverse_width_is_about_a_cell_and_centred(sample):
    cells = np.arange(25)
    for e, x in sample.items():
        for axes in ((2, 3), (1, 3)):  # x then y profile
            prof = x.sum(axis=axes)
            w = prof / prof.sum(axis=1, keepdims=True)
            mean = w @ cells
            second = w @ cells**2 - mean**2
            assert mean.mean() == pytest.approx(12.0, abs=0.05)
            # RMS width ~0.9 cell (~0.5 Moliere radius): between half a cell^2 and a few cells^2.
            assert 0.5 < second.mean() < 3.0


def test_hits_rise_with_energy(sample):
    hits = [(x > 2e-4).sum(axis=(1, 2, 3)) for x in sample.values()]
    for lower, higher in zip(hits, hits[1:]):
        err = np.hypot(lower.std(), higher.std()) / np.sqrt(N_PER_ENERGY)
        assert higher.mean() - lower.mean() > 5 * err


def test_energy_resolution_falls_like_inverse_sqrt_energy(sample):
    """sigma/E of the reconstructed energy (visible / layer sampling fraction) = a/sqrt(E) (+) b."""
    weights = 1.0 / showers.layer_table()["sampling"]
    e = np.array(ENERGIES)
    rel = np.array([(r := x.sum(axis=(1, 2)) @ weights).std() / r.mean() for x in sample.values()])
    # Least squares of (sigma/E)^2 = a^2 / E + b^2, weighted by the 1/sqrt(2n) error of sigma.
    design = np.c_[1 / e, np.ones_like(e)] / (rel**2)[:, None]
    (a2, b2), *_ = np.linalg.lstsq(design, np.ones_like(e), rcond=None)
    a, b = np.sqrt(a2), np.sqrt(max(b2, 0.0))
    assert 0.15 < a < 0.22  # RESOLUTION = 0.17 plus the back layers' coarser sampling
    assert b < 0.02  # leakage only
    model = np.sqrt(a2 / e + max(b2, 0.0))
    assert np.all(np.abs(rel / model - 1) < 5 / np.sqrt(2 * N_PER_ENERGY))
    assert np.all(np.diff(rel) < 0)


def test_resolution_fit_recovers_known_terms():
    e = np.array([10.0, 30.0, 100.0, 300.0])
    fit = physics.resolution_fit(e, np.hypot(0.17 / np.sqrt(e), 0.01), 500)
    assert fit["a"] == pytest.approx(0.17, rel=1e-6) and fit["b"] == pytest.approx(0.01, rel=1e-5)


def test_summary_agrees_with_the_laws(sample):
    x = np.concatenate(list(sample.values()))
    e = np.repeat(ENERGIES, N_PER_ENERGY)
    out = physics.sample_summary(x, e, [20.0, 100.0, 500.0, 1000.0])  # 1000 GeV: no showers, no row
    assert [b["energy"] for b in out["bins"]] == [20.0, 100.0, 500.0]
    assert all(b["n"] == N_PER_ENERGY for b in out["bins"])
    assert out["max_abs_deviation_from_fit"] < 0.03
    assert 0.15 < out["resolution_fit_reconstructed"]["a"] < 0.22
    assert out["resolution_fit_visible"]["b"] > out["resolution_fit_reconstructed"]["b"]
