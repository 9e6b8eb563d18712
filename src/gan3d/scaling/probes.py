"""What runs inside each MPI rank of a scaling experiment: timed steps, a full training, all-reduces.

:mod:`gan3d.scaling.experiments` writes a job file and starts ``python -m gan3d.scaling.probes
JOB.json`` on N ranks with :func:`gan3d.parallel.launch.launch`; rank 0 writes the result to
``job["out"]``. A job is::

    {"task": "steps" | "train" | "trains" | "allreduce" | "roofline", "threads": int, "out": path, ...task fields}

* ``steps``: :func:`measure_step_rate` (``steps`` timed after ``warmup``) on the job's ``config``;
* ``train``: ``training.train(cfg)``, which writes ``history.jsonl`` in ``cfg.train.output``;
* ``trains``: one ``train`` per entry of ``configs``, in order (the convergence study);
* ``allreduce``: Horovod and plain-MPI all-reduce times over message ``sizes`` (bytes);
* ``roofline``: :func:`gan3d.scaling.roofline.profile_step`, one rank, every layer's passes.

Threads and cores are pinned first (``threads`` intra-op threads on as many cores per rank, the
same at every worker count, so that one worker always stands for the same hardware, as one GPU
did in the paper).
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .. import runtime
from ..config import from_dict
from ..io import read_json, write_json
from ..parallel import distributed
from ..parallel.launch import guard

__all__ = ["main", "measure_step_rate", "pin_cores", "pin_threads", "pin_to", "scheduler_times",
           "time_allreduce", "time_shared_compute"]


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
    world = distributed.init(threads=threads)
    pin_cores(threads)  # after MPI_Init, which binds the process to the launcher's cores again
    import tensorflow as tf

    tf.constant(1.0) + 1.0
    return world


def _steps(job: dict, world: distributed.World) -> dict:

    cfg = from_dict(job["config"])
    return measure_step_rate(cfg, job["steps"], job["warmup"])


def _train(job: dict, world: distributed.World) -> dict:
    from ..gan.training import train  # imports TensorFlow

    cfg = from_dict(job["config"])
    t0 = time.perf_counter()
    result = train(cfg)
    return {"wall_s": time.perf_counter() - t0, **result.to_dict()}


def _trains(job: dict, world: distributed.World) -> dict:
    """Several trainings one after the other in the same processes (each writes its own output
    folder, so a job stopped midway keeps the runs it finished)."""
    return {"runs": [_train({"config": c}, world) for c in job["configs"]]}


def time_allreduce(sizes: list[int], repeats: int, warmup: int = 2) -> dict:
    """Median seconds per all-reduce (sum) of float32 messages of ``sizes`` bytes, two ways:
    ``horovod`` (hvd.allreduce of a TF tensor, as training does, incl. Horovod's coordination)
    and ``mpi`` (mpi4py Allreduce of a NumPy buffer: the MPI library alone)."""
    import tensorflow as tf

    out: dict = {"sizes": [], "horovod_s": [], "mpi_s": []}
    for n in sizes:
        count = max(1, n // 4)
        x = tf.ones((count,), tf.float32)
        buf, res = np.ones(count, np.float32), np.empty(count, np.float32)
        th, tm = [], []
        for i in range(warmup + repeats):
            distributed.mpi_barrier()  # start together: we time the collective, not the skew
            t0 = time.perf_counter()
            distributed.allreduce(x, "sum", name=f"bench_{n}").numpy()
            t1 = time.perf_counter()
            distributed.mpi_barrier()
            t2 = time.perf_counter()
            distributed.mpi_allreduce_sum(buf, res)
            t3 = time.perf_counter()
            if i >= warmup:
                th.append(t1 - t0)
                tm.append(t3 - t2)
        out["sizes"].append(count * 4)
        out["horovod_s"].append(statistics.median(th))
        out["mpi_s"].append(statistics.median(tm))
    return out


def _allreduce(job: dict, world: distributed.World) -> dict:
    res = time_allreduce(job["sizes"], job["repeats"], job.get("warmup", 2))
    import tensorflow as tf

    for key in ("horovod_s", "mpi_s"):  # the slowest rank's time is the collective's time
        worst = distributed.allreduce(tf.constant(res[key], tf.float64), "max", name=f"max_{key}")
        res[key] = [float(v) for v in tf.reshape(worst, [-1]).numpy()]
    res["workers"] = world.size
    res["memcpy_Bps"] = _memcpy_bandwidth(max(job["sizes"]))
    res["compute"] = time_shared_compute(world, job.get("compute_s", 4.0))
    return res


@functools.lru_cache(maxsize=1)
def _compute_probe(batch: int = 2):
    """The 3DGAN step's computation without its all-reduces, as a traced function: D's gradients
    on a batch, then G's gradients through D (the step's op mix, half its work). Returns the
    function and its FLOPs per call (5 D + 3 G forward passes per shower)."""
    import tensorflow as tf

    from ..gan.model import build_discriminator, build_generator
    from .perfmodel import REFERENCE_COUNTS as C

    g, d = build_generator(), build_discriminator()
    image = tf.random.uniform((batch, 25, 25, 25, 1))
    z = tf.random.normal((batch, 200))

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.add_n(d(image, training=True)[:2]))
        gd = tape.gradient(loss, d.trainable_variables)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.add_n(d(g(z, training=True), training=True)[:2]))
        gg = tape.gradient(loss, g.trainable_variables)
        return tf.add_n([tf.reduce_sum(x) for x in gd + gg if x is not None])

    grads().numpy()  # trace and warm up once
    return grads, batch * (5 * C["d_forward_flops"] + 3 * C["g_forward_flops"])


def _compute_rate(seconds: float) -> float:
    """FLOP/s of this process on :func:`_compute_probe`, run for about ``seconds``."""
    conv, flop = _compute_probe()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        conv().numpy()
        n += 1
    return n * flop / (time.perf_counter() - t0)


def time_shared_compute(world: distributed.World, seconds: float = 4.0) -> dict:
    """The per-worker compute rate with the node to itself against with every rank computing.

    Cores of one machine share caches, memory bandwidth, power and, on virtual machines, often
    one physical core (SMT siblings); GPUs do not. Rank 0 measures alone while the others sleep
    (an MPI barrier would spin on a sibling core), then all ranks measure at once. Returns FLOP/s
    ``alone`` and ``together`` (mean per rank) and their ratio ``shared_factor``.
    """
    import tensorflow as tf

    _compute_probe()  # every rank traces it before anyone times it
    distributed.allreduce(tf.constant(0.0), "sum", name="compute_sync0")
    if world.is_root:
        alone = _compute_rate(seconds)
    else:
        time.sleep(seconds + 1.0)
    distributed.allreduce(tf.constant(0.0), "sum", name="compute_sync1")
    together = _compute_rate(seconds)
    total = distributed.allreduce(tf.constant(together, tf.float64), "sum", name="compute_sum")
    together = float(np.asarray(total)) / world.size
    alone = alone if world.is_root else 0.0
    return {"alone_flops": alone, "together_flops": together,
            "shared_factor": together / alone if alone else float("nan"), "seconds": seconds}


def _memcpy_bandwidth(nbytes: int, repeats: int = 5) -> float:
    """Bytes/s of one core copying a buffer of ``nbytes`` (at least 64 MiB, beyond the caches):
    the ceiling of an all-reduce through shared memory, which copies each byte several times."""
    n = max(nbytes, 64 * 2**20) // 4
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return 4 * n / statistics.median(times)


# ---------------------------------------------------------------------------------------------
# The training step's rate, for benchmarks and scaling studies


def measure_step_rate(cfg, steps: int = 5, warmup: int = 2, *, data: str = "random",
                      threads: int | None = None) -> dict:
    """Time ``steps`` full training steps after ``warmup`` untimed ones, on every rank.

    ``data="random"`` feeds one fixed random batch (compute and all-reduce only);
    ``data="files"`` reads this rank's shard of the configured data through the real pipeline.
    Returns this rank's numbers: ``seconds_per_step`` (median), ``step_times_s``,
    ``cpu_seconds_per_step`` (median CPU time of this process, all its threads, per step: busy
    polling shows up here, other users of the machine do not), ``cpu_step_times_s``,
    ``showers_per_s`` (this process: batch / median step), ``showers_per_s_total`` (x workers),
    ``gflop_per_s`` (this process, by :func:`gan3d.gan.model.step_flops`), ``workers``, ``rank``,
    ``batch_size``, ``precision``, ``threads``. ``threads`` overrides the intra-op thread count
    (default cores / local ranks); it only takes effect if TensorFlow has not started yet.
    """
    world = distributed.init(threads=threads)  # DISTRIBUTED: before TensorFlow starts
    import tensorflow as tf

    from ..config import resolved_precision
    from ..gan import training  # imports TensorFlow
    from ..gan.model import step_flops

    cfg = resolved_precision(cfg)
    step = training.build_step(cfg)
    step.broadcast_state()  # DISTRIBUTED
    step.reseed(cfg.train.seed, world.rank, 0)
    step.set_learning_rate(training.learning_rate(cfg, world.size, 1.0))
    batches = _rate_batches(cfg, world, data)
    times, cpu = [], []
    for i in range(warmup + steps):
        batch = next(batches)
        t0, c0 = time.perf_counter(), time.process_time()
        np.asarray(step.train_step(batch))  # the host copy waits for the step to finish
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    median = float(np.median(times))
    b = cfg.train.batch_size
    return {"seconds_per_step": median, "step_times_s": times, "showers_per_s": b / median,
            "cpu_seconds_per_step": float(np.median(cpu)), "cpu_step_times_s": cpu,
            "showers_per_s_total": b * world.size / median,
            "gflop_per_s": step_flops(step.g, step.d) * b / median / 1e9,
            "workers": world.size, "rank": world.rank, "batch_size": b,
            "precision": cfg.train.precision,
            "threads": runtime.intra_op_threads()}


def _rate_batches(cfg, world, data: str):
    b = cfg.train.batch_size
    if data == "random":
        from ..gan.step import E_RANGE

        rng = np.random.default_rng([cfg.train.seed, world.rank])
        image = (rng.gamma(0.05, 2.0, (b, 25, 25, 25, 1)) * (rng.random((b, 25, 25, 25, 1)) < 0.3))
        batch = {"image": image.astype(np.float32),
                 "energy": rng.uniform(*E_RANGE, b).astype(np.float32),
                 "ecal_sum": image.sum(axis=(1, 2, 3, 4)).astype(np.float32)}
        while True:
            yield batch
    elif data == "files":
        from ..data import sharding
        from ..gan.training import collective, data_files

        train_files, _ = collective(world, lambda: data_files(cfg, world.size))
        shard = sharding.ShardedShowers(train_files, world.rank, world.size, b, seed=cfg.train.seed,
                                        theta_window=cfg.data.theta_window or None)
        epoch = 0
        while True:
            yield from shard.epoch(epoch)
            epoch += 1
    else:
        raise ValueError(f"measure_step_rate: data must be 'random' or 'files', not {data!r}")


def _roofline(job: dict, world: distributed.World) -> dict:
    from ..config import resolved_precision
    from ..gan import training
    from . import roofline

    cfg = resolved_precision(from_dict(job["config"]))
    step = training.build_step(cfg)
    return roofline.profile_step(step, cfg.train.batch_size, repeats=int(job.get("repeats", 3)),
                                 progress=world.is_root)


TASKS = {"steps": _steps, "train": _train, "trains": _trains, "allreduce": _allreduce, "roofline": _roofline}


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


def _run(job_path: str) -> None:
    job = read_json(job_path)
    world = pin_threads(int(job.get("threads", 1)))
    before = scheduler_times()
    result = TASKS[job["task"]](job, world)
    after = scheduler_times()
    if world.is_root:
        result = dict(result, workers=world.size, threads=int(job.get("threads", 1)),
                      cores=sorted(os.sched_getaffinity(0)),
                      scheduler={k: after[k] - before[k] for k in after})
        write_json(job["out"], result)


def main(argv: list[str] | None = None) -> None:
    """Entry point of one rank: ``python -m gan3d.scaling.probes JOB.json`` (errors end the job)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_file():
        raise SystemExit("usage: python -m gan3d.scaling.probes JOB.json")
    guard(_run, args[0])


if __name__ == "__main__":
    main()
