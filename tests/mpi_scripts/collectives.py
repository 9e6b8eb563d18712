"""Functions run inside MPI ranks by tests/test_distributed.py (via mpirun or ipyparallel engines).

As a script: ``python collectives.py OUT_DIR [fail_rank]`` writes OUT_DIR/rank<k>.json.
"""

from __future__ import annotations

import json
import os
import sys


def allreduce_check() -> dict:
    """Each rank contributes rank+1; returns what Horovod's ring all-reduce gave back."""
    from gan3d.parallel import distributed

    world = distributed.init()
    import tensorflow as tf

    total = distributed.allreduce(tf.constant([world.rank + 1.0, 10.0]), op="sum")
    mean = distributed.average([tf.constant(float(world.rank))])[0]
    return {
        "rank": world.rank, "size": world.size, "local_size": world.local_size,
        "sum": [float(v) for v in total.numpy()], "mean": float(mean.numpy()),
        "intra_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "yield_when_idle": os.environ.get("OMPI_MCA_mpi_yield_when_idle"),
        "cores": len(os.sched_getaffinity(0)),
        "pid": os.getpid(),
    }


def fail_on(rank_to_fail: int) -> dict:
    """Rank ``rank_to_fail`` raises; the others wait in an all-reduce that can never complete."""
    from gan3d.parallel import distributed

    world = distributed.init()
    import tensorflow as tf

    if world.rank == rank_to_fail:
        raise ValueError(f"deliberate failure on rank {world.rank}")
    distributed.allreduce(tf.constant([1.0]), op="sum")
    return {"rank": world.rank}


def main() -> None:
    from gan3d.parallel.launch import guard

    out = sys.argv[1]
    fn = (lambda: fail_on(int(sys.argv[2]))) if len(sys.argv) > 2 else allreduce_check
    result = guard(fn)
    with open(os.path.join(out, f"rank{result['rank']}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
