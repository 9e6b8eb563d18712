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
    # Amdahl's law with 98.9 % training efficiency on 12 GPUs, solved by hand for 20 h 16 min ->
    # 2 h 14 min: s = (8,040 / 72,960 - 1 / 11.868) / (1 - 1 / 11.868) = 2.832 %.
    assert p["serial_fraction"] == pytest.approx(0.0283237, abs=1e-7)
    one, serial, dist = (p["runs"][k] for k in ("1 GPU", "12 GPUs, serial evaluation (paper)",
                                               "12 GPUs, distributed evaluation"))
    # Energy = watts x seconds. One GPU: a P100 at 300 W and its node's two POWER8 sockets at
    # half of 190 W, 490 W for 72,960 s: 35.75 MJ = 9.931 kWh, over 40 x 180,000 showers 4.965 J.
    assert one["hours"] == pytest.approx(72_960 / 3600)
    assert one["kwh"] == pytest.approx(490 * 72_960 / 3.6e6)
    assert p["trained_showers"] == 7_200_000
    assert one["joule_per_shower"] == pytest.approx(490 * 72_960 / 7_200_000)
    assert serial["hours"] == pytest.approx(P["time_12_s"] / 3600, rel=0.01)  # its own numbers
    # 12 GPUs on 3 nodes: training 70,893.5 s / 11.868 = 5,973.5 s at 12 x 300 + 3 x 190 = 4,170 W;
    # the serial evaluation 2,066.5 s with one GPU busy and 11 idle at 30 W: 300 + 330 + 570 W.
    train12, eval1 = 72_960 * (1 - 0.0283237) / 11.868, 72_960 * 0.0283237
    assert serial["kwh"] == pytest.approx((train12 * 4170 + eval1 * 1200) / 3.6e6, rel=1e-5)
    # what the idle GPUs and the other nodes burn while one evaluates: 1,200 - 490 W for 2,066.5 s
    assert serial["eval_idle_kwh"] == pytest.approx(eval1 * (1200 - 490) / 3.6e6, rel=1e-5)
    assert dist["kwh"] == pytest.approx((train12 + eval1 / 12) * 4170 / 3.6e6, rel=1e-5)
    assert dist["hours"] < serial["hours"] and dist["kwh"] < serial["kwh"]
    assert dist["eval_idle_kwh"] == 0
    assert all("vendor" in w["source"] or "assumption" in w["source"] for w in p["watts"].values())


def test_a_cpu_run_is_estimated_per_busy_core():
    est = energy.cpu_estimate(showers_per_s=5.0, cores=2)
    assert est["kind"] == "estimate"
    # 2 busy cores of a 280 W, 64-core EPYC: 8.75 W; 5 showers/s: 50 showers in 10 s, 87.5 J.
    assert est["watts"] == pytest.approx(8.75)
    assert est["joule_per_shower"] == pytest.approx(87.5 / 50)
    table = energy.energy_table(energy.paper_runs(), {"label": "2 cores", **est})
    assert table.count("\n| ") == 4 and "this machine, 2 cores" in table
