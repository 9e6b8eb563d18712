"""Tasks for the job runner (``gan3d.parallel.jobs``), run inside MPI ranks by tests/test_jobs.py
as ``"task": "job_tasks:NAME"`` (this folder on the ranks' PYTHONPATH)."""

from __future__ import annotations

import os


def rank_values(job: dict, world) -> dict:
    """Each rank's own values, gathered on every rank: rank, process id, TensorFlow's intra-op
    threads, a bit mask of the cores it may run on, and a number only that rank computes."""
    import numpy as np

    from gan3d.parallel import runtime
    from gan3d.parallel import distributed

    mask = sum(1 << c for c in os.sched_getaffinity(0))
    mine = np.array([[world.rank, os.getpid(), runtime.intra_op_threads(), mask,
                      (world.rank + job["offset"]) ** 2]], np.int64)
    rows = np.asarray(distributed.allgather(mine)).tolist()  # DISTRIBUTED
    keys = ("rank", "pid", "intra_op_threads", "core_mask", "square")
    return {key: [row[i] for row in rows] for i, key in enumerate(keys)}


def fail_on(job: dict, world) -> dict:
    """Rank ``job["rank"]`` raises; the others wait in an all-reduce that never completes."""
    from gan3d.parallel import distributed

    if world.rank == job["rank"]:
        raise RuntimeError(f"deliberate failure in a job task on rank {world.rank}")
    distributed.barrier()  # DISTRIBUTED
    return {}
