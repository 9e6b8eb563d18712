"""Every Horovod and MPI call of gan3d lives here; world size 1 is the same code path.

Inside a training process::

    world = distributed.init()                 # hvd.init() after the process defaults
    grads = distributed.average(grads)         # ring all-reduce, mean over ranks
    distributed.broadcast(variables)           # rank 0's values everywhere
    if world.is_root: ...                      # logging and checkpoints

Plain MPI (mpi4py) is used only where Horovod has no equivalent: the MPI rank of an ipyparallel
engine before Horovod starts (:func:`mpi_rank`), and the library-only all-reduce that benchmarks
time against Horovod's (:func:`mpi_barrier`, :func:`mpi_allreduce_sum`). :func:`versions` tells
``gan3d doctor`` what Horovod and mpi4py were built with, so that no other module imports them.

Every line that talks to other ranks is marked ``DISTRIBUTED``; a test checks that ``horovod`` and
``mpi4py`` are imported nowhere else in the package.

Horovod with Keras 3: ``hvd.DistributedGradientTape`` and ``hvd.DistributedOptimizer`` do not work
with Keras 3 variables (and with ``fit`` would silently not average), so the averaging is explicit.
Launching processes is :mod:`gan3d.parallel.launch`; ipyparallel engines are
:mod:`gan3d.parallel.cluster`.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Sequence

from .. import console
from ..exceptions import EnvironmentProblem
from . import devices, runtime

__all__ = [
    "World", "init", "init_jax", "world", "average", "allreduce", "broadcast", "broadcast_object",
    "allgather", "barrier", "mpi_rank", "mpi_barrier", "mpi_allreduce_sum", "versions",
    "gloo_rendezvous", "gloo_stop", "gloo_environment",
]


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place in the job."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def is_root(self) -> bool:
        return self.rank == 0


_WORLD: World | None = None
_JAX = False  # train.backend jax: the collectives below route to gan3d.parallel.jaxdist


def _hvd():
    import horovod.tensorflow as hvd  # DISTRIBUTED: the only place Horovod is imported

    return hvd


def _jaxdist():
    from . import jaxdist

    return jaxdist


def _mpi():
    from mpi4py import MPI  # DISTRIBUTED: the only place mpi4py is imported

    return MPI


def init(*, threads: int | None = None) -> World:
    """Start Horovod (idempotent) after applying the process defaults and thread settings.

    ``threads`` overrides the intra-op thread count (default: cores / local ranks).
    """
    global _WORLD
    runtime.apply_process_defaults()
    runtime.configure_tensorflow_threads(threads)
    try:
        hvd = _hvd()
    except ImportError as exc:  # pragma: no cover - the environment always has it
        raise EnvironmentProblem(f"Horovod is not importable ({exc}); run `gan3d doctor`") from None
    if _WORLD is None or not hvd.is_initialized():
        hvd.init()  # DISTRIBUTED: joins the MPI (or Gloo) world started by the launcher
        _WORLD = World(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
        console.set_rank(_WORLD.rank, _WORLD.size)  # rank 0 logs; the others only warnings
        devices.pin(_WORLD.local_rank, _WORLD.local_size)  # one GPU per rank (none: CPU)
    return _WORLD


def init_jax(*, threads: int | None = None) -> World:
    """Join the JAX backend's world instead of Horovod's (:mod:`gan3d.parallel.jaxdist`); the
    collectives of this module then run there."""
    global _WORLD, _JAX
    from . import jaxdist

    runtime.apply_process_defaults()
    runtime.configure_tensorflow_threads(threads)  # the input pipeline's tf.data threads
    _WORLD, _JAX = World(*jaxdist.init()), True  # DISTRIBUTED
    console.set_rank(_WORLD.rank, _WORLD.size)
    return _WORLD


def world() -> World:
    """The current world (size 1 before :func:`init`)."""
    return _WORLD or World()


def average(tensors: Sequence[Any], name: str | None = None) -> list[Any]:
    """Mean of each tensor over all ranks, in one grouped ring all-reduce (identity for size 1)."""
    if world().size == 1:
        return list(tensors)
    hvd = _hvd()
    return hvd.grouped_allreduce(list(tensors), op=hvd.Average, name=name)  # DISTRIBUTED


def allreduce(value: Any, op: str = "sum", name: str | None = None) -> Any:
    """Sum, mean, min or max of a tensor/number over all ranks."""
    if world().size == 1:
        return value
    if _JAX:
        return _jaxdist().allreduce(value, op)  # DISTRIBUTED
    hvd = _hvd()
    ops = {"sum": hvd.Sum, "mean": hvd.Average, "min": hvd.Min, "max": hvd.Max}
    return hvd.allreduce(value, op=ops[op], name=name)  # DISTRIBUTED


def broadcast(variables: Sequence[Any], root_rank: int = 0) -> None:
    """Overwrite Keras 3 / TF variables everywhere with ``root_rank``'s values."""
    if world().size == 1 or not variables:
        return
    if _JAX:
        values = _jaxdist().broadcast_arrays([v.numpy() for v in variables])  # DISTRIBUTED
        for v, value in zip(variables, values):
            v.assign(value)
        return
    hvd = _hvd()
    # Keras 3 variables wrap a tf.Variable in `.value`; Horovod needs the TF variable itself.
    tf_vars = [getattr(v, "value", v) for v in variables]
    hvd.broadcast_variables(tf_vars, root_rank=root_rank)  # DISTRIBUTED


