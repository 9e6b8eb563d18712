"""The long runs' progress in ``studies/README.md``, rendered from their committed checkpoints.

Two marked blocks of the page are not typed but rendered from the checkpoints' histories (every
epoch's rate, time and physics monitors):

* the sessions table (between :data:`SESSIONS_BEGIN` and its end
  marker): one row per run and session, its numbers computed by
  :func:`sessions_block`;
* the standing table (between :data:`STANDING_BEGIN` and :data:`STANDING_END`): per run its
  newest epoch and showers, its own hours of training since the fork, the hours to
  :data:`~gan3d.validation.longruns.BUDGET` at its last session's median epoch time, the targets
  its monitors met over the last :data:`LAST` epochs and :mod:`gan3d.validation.trend`'s
  estimates (a planning number, labelled so).

:func:`check` lists what differs between a page and its checkpoints (a number edited by hand, a
checkpoint that moved on without a row for its session, rows whose epochs do not chain from the
fork to the newest checkpoint); :func:`render` rewrites the blocks, atomically::

    python tools/pages longruns                   # check studies/README.md; exit 1 if stale
    python tools/pages longruns --write           # rewrite the numbers
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

from gan3d.exceptions import PageBlockError, StudyFileError
from gan3d.io import repo_root
from gan3d.validation import trend
from gan3d.validation.longruns import BUDGET, RUNS
from gan3d.validation.study import checkpoint_record, newest_checkpoint
from pages import blocks

__all__ = ["SESSIONS_BEGIN", "SESSIONS_END", "STANDING_BEGIN", "STANDING_END", "MARKERS", "LAST",
           "Run", "runs", "sessions_block", "sessions_table", "last_session_epoch_s",
           "standing_block", "rendered", "check", "render", "main"]

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
    committed checkpoints."""
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


LAST = 5  # epochs over which the monitors' targets met are quoted
STANDING_BEGIN, STANDING_END = "<!-- long-runs:standing -->", "<!-- /long-runs:standing -->"
MARKERS = {"sessions": (SESSIONS_BEGIN, SESSIONS_END), "standing": (STANDING_BEGIN, STANDING_END)}


def _rounded(text: str) -> str:
    """Every number of ``text`` with thousands separators to 2 significant digits: an
    extrapolation's estimate is not known to the shower."""
    def two(m: re.Match) -> str:
        x = int(m[0].replace(",", ""))
        return f"{round(x, 2 - len(str(x))):,}"
    return re.sub(r"\d{1,3}(?:,\d{3})+", two, text)


def standing_block(found: dict[str, Run], sessions: str) -> str:
    """Where each run stands: epoch, showers, own hours, hours to the budget, the monitors'
    targets met over the last epochs and the trend's estimates."""
    lines = ["| run | epoch | showers | own hours since the fork | hours to "
             f"{BUDGET:,} at the last session's median epoch | targets met by the monitors, "
             f"last {LAST} epochs | showers to {trend.GOAL_TARGETS} targets, estimated [90 %] | "
             "showers to the resolution goal, estimated [90 %] |", "|---" * 8 + "|"]
    for run, (history, fork) in found.items():
        now = history[-1]
        own = sum(r["time_epoch_s"] for r in history if r["epoch"] > fork) / 3600
        per_epoch = now["showers_seen"] - history[-2]["showers_seen"]  # the run's own epochs
        left = max(BUDGET - now["showers_seen"], 0) / per_epoch
        hours = left * last_session_epoch_s(sessions, run, history) / 3600
        met = sorted(int(r["mon_targets_met"]) for r in history[-LAST:])
        span = f"{met[0]}" if met[0] == met[-1] else f"{met[0]}-{met[-1]}"
        goal = trend.showers_to_goal(history)
        lines.append(f"| {run} | {now['epoch']} | {now['showers_seen']:,} | {own:.2f} | "
                     f"{hours:.1f} | {span} of 20 | "
                     f"{_rounded(trend.need(goal['targets_met'], 'targets_met'))} | "
                     f"{_rounded(trend.need(goal['resolution'], 'resolution'))} |")
    return "\n".join(lines)


def rendered(text: str, root: Path, where: str = "the page") -> str:
    """``text`` with both blocks rendered from the checkpoints under ``root``."""
    at = blocks.spans(text, MARKERS, where)
    found = runs(root)
    sessions = sessions_block(text[slice(*at["sessions"])], found)
    return blocks.replaced(text, at, {"sessions": sessions,
                                      "standing": standing_block(found, sessions)})


def check(page: str | Path, root: str | Path | None = None) -> list[str]:
    """The lines of ``page``'s blocks that differ from their rendering (empty: current)."""
    page = Path(page)
    text = page.read_text()
    new = rendered(text, Path(root) if root else repo_root(), str(page))
    old_lines, new_lines = text.splitlines(), new.splitlines()
    diff = [f"{page}: '{a}' should read '{b}'" for a, b in zip(old_lines, new_lines) if a != b]
    if len(old_lines) != len(new_lines):
        diff.append(f"{page}: the blocks have {len(old_lines) - len(new_lines):+d} lines")
    return diff


def render(page: str | Path, root: str | Path | None = None) -> bool:
    """Rewrite ``page``'s blocks from the checkpoints, atomically; True if it changed."""
    page = Path(page)
    text = page.read_text()
    return blocks.write_if_changed(page, text, rendered(text, Path(root) if root else repo_root(),
                                                        str(page)))


def main(argv: list[str] | None = None) -> int:
    write, root, page = blocks.command_line(argv, "python tools/pages longruns", __doc__,
                                            "studies/README.md", "rewrite the blocks' numbers",
                                            "the checkout whose studies/ are read")
    try:
        if write:
            print(f"{page}: {'rewritten' if render(page, root) else 'current'}")
            return 0
        stale = check(page, root)
    except (StudyFileError, PageBlockError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(stale) if stale else f"{page}: current")
    return 1 if stale else 0
