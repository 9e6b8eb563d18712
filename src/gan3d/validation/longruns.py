"""The long runs' sessions as ``studies/README.md`` records them, numbers from the checkpoints.

The long 1- and 2-worker runs go on over many sessions; after each, their newest checkpoints are
committed in ``studies/long-*-bf16/`` and ``studies/README.md`` says how far they are. Its
sessions table (between :data:`SESSIONS_BEGIN` and :data:`SESSIONS_END`) has one row per run and
session, whose first columns (session, date, run, epochs ``A-B``, note) are the record of who
trained what when - the history holds no dates - and whose numbers (median showers/s over epochs
``A+1`` to ``B`` and their range) are computed from the history.

:func:`runs` reads each run's history and fork from its newest committed checkpoint;
:func:`sessions_block` recomputes a sessions table's numbers from them and refuses rows whose
epochs do not chain from the fork to the newest checkpoint; :func:`sessions_table` is the page's
table so rendered (notebook 04 shows it beside the long runs' learning curves). The repository
renders and checks the page's blocks with ``python tools/pages longruns``.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import NamedTuple

from ..exceptions import PageBlockError, StudyFileError
from ..io import repo_root

__all__ = ["RUNS", "BUDGET", "SESSIONS_BEGIN", "SESSIONS_END", "Run", "runs", "sessions_block",
           "sessions_table", "last_session_epoch_s"]

RUNS = {"1 worker": "studies/long-1w-bf16", "2 workers": "studies/long-2w-bf16"}
BUDGET = 227_200  # showers each run goes to: 201,600 at lr 1e-3 (x 2), then 25,600 at a tenth
SESSIONS_BEGIN, SESSIONS_END = "<!-- long-runs:sessions -->", "<!-- /long-runs:sessions -->"
SESSIONS_HEAD = ("| session | date | run | epochs | median showers/s | range per epoch | note |\n"
                 "|---|---|---|---|---|---|---|")
_ROW = re.compile(r"^\|\s*(?P<session>[^|]+?)\s*\|\s*(?P<date>[^|]+?)\s*\|\s*(?P<run>[^|]+?)\s*"
                  r"\|\s*(?P<first>\d+)\s*-\s*(?P<last>\d+)\s*\|[^|]*\|[^|]*\|\s*(?P<note>[^|]*?)"
                  r"\s*\|\s*$")


class Run(NamedTuple):
    """A long run as its newest committed checkpoint records it."""

    history: list[dict]  # one row per epoch, its parent's epochs first
    fork: int  # the learning curve's epoch it was first forked from (its own epochs come after;
    # a later fork of the run itself, e.g. to lower its learning rate, does not move it)


def runs(root: Path) -> dict[str, Run]:
    """Each run's history and fork epoch, read from its newest committed checkpoint."""
    from .study import checkpoint_record, newest_checkpoint

    out = {}
    for run, folder in RUNS.items():
        found = newest_checkpoint(root / folder)
        if found is None:
            raise StudyFileError(f"{root / folder} holds no epoch-*.npz: the long run's newest "
                                 "checkpoint must be committed there (studies/README.md says how)")
        record = checkpoint_record(found)
        fork = record["forks"][0]["epoch"] if record["forks"] else None
        if fork is None:
            raise StudyFileError(f"{found} records no fork: a long run is forked from the "
                                 "learning curve's checkpoint (gan3d train --fork-from); commit "
                                 "the long run's own checkpoint there")
        out[run] = Run(record["history"], int(fork))
    return out


def _epochs(history: list[dict], first: int, last: int) -> list[dict]:
    return [r for r in history if first < r["epoch"] <= last]


def _session_row(m: re.Match, history: list[dict]) -> str:
    first, last = int(m["first"]), int(m["last"])
    rows = _epochs(history, first, last)
    if len(rows) != last - first:
        raise StudyFileError(f"the sessions table's row '{m['run']}, epochs {first}-{last}' "
                             f"asks for epochs the checkpoint's history does not hold (it ends "
                             f"at epoch {history[-1]['epoch']}): fix the row")
    rates = [r["showers_per_s"] for r in rows]
    return (f"| {m['session']} | {m['date']} | {m['run']} | {first}-{last} | "
            f"{statistics.median(rates):.1f} | {min(rates):.1f}-{max(rates):.1f} |"
            + (f" {m['note']} |" if m["note"] else " |"))


def sessions_block(block: str, found: dict[str, Run]) -> str:
    """The sessions table with its numbers recomputed from the runs' histories; its rows must
    chain each run's epochs from its fork to its newest checkpoint's."""
    hist = {run: r.history for run, r in found.items()}
    rows, reached = [], {run: r.fork for run, r in found.items()}
    for line in block.strip().splitlines()[2:]:
        m = _ROW.match(line)
        if not m or m["run"] not in hist:
            raise StudyFileError(f"not a row of the long runs' sessions table: {line!r} (session "
                                 f"| date | run, one of {sorted(hist)} | epochs A-B | ... | note)")
        if int(m["first"]) != reached[m["run"]]:
            raise StudyFileError(f"the sessions table's row {line!r} starts at epoch "
                                 f"{m['first']}, but the run's previous row ended at "
                                 f"{reached[m['run']]}: the rows must chain")
        reached[m["run"]] = int(m["last"])
        rows.append(_session_row(m, hist[m["run"]]))
    for run, history in hist.items():
        if reached[run] != history[-1]["epoch"]:
            raise StudyFileError(f"the sessions table takes the {run} run to epoch {reached[run]}"
                                 f", but its committed checkpoint is at epoch "
                                 f"{history[-1]['epoch']}: add a row for the session that "
                                 "trained it")
    return "\n".join([SESSIONS_HEAD, *rows])


def sessions_table(root: str | Path | None = None) -> str:
    """The sessions table of ``studies/README.md`` under ``root``, its numbers rendered from the
    committed checkpoints (notebook 04 shows it beside the long runs' learning curves)."""
    root = Path(root) if root else repo_root()
    page = root / "studies" / "README.md"
    text = page.read_text()
    if (text.count(SESSIONS_BEGIN) != 1 or text.count(SESSIONS_END) != 1
            or text.index(SESSIONS_BEGIN) > text.index(SESSIONS_END)):
        raise PageBlockError(f"{page} needs one {SESSIONS_BEGIN} ... {SESSIONS_END} block (found "
                             f"{text.count(SESSIONS_BEGIN)} begin and {text.count(SESSIONS_END)} "
                             "end markers): restore them around the block")
    block = text[text.index(SESSIONS_BEGIN) + len(SESSIONS_BEGIN):text.index(SESSIONS_END)]
    return sessions_block(block, runs(root))


def last_session_epoch_s(block: str, run: str, history: list[dict]) -> float:
    """The median time of an epoch (training, test loss and monitors) in the run's last session
    of the sessions table ``block`` (one :func:`sessions_block` rendered, so every row parses)."""
    last = [m for m in map(_ROW.match, block.strip().splitlines()[2:]) if m and m["run"] == run]
    rows = _epochs(history, int(last[-1]["first"]), int(last[-1]["last"])) if last else history
    return statistics.median(r["time_epoch_s"] for r in rows)
