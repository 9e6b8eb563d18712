"""The JAX backend's processes: ``jax.distributed`` start-up and host-level collectives.

With ``train.backend: jax`` every training process runs Keras 3 on JAX; the processes form one
JAX world (``jax.distributed.initialize``) whose devices - one CPU device per process here, the
GPUs or TPUs of each process elsewhere - make one mesh with the axis ``"workers"``. The training
step itself all-reduces inside its compiled function (``lax.pmean`` under ``shard_map``,
:mod:`gan3d.gan.jax.step`); this module gives the loop the few host-level operations the
Horovod backend gets from :mod:`gan3d.parallel.distributed` (sum of a small array, an object
from process 0, a barrier), which then routes its calls here.

Where the processes learn who they are:

* launched by ``gan3d train --backend jax --workers N``: ``mpirun`` starts them and passes
  ``GAN3D_JAX_COORDINATOR`` (process 0's address and a free port);
* under a cluster's ``mpirun`` (Open MPI): rank and size from ``OMPI_COMM_WORLD_*`` and the
  coordinator from ``GAN3D_JAX_COORDINATOR=host:port``, which the user exports;
* under ``srun``: JAX reads the Slurm job itself.

CPU collectives between processes use Gloo (``jax_cpu_collectives_implementation``), which the
pinned jaxlib carries; without it a multi-process CPU computation would fail at its first
all-reduce.
"""

from __future__ import annotations

import os
import pickle
import socket
from typing import Any

import numpy as np

from ..exceptions import ConfigError, EnvironmentProblem

__all__ = ["COORDINATOR_ENV", "init", "mesh", "allreduce", "broadcast_object", "broadcast_arrays",
           "barrier", "free_coordinator"]

COORDINATOR_ENV = "GAN3D_JAX_COORDINATOR"
AXIS = "workers"
_STARTED = False


def free_coordinator() -> str:
    """``127.0.0.1:PORT`` with a port free now, for a job on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _job() -> tuple[int, int, str | None] | None:
    """(process id, processes, coordinator) from the launcher's variables; None: a single process
    or a launcher JAX recognises by itself (Slurm)."""
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    if size <= 1:
        return None
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    address = os.environ.get(COORDINATOR_ENV)
    if not address:
        raise ConfigError(f"{size} processes with train.backend jax need the address of process "
                          f"0: export {COORDINATOR_ENV}=host:port (a free port on the first node) "
                          "before mpirun, or launch with `gan3d train --backend jax --workers N`")
    return rank, size, address


def cpu_flags() -> None:
    """XLA's CPU settings for the 3DGAN's 3D convolutions, before JAX starts its backend.

    jaxlib 0.4.3x-0.5.x run CPU programs on the "thunk" runtime, which computes a 3D convolution
    with a generic loop: measured here, a (4, 29, 29, 29, 32) x (5, 5, 5, 32, 8) convolution took
    1.00 s on it and 0.076 s on the previous runtime, which calls Eigen's (13x), and the whole
    step 13x likewise. Later jaxlibs removed the switch (and a removed flag is fatal), so it is
    set only where it exists and the user has not chosen.
    """
    from importlib import metadata

    try:
        major, minor = (int(p) for p in metadata.version("jaxlib").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if (major, minor) < (0, 6) and "xla_cpu_use_thunk_runtime" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_use_thunk_runtime=false").strip()


def pin_local_gpu() -> str | None:
    """Several processes on a node: each sees only the GPU of its local rank (as Horovod's ranks
    do, :mod:`gan3d.parallel.devices`), set before JAX starts; one process per node sees all of
    them and spreads over them. A ``CUDA_VISIBLE_DEVICES`` the user set is kept. Returns it."""
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    local_size = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE",
                                    os.environ.get("SLURM_NTASKS_PER_NODE", "1")))
    if local_size > 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(local)
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def init() -> tuple[int, int, int, int]:
    """Join the JAX world (idempotent); returns (rank, size, local_rank, local_size) by process."""
    global _STARTED
    cpu_flags()
    try:
        import jax
    except ImportError as exc:
        raise EnvironmentProblem(f"JAX is not importable ({exc}): train.backend jax needs the "
                                 "environment's jax and jaxlib; run `make env`") from None
    pin_local_gpu()
    if not _STARTED:
        job = _job()
        if job is not None or "SLURM_NTASKS" in os.environ and int(os.environ["SLURM_NTASKS"]) > 1:
            try:
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            except (AttributeError, ValueError):  # newer JAX: Gloo is the CPU default already
                pass
            if job is None:
                jax.distributed.initialize()  # DISTRIBUTED: Slurm's job, read by JAX
            else:
                rank, size, address = job
                jax.distributed.initialize(address, num_processes=size,  # DISTRIBUTED
                                           process_id=rank, initialization_timeout=120)
        _STARTED = True
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    local_size = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE",
                                    os.environ.get("SLURM_NTASKS_PER_NODE", "1")))
    return jax.process_index(), jax.process_count(), local, local_size


def mesh():
    """Every device of every process on the data-parallel axis ``"workers"``."""
    import jax
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()), (AXIS,))


def allreduce(value: Any, op: str = "sum") -> np.ndarray:
    """Sum, mean, min or max of a small array over processes (on the host)."""
    import jax
    from jax.experimental import multihost_utils

    x = np.asarray(value, dtype=np.float64 if np.asarray(value).dtype.kind == "f" else None)
    if jax.process_count() == 1:
        return x
    stacked = np.asarray(multihost_utils.process_allgather(x.astype(np.float32)))  # DISTRIBUTED
    reduce = {"sum": np.sum, "mean": np.mean, "min": np.min, "max": np.max}[op]
    return reduce(stacked.astype(np.float64), axis=0)


def broadcast_arrays(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Process 0's arrays on every process."""
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() == 1:
        return arrays
    return [np.asarray(a) for a in multihost_utils.broadcast_one_to_all(arrays)]  # DISTRIBUTED


def broadcast_object(obj: Any) -> Any:
    """Any picklable object from process 0 to every process."""
    import jax

    if jax.process_count() == 1:
        return obj
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if jax.process_index() == 0 else None
    sizes = [np.array([0 if data is None else data.size], np.int64)]
    size = int(broadcast_arrays(sizes)[0][0])  # DISTRIBUTED
    buf = data if data is not None else np.zeros(size, np.uint8)
    # uint8 travels as int32: Gloo's broadcast of every dtype is not guaranteed on all builds.
    out = broadcast_arrays([buf.astype(np.int32)])[0].astype(np.uint8)  # DISTRIBUTED
    return pickle.loads(out.tobytes())


def barrier(name: str = "gan3d_barrier") -> None:
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)  # DISTRIBUTED
