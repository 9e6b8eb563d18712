"""Scaling experiments: batch/thread/core rules, speed-ups, histories, timelines, the overall-time
analysis, and (with MPI) the all-reduce benchmark. The real 2-worker timeline of the 3DGAN is
checked in test_notebook_scaling.py, which records one anyway."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gan3d import config, perfmodel as pm, runtime, scaling, speedup, timeline
from gan3d.exceptions import ConfigError

CFG = config.resolve("quick")


def test_per_worker_batch_weak_and_strong():
    cfg = CFG.replace(**{"train.batch_size": 8})
    assert [scaling.per_worker_batch(cfg, p, "weak", (1, 2, 4)) for p in (1, 2, 4)] == [8, 8, 8]
    assert [scaling.per_worker_batch(cfg, p, "strong", (1, 2, 4)) for p in (1, 2, 4)] == [32, 16, 8]
    with pytest.raises(ConfigError, match="does not split over 3"):
        scaling.per_worker_batch(cfg, 3, "strong", (1, 2, 4))


def test_threads_per_worker_is_fixed_by_the_largest_count(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_count", lambda: 8)
    assert scaling.threads_per_worker([1, 2]) == 4
    assert scaling.threads_per_worker([1, 2, 4, 8]) == 1
    assert scaling.threads_per_worker([1, 16]) == 1  # oversubscribed: still one thread each


def test_points_and_speedups():
    runs = {1: [[2.0, 2.2], [2.1, 2.1]], 2: [[2.2, 2.2], [2.4, 2.2]]}
    pts = [scaling._point(p, 4, runs[p], cores=2, threads=1) for p in (1, 2)]
    scaling._speedups(pts, "weak")
    assert pts[0]["step_time_s"] == pytest.approx(2.1)
    assert pts[1]["step_time_s"] == pytest.approx(2.25)   # median of the repeat medians
    assert pts[1]["speedup"] == pytest.approx(2 * 2.1 / 2.25)
    assert pts[1]["efficiency"] == pytest.approx(2.1 / 2.25)
    assert not pts[1]["oversubscribed"]
    assert scaling._point(4, 4, runs[2], cores=2, threads=1)["oversubscribed"]
    strong = [scaling._point(p, 8 // p, runs[p], cores=2, threads=1) for p in (1, 2)]
    scaling._speedups(strong, "strong")
    assert strong[1]["efficiency"] == pytest.approx(2.1 / 2.25 / 2)


def test_step_times_from_a_measurement():
    assert scaling._step_times({"step_times_s": [1, 2], "seconds_per_step": 1.5}) == [1.0, 2.0]
    assert scaling._step_times({"seconds": 6.0, "steps": 3}) == [2.0]


def test_model_workload_uses_the_file_split():
    wl = scaling.model_workload(CFG.replace(**{"data.n_showers": 800, "data.n_files": 8}))
    assert (wl.train_showers, wl.test_showers) == (700, 100)  # 7 of 8 files train


def test_read_history(tmp_path):
    path = tmp_path / "history.jsonl"
    rows = [{"epoch": 1, "timed": False, "time_train_s": 50, "time_eval_s": 9, "time_epoch_s": 59},
            {"epoch": 2, "timed": True, "time_train_s": 10, "time_eval_s": 1, "time_epoch_s": 11},
            {"epoch": 3, "timed": True, "time_train_s": 12, "time_eval_s": 1, "time_epoch_s": 13}]
    path.write_text("".join(json.dumps(dict(r, eval_mode="serial", workers=2)) + "\n" for r in rows))
    h = scaling.read_history(path)
    assert (h["epochs"], h["train_s"], h["eval_s"], h["epoch_s"]) == (2, 11, 1, 12)
    path.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(ConfigError, match="timing_warmup_epochs"):
        scaling.read_history(path)


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
    assert pc["model_efficiency_12"] > 0.989
    assert pc["overall"]["serial_fraction_fitted"] == pytest.approx(0.0283, abs=5e-4)
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


# ---------------------------------------------------------------------------------------------
# Horovod timelines


def _trace(compute: np.ndarray, coord: float = 200.0, transfer: float = 300.0,
           names=("d1", "d2", "g1", "g2", "step_losses"), fused=()) -> list[dict]:
    """A Horovod-style trace of steps x collectives, compute[r, step, c] microseconds on rank r
    before it submits collective c; returns events in the order rank 0's timeline holds them.
    In the steps listed in ``fused`` the last tensor travels in the same collective as the one
    before it (Horovod's fusion, which depends on timing)."""
    workers, steps, k = compute.shape
    ev = [{"name": "process_name", "ph": "M", "pid": i + 1, "args": {"name": f"{n}_1of1"}}
          for i, n in enumerate(names)]
    ev.append({"name": "process_name", "ph": "M", "pid": 99, "args": {"name": "broadcast_1of1"}})
    ev += [{"ph": "B", "name": "NEGOTIATE_BROADCAST", "ts": 0, "pid": 99},
           *({"ph": "X", "name": str(r), "ts": 0, "pid": 99, "dur": 0} for r in range(workers)),
           {"ph": "E", "ts": 1, "pid": 99}, {"ph": "B", "name": "BROADCAST", "ts": 2, "pid": 99},
           {"ph": "E", "ts": 10, "pid": 99, "args": {"dtype": "float32", "shape": "[4]"}}]
    t = np.full(workers, 10.0)
    for s in range(steps):
        for c in range(k):
            if s in fused and c == k - 1:  # same spans as the previous tensor: one collective
                ready, t[:] = ready, end - transfer - coord
            else:
                ready = t + compute[:, s, c]
            start, end = ready.max() + coord, ready.max() + coord + transfer
            if s in fused and c == k - 1:
                start -= 1  # fused members start microseconds apart, in no fixed order
            pid = c + 1
            ev.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": ready.min(), "pid": pid})
            ev += [{"ph": "X", "name": str(r), "ts": ready[r], "pid": pid, "dur": 0}
                   for r in range(workers)]
            ev += [{"ph": "E", "ts": ready.max(), "pid": pid},
                   {"ph": "B", "name": "ALLREDUCE", "ts": start, "pid": pid},
                   {"ph": "B", "name": "MPI_ALLREDUCE", "ts": start + 1, "pid": pid},
                   {"ph": "E", "ts": end - 1, "pid": pid},
                   {"ph": "E", "ts": end, "pid": pid, "args": {"dtype": "float32", "shape": f"[{c + 1}, 10]"}}]
            t[:] = end
    return ev


def test_timeline_breakdown_recovers_compute_wait_and_comm(tmp_path):
    rng = np.random.default_rng(0)
    compute = rng.uniform(1e4, 3e4, (2, 6, 5))
    path = tmp_path / "timeline.json"
    text = json.dumps(_trace(compute))
    path.write_text(text[:-1] + ",")  # as Horovod leaves it while running: no closing bracket
    res = timeline.breakdown(timeline.load(path), 2, last_steps=4)
    assert res["collectives_per_step"] == 5 and res["steps"] == 4
    assert [m["bytes"] for m in res["messages"]] == [40 * (c + 1) for c in range(5)]
    for s, step in enumerate(res["per_step"]):
        c = compute[:, 2 + s, :]
        assert step["compute_s"] == pytest.approx(c.sum(axis=1) * 1e-6)
        assert step["wait_s"] == pytest.approx((c.max(axis=0) - c).sum(axis=1) * 1e-6)
        assert step["comm_s"] == pytest.approx(5 * 500e-6)
        assert step["transfer_s"] == pytest.approx(5 * 300e-6)
        assert step["duration_s"] == pytest.approx((c.max(axis=0).sum() + 5 * 500) * 1e-6)
    m = res["mean"]
    assert m["compute_fraction"] + m["wait_fraction"] + m["comm_fraction"] == pytest.approx(1.0)
    spans = np.array([[s[2], s[3]] for s in res["strip"] if s[0] == 1])
    assert np.all(np.diff(spans, axis=1) > 0) and np.all(spans[1:, 0] >= spans[:-1, 1] - 1e-12)


def test_timeline_steps_survive_fusion_that_varies_between_steps():
    """The loss tensor fused into the gradients' collective in some steps only (as Horovod does
    when it is submitted within one cycle), and starting just before them there: the collectives
    no longer repeat, the tensors in a canonical order still do."""
    compute = np.random.default_rng(1).uniform(1e4, 3e4, (2, 7, 5))
    ev = _trace(compute, fused=(2, 4))
    colls = timeline.collectives(ev, 2, "ALLREDUCE")
    assert len(colls) == 7 * 5 - 2
    with pytest.raises(timeline.TimelineError, match="no repeating step"):
        timeline.period([c["signature"] for c in colls])  # what a collective-level period sees
    res = timeline.breakdown(ev, 2)
    assert res["tensors_per_step"] == 5 and res["steps"] == 6
    assert [s["collectives"] for s in res["per_step"]] == [5, 4, 5, 4, 5, 5]
    for s, step in enumerate(res["per_step"], start=1):
        c = compute[:, s, :4] if s in (2, 4) else compute[:, s, :]
        assert step["duration_s"] == pytest.approx((c.max(axis=0).sum() + c.shape[1] * 500) * 1e-6)
        assert step["compute_s"] == pytest.approx(c.sum(axis=1) * 1e-6)
    assert res["messages"][-1]["name"] == "step_losses"


def test_timeline_errors(tmp_path):
    with pytest.raises(timeline.TimelineError, match="does not exist"):
        timeline.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[{\"ph\": ")
    with pytest.raises(timeline.TimelineError, match="not valid JSON"):
        timeline.load(tmp_path / "bad.json")
    with pytest.raises(timeline.TimelineError, match="no repeating step"):
        timeline.period(["a", "b", "c", "d", "e", "f"])


# ---------------------------------------------------------------------------------------------
# With MPI


@pytest.mark.mpi
def test_allreduce_benchmark_on_two_ranks(tmp_path):
    sizes = [1024 * 4**k for k in range(6)]  # 1 KiB .. 1 MiB
    res = scaling.allreduce_benchmark(workers=2, sizes=sizes, repeats=3,
                                      output=tmp_path / "allreduce.json")
    assert json.loads((tmp_path / "allreduce.json").read_text())["sizes_bytes"] == sizes
    for k in ("horovod", "mpi"):
        t = np.asarray(res["time_s"][k])
        assert np.all(t > 0) and np.all(np.isfinite(t))
        bw = np.asarray(res["bus_bandwidth_Bps"][k])
        assert bw == pytest.approx(np.asarray(sizes) / t)  # 2(p-1)/p = 1 for two ranks
    # Horovod adds its coordination cycle to MPI's own all-reduce.
    assert np.median(res["time_s"]["horovod"]) > np.median(res["time_s"]["mpi"])
    assert res["gradient_bytes"] == {"G": 4 * 872_808, "D": 4 * 73_402}
    assert res["fit"]["mpi"]["bandwidth_Bps"] > 1e7
    assert res["memcpy_Bps"] > 1e8  # one core copies at least 100 MB/s
    c = res["compute"]  # the step's computation alone on the node and with both ranks busy
    assert c["alone_flops"] > 1e9 and c["together_flops"] > 1e9
    assert 0.2 < c["shared_factor"] < 1.3


@pytest.mark.parametrize("allowed, threads, local_rank, expected", [
    ([0, 1, 2, 3], 2, 1, [2, 3]),     # 2 of 4 cores each
    ([0, 1], 1, 0, [0]),              # a 1-worker run bound to both cores keeps one
    ([1], 1, 1, [1]),                 # already bound to one core by mpirun: unchanged
    ([0, 1], 1, 3, [1]),              # oversubscribed, unbound: round-robin
])
def test_pin_cores(monkeypatch, allowed, threads, local_rank, expected):
    from gan3d import probes

    state = {"cpus": set(allowed)}
    monkeypatch.setattr(probes.os, "sched_getaffinity", lambda pid: set(state["cpus"]))
    monkeypatch.setattr(probes.os, "sched_setaffinity", lambda pid, cpus: state.update(cpus=set(cpus)))
    monkeypatch.setattr(probes, "Path", lambda p: type("P", (), {"glob": lambda self, pat: []})())
    monkeypatch.setattr(runtime, "local_rank_info", lambda: (local_rank, 4))
    assert probes.pin_cores(threads) == expected


def test_load_or_run_reuses_only_matching_results(tmp_path):
    from gan3d.io import write_json

    path = tmp_path / "r.json"
    calls = []
    make = lambda: calls.append(1) or {"new": True}  # noqa: E731
    assert scaling.load_or_run(path, make, config=CFG) == {"new": True}  # missing: measured
    write_json(path, {"config": config.to_dict(CFG), "old": True})
    other = CFG.replace(**{"validation.n_showers": 50, "scale.steps": 99})
    assert scaling.load_or_run(path, make, config=other, sections=("train",))["old"]
    assert scaling.load_or_run(path, make, config=other, sections=("scale",)) == {"new": True}
    with pytest.raises(ConfigError, match="run_missing"):
        scaling.load_or_run(path, make, config=other, sections=("scale",), run_missing=False)
    assert len(calls) == 2
