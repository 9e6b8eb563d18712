"""The measuring probes of the scaling experiments: what runs inside each MPI rank to time things.

:mod:`gan3d.scaling.experiments` launches them as jobs of :mod:`gan3d.parallel.jobs` (``python -m
gan3d.parallel.jobs JOB.json`` on N ranks; that module pins threads and cores and writes rank 0's
result). The tasks of this module, each ``fn(job, world) -> dict``:

* ``steps`` (:func:`steps_task`): :func:`measure_step_rate`, ``steps`` timed after ``warmup``,
  on the job's ``config``;
* ``allreduce`` (:func:`allreduce_task`): Horovod and plain-MPI all-reduce times over message
  ``sizes`` (bytes), the copy bandwidth of one core and the compute rate alone and shared;
* ``roofline`` (:func:`roofline_task`): :func:`gan3d.scaling.roofline.profile_step`, one rank,
  every layer's passes.

:func:`measure_step_rate` is also the step-rate probe of the benchmarks (``bench/``).
"""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np

from ..parallel import runtime
from ..config import from_dict
from ..parallel import distributed
from . import energy

__all__ = ["allreduce_task", "measure_step_rate", "roofline_task", "steps_task", "time_allreduce",
           "time_shared_compute"]


def steps_task(job: dict, world: distributed.World) -> dict:
    """``steps``: :func:`measure_step_rate` of the job's ``config``, ``steps`` after ``warmup``."""
    cfg = from_dict(job["config"])
    return measure_step_rate(cfg, job["steps"], job["warmup"])


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
            distributed.mpi_barrier()  # DISTRIBUTED: start together (time the collective, not skew)
            t0 = time.perf_counter()
            distributed.allreduce(x, "sum", name=f"bench_{n}").numpy()  # DISTRIBUTED
            t1 = time.perf_counter()
            distributed.mpi_barrier()  # DISTRIBUTED
            t2 = time.perf_counter()
            distributed.mpi_allreduce_sum(buf, res)  # DISTRIBUTED
            t3 = time.perf_counter()
            if i >= warmup:
                th.append(t1 - t0)
                tm.append(t3 - t2)
        out["sizes"].append(count * 4)
        out["horovod_s"].append(statistics.median(th))
        out["mpi_s"].append(statistics.median(tm))
    return out


def allreduce_task(job: dict, world: distributed.World) -> dict:
    """``allreduce``: :func:`time_allreduce` of the job's ``sizes`` (the slowest rank's times),
    one core's copy bandwidth and :func:`time_shared_compute`."""
    res = time_allreduce(job["sizes"], job["repeats"], job.get("warmup", 2))
    import tensorflow as tf

    for key in ("horovod_s", "mpi_s"):  # the slowest rank's time is the collective's time
        worst = distributed.allreduce(tf.constant(res[key], tf.float64), "max",  # DISTRIBUTED
                                      name=f"max_{key}")
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
    distributed.allreduce(tf.constant(0.0), "sum", name="compute_sync0")  # DISTRIBUTED
    if world.is_root:
        alone = _compute_rate(seconds)
    else:
        time.sleep(seconds + 1.0)
    distributed.allreduce(tf.constant(0.0), "sum", name="compute_sync1")  # DISTRIBUTED
    together = _compute_rate(seconds)
    total = distributed.allreduce(tf.constant(together, tf.float64), "sum",  # DISTRIBUTED
                                  name="compute_sum")
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
    ``batch_size``, ``precision``, ``threads``, ``energy`` (:func:`gan3d.scaling.energy.meter`
    over the timed steps: this host's counters and the showers its ranks trained). ``threads``
    overrides the intra-op thread count (default cores / local ranks); it only takes effect if
    TensorFlow has not started yet.
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
    for _ in range(warmup):
        np.asarray(step.train_step(next(batches)))
    with energy.meter() as joules:  # this host's counters over the timed steps, where readable
        for _ in range(steps):
            batch = next(batches)
            t0, c0 = time.perf_counter(), time.process_time()
            np.asarray(step.train_step(batch))  # the host copy waits for the step to finish
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
            "threads": runtime.intra_op_threads(),
            "energy": {**joules.result(), "showers": b * world.local_size * steps}}


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

        train_files, _ = collective(world, lambda: data_files(cfg, world.size))  # DISTRIBUTED
        shard = sharding.ShardedShowers(train_files, world.rank, world.size, b, seed=cfg.train.seed,
                                        theta_window=cfg.data.theta_window or None)
        epoch = 0
        while True:
            yield from shard.epoch(epoch)
            epoch += 1
    else:
        raise ValueError(f"measure_step_rate: data must be 'random' or 'files', not {data!r}")


def roofline_task(job: dict, world: distributed.World) -> dict:
    """``roofline``: :func:`gan3d.scaling.roofline.profile_step` of the job's ``config`` at its
    batch and precision, ``repeats`` timings of every layer's passes."""
    from ..config import resolved_precision
    from ..gan import training
    from . import roofline

    cfg = resolved_precision(from_dict(job["config"]))
    step = training.build_step(cfg)
    return roofline.profile_step(step, cfg.train.batch_size, repeats=int(job.get("repeats", 3)),
                                 progress=world.is_root)
