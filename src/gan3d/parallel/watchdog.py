"""A watchdog that ends an engine cluster when the process that started it dies.

A notebook kernel that is killed (out of memory, "kill kernel", a crash) cannot run its clean-up,
and ipyparallel's controller and ``mpiexec`` would keep its engines alive, each holding a core.
:func:`gan3d.parallel.cluster.start_engines` therefore starts this tiny process beside them::

    python -m gan3d.parallel.watchdog OWNER_PID PID [PID ...] [--remove FILE ...]

It checks twice a second whether ``OWNER_PID`` still runs. When it does not, it ends every
``PID`` and all their descendants (SIGTERM, then SIGKILL after 3 s), removes each ``FILE`` (the
cluster file ipyparallel keeps in the profile's ``security/`` folder, which only the dead owner
would have removed) and exits; it also exits when all of them have ended by themselves. It
imports nothing heavy (no TensorFlow, no MPI).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import psutil

__all__ = ["main", "end_trees"]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def end_trees(pids: list[int], grace: float = 3.0) -> None:
    """SIGTERM every process of ``pids`` and their descendants; SIGKILL what is left after
    ``grace`` seconds."""
    procs = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--remove") if "--remove" in args else len(args)
    numbers, files = [int(a) for a in args[:cut]], args[cut + 1:]
    owner, pids = numbers[0], numbers[1:]
    while any(_alive(p) for p in pids):
        if not _alive(owner):
            end_trees(pids)
            for path in files:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
            return 0
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
