"""Starting MPI jobs on this machine, and ending them fast when one rank fails.

* :func:`launch` - ``mpirun -np N`` with the package's settings (:mod:`gan3d.parallel.runtime`),
  output streamed, :class:`~gan3d.exceptions.RankFailed` naming the failing rank;
* :func:`guard` - runs a rank's work; on error it prints one marked line and ends the process at
  once, so that the other ranks are not left waiting in an all-reduce.

The same launched code runs unchanged under a cluster's own ``mpirun``, ``srun`` or ``horovodrun``;
the collectives themselves are :mod:`gan3d.parallel.distributed`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Sequence

from . import runtime
from ..exceptions import Gan3dError, RankFailed
from . import distributed

__all__ = ["launch", "guard", "in_mpi_job", "exit_on_termination", "restore_handlers"]


def in_mpi_job() -> bool:
    """True inside a process started by mpirun, horovodrun or srun: ``srun --mpi=pmix`` (Open MPI
    5) gives its tasks PMIx's variables alone, ``--mpi=pmi2`` PMI's."""
    return any(k in os.environ
               for k in ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMIX_RANK", "PMI_SIZE"))


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
    previous = exit_on_termination(f"stopping the {np} MPI ranks")
    try:
        proc.wait(timeout=timeout)
    except BaseException:  # a timeout, Ctrl-C, SIGTERM, a test's time limit: no rank may survive
        _kill_group(proc)
        reader.join(5)
        raise
    finally:
        restore_handlers(previous)
    reader.join(5)
    proc.stdout.close()
    output = "".join(lines)
    if proc.returncode != 0:
        rank, message = _failing_rank(output)
        raise RankFailed(rank, message or f"mpirun exited with status {proc.returncode}:\n"
                         + "".join(lines[-30:]))
    return subprocess.CompletedProcess(cmd, proc.returncode, output, "")


def exit_on_termination(doing: str | None = None) -> dict:
    """Until :func:`restore_handlers`, SIGTERM and SIGHUP (a batch system's stop, a closed
    terminal) raise ``SystemExit(128 + signal)`` so that the caller's cleanup runs: :func:`launch`
    stops the ranks (mpirun runs in a session of its own and would not hear a signal sent to this
    process alone), an emulated network is torn down. ``doing`` is said on stderr when one comes.
    Returns the handlers to put back; nothing is changed outside the main thread (where Python
    cannot set handlers), and a signal set to be ignored (``nohup``'s SIGHUP) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        if doing:
            print(f"gan3d: {signal.Signals(signum).name} received: {doing}", file=sys.stderr,
                  flush=True)
        raise SystemExit(128 + signum)

    return {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(signum) not in (signal.SIG_IGN, None)}


def restore_handlers(previous: dict) -> None:
    """Put back the handlers :func:`exit_on_termination` replaced."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    previous.clear()


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


# Open MPI's (PRTE's) report of a rank that a signal ended (killed, out of memory, segfault).
_SIGNALLED = re.compile(r"process rank (\d+) with PID (\d+) on node (\S+) exited on\s+signal "
                        r"(\d+) \(([^)]+)\)")


def _failing_rank(output: str) -> tuple[int, str]:
    """The rank that failed first and why: its own marked report (:func:`guard`), else Open
    MPI's report of a rank ended by a signal; (-1, "") when neither is there."""
    for line in output.splitlines():
        if line.startswith(_MARK) and "] FAILED: " in line:
            head, _, message = line.partition("] FAILED: ")
            try:
                return int(head[len(_MARK):]), message.strip().replace("\\n", "\n")
            except ValueError:
                continue
    m = _SIGNALLED.search(output)
    if m:
        rank, pid, node, signum, name = m.groups()
        return int(rank), (f"the process (PID {pid} on {node}) was ended by signal {signum} "
                           f"({name}): killed, out of memory, or crashed; the other ranks were "
                           "stopped")
    return -1, ""


def guard(fn, *args, **kwargs):
    """Run ``fn`` in a rank; on error print a marked one-line report and end this process at once
    (with the traceback above it only for an error that is not one of gan3d's named errors: a
    named error already says what to fix).

    Exiting with ``os._exit`` skips Horovod's shutdown, which would otherwise wait for the other
    ranks in a collective that will never complete; mpirun then stops the remaining ranks.
    """
    try:
        return fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - any error must end the whole job fast
        rank = _rank_from_env()
        message = f"{type(exc).__name__}: {exc}".replace("\n", "\\n")
        if not isinstance(exc, Gan3dError):
            traceback.print_exc()
        sys.stderr.write(f"{_MARK}{rank}] FAILED: {message}\n")
        sys.stderr.flush()
        sys.stdout.flush()
        time.sleep(0.2)
        os._exit(1)


def _rank_from_env() -> int:
    for key in ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMIX_RANK", "PMI_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return distributed.world().rank
