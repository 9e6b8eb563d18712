"""Speed-up arithmetic: Amdahl's law recovered, the paper's numbers, the model against a measurement."""

from __future__ import annotations

import pytest

from gan3d.scaling import perfmodel as pm
from gan3d.scaling import speedup


def _amdahl_runs(s: float, e: float, p: int, t1: float = 100.0) -> dict:
    """Histories of runs that follow Amdahl's law exactly."""
    ev, tr = s * t1, (1 - s) * t1
    runs = {"serial_p1": {"train_s": tr, "eval_s": ev, "epoch_s": t1}}
    runs[f"serial_p{p}"] = {"train_s": tr / (p * e), "eval_s": ev, "epoch_s": tr / (p * e) + ev}
    runs[f"distributed_p{p}"] = {"train_s": tr / (p * e), "eval_s": ev / p,
                                 "epoch_s": tr / (p * e) + ev / p}
    return runs


def test_overall_analysis_recovers_amdahl():
    a = speedup.analyse_overall(_amdahl_runs(0.03, 0.98, 2), (1, 2))
    c = a["per_workers"][0]
    assert a["serial_fraction_measured"] == pytest.approx(0.03)
    assert c["serial_fraction_fitted"] == pytest.approx(0.03)
    assert c["amdahl_speedup"] == pytest.approx(c["measured_speedup_serial"])
    # Distributed evaluation scales perfectly here, a little better than training (98 %).
    expected = 100 * (0.98 - 100 / (97 / 0.98 + 3) / 1)
    assert c["efficiency_gap_distributed_points"] == pytest.approx(expected)
    assert abs(expected) < 0.1
    assert c["efficiency_gap_serial_points"] > 1.0
    assert c["gain_distributed_over_serial"] > 1.0
    assert [r["workers"] for r in a["rows"]] == [1, 2, 2]
    table = speedup.overall_table(a)
    assert table.count("\n| ") == 3 and "9.07x" in table  # one row per run


def test_paper_check():
    pc = speedup.paper_check()
    # By hand, from the FLOP counts (F = 10 D + 7 G per shower trained, E = 3 D + 2 G per test
    # shower) and the paper's 40 epochs of 180,000 + 20,000 showers in 20 h 16 min on one P100:
    D, G = 1_572_204_748, 511_759_385  # FLOP per shower forward (test_model counts them)
    F, E = 10 * D + 7 * G, 3 * D + 2 * G
    rate = 40 * (180_000 * F + 20_000 * E) / (20 * 3600 + 16 * 60)  # ~1.97 TFLOP/s sustained
    assert pc["sustained_flops"] == pytest.approx(rate)
    # a step of 512 showers against its 4 all-reduces on a ring of 12 GPUs, whose slowest link is
    # InfiniBand: 4 x 22 hops x 5 us + 2 x 11/12 x 8 x (73,402 + 872,808) B / 12.5 GB/s = 1.55 ms
    comm = 88 * 5e-6 + 2 * 11 / 12 * 8 * (73_402 + 872_808) / 12.5e9
    c = 512 * F / rate
    assert pc["comm_per_step_12_s"] == pytest.approx(comm)
    assert pc["model_efficiency_12"] == pytest.approx(c / (c + comm))  # 99.97 %, above 98.9 %
    # The evaluation's share of the 1-GPU run: Amdahl's serial fraction from the FLOP counts.
    assert pc["overall"]["serial_fraction_flops"] == pytest.approx(
        20_000 * E / (180_000 * F + 20_000 * E))  # 3.2 %
    # The FLOP counts put the evaluation at ~3 % of an epoch, and so predict ~9x, as published.
    assert abs(pc["overall"]["model_speedup"] / pc["overall"]["published_speedup"] - 1) < 0.05
    assert pc["overall"]["model_speedup_distributed"] > 11.5


