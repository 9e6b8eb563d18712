"""Horovod on ipyparallel MPI engines, from a notebook, that always cleans up.

    from gan3d.parallel.cluster import mpi_engines, train_on_engines

    with mpi_engines(2) as cluster:                  # 2 engines = 2 ranks of one MPI job
        ranks = cluster.run(some_function, arg)      # runs on every rank; results in rank order

    result = train_on_engines(cfg, workers=2)        # rank 0's TrainResult as a dict
                                                     # (train.backend horovod or jax)

    engines = start_engines(2)                       # a lesson: the cluster lives across cells,
    %%px                                             # which run on every engine with %%px,
    ...                                              # until engines.stop() (or the kernel ends)

Every engine is one MPI rank started by ``mpiexec``; ``hvd.init()`` inside a function joins that
world. Every collective must run on all ranks, so :meth:`EngineCluster.run` always targets all of
them. Rank 0's output is streamed while the function runs. If one rank raises, the others would
wait forever in their next all-reduce: ``run`` notices the failed rank at once, raises
:class:`~gan3d.exceptions.RankFailed` with that rank's error, and leaving the ``with`` block stops
the whole cluster. Interrupting the cell (KeyboardInterrupt) does the same. No engine, controller or
``mpiexec`` process outlives the block.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

import psutil

from .. import console
from ..config import from_dict, to_dict
from ..exceptions import EnvironmentProblem, RankFailed
from . import distributed, runtime

__all__ = ["EngineCluster", "start_engines", "mpi_engines", "train_on_engines"]

log = console.get_logger(__name__)


def _prepend_sys_path(path: str) -> None:
    """Runs on an engine."""
    if path not in sys.path:
        sys.path.insert(0, path)


class EngineCluster:
    """A running ipyparallel cluster whose engines form one MPI job (see :func:`mpi_engines`)."""

    def __init__(self, client, n: int, timeout: float = 120.0):
        self.client = client
        self.n = n
        ids = sorted(client.ids)
        ranks = client[ids].apply_async(distributed.mpi_rank).get(timeout=timeout)
        pids = client[ids].apply_async(os.getpid).get(timeout=timeout)
        self.engine_of_rank = {r: e for r, e in zip(ranks, ids)}
        self.pid_of_rank = dict(zip(ranks, pids))
        if sorted(self.engine_of_rank) != list(range(n)):
            raise EnvironmentProblem(f"engines report MPI ranks {sorted(ranks)}, expected 0..{n - 1}: "
                                     "they were not started as one MPI job")

    def stop(self) -> None:
        """Stop the engines, the controller and whatever they started (idempotent)."""
        stopper, self._stopper = getattr(self, "_stopper", None), None
        if stopper is not None:
            atexit.unregister(self.stop)
            stopper()

    def __enter__(self) -> "EngineCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def dead_ranks(self) -> list[int]:
        """Ranks whose engine process has ended (killed, out of memory, crashed): a liveness
        check that does not wait for ipyparallel's heartbeat to notice."""
        dead = []
        for rank, pid in self.pid_of_rank.items():
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    dead.append(rank)
            except psutil.NoSuchProcess:
                dead.append(rank)
        return dead

    def add_import_path(self, path: str) -> None:
        """Make modules in ``path`` importable on every engine (e.g. helpers next to a notebook)."""
        self.client[:].apply_sync(_prepend_sys_path, str(path))

    def run(self, fn: Callable, *args: Any, stream: bool = True, poll: float = 0.2,
            timeout: float | None = None, **kwargs: Any) -> list[Any]:
        """Call ``fn(*args, **kwargs)`` on every rank; return the results in rank order.

        Rank 0's stdout and stderr (its log and progress bar) are streamed while it runs. Every
        ``poll`` seconds each rank is checked: one that raised, or whose engine process ended,
        raises :class:`RankFailed` at once (the others would wait for it forever in their next
        all-reduce); ``timeout`` (s) bounds the whole call when given.
        """
        pending = {r: self.client[e].apply_async(fn, *args, **kwargs)
                   for r, e in self.engine_of_rank.items()}
        shown = {"stdout": 0, "stderr": 0}
        start = time.monotonic()
        while True:
            if stream:
                _stream(pending[0], shown)
            for rank, ar in pending.items():
                if ar.ready() and not ar.successful():
                    if stream:
                        _stream(pending[0], shown)
                    raise RankFailed(rank, _remote_error(ar))
            if all(ar.ready() for ar in pending.values()):
                break
            dead = self.dead_ranks()
            if dead:
                raise RankFailed(dead[0], f"its engine process (PID {self.pid_of_rank[dead[0]]}) "
                                 f"ended while running {getattr(fn, '__name__', fn)}: killed, out "
                                 "of memory or crashed; the cluster is stopped")
            if timeout is not None and time.monotonic() - start > timeout:
                raise TimeoutError(f"ranks still running after {timeout:.0f} s")
            time.sleep(poll)
        if stream:
            _stream(pending[0], shown)
        return [pending[r].get() for r in sorted(pending)]


