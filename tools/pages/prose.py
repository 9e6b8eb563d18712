"""Numbers in the pages' prose that look measured and are not quotes.

:func:`unmarked` finds every number of a page (README.md, docs/*.md) that reads like a
measurement - a percentage, a speed-up, showers/s, a time - outside code, links and the
``<!--q:ID-->...<!--/q-->`` markers of :mod:`quotes` (this folder), unless it is one of
:data:`NOT_MEASURED` (the paper's numbers and settings). ``python tools/pages quotes`` reports them.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

__all__ = ["NOT_MEASURED", "MEASURED", "Suspect", "unmarked"]

# Numbers in the pages that are not measurements: the paper's, and settings. Each phrase is
# skipped wherever it occurs (whole), so keep them specific.
NOT_MEASURED: dict[str, str] = {
    "98.9 %": "the paper's training-only scaling efficiency at 12 GPUs",
    "20 h 16 min": "the paper's full training with test-loss evaluation on 1 GPU",
    "2 h 14 min": "the paper's full training with test-loss evaluation on 12 GPUs",
    "9.07×": "the paper's speed-up, 20 h 16 min over 2 h 14 min",
    "25×25×25": "the calorimeter's cells (the data's shape)",
    "after 15 minutes": "pytest-timeout's limit per test (`timeout = 900` in pyproject.toml)",
    "10 % of a step": "the share of a step at which scaling/multinode.py calls an all-reduce costly",
    "540 s by default": "the default of bench/device_check.py's --budget, a setting",
    "90 % interval": "the confidence level of the studies' equivalence test (TOST at 5 %), a setting",
    "margin of 0.05": "the profile distance's equivalence margin, fixed in convergence/analysis.py",
    # docs/reliability.md: the bounds its fault tests assert, and the watchdog's setting
    "< 60 s": "the bound tests/test_faults.py asserts on a killed rank or engine",
    "within 120 s": "the bound of tests/test_faults.py's kernel interrupt",
    "within 15 s more": "the bound of tests/test_faults.py on the engines' exit after it",
    "within 10 s": "the bound of tests/test_faults.py on each cluster cycle's processes",
    "each 0.2 s": "how often Cluster.run checks its engines (poll = 0.2 in parallel/cluster.py), a setting",
    "after 900 s": "pytest-timeout's limit per test (`timeout = 900` in pyproject.toml)",
    "| 900 s |": "the same limit, in the table's time column",
    "under 30 s (the test's bound)": "the bound tests/test_netns.py asserts",
    "a grace of 30 s": "the default grace of cli._bounded_interrupt after Ctrl-C, a setting",
}


MEASURED = re.compile(
    r"(?<![\w.,])\d[\d,]*(?:\.\d+)?(?:[x×](?!\w)|\s?(?:%|showers/s|[GT]FLOP/s|[GM]B/s"
    r"|ms\b|s\b|min\b|minutes?\b|h\b|hours?\b|seconds?\b))")
# Also the README's claims block: rendered from figures/claims.json (the run's own record, cost
# line included), and test_claims.py checks that it is current.
_SKIP = re.compile(r"```.*?```|`[^`\n]*`|<!--q:.*?<!--/q-->|<!-- claims:begin -->.*?<!-- claims:end -->"
                   r"|<!--.*?-->|\]\([^)]*\)", re.S)


@dataclasses.dataclass(frozen=True)
class Suspect:
    """A number in a page's prose that looks measured and is neither marked nor allowed."""

    path: str
    line: int
    number: str
    context: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: {self.number!r} looks measured but is not a quote "
                f"(...{self.context}...); mark it <!--q:ID-->...<!--/q--> or say it without the number")


def unmarked(path: str | Path) -> list[Suspect]:
    """Numbers of ``path`` that look measured, outside code, markers, links and
    :data:`NOT_MEASURED` (blanked with spaces, so that line numbers stay right)."""
    text = Path(path).read_text()
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    text = _SKIP.sub(blank, text)
    for phrase in NOT_MEASURED:
        text = text.replace(phrase, re.sub(r"[^\n]", " ", phrase))
    return [Suspect(str(path), text.count("\n", 0, m.start()) + 1, m.group(0),
                    " ".join(text[max(0, m.start() - 40):m.end() + 20].split()))
            for m in MEASURED.finditer(text)]
