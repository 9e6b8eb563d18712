"""Every Horovod and MPI call of gan3d lives here; world size 1 is the same code path.

Inside a training process::

    world = distributed.init()                 # hvd.init() after the process defaults
    grads = distributed.average(grads)         # ring all-reduce, mean over ranks
    distributed.broadcast(variables)           # rank 0's values everywhere
    if world.is_root: ...                      # logging and checkpoints

Launchers, from outside the training processes:

* :func:`launch` - ``mpirun -np N`` with the package's settings, failing fast when a rank fails;
* :func:`mpi_engines` - a context manager that starts an ipyparallel cluster of N MPI engines and
  always shuts it down (see :mod:`gan3d.engines`).

Horovod with Keras 3: ``hvd.DistributedGradientTape`` and ``hvd.DistributedOptimizer`` do not work
with Keras 3 variables (and with ``fit`` would silently not average), so the averaging is explicit.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from . import runtime
from .exceptions import EnvironmentProblem, RankFailed

__all__ = [
    "World",
    "init",
    "world",
    "average",
    "allreduce",
    "broadcast",
    "broadcast_object",
    "allgather",
    "barrier",
    "launch",
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


def _hvd():
    import horovod.tensorflow as hvd

    return hvd


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
    hvd = _hvd()
    ops = {"sum": hvd.Sum, "mean": hvd.Average, "min": hvd.Min, "max": hvd.Max}
    return hvd.allreduce(value, op=ops[op], name=name)  # DISTRIBUTED


def broadcast(variables: Sequence[Any], root_rank: int = 0) -> None:
    """Overwrite Keras 3 / TF variables everywhere with ``root_rank``'s values."""
    if world().size == 1 or not variables:
        return
    hvd = _hvd()
    # Keras 3 variables wrap a tf.Variable in `.value`; Horovod needs the TF variable itself.
    tf_vars = [getattr(v, "value", v) for v in variables]
    hvd.broadcast_variables(tf_vars, root_rank=root_rank)  # DISTRIBUTED


def broadcast_object(obj: Any, root_rank: int = 0) -> Any:
    """Any picklable object from ``root_rank`` to all ranks."""
    if world().size == 1:
        return obj
    return _hvd().broadcast_object(obj, root_rank=root_rank)  # DISTRIBUTED


def allgather(value: Any) -> Any:
    """Concatenate a tensor's first axis over ranks (rank order)."""
    if world().size == 1:
        return value
    return _hvd().allgather(value)  # DISTRIBUTED


def barrier() -> None:
    if world().size > 1:
        _hvd().join()  # DISTRIBUTED


# ---------------------------------------------------------------------------------------------
# Launching with mpirun


def launch(np: int, argv: Sequence[str], *, timeout: float | None = None,
           stream: bool = True, extra: Sequence[str] | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``np`` MPI ranks on this machine; raise :class:`RankFailed` if any fails.

    Output of all ranks is streamed (Open MPI tags nothing; rank 0 alone logs in gan3d). When a
    rank exits with an error, Open MPI stops the others; the error text of the failing rank is
    taken from its stderr (lines ``[gan3d rank N] ...`` written by :func:`guard`).
    """
    cmd = runtime.mpirun_command(np, list(argv), extra=list(extra or []))
    env = runtime.mpi_environment()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, start_new_session=True)
    lines: list[str] = []

    def pump():
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if stream:
                sys.stdout.write(line)
                sys.stdout.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        _kill_group(proc)
        reader.join(5)
        raise
    reader.join(5)
    proc.stdout.close()
    output = "".join(lines)
    if proc.returncode != 0:
        rank, message = _failing_rank(output)
        raise RankFailed(rank, message or f"mpirun exited with status {proc.returncode}:\n"
                         + "".join(lines[-30:]))
    return subprocess.CompletedProcess(cmd, proc.returncode, output, "")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


_MARK = "[gan3d rank "


def _failing_rank(output: str) -> tuple[int, str]:
    for line in output.splitlines():
        if line.startswith(_MARK) and "] FAILED: " in line:
            head, _, message = line.partition("] FAILED: ")
            try:
                return int(head[len(_MARK):]), message.strip().replace("\\n", "\n")
            except ValueError:
                continue
    return -1, ""


def guard(fn, *args, **kwargs):
    """Run ``fn`` in a rank; on error print a marked one-line report and end this process at once.

    Exiting with ``os._exit`` skips Horovod's shutdown, which would otherwise wait for the other
    ranks in a collective that will never complete; mpirun then stops the remaining ranks.
    """
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - any error must end the whole job fast
        rank = _rank_from_env()
        message = f"{type(exc).__name__}: {exc}".replace("\n", "\\n")
        import traceback

        traceback.print_exc()
        sys.stderr.write(f"{_MARK}{rank}] FAILED: {message}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        time.sleep(0.2)
        os._exit(1)


def _rank_from_env() -> int:
    for key in ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return world().rank