def _stream(ar, shown: dict[str, int]) -> None:
    """Write what the engine of ``ar`` printed since last time to our stdout and stderr."""
    for name in ("stdout", "stderr"):
        text = getattr(ar, name) or ""
        if isinstance(text, list):  # older ipyparallel: one entry per engine
            text = "".join(text)
        if len(text) > shown[name]:
            out = getattr(sys, name)
            out.write(text[shown[name]:])
            out.flush()
        shown[name] = len(text)


def _remote_error(ar) -> str:
    try:
        ar.get(0)
    except Exception as exc:  # noqa: BLE001 - RemoteError or engine death
        ename = getattr(exc, "ename", type(exc).__name__)
        evalue = getattr(exc, "evalue", str(exc))
        return f"{ename}: {evalue}"
    return "unknown error"


def _own_processes():
    return {p.pid: p for p in psutil.Process().children(recursive=True)}


def start_engines(n: int, *, timeout: float = 180.0, magics: bool = True) -> EngineCluster:
    """Start an ipyparallel controller and ``n`` engines as one MPI job; return it running.

    Stop it with :meth:`EngineCluster.stop` (or use :func:`mpi_engines`, which always does); it
    is also stopped when the Python process exits, so a notebook whose kernel is shut down leaves
    no engine behind. With ``magics`` (in IPython), ``%px`` / ``%%px`` / ``%autopx`` run code on
    every engine. The package's Open MPI settings apply (root, yielding); binding is left to the
    OS because ipyparallel starts one engine per slot and more engines than cores are allowed.
    """
    import ipyparallel as ipp

    if n < 1:
        raise ValueError("need at least one engine")
    runtime.apply_process_defaults()
    os.environ.setdefault("IPP_NONINTERACTIVE", "1")
    before = set(_own_processes())
    # The hub counts an engine in only at its next heartbeat ping: at ipyparallel's default of
    # one ping every 3 s, 2 engines took 6.0 s to start here, 2.5 s at one every 0.5 s. An engine
    # is still dropped after 30 s without an answer (60 misses, the default's 10 x 3 s); a dead
    # rank is noticed sooner anyway, by its process (EngineCluster.dead_ranks).
    cluster = ipp.Cluster(engines="mpi", n=n, log_level=logging.ERROR,
                          controller_args=["--log-level=ERROR", "--HeartMonitor.period=500",
                                           "--HeartMonitor.max_heartmonitor_misses=60"])
    mpiexec = str(runtime.env_bin() / "mpiexec")
    cluster.config.MPILauncher.mpi_cmd = [mpiexec]
    extra = ["--map-by", ":OVERSUBSCRIBE"] if n > runtime.cpu_count() else []
    cluster.config.MPILauncher.mpi_args = ["--bind-to", "none", *extra]
    cluster.config.MPIEngineSetLauncher.engine_args = ["--log-level=ERROR"]
    cluster.engine_timeout = timeout
    client = None
    try:
        log.info("starting %d MPI engine(s)", n)
        client = cluster.start_and_connect_sync(n=n)
        engines = EngineCluster(client, n)
    except BaseException:
        _shutdown(cluster, client, before)
        raise
    started = [pid for pid in _own_processes() if pid not in before]
    files = ["--remove", cluster.cluster_file] if cluster.cluster_file else []
    watchdog = subprocess.Popen(  # ends the cluster if this process dies without cleaning up
        [sys.executable, "-m", "gan3d.parallel.watchdog", str(os.getpid()), *map(str, started),
         *files],
        env=runtime.mpi_environment(), start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    engines._stopper = lambda: _shutdown(cluster, client, before, watchdog)
    atexit.register(engines.stop)
    if magics and _in_ipython():
        view = client[:]
        view.block = True  # a %%px cell ends when every engine has run it, its output shown
        view.activate()  # %px, %%px, %autopx on every engine
    return engines


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with Jupyter, always installed here
        return False
    return get_ipython() is not None


@contextlib.contextmanager
def mpi_engines(n: int, *, timeout: float = 180.0) -> Iterator[EngineCluster]:
    """:func:`start_engines` as a context manager: the cluster is stopped on leaving the block,
    also when a rank failed or the cell was interrupted."""
    engines = start_engines(n, timeout=timeout, magics=False)
    try:
        yield engines
    finally:
        engines.stop()


def _shutdown(cluster, client, before: set[int], watchdog=None) -> None:
    """Stop engines and controller; kill whatever the cluster started and is still alive."""
    if watchdog is not None:
        watchdog.kill()
        watchdog.wait()
    with contextlib.suppress(Exception):
        if client is not None:
            client.close()
    with contextlib.suppress(Exception):
        cluster.stop_cluster_sync()
    leftovers = [p for pid, p in _own_processes().items() if pid not in before]
    if leftovers:
        log.info("stopping %d process(es) the cluster left: %s", len(leftovers),
                 ", ".join(str(p.pid) for p in leftovers))
    for p in leftovers:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(leftovers, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


def _train_rank(cfg_dict: dict, resume: bool, coordinator: str | None = None,
                force: bool = False) -> dict:
    """Runs on each engine: one rank of the training, on the configured backend."""
    cfg = from_dict(cfg_dict)
    if cfg.train.backend == "jax":
        from .jaxdist import COORDINATOR_ENV

        if coordinator:  # process 0's address, chosen by the kernel for this job
            os.environ[COORDINATOR_ENV] = coordinator
    # One loop for both backends: the JAX one sets KERAS_BACKEND=jax before keras is imported;
    # TensorFlow or JAX is imported on the engines only, not in the kernel.
    from ..gan.training import train
    return train(cfg, resume=resume, force=force).to_dict()


def train_on_engines(cfg, workers: int | None = None, *, resume: bool = False,
                     force: bool = False) -> dict:
    """Train on ``workers`` MPI engines (default ``cfg.train.workers``); rank 0's result dict.
    ``resume`` and ``force`` as :func:`gan3d.gan.training.train`'s (a folder holding another run
    is refused unless resumed or replaced).

    ``train.backend`` chooses Horovod or JAX; with JAX the engines of this fresh cluster join one
    ``jax.distributed`` world whose coordinator is a free port on this machine.
    """
    workers = workers or cfg.train.workers
    cfg = cfg.replace(**{"train.workers": workers})
    coordinator = None
    if cfg.train.backend == "jax":
        from .jaxdist import free_coordinator

        coordinator = free_coordinator()
    with mpi_engines(workers) as cluster:
        results = cluster.run(_train_rank, to_dict(cfg), resume, coordinator, force)
    return results[0]
