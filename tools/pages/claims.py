"""The README's claims summary, rendered from the committed ledger (``figures/claims.json``).

``make figures`` decides every claim (:mod:`gan3d.report.claims`) and commits the ledger with the
figures; the README's block between :data:`BEGIN` and :data:`END` says the counts, one line per
verdict with its claims, and what the run cost - from that file alone::

    python tools/pages claims             # check README.md; exit 1 if stale
    python tools/pages claims --write     # rewrite the block
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gan3d.exceptions import PageBlockError
from gan3d.report.claims import VERDICTS, summary_line
from pages import blocks

__all__ = ["BEGIN", "END", "KIND_WORDS", "readme_block", "run_cost", "update_readme", "main"]

BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"


def readme_block(data: dict) -> str:
    """The README's summary of a ledger: the counts, then one line per claim with its verdict."""
    run = data["run"]
    lines = [f"**{summary_line(data)}** in the last `make figures` (profile "
             f"`{run.get('profile') or '?'}`, {run.get('cpu') or '?'}, "
             f"{str(data['provenance'].get('time_utc', '?'))[:10]}):", ""]
    for verdict in VERDICTS:
        rows = [r for r in data["claims"] if r["verdict"] == verdict]
        if rows:
            by_kind = [f"{KIND_WORDS[k]}: " + ", ".join(f"`{r['id']}`" for r in rows
                                                         if r["kind"] == k)
                       for k in KIND_WORDS if any(r["kind"] == k for r in rows)]
            lines.append(f"- *{verdict}* ({len(rows)}) - " + "; ".join(by_kind))
    cost = run_cost(run)
    if cost:
        lines += ["", cost]
    return "\n".join(lines)


# How a claim's value was obtained, as the README's tally says it.
KIND_WORDS = {"measured": "measured here", "modelled": "modelled on the paper's hardware",
              "study": "from a committed study", "estimated": "estimated"}


def run_cost(run: dict) -> str:
    """What the last run cost on its machine, from its own record (empty when not recorded)."""
    secs = run.get("notebook_seconds") or {}
    if not secs:
        return ""
    env = run.get("environment_seconds")
    how = {"cached": " (Horovod's wheel from the cache of an earlier build; a first build also "
                     "compiles it)", "compiled": " (Horovod compiled)"}.get(run.get("horovod_build"), "")
    built = (f"; building the environment took {env / 60:.1f} min{how}" if env else "")
    return (f"What it cost: the notebooks took {sum(secs.values()) / 60:.1f} min on "
            f"{run.get('cores') or '?'} cores of an {run.get('cpu') or '?'} "
            f"({', '.join(f'{nb[:2]}: {s / 60:.1f}' for nb, s in sorted(secs.items()))} min){built}.")


def update_readme(path: str | Path, data: dict) -> bool:
    """Rewrite the block between :data:`BEGIN` and :data:`END` of ``path`` from ``data``;
    True if it changed."""
    text = Path(path).read_text()
    at = blocks.spans(text, {"claims": (BEGIN, END)}, f"{path} (the claims' summary)")
    return blocks.write_if_changed(path, text, blocks.replaced(text, at,
                                                               {"claims": readme_block(data)}))


def main(argv: list[str] | None = None) -> int:
    write, root, page = blocks.command_line(argv, "python tools/pages claims", __doc__, "README.md",
                                            "rewrite the block",
                                            "the checkout whose figures/claims.json is read")
    data = json.loads((root / "figures" / "claims.json").read_text())
    try:
        if write:
            changed = update_readme(page, data)
            print(f"{page}: {'rewritten' if changed else 'current'} ({summary_line(data)})")
            return 0
        text = page.read_text()
        at = blocks.spans(text, {"claims": (BEGIN, END)}, f"{page} (the claims' summary)")
    except PageBlockError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if text[slice(*at["claims"])].strip() != readme_block(data).strip():
        print(f"{page}: the claims' summary is stale: python tools/pages claims --write")
        return 1
    print(f"{page}: current")
    return 0
