"""What runs inside each rank of a scaling experiment: pinning to cores, scheduler accounting."""

from __future__ import annotations

import os
import time

import pytest

from gan3d import runtime
from gan3d.scaling import probes


@pytest.mark.parametrize("allowed, threads, local_rank, expected", [
    ([0, 1, 2, 3], 2, 1, [2, 3]),     # 2 of 4 cores each
    ([0, 1], 1, 0, [0]),              # a 1-worker run bound to both cores keeps one
    ([1], 1, 1, [1]),                 # already bound to one core by mpirun: unchanged
    ([0, 1], 1, 3, [1]),              # oversubscribed, unbound: round-robin
])
def test_pin_cores(monkeypatch, allowed, threads, local_rank, expected):
    state = {"cpus": set(allowed)}
    monkeypatch.setattr(probes.os, "sched_getaffinity", lambda pid: set(state["cpus"]))
    monkeypatch.setattr(probes.os, "sched_setaffinity",
                        lambda pid, cpus: state.update(cpus=set(cpus)))
    monkeypatch.setattr(probes, "Path", lambda p: type("P", (), {"glob": lambda self, pat: []})())
    monkeypatch.setattr(runtime, "local_rank_info", lambda: (local_rank, 4))
    assert probes.pin_cores(threads) == expected


def test_scheduler_times_count_this_process_on_the_cpu():
    before = probes.scheduler_times()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:  # busy for 0.3 s of CPU
        pass
    after = probes.scheduler_times()
    ran = after["cpu_s"] - before["cpu_s"]
    assert 0.25 < ran < 0.3 + 2.0  # our busy loop, plus what other threads of ours did
    assert after["runqueue_wait_s"] >= before["runqueue_wait_s"] >= 0


def test_pin_to_moves_every_existing_thread(monkeypatch):
    calls = []
    monkeypatch.setattr(probes.os, "sched_setaffinity", lambda tid, cpus: calls.append(tid))
    probes.pin_to({0})
    tids = {int(p.name) for p in __import__("pathlib").Path("/proc/self/task").iterdir()}
    assert tids and tids <= set(calls)  # not only the calling thread: library pools too
    assert len(os.sched_getaffinity(0)) >= 1


@pytest.mark.slow
def test_measure_step_rate_times_real_steps_within_physical_limits(tmp_path):
    """The step-rate probe times exactly the steps asked for, within what the cores can do, on
    random batches and on the real pipeline; a bad data source is a named choice."""
    from gan3d import config
    from gan3d.runtime import cpu_count

    cfg = config.resolve("quick", {"train.batch_size": 2, "data.path": str(tmp_path / "data"),
                                   "data.n_showers": 40, "data.n_files": 4})
    for data in ("random", "files"):
        r = probes.measure_step_rate(cfg, steps=2, warmup=1, data=data)
        assert len(r["step_times_s"]) == len(r["cpu_step_times_s"]) == 2
        # a process cannot use more CPU than its cores for the wall time (a wrong clock would)
        assert 0 < r["cpu_seconds_per_step"] <= 1.1 * cpu_count() * r["seconds_per_step"]
        assert r["threads"] >= 1 and r["workers"] == 1
    with pytest.raises(ValueError, match="'random' or 'files'"):
        probes.measure_step_rate(cfg, steps=1, warmup=0, data="memory")
