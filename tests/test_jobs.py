"""The job runner (``python -m gan3d.parallel.jobs JOB.json``): a job on 2 real MPI ranks gives
rank 0 every rank's own values, the threads set are the threads used, the cores are pinned, a
failing rank is named, and a task that does not exist is refused before anything starts."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from gan3d.parallel import runtime
from gan3d.exceptions import ConfigError, RankFailed
from gan3d.parallel import jobs

TASKS_HERE = Path(__file__).resolve().parent / "mpi_scripts"  # job_tasks.py, for the ranks


@pytest.fixture
def ranks_import_tests(monkeypatch):
    """The ranks find tests/mpi_scripts/job_tasks.py (and gan3d, as before)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(TASKS_HERE), os.environ.get("PYTHONPATH")) if p))


@pytest.mark.mpi
def test_a_job_on_two_ranks_returns_what_each_rank_computed(tmp_path, ranks_import_tests):
    threads = runtime.cpu_count() + 1  # never a default (cores / local ranks)
    res = jobs.launch_job(2, {"task": "job_tasks:rank_values", "threads": threads, "offset": 3},
                          tmp_path, "values", timeout=300)
    assert res["rank"] == [0, 1] and res["workers"] == 2 and res["threads"] == threads
    assert res["square"] == [9, 16]  # (rank + 3)^2, computed by each rank itself
    assert res["intra_op_threads"] == [threads, threads]  # what the job set, in both ranks
    assert len(set(res["pid"])) == 2 and os.getpid() not in res["pid"]
    cores0 = [c for c in range(64) if res["core_mask"][0] >> c & 1]
    assert res["cores"] == cores0  # the runner reports rank 0's cores as rank 0 saw them
    if runtime.cpu_count() >= 2:  # one rank per core (mpirun's binding, kept by the pinning)
        assert res["core_mask"][0] & res["core_mask"][1] == 0
    assert not list(tmp_path.glob("values.job.json"))  # the job file is removed afterwards


@pytest.mark.mpi
def test_a_failing_rank_of_a_job_is_named(tmp_path, ranks_import_tests):
    with pytest.raises(RankFailed) as err:
        jobs.launch_job(2, {"task": "job_tasks:fail_on", "rank": 1, "threads": 1}, tmp_path,
                        "fail", timeout=300)
    assert err.value.rank == 1
    assert "deliberate failure in a job task on rank 1" in err.value.message


def test_an_unknown_task_is_refused_before_the_ranks_start(tmp_path):
    job = tmp_path / "job.json"
    job.write_text('{"task": "stpes", "threads": 1, "out": "never.json"}')
    with pytest.raises(ConfigError, match="unknown job task 'stpes'; choose one of train, trains"):
        jobs.run_job(job)  # no Horovod started: it fails before pinning
    with pytest.raises(ConfigError, match="cannot find gan3d.scaling.probes:no_such"):
        jobs.task_function("gan3d.scaling.probes:no_such")


def test_every_named_task_is_a_function_of_its_room():
    """A task renamed or moved in its module breaks this test, not a launch hours later."""
    where = {name: jobs.task_function(name).__module__ for name in jobs.TASKS}
    assert where == {"train": "gan3d.parallel.jobs", "trains": "gan3d.parallel.jobs",
                     "steps": "gan3d.scaling.probes", "allreduce": "gan3d.scaling.probes",
                     "roofline": "gan3d.scaling.probes"}
    assert jobs.command("j.json")[-3:] == ["-m", "gan3d.parallel.jobs", "j.json"]


@pytest.mark.parametrize("allowed, threads, local_rank, expected", [
    ([0, 1, 2, 3], 2, 1, [2, 3]),     # 2 of 4 cores each
    ([0, 1], 1, 0, [0]),              # a 1-worker run bound to both cores keeps one
    ([1], 1, 1, [1]),                 # already bound to one core by mpirun: unchanged
    ([0, 1], 1, 3, [1]),              # oversubscribed, unbound: round-robin
])
def test_pin_cores(monkeypatch, allowed, threads, local_rank, expected):
    state = {"cpus": set(allowed)}
    monkeypatch.setattr(jobs.os, "sched_getaffinity", lambda pid: set(state["cpus"]))
    monkeypatch.setattr(jobs.os, "sched_setaffinity",
                        lambda pid, cpus: state.update(cpus=set(cpus)))
    monkeypatch.setattr(jobs, "Path", lambda p: type("P", (), {"glob": lambda self, pat: []})())
    monkeypatch.setattr(runtime, "local_rank_info", lambda: (local_rank, 4))
    assert jobs.pin_cores(threads) == expected


def test_pin_to_moves_threads_that_already_run():
    """A thread started before the pinning (a library's pool) ends up on the pinned core too."""
    before = os.sched_getaffinity(0)
    core = max(before)
    started, stop = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (started.set(), stop.wait(30)))
    worker.start()
    started.wait(10)
    try:
        jobs.pin_to({core})
        assert os.sched_getaffinity(worker.native_id) == {core}
        assert os.sched_getaffinity(0) == {core}
    finally:
        jobs.pin_to(before)  # the test process gets its cores back
        stop.set()
        worker.join(10)
    assert os.sched_getaffinity(0) == before


def test_scheduler_times_agree_with_the_process_cpu_clock():
    """schedstat's run time of all threads and the kernel's CPU clock of the process are two
    counters of the same thing: over a busy stretch they advance alike."""
    before, c0 = jobs.scheduler_times(), time.process_time()
    while time.process_time() - c0 < 0.3:  # busy for 0.3 s of CPU
        pass
    after, c1 = jobs.scheduler_times(), time.process_time()
    assert after["cpu_s"] - before["cpu_s"] == pytest.approx(c1 - c0, abs=0.03)
