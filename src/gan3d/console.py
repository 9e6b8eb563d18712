"""What the package tells its user: log messages in one format, tqdm progress bars, and tables.

Every module logs through ``console.get_logger(__name__)``; the first call gives the ``gan3d``
logger one handler (unless the application configured logging itself), so that messages look the
same from the command line, a notebook, an MPI rank and an ipyparallel engine::

    12:03:07 gan3d.gan.training: resuming after epoch 2 from results/train/checkpoints/...
    12:03:09 gan3d.gan.training [rank 1]: WARNING ...

In a job of several ranks only rank 0 logs information; the others log warnings and errors,
marked with their rank (:func:`set_rank`, called by :func:`gan3d.parallel.distributed.init`).
Long work shows a tqdm bar (:func:`progress`), on rank 0 only. ``GAN3D_LOG_LEVEL`` (e.g.
``DEBUG``) sets the level, ``GAN3D_PROGRESS=0`` turns the bars off.

A command stopped by SIGTERM or SIGHUP ends as on Ctrl-C (:func:`stop_on_signals`); inside
:func:`signals_at_checkpoints` the signal waits for the loop's next :func:`checkpoint`, so that
library code (TensorFlow tracing a function, HDF5 writing a chunk) is never interrupted half way.

Every Markdown table the package shows (the notebooks' tables, the claims ledger, the figure index)
is made by :func:`table`, on the ``tabulate`` library.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import os
import re
import sys
from typing import Iterable, Sequence

from tqdm import tqdm  # text bars: the same in a terminal, a notebook and an engine

__all__ = ["get_logger", "set_rank", "progress", "table", "FORMAT", "Stopped", "stop_on_signals",
           "signals_at_checkpoints", "checkpoint"]

FORMAT = "%(asctime)s %(name)s%(rank)s: %(message)s"
_DATE = "%H:%M:%S"
_RANK = {"rank": 0, "size": 1}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the command unwinds as on Ctrl-C (its writers remove what they were
    writing) and exits with 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_held: list[int] | None = None  # signals that came inside signals_at_checkpoints()


def _on_signal(signum, frame) -> None:
    if _held is not None:
        _held.append(signum)
        return
    raise Stopped(signum)


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP end this process's command as Ctrl-C does (:class:`Stopped`), so that
    what it was writing is removed rather than left as a temporary file. A signal the process was
    started to ignore (``nohup``'s SIGHUP) stays ignored. From the main thread only."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, _on_signal)


@contextlib.contextmanager
def signals_at_checkpoints():
    """Inside the block, SIGTERM and SIGHUP raise :class:`Stopped` only at :func:`checkpoint`
    (or when the block ends), not wherever the interpreter happens to be. Raised inside
    TensorFlow's code, the exception was seen lost (``gan3d simulate`` ran on as if no signal
    came) and once left the interpreter broken (``SystemError``)."""
    global _held
    outer, _held = _held, []
    try:
        yield
    finally:
        came, _held = _held, outer
    if came:
        raise Stopped(came[0])


def checkpoint() -> None:
    """Raise :class:`Stopped` if SIGTERM or SIGHUP came since the block began: a loop calls this
    where stopping is safe (between batches)."""
    if _held:
        raise Stopped(_held[0])


class _CurrentStderr(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is at the time of the message (Jupyter,
    ipyparallel and pytest replace it), not the one that existed when it was made."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; the property always wins
        pass


class _RankFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = f" [rank {_RANK['rank']}]" if _RANK["size"] > 1 and _RANK["rank"] else ""
        return True


def _configure() -> logging.Logger:
    root = logging.getLogger("gan3d")
    if not getattr(root, "_gan3d_configured", False):
        root._gan3d_configured = True  # type: ignore[attr-defined]
        root.setLevel(os.environ.get("GAN3D_LOG_LEVEL", "INFO").upper())
        if not logging.getLogger().handlers:  # the application has not configured logging
            handler = _CurrentStderr()
            handler.setFormatter(logging.Formatter(FORMAT, _DATE))
            handler.addFilter(_RankFilter())
            root.addHandler(handler)
            root.propagate = False
        else:
            root.addFilter(_RankFilter())
    return root


def get_logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (a ``gan3d.*`` dotted name), with the package's format."""
    _configure()
    return logging.getLogger(name)


def set_rank(rank: int, size: int) -> None:
    """This process is rank ``rank`` of ``size``: other ranks than 0 log warnings and errors only."""
    _RANK.update(rank=rank, size=size)
    root = _configure()
    if rank != 0:
        root.setLevel(max(root.level, logging.WARNING))


def progress(iterable=None, *, total: float | None = None, desc: str | None = None,
             unit: str = "it", disable: bool | None = None, **kwargs) -> tqdm:
    """A tqdm bar in the package's style (rank 0 only, off with ``GAN3D_PROGRESS=0``).

    Use as ``for x in progress(items, desc="bins")`` or ``with progress(total=n) as bar``.
    """
    off = _RANK["rank"] != 0 or os.environ.get("GAN3D_PROGRESS", "1") == "0"
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr,
                disable=off if disable is None else (disable or off), dynamic_ncols=True,
                **kwargs)


def _cell(value, fmt: str, missing: str) -> str:
    """One cell's text: a string as it is, a float in ``fmt``, None as ``missing``; a ``|`` not
    escaped yet escaped, line breaks as spaces (a cell of a Markdown table is one line)."""
    if value is None:
        text = missing
    elif isinstance(value, str):
        text = value
    elif isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        text = format(value, fmt)  # float and NumPy's floating types
    else:
        text = str(value)
    return re.sub(r"(?<!\\)\|", r"\\|", text).replace("\n", " ")


def table(rows: Iterable[Sequence], headers: Sequence[str], *,
          floatfmt: str | Sequence[str] = "g", missing: str = "") -> str:
    """A GitHub-flavoured Markdown table of ``rows`` under ``headers`` (``tabulate``'s "github").

    A string cell is shown as it is (tabulate would read "0.10" as a number and print "0.1"), a
    float cell in ``floatfmt`` (one format for every column, or one per column), None as
    ``missing``. Columns are padded to their widest cell; a row shorter than the headers is
    filled with empty cells.
    """
    from tabulate import tabulate  # only where a table is made: the CLI starts without it

    n = len(headers)
    fmts = [floatfmt] * n if isinstance(floatfmt, str) else list(floatfmt)
    body = []
    for row in rows:
        cells = list(row)
        if len(cells) > n:
            raise ValueError(f"a row of {len(cells)} cells under {n} headers: {cells!r}")
        cells += [""] * (n - len(cells))
        body.append([_cell(v, f, missing) for v, f in zip(cells, fmts)])
    return tabulate(body, headers=[_cell(h, "g", "") for h in headers], tablefmt="github",
                    disable_numparse=True)