def broadcast_object(obj: Any, root_rank: int = 0) -> Any:
    """Any picklable object from ``root_rank`` to all ranks."""
    if world().size == 1:
        return obj
    if _JAX:
        return _jaxdist().broadcast_object(obj)  # DISTRIBUTED
    return _hvd().broadcast_object(obj, root_rank=root_rank)  # DISTRIBUTED


def allgather(value: Any) -> Any:
    """Concatenate a tensor's first axis over ranks (rank order)."""
    if world().size == 1:
        return value
    return _hvd().allgather(value)  # DISTRIBUTED


def barrier() -> None:
    if world().size > 1 and _JAX:
        _jaxdist().barrier()  # DISTRIBUTED
    elif world().size > 1:
        _hvd().join()  # DISTRIBUTED


# ---------------------------------------------------------------------------------------------
# Horovod over Gloo without mpirun: one rank per emulated host (gan3d.parallel.netns)


def gloo_rendezvous(hosts: Sequence[str]) -> tuple[Any, int, list]:
    """Start Horovod's Gloo rendezvous server in this process for one rank on each of ``hosts``
    (as ``horovodrun --gloo`` does); returns ``(server, port, slots)``; :func:`gloo_stop` ends it."""
    from horovod.runner.common.util.hosts import (  # DISTRIBUTED: Horovod's own launcher parts
        get_host_assignments, parse_hosts)
    from horovod.runner.http.http_server import RendezvousServer  # DISTRIBUTED

    slots = get_host_assignments(parse_hosts(",".join(f"{h}:1" for h in hosts)), len(hosts))
    server = RendezvousServer()
    port = server.start()
    server.init(slots)
    return server, port, slots


def gloo_stop(server) -> None:
    """Stop a :func:`gloo_rendezvous` server and close its socket."""
    server.stop()
    server._httpd.server_close()  # Horovod's stop() shuts the loop down but leaves the socket


def gloo_environment(slot, address: str, port: int, iface: str) -> dict[str, str]:
    """The variables that make one process a Gloo rank of the job of :func:`gloo_rendezvous`."""
    return {"HOROVOD_HOSTNAME": slot.hostname, "HOROVOD_RANK": str(slot.rank),
            "HOROVOD_SIZE": str(slot.size), "HOROVOD_LOCAL_RANK": str(slot.local_rank),
            "HOROVOD_LOCAL_SIZE": str(slot.local_size), "HOROVOD_CROSS_RANK": str(slot.cross_rank),
            "HOROVOD_CROSS_SIZE": str(slot.cross_size), "HOROVOD_GLOO_RENDEZVOUS_ADDR": address,
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port), "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": iface}


# ---------------------------------------------------------------------------------------------
# Plain MPI, where Horovod has no equivalent


def mpi_rank() -> int:
    """This process's rank in MPI_COMM_WORLD (starts MPI if needed; no Horovod)."""
    return _mpi().COMM_WORLD.Get_rank()  # DISTRIBUTED


def mpi_size() -> int:
    """Ranks in MPI_COMM_WORLD (starts MPI if needed; no Horovod)."""
    return _mpi().COMM_WORLD.Get_size()  # DISTRIBUTED


def mpi_max(value: float) -> float:
    """The largest ``value`` over the ranks of MPI_COMM_WORLD (e.g. the slowest rank's time)."""
    MPI = _mpi()
    return MPI.COMM_WORLD.allreduce(value, op=MPI.MAX)  # DISTRIBUTED


def mpi_barrier() -> None:
    """MPI_Barrier on MPI_COMM_WORLD: every rank waits for all."""
    _mpi().COMM_WORLD.Barrier()  # DISTRIBUTED


def mpi_allreduce_sum(send, recv) -> None:
    """MPI_Allreduce (sum) of the NumPy buffer ``send`` into ``recv``: the MPI library alone,
    without Horovod's coordination (what benchmarks time it against)."""
    MPI = _mpi()
    MPI.COMM_WORLD.Allreduce(send, recv, op=MPI.SUM)  # DISTRIBUTED


# ---------------------------------------------------------------------------------------------
# What the environment's Horovod and mpi4py were built with (for `gan3d doctor`)


def versions() -> dict[str, dict]:
    """``{"horovod": {...}, "mpi4py": {...}}``: version and build of each, or ``error``.

    Does not start MPI (mpi4py is told not to initialise) and does not start Horovod.
    """
    return {"horovod": _horovod_build(), "mpi4py": _mpi4py_build()}


def _horovod_build() -> dict:
    try:
        hvd = _hvd()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"version": importlib.import_module("horovod").__version__,
            "tensorflow": True, "mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built()),
            "nccl": bool(hvd.nccl_built())}


def _mpi4py_build() -> dict:
    try:
        import mpi4py  # DISTRIBUTED: configured before MPI is loaded, so MPI does not start

        mpi4py.rc.initialize = False  # only ask for the library, do not start MPI
        mpi4py.rc.finalize = False
        MPI = _mpi()
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"version": mpi4py.__version__,
            "library": MPI.Get_library_version().strip().splitlines()[0]}
