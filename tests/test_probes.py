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
