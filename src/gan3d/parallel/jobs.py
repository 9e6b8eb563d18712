"""Jobs on N MPI ranks, described by a JSON file: the launcher's side and each rank's side.

A launcher writes a job file and starts ``python -m gan3d.parallel.jobs JOB.json`` on N ranks
(:func:`launch_job` does both, under this machine's ``mpirun`` or over an emulated network; a
cluster's own ``mpirun``/``srun`` runs the same command). Every rank pins its threads and cores,
runs the job's task, and rank 0 writes the task's result to ``job["out"]``. A job is::

    {"task": "steps" | "train" | "trains" | "allreduce" | "roofline" | "module:function",
     "threads": int, "out": path, ...task fields}

* ``train``: ``gan.training.train(cfg)`` on the job's ``config``, which writes ``history.jsonl``
  in ``cfg.train.output`` (:func:`train_task`);
* ``trains``: one ``train`` per entry of ``configs``, in order (the convergence study);
* ``steps``, ``allreduce``, ``roofline``: the measuring probes of :mod:`gan3d.scaling.probes`
  (step rate, all-reduce times, every layer's passes);
* ``module:function``: any function ``fn(job, world) -> dict`` importable in the ranks.

Tasks are named, not imported, here (:data:`TASKS`): the runner sits below the rooms whose work it
runs, and a rank imports only the task it runs. Threads and cores are pinned first
(``threads`` intra-op threads on as many cores per rank, the same at every worker count, so that
one worker always stands for the same hardware, as one GPU did in the paper).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from . import runtime
from ..config import from_dict
from ..exceptions import ConfigError
from ..io import read_json, write_json
from . import distributed
from .launch import guard, launch

__all__ = ["MODULE", "TASKS", "command", "launch_job", "main", "pin_cores", "pin_threads",
           "pin_to", "run_job", "scheduler_times", "task_function", "train_task", "trains_task"]

MODULE = "gan3d.parallel.jobs"  # what every rank runs: python -m MODULE JOB.json

# Task name -> "module:function" run in each rank as fn(job, world) -> dict (rank 0's is kept).
TASKS = {
    "train": f"{MODULE}:train_task",
    "trains": f"{MODULE}:trains_task",
    "steps": "gan3d.scaling.probes:steps_task",
    "allreduce": "gan3d.scaling.probes:allreduce_task",
    "roofline": "gan3d.scaling.probes:roofline_task",
}


# ---------------------------------------------------------------------------------------------
# The launcher's side


def command(job_path: str | os.PathLike) -> list[str]:
    """The command every rank of a job runs: ``python -m gan3d.parallel.jobs JOB.json``."""
    return [sys.executable, "-m", MODULE, str(job_path)]


def launch_job(p: int, job: dict, folder: str | os.PathLike, name: str, *, timeout: float,
               extra: Sequence[str] = (), network: str | None = None) -> dict:
    """Run ``job`` on ``p`` ranks of this machine and return rank 0's result.

    The job file ``folder/name.job.json`` (with ``out`` set to ``folder/name.out.json``) is
    removed afterwards. ``extra``: further ``mpirun`` arguments (``-x VAR=value``). With
    ``network`` (a profile of :data:`gan3d.parallel.netns.PROFILES`) and ``p`` > 1, every rank
    sits in its own network namespace behind a link of that profile and Horovod's MPI talks TCP
    over it (root). A failing rank raises :class:`~gan3d.exceptions.RankFailed`.
    """
    folder = Path(folder)
    job_path, out = folder / f"{name}.job.json", folder / f"{name}.out.json"
    out.unlink(missing_ok=True)
    write_json(job_path, dict(job, out=str(out)))
    if network and p > 1:
        from . import netns

        with netns.Network(p, network) as net:
            net.mpirun(command(job_path), timeout=timeout, env={"GAN3D_PROGRESS": "0"})
    else:
        launch(p, command(job_path), timeout=timeout, stream=False, extra=list(extra))
    job_path.unlink(missing_ok=True)
    return read_json(out)


# ---------------------------------------------------------------------------------------------
# Each rank's side: pinning, accounting, the task


def pin_cores(threads: int) -> list[int]:
    """Restrict this process to ``threads`` of the cores the launcher gave it; return them.

    mpirun binds one rank of a 1-worker run to every core but two ranks to one core each; pinning
    each rank to exactly ``threads`` cores makes a worker the same hardware at every count (and
    under other load it cannot borrow an idle core the others lack). With more ranks than cores
    (oversubscribed, no binding) local ranks take the cores round-robin.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) > threads:
        local_rank, _ = runtime.local_rank_info()
        pin_to({allowed[(local_rank * threads + i) % len(allowed)] for i in range(threads)})
    return sorted(os.sched_getaffinity(0))


