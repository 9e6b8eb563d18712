"""Physics monitors: reference showers meet every target, known distortions miss the right one."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d.data.showers import generate
from gan3d.validation import monitors, physics
from gan3d.validation.metrics import separation_power_null

E = (50.0, 200.0)


def _sample(seed, distort=None):
    rng = np.random.default_rng(seed)
    out = {}
    for e in E:
        x = generate(np.full(64, e), rng=rng)
        out[e] = distort(x) if distort else x
    return out


def test_an_independent_reference_sample_meets_every_target():
    r = monitors.compare(_sample(5), n_reference=64)
    assert r["targets"] == len(monitors.TARGETS) * len(E)
    assert r["targets_met"] == r["targets"], r
    for row in r["per_energy"].values():
        assert row["profile_distance"] < 0.05
        assert row["sep_sampling_fraction"] < 2.5 * separation_power_null(30, 64, 64)
        assert 0.005 < row["sampling_fraction"]["value"] < 0.05  # about 0.02, GeV over GeV
        assert row["transverse_width"]["reference"] > 0.5


@pytest.mark.parametrize("distort, missed", [
    (lambda x: physics.scale_energy(x, 1.25), {"sampling_fraction", "ecal_sum"}),
    (lambda x: physics.shift_layers(x, 3), {"max_layer"}),
    (lambda x: physics.widen_transverse(x, 1.6), {"transverse_width"}),
    (lambda x: x * np.random.default_rng(0).lognormal(0, 0.3, (len(x), 1, 1, 1)).astype(np.float32),
     {"ecal_sum_spread"}),
])
def test_a_known_distortion_misses_its_target(distort, missed):
    r = monitors.compare(_sample(5, distort), n_reference=64)
    for e, row in r["per_energy"].items():
        failed = {name for name in monitors.TARGETS if not row[name]["met"]}
        assert missed <= failed, (e, failed)


def test_noise_misses_everything_and_the_history_row_is_flat():
    rng = np.random.default_rng(0)
    noise = {e: rng.exponential(0.01, (32, 25, 25, 25)).astype(np.float32) for e in E}
    r = monitors.compare(noise, n_reference=64)
    assert r["targets_met"] <= 2
    row = monitors.history_row(r)
    assert row["mon_targets"] == r["targets"] and "mon_max_layer_200" in row
    assert all(np.isscalar(v) for v in row.values())
    assert row["mon_profile_distance_50"] > 0.2


def test_showers_needed_is_the_start_of_the_last_streak():
    def row(seen, dev):
        return {"showers_seen": seen, **{f"mon_{n}_{e:g}": dev for n in monitors.TARGETS
                                          for e in E}}
    rows = [row(100, 1.5), row(200, 0.01), row(300, 1.5), row(400, 0.01), row(500, 0.0)]
    assert set(monitors.showers_needed(rows, E).values()) == {400}
    rows[2] = row(300, 0.5)  # within 1 layer, not within 10 %
    need = monitors.showers_needed(rows, E)
    assert need["sampling_fraction"] == 400 and need["max_layer"] == 200
    assert monitors.showers_needed(rows[:3], E)["sampling_fraction"] is None