def test_model_check_against_a_synthetic_measurement():
    wl = pm.threedgan_workload()
    bench = {"fit": {"mpi": {"bandwidth_Bps": 1e9, "latency_s": 1e-5}}, "horovod_overhead_s": 2e-3}
    hw = pm.calibrate(3.0, 4, wl, bandwidth=1e9, latency=1e-5, overhead=2e-3)
    t2 = pm.step_time(2, 4, wl, hw).total
    scale = {"points": [{"workers": 1, "batch_per_worker": 4, "step_time_s": 3.0, "step_time_cv": 0.0,
                         "oversubscribed": False},
                        {"workers": 2, "batch_per_worker": 4, "step_time_s": 1.05 * t2,
                         "oversubscribed": False}]}
    rows = speedup.model_check(scale, bench, wl)
    assert rows[0]["rel_error"] == pytest.approx(0.0)
    assert rows[1]["rel_error"] == pytest.approx(1 / 1.05 - 1)
    # A measured sharing of the cores slows the 2-worker compute, never the 1-worker one.
    bench["compute"] = {"shared_factor": 0.5}
    rows = speedup.model_check(scale, bench, wl)
    assert rows[0]["rel_error"] == pytest.approx(0.0)
    assert rows[1]["compute_s"] == pytest.approx(2 * 3.0)


def test_what_notebook_03_says_is_computed_from_the_results():
    wl = pm.threedgan_workload()
    bench = {"fit": {"mpi": {"bandwidth_Bps": 2e9, "latency_s": 2e-5}}, "horovod_overhead_s": 1e-3}
    link = pm.Link(2e9, 2e-5)  # the ring on 2 workers: 2 hops and the message over the link
    per_step = sum(2 * 2e-5 + n / 2e9 + 1e-3 for n in wl.allreduce_bytes)
    assert speedup.step_allreduce(bench, wl) == pytest.approx(per_step)
    assert speedup.step_allreduce(bench, wl, overhead=False) == pytest.approx(
        sum(pm.allreduce_time(n, 2, link) for n in wl.allreduce_bytes))
    assert speedup.bench_lines(bench, wl) == (  # no compute probe in this benchmark: one line
        f"MPI: 2.00 GB/s, 20 us per hop; Horovod adds 1.0 ms per call. One step's gradients "
        f"(2 x D + 2 x G): {1e3 * per_step:.1f} ms on 2 workers.")
    share = 4 * 1e-3 / per_step
    assert f"{100 * share:.0f} % of it Horovod's coordination" in speedup.bench_reading(bench, wl)
    check = [{"workers": 1, "measured_s": 1.0, "predicted_s": 1.0, "rel_error": 0.0,
              "oversubscribed": False},
             {"workers": 2, "measured_s": 0.5, "predicted_s": 0.56, "rel_error": 0.12,
              "oversubscribed": True}]
    assert speedup.check_lines(check).splitlines()[1] == (
        "2 worker(s): measured 0.500 s/step, model 0.560 s/step (+12.0 %) [oversubscribed]")
    assert "+12.0 % off the measurement (OUTSIDE the 10 %" in speedup.model_reading(
        check, speedup.paper_check())
    assert "no 2-worker measurement" in speedup.model_reading(check[:1], speedup.paper_check())
    cross = {8: 40, 512: None}
    assert speedup.crossover_lines(cross).splitlines() == [
        "batch    8 per worker: all-reduce as long as computation from 40 workers (paper "
        "hardware, ring)",
        "batch  512 per worker: all-reduce as long as computation from beyond 10 million workers "
        "(paper hardware, ring)"]
    assert "batch 8 from 40 workers, batch 512 from > 10^7 workers (model)." in \
        speedup.crossover_reading(cross)
    a = speedup.analyse_overall(_amdahl_runs(0.03, 0.98, 2), (1, 2))
    assert "fraction measured here, 3.0 % of the 1-worker epoch" in speedup.overall_reading(a)
    wl_p, hw_p = speedup.paper_model()
    assert hw_p.jitter == speedup.paper_check()["jitter_cv_inferred"] and wl_p == wl
    model = speedup.step_model(4, wl, hw_p)
    st = pm.step_time(2, 4, wl, hw_p)
    assert model == {"compute_s": st.compute, "wait_s": st.wait, "comm_s": st.comm}
    here = {"predicted_step_2_s": 0.5, "measured_step_2_s": 0.52, "within_10_percent": True}
    lines = speedup.headline_lines({"model_here": here, "overall_measured": None})
    assert lines == "model vs measured, 2 workers: 0.5 s vs 0.52 s (within 10 %: True)"
