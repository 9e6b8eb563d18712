"""Scaling experiments: batch/thread/core rules, speed-ups, histories, reusing results, and (with
MPI) the all-reduce benchmark. Timelines, probes and the speed-up arithmetic have test files of
their own; the real 2-worker timeline of the 3DGAN is checked in test_notebook_scaling.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gan3d import config
from gan3d.parallel import runtime
from gan3d.exceptions import ConfigError
from gan3d.scaling import experiments as scaling

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


def test_timed_epoch_means(tmp_path):
    path = tmp_path / "history.jsonl"
    rows = [{"epoch": 1, "timed": False, "time_train_s": 50, "time_eval_s": 9, "time_epoch_s": 59},
            {"epoch": 2, "timed": True, "time_train_s": 10, "time_eval_s": 1, "time_epoch_s": 11},
            {"epoch": 3, "timed": True, "time_train_s": 12, "time_eval_s": 1, "time_epoch_s": 13}]
    path.write_text("".join(json.dumps(dict(r, eval_mode="serial", workers=2)) + "\n" for r in rows))
    h = scaling.timed_epoch_means(path)
    assert (h["epochs"], h["train_s"], h["eval_s"], h["epoch_s"]) == (2, 11, 1, 12)
    path.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(ConfigError, match="timing_warmup_epochs"):
        scaling.timed_epoch_means(path)


# ---------------------------------------------------------------------------------------------
# With MPI


@pytest.mark.mpi
@pytest.mark.slow
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
    assert res["gradient_bytes"] == {"G": 4 * 872_808, "D": 4 * 73_402}  # the models' sizes
    assert set(res["compute"]) >= {"alone_flops", "together_flops", "shared_factor"}
    # Timings (Horovod's overhead over MPI, how much the cores share) are reported by
    # bench/bench_allreduce.py and notebook 03, not asserted on a shared machine.


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