def pin_to(cores: set[int]) -> None:
    """Restrict every thread of this process to ``cores``: those that exist already (library pools
    started at import), not only the calling one, since an affinity belongs to a thread and new
    threads inherit their creator's."""
    tids = [int(t.name) for t in Path("/proc/self/task").glob("*")] or [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


def pin_threads(threads: int) -> distributed.World:
    """Start Horovod with ``threads`` intra-op threads, pin the cores (:func:`pin_cores`) and make
    the thread setting stick.

    A first TensorFlow op initialises its runtime, after which later thread requests (the
    training's own ``distributed.init()``) are ignored instead of overriding this one.
    """
    world = distributed.init(threads=threads)  # DISTRIBUTED: joins the job's ranks
    pin_cores(threads)  # after MPI_Init, which binds the process to the launcher's cores again
    import tensorflow as tf

    tf.constant(1.0) + 1.0
    return world


def scheduler_times() -> dict:
    """Seconds this process's threads ran on a CPU and waited for one (Linux schedstat).

    Waiting for a CPU while runnable means something else had it - other processes on a shared
    machine, or this process's own threads: the measure of contention a wall-clock time hides.
    """
    run = wait = 0
    for task in Path("/proc/self/task").glob("*"):
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:  # a thread that ended meanwhile, or no schedstat (not Linux)
            continue
        run, wait = run + int(fields[0]), wait + int(fields[1])
    return {"cpu_s": run * 1e-9, "runqueue_wait_s": wait * 1e-9, "wall_s": time.perf_counter()}


def task_function(task: str) -> Callable[[dict, distributed.World], dict]:
    """The function of a job's ``task``: a name of :data:`TASKS` or ``"module:function"``.

    Raises :class:`~gan3d.exceptions.ConfigError` naming the choices when there is no such task.
    """
    ref = TASKS.get(task, task)
    module, sep, name = ref.partition(":")
    if not sep or not module or not name:
        raise ConfigError(f"unknown job task {task!r}; choose one of {', '.join(TASKS)} "
                          "or give 'module:function'")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"job task {task!r}: cannot find {ref} ({exc})") from None
    return fn


def train_task(job: dict, world: distributed.World) -> dict:
    """``train``: one training of the job's ``config``; its result and wall-clock seconds."""
    from ..gan.training import train  # imports TensorFlow

    cfg = from_dict(job["config"])
    t0 = time.perf_counter()
    result = train(cfg)
    return {"wall_s": time.perf_counter() - t0, **result.to_dict()}


def trains_task(job: dict, world: distributed.World) -> dict:
    """``trains``: several trainings one after the other in the same processes (each writes its
    own output folder, so a job stopped midway keeps the runs it finished)."""
    return {"runs": [train_task({"config": c}, world) for c in job["configs"]]}


def run_job(job_path: str | os.PathLike) -> dict[str, Any] | None:
    """One rank's part of the job in ``job_path``: pin, run the task, and on rank 0 write its
    result (with ``workers``, ``threads``, rank 0's ``cores`` and its ``scheduler`` times) to
    ``job["out"]``. Returns that result on rank 0, None on the others."""
    job = read_json(job_path)
    fn = task_function(job["task"])  # an unknown task fails before the ranks meet
    threads = int(job.get("threads", 1))
    world = pin_threads(threads)
    before = scheduler_times()
    result = fn(job, world)
    after = scheduler_times()
    if not world.is_root:
        return None
    result = dict(result, workers=world.size, threads=threads,
                  cores=sorted(os.sched_getaffinity(0)),
                  scheduler={k: after[k] - before[k] for k in after})
    write_json(job["out"], result)
    return result


def main(argv: list[str] | None = None) -> None:
    """Entry point of one rank: ``python -m gan3d.parallel.jobs JOB.json`` (errors end the job)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_file():
        raise SystemExit(f"usage: python -m {MODULE} JOB.json")
    guard(run_job, args[0])


if __name__ == "__main__":
    main()
