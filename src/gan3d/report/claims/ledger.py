"""The ledger: every claim decided, as JSON (``results/claims.json``) and Markdown
(``figures/CLAIMS.md``), and one notebook's rows."""

from __future__ import annotations

import dataclasses
import json
import platform
from pathlib import Path
from typing import Any

from ... import console
from ...io import atomic_path, provenance, repo_root, write_json
from .outcome import VERDICTS, Claim, Evidence, MissingEvidence, Outcome
from .registry import CLAIMS

log = console.get_logger(__name__)

__all__ = ["evaluate", "ledger", "markdown", "write", "notebook_rows", "summary_line", "main"]


# ---------------------------------------------------------------------------------------------
# The ledger


def evaluate(claim: Claim, ev: Evidence) -> Outcome:
    """``claim.decide(ev)``. A missing or unreadable input, or one laid out otherwise than the
    claim reads (written by another version), is an inconclusive verdict that names it."""
    try:
        return claim.decide(ev)
    except MissingEvidence as exc:
        return Outcome("inconclusive", "measured", "not measured in this run", "",
                       f"{exc}: {exc.how or f'run `gan3d reproduce` (notebook {claim.notebook})'}")
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as exc:
        files = ", ".join(ev.touched) or "its input"
        return Outcome("inconclusive", "measured", "not readable from this run's results", "",
                       f"{files} does not hold what the claim reads ({type(exc).__name__}: "
                       f"{exc}), written by another version: rerun `gan3d reproduce --force` "
                       f"(notebook {claim.notebook})")


def ledger(root: str | Path | None = None, ids: tuple[str, ...] | None = None,
           results: str | Path | None = None, folders: dict[str, Path] | None = None) -> dict:
    """Every claim (or those of ``ids``) decided from the files under ``root`` (this run's
    under ``results``, default ``root/results``; a step's under ``folders[step]``); JSON."""
    ev = Evidence(root, results, folders)
    rows = []
    for claim in CLAIMS:
        if ids and claim.id not in ids:
            continue
        ev.touched = []
        out = evaluate(claim, ev)
        used = list(ev.touched)
        rows.append({**{k: getattr(claim, k) for k in ("id", "statement", "source", "quantity",
                                                       "paper", "tolerance", "where",
                                                       "notebook")},
                     **dataclasses.asdict(out), "evidence": {f: ev.used[f] for f in used}})
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    run = _run_info(ev)
    return {"schema": 1, "kind": "claims", "claims": rows, "counts": counts, "run": run,
            "provenance": provenance()}


def _run_info(ev: Evidence) -> dict:
    info: dict[str, Any] = {"cpu": _cpu_model(), "cores": None, "profile": None}
    try:
        s = json.loads((ev.results / "scaling/scaling_summary.json").read_text())
        info["cores"] = s.get("machine", {}).get("cores")
        info["profile"] = s.get("config", {}).get("profile")
        sc = s.get("config", {}).get("scale", {})
        info["scaling"] = {"workers": sc.get("workers"), "steps": sc.get("steps"),
                           "repeats": sc.get("repeats"),
                           "overall_showers": s.get("config_overall", {}).get("data", {})
                           .get("n_showers")}
    except (OSError, ValueError):
        pass
    try:
        t = json.loads((ev.results / "training/training_summary.json").read_text())
        info["profile"] = info["profile"] or t.get("profile")
        info["training"] = {"workers": t.get("workers"), "epochs": t.get("epochs"),
                            "batch_per_worker": t.get("batch_per_worker"),
                            "showers_seen": t.get("quick_monitors", {}).get("showers_seen")}
    except (OSError, ValueError):
        pass
    try:
        h = json.loads((ev.results / "validation/headline.json").read_text())
        info["validation_showers"] = h.get("config", {}).get("validation", {}).get("n_showers")
    except (OSError, ValueError):
        pass
    # What the run cost here: each notebook's seconds in the run that made its figures (the
    # pipeline's state) and the environment's build (tools/bootstrap.sh writes it).
    try:
        state = json.loads((ev.results / "pipeline/state.json").read_text())
        info["notebook_seconds"] = {nb: round(float(e["seconds"]), 1) for nb, e in state.items()
                                    if isinstance(e, dict) and "seconds" in e}
    except (OSError, ValueError, TypeError, KeyError):
        pass
    try:
        env = json.loads((ev.root / ".venv/gan3d-build.json").read_text())
        info["environment_seconds"] = int(env["seconds"])
        info["horovod_build"] = env.get("horovod", "unknown")  # compiled, or cached before
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return info


def _sizes(run: dict) -> str:
    """What was run, at what size: so that a smaller run reads as a smaller run."""
    parts = []
    t, sc = run.get("training") or {}, run.get("scaling") or {}
    if t:
        parts.append(f"training: {t.get('workers')} workers x batch {t.get('batch_per_worker')}, "
                     f"{t.get('epochs')} epochs, {t.get('showers_seen')} showers seen")
    if sc:
        parts.append(f"scaling: workers {sc.get('workers')}, {sc.get('steps')} timed steps x "
                     f"{sc.get('repeats')} repeats, overall time on {sc.get('overall_showers')} "
                     "showers")
    if run.get("validation_showers"):
        parts.append(f"validation: {run['validation_showers']} showers per sample and bin")
    return "; ".join(parts) or "no sizes recorded (no results of a run)"


