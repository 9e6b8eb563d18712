"""Energy: counters found where they exist, the paper's runs estimated consistently."""

from __future__ import annotations

import pytest

from gan3d.scaling import energy
from gan3d.scaling import perfmodel as pm


def test_rapl_counters_are_found_by_domain_name(tmp_path):
    assert energy.counters(tmp_path / "absent") == {}
    zone = tmp_path / "intel-rapl:0"
    zone.mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("123\n")
    (tmp_path / "intel-rapl:1").mkdir()  # no counter file: not a domain
    assert energy.counters(tmp_path) == {"package-0": zone / "energy_uj"}


def test_the_paper_runs_add_up_and_serial_evaluation_costs_energy():
    p = energy.paper_runs()
    P = pm.PAPER
    assert p["serial_fraction"] == pytest.approx(
        pm.serial_fraction(P["time_1_s"] / P["time_12_s"], 12, P["train_efficiency"]))
    one, serial, dist = (p["runs"][k] for k in ("1 GPU", "12 GPUs, serial evaluation (paper)",
                                               "12 GPUs, distributed evaluation"))
    assert one["hours"] == pytest.approx(P["time_1_s"] / 3600)
    assert serial["hours"] == pytest.approx(P["time_12_s"] / 3600, rel=0.01)  # its own numbers
    assert dist["hours"] < serial["hours"] and dist["kwh"] < serial["kwh"]
    assert serial["eval_idle_kwh"] > 0 and dist["eval_idle_kwh"] == 0
    assert one["joule_per_shower"] == pytest.approx(one["kwh"] * 3.6e6 / p["trained_showers"])
    assert all("vendor" in w["source"] or "assumption" in w["source"] for w in p["watts"].values())


def test_a_cpu_run_is_estimated_per_busy_core():
    est = energy.cpu_estimate(showers_per_s=5.0, cores=2)
    assert est["kind"] == "estimate"
    assert est["joule_per_shower"] == pytest.approx(2 * 280 / 64 / 5.0)
    table = energy.energy_table(energy.paper_runs(), {"label": "2 cores", **est})
    assert table.count("\n| ") == 4 and "this machine, 2 cores" in table
