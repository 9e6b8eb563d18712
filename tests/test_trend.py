"""The showers a run's trend would need to reach a goal: exact on exact laws, honest on noisy ones."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d.validation import monitors, trend

S = np.arange(1, 41) * 1600.0  # 40 epochs of 1,600 showers


def test_an_exact_power_law_gives_its_crossing_and_exponent():
    dev = 3.0 * (S / 1e4) ** -0.5  # reaches 1 at 1e4 * 3**2 = 90,000 showers
    r = trend.estimate(S, dev, goal=1.0, rising=False, log_values=True, n_boot=200)
    assert r["exponent"] == pytest.approx(-0.5, abs=1e-9)
    assert r["showers"] == pytest.approx(90_000, rel=1e-9)
    assert r["low"] == pytest.approx(90_000, rel=1e-6) and r["high"] == pytest.approx(90_000, rel=1e-6)
    assert r["epochs"] == 21  # the epochs at or after half the showers seen (32,000 of 64,000)
    plain = trend.table({"run": {"ecal_sum": dict(r, goal=1.0)}})  # no budget: no such column
    assert "90,000 [90,000, 90,000]" in plain and "within" not in plain
    assert not r["met"] and r["now"] == pytest.approx(float(np.median(dev[-3:])))


def test_targets_met_rising_in_log_showers_give_their_crossing():
    met = 4.0 + 3.0 * np.log(S / 1e4)  # 18 at 1e4 * e**(14 / 3)
    r = trend.estimate(S, met, goal=18, rising=True, log_values=False, n_boot=200)
    assert r["showers"] == pytest.approx(1e4 * np.exp(14 / 3), rel=1e-9)


def test_the_interval_covers_the_truth_of_a_noisy_power_law():
    """90 % intervals from the block bootstrap over 40 replicas (fixed seeds): most cover the
    true crossing (31 of 40 do: a percentile bootstrap of 21 epochs covers somewhat less than
    its nominal 90 %, which the module's text says), and all are wider than nothing."""
    covered = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        dev = 3.0 * (S / 1e4) ** -0.5 * np.exp(rng.normal(0, 0.15, len(S)))
        r = trend.estimate(S, dev, goal=1.0, rising=False, log_values=True, n_boot=400, seed=seed)
        assert r["low"] < r["high"]
        covered += r["low"] <= 90_000 <= r["high"]
    assert covered >= 28, covered


@pytest.mark.parametrize("law", ["rising deviation", "flat beyond the horizon"])
def test_no_progress_and_a_crawl_are_not_given_a_number(law):
    dev = 2.0 * (S / 1e4) ** 0.3 if law == "rising deviation" else 2.0 * (S / 1e4) ** -0.01
    r = trend.estimate(S, dev, goal=1.0, rising=False, log_values=True, n_boot=200)
    assert r["showers"] == float("inf") and r["high"] == float("inf")
    text = trend.table({"run": {"ecal_sum": dict(r, goal=1.0)}}, budget=208_000)
    expect = "not improving at this stage" if law == "rising deviation" else "> 100x now"
    assert expect in text


def test_met_now_and_too_few_epochs_are_said_so():
    met = trend.estimate(S, np.full(len(S), 0.5), goal=1.0, rising=False, log_values=True)
    assert met["met"]
    few = trend.estimate(S[:8], 3.0 * (S[:8] / 1e4) ** -0.5, goal=1.0, rising=False,
                         log_values=True)
    assert few["epochs"] == 5 and np.isnan(few["showers"])  # 5 < MIN_EPOCHS
    text = trend.table({"a": {"max_layer": dict(met, goal=1.0)},
                        "b": {"max_layer": dict(few, goal=1.0)}}, budget=208_000)
    assert "met now" in text and "too few epochs (5)" in text


def test_series_takes_the_worst_energy_over_each_tolerance():
    e = monitors.MONITOR_ENERGIES
    rows = []
    for i, s in enumerate(S[:3]):
        row = {"showers_seen": s, "mon_targets_met": 5 + i}
        for name in monitors.NUMBERS:
            for k, en in enumerate(e):
                row[f"mon_{name}_{en:g}"] = (-1) ** k * 0.01 * (k + 1) * (i + 1)
        rows.append(row)
    rows.insert(1, {"showers_seen": 2400, "d_loss": 1.0})  # an epoch without monitors
    got = trend.series(rows)
    s, v = got["ecal_sum_spread"]
    assert list(s) == list(S[:3])
    worst = np.array([0.01 * len(e) * (i + 1) for i in range(3)])  # the last energy's |dev|
    assert v == pytest.approx(worst / monitors.TARGETS["ecal_sum_spread"][1])
    assert got["resolution"][1] == pytest.approx(worst / (trend.RESOLUTION_RATIO - 1))
    assert list(got["targets_met"][1]) == [5, 6, 7]
    assert set(got) == {"targets_met", "resolution", *monitors.TARGETS}


def _history(lrs, dev):
    """Epochs at the learning rates ``lrs`` whose every deviation is ``dev(i)``."""
    rows = []
    for i, lr in enumerate(lrs):
        row = {"epoch": i + 1, "showers_seen": 1600 * (i + 1), "lr": lr,
               "mon_targets_met": 10}
        for name in monitors.NUMBERS:
            for en in monitors.MONITOR_ENERGIES:
                row[f"mon_{name}_{en:g}"] = dev(i)
        rows.append(row)
    return rows


def test_a_lowered_learning_rate_starts_a_trend_of_its_own():
    """A run falling steadily at lr 1e-3, then flat after its lr was cut to 1e-4: the estimate
    is the flat stage's (not improving), not the first stage's line carried across the change;
    with too few epochs since the change there is no estimate at all."""
    falling = lambda i: 2.0 * (1600 * (i + 1) / 1e4) ** -0.3  # noqa: E731
    steady = _history([1e-3] * 40, falling)
    assert trend.at_current_lr(steady) == steady
    est = trend.showers_to_goal(steady, n_boot=100)["resolution"]
    assert est["epochs"] == 21 and np.isfinite(est["showers"])  # the later half, one lr
    flat = _history([1e-3] * 40 + [1e-4] * 12,
                    lambda i: falling(i) if i < 40 else falling(39) * (1 + 0.003 * (i - 39)))
    assert [r["epoch"] for r in trend.at_current_lr(flat)] == list(range(41, 53))
    assert [(a["epoch"], b["epoch"]) for a, b in trend.lr_changes(flat)] == [(40, 41)]
    est = trend.showers_to_goal(flat, n_boot=100)["resolution"]
    assert est["epochs"] == 12 and trend.need(est, "resolution") == "not improving at this stage"
    mixed = trend.estimate(*trend.series(flat)["resolution"], goal=1.0, rising=False,
                           log_values=True, n_boot=100)  # the fit across the change
    assert mixed["epochs"] == 27 and mixed["exponent"] < 0 < est["exponent"]  # a false descent
    few = trend.showers_to_goal(flat[:44], n_boot=100)["resolution"]
    assert few["epochs"] == 4 and trend.need(few, "resolution") == "too few epochs (4)"
    assert trend.at_current_lr([{"epoch": 1}]) == [{"epoch": 1}]  # no lr recorded: all rows


def test_the_section_introduces_the_estimates_table():
    rows = [{"epoch": e, "showers_seen": 1000 * e, "lr": 1e-3, "mon_targets_met": 10 + e // 4}
            for e in range(1, 21)]
    est = {"run": {"targets_met": trend.showers_to_goal(rows)["targets_met"]}}
    text = trend.section(est, budget=50_000)
    assert text.startswith("**Estimated**: ") and text.endswith(trend.table(est, budget=50_000))