def _cpu_model() -> str:
    from ...scaling.energy import cpu_model

    return cpu_model() or platform.machine()


def summary_line(data: dict) -> str:
    c = data["counts"]
    return (f"{len(data['claims'])} claims: " + ", ".join(f"{c[v]} {v}" for v in VERDICTS))


def _table(rows: list[dict]) -> list[str]:
    """The claims as one Markdown table (its cells' pipes escaped, line breaks as spaces)."""
    return [console.table(
        [[f"**{r['id']}**: {r['statement']}", str(r["source"]), str(r["paper"]), str(r["value"]),
          str(r["kind"]), str(r["tolerance"]), f"**{r['verdict']}**"] for r in rows],
        ["claim", "source", "paper", "this run", "kind", "tolerance", "verdict"])]


def markdown(data: dict) -> str:
    """``figures/CLAIMS.md``: the summary, the table, and per claim why and what it would need."""
    run = data["run"]
    prov = data["provenance"]
    commit = prov.get("commit") or "not a git checkout"
    clean = {True: "clean", False: "with uncommitted changes", None: "tree unknown"}[
        prov.get("clean")]
    lines = ["# Claims: what this run reproduced", "",
             f"Decided on {prov.get('time_utc', '?')[:10]} by `gan3d.report.claims` at commit "
             f"`{str(commit)[:12]}` ({clean}) from the results of `gan3d reproduce` "
             f"(their commits under each claim), profile `{run.get('profile') or '?'}`, on "
             f"{run.get('cpu') or '?'} ({run.get('cores') or '?'} cores); sizes: {_sizes(run)}. "
             "Every tolerance was fixed in `gan3d.report.claims` before the run; *measured* "
             "means on this machine in this run, *modelled* the performance model on the paper's "
             "hardware, *estimated* from published figures, *study* a committed study "
             "(`studies/`, provenance below).", "",
             f"**{summary_line(data)}.**", "", *_table(data["claims"]), "", "## Why, claim by claim",
             ""]
    for r in data["claims"]:
        lines.append(f"### {r['id']}: {r['verdict']}")
        lines.append("")
        lines.append(f"- Quantity: {r['quantity']}; measured in {r['where']}.")
        if r["detail"]:
            lines.append(f"- Decision: {r['detail']}.")
        if r["needs"]:
            word = "Why" if r["verdict"] == "not testable here" else "A decision would need"
            lines.append(f"- {word}: {r['needs']}.")
        if r.get("study") and r["study"] != r["value"]:
            lines.append(f"- Committed study: {r['study']}.")
        for f, p in r["evidence"].items():
            clean = {True: "clean", False: "uncommitted changes", None: "tree state unknown"}[
                p.get("clean")]
            note = f"; {p['note']}" if p.get("note") else ""
            lines.append(f"- Evidence: `{f}` (commit {p.get('commit') or 'unknown'}, {clean}, "
                         f"{p.get('time_utc') or 'time unknown'}{note}).")
        lines.append("")
    return "\n".join(lines)


def write(root: str | Path | None = None, figures_dir: str | Path = "figures",
          results_dir: str | Path = "results") -> dict:
    """Decide every claim and write ``figures/CLAIMS.md``, ``figures/claims.json`` and
    ``results/claims.json`` (atomically); returns the ledger."""
    root = Path(root) if root else repo_root()
    fig = Path(figures_dir) if Path(figures_dir).is_absolute() else root / figures_dir
    res = Path(results_dir) if Path(results_dir).is_absolute() else root / results_dir
    data = ledger(root, results=res)
    write_json(res / "claims.json", data)
    write_json(fig / "claims.json", data)  # committed with the figures: the README's source
    with atomic_path(fig / "CLAIMS.md") as tmp:
        Path(tmp).write_text(markdown(data) + "\n")
    log.info("claims: %s", summary_line(data))
    return data


def notebook_rows(step: str, results_dir: str | Path | None = None) -> str:
    """Markdown table of the claims the notebook of pipeline step ``step`` measures, decided
    from the notebook's own ``results_dir`` (in place of ``results/<step>``) and the committed
    studies."""
    ids = tuple(c.id for c in CLAIMS if c.notebook == step)
    folders = None
    if results_dir is not None:
        from ...io import resolve_path

        folders = {step: resolve_path(results_dir)}
    data = ledger(None, ids, folders=folders)
    return "\n".join([f"**Claims measured here** ({summary_line(data)}; all claims: "
                      "`figures/CLAIMS.md`)", "", *_table(data["claims"])])


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gan3d.report.claims",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", help="the checkout whose results/ and studies/ are read")
    args = parser.parse_args(argv)
    data = write(Path(args.root) if args.root else repo_root())
    print(summary_line(data))
    return 0
