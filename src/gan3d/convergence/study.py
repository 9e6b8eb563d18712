"""The convergence study: which runs, how each is launched, and the committed results file.

Three blocks, every configuration trained from ``study.seeds`` seeds on the same number of showers
(``study.showers``, all workers together), per-worker batch ``study.batch_size``, float32, the
physics monitors evaluated ``study.points`` times per run (once per epoch):

* ``eq`` - the paper's claim: 1 worker against 2 workers with the paper's lr x N (``linear``) and
  with the plain lr (``none``);
* ``sync`` - local SGD on 2 workers, model averaging every k steps for k in ``study.sync_every``
  (k = 1 is ``eq``'s 2-worker linear run: the same configuration, trained once);
* ``lr`` - learning-rate rules at ``study.lr_workers`` workers: ``linear`` (lr x N), ``sqrt``
  (lr x sqrt N), ``warmup`` (linear, reached over the first epoch) and ``none``; the 2-worker
  linear and none runs are ``eq``'s. Counts above the cores run oversubscribed (timing is not
  what this study measures).

Runs of one worker count and one seed round share one MPI launch (:mod:`gan3d.parallel.jobs`, task ``trains``);
each run writes its own folder under ``study.workdir``, and after every launch the finished runs
are summarised into ``study.output`` (atomically, with the verdicts and the communication table
of the runs so far, :mod:`gan3d.convergence.analysis`): a stopped study loses at most the run it was
in, and ``run_study`` continues where the file ends. The file records the code version of the
modules that determine a run's numbers (:func:`gan3d.convergence.plan.code_hash`); runs of another
version are *stale* unless a behavioural check (:mod:`gan3d.convergence.verify`) showed this
version to train every kind of run the study holds to the same bits. Into a repository's
``studies/`` the file is written only from a clean tree (:func:`gan3d.records.check_writable`,
checked before the first launch), unless ``allow_dirty``, and then it says ``clean: false``.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import console
from ..config import Config, to_dict
from ..exceptions import Gan3dError
from ..io import ensure_dir, provenance, write_json
from ..records import check_writable, stamp, write
from ..parallel import runtime
from ..parallel.launch import launch
from ..io import resolve_path
from .plan import Run, code_hash, plan, run_config, summarise_history

log = console.get_logger(__name__)

__all__ = ["run_study", "load", "stale", "status", "verify", "finite_json", "runs_table",
           "describe"]

def load(path: str | Path) -> dict:
    """The results file (an empty study if it does not exist yet)."""
    from ..records import read

    path = resolve_path(path)
    return read(path, "convergence") if path.is_file() else {"runs": {}}


def stale(results: dict) -> list[str]:
    """Ids of the runs this checkout's training code is not known to make (empty: all current):
    runs of another code version, unless a behavioural check of this version
    (:func:`gan3d.convergence.verify.verify_code`) covered their kind of run."""
    from .verify import stale_runs

    return stale_runs(results)


def _harvest(cfg: Config, results: dict, runs: list[Run], seconds: float) -> list[str]:
    """Add every finished run of ``runs`` (its history has all epochs, its generator exists)."""
    from ..gan.history import read_history

    done = []
    for run in runs:
        folder = resolve_path(cfg.study.workdir) / run.id
        hist = folder / "history.jsonl"
        if not hist.is_file() or not (folder / "generator.keras").is_file():
            continue
        rows = read_history(hist)
        if len(rows) < cfg.study.points:
            continue
        results["runs"][run.id] = {
            **dataclasses.asdict(run), "config_id": run.config_id, "code_hash": code_hash(),
            "batch_size": cfg.study.batch_size, "showers": rows[-1]["showers_seen"],
            "lr": run_config(cfg, run).train.learning_rate, "launch_s": seconds,
            "rows": summarise_history(rows)}
        done.append(run.id)
    return done


def run_study(cfg: Config, *, only: str | None = None, max_runs: int | None = None,
              restart: bool = False, timeout: float = 6 * 3600,
              allow_dirty: bool = False) -> dict:
    """Run every missing run of :func:`plan` (``only``: one block), ``max_runs`` at most; write
    ``study.output`` after each launch. ``restart`` forgets earlier results first; ``allow_dirty``
    writes into ``studies/`` from a tree with uncommitted changes (marked so). Returns the
    results (also with the communication measurement of :mod:`gan3d.convergence.analysis`)."""
    from ..data.generate import generate_dataset
    from . import analysis

    out = resolve_path(cfg.study.output)
    check_writable(out, allow_dirty)  # before hours of training, not after them
    results = {"runs": {}} if restart else load(out)
    old = stale(results)
    if old:
        raise Gan3dError(f"{out} holds {len(old)} run(s) made by other code ({', '.join(old[:3])}"
                         f"...); rerun them with restart=True (gan3d study --restart) or keep them")
    todo = [r for r in plan(cfg) if r.id not in results["runs"] and (only is None or r.block == only)]
    todo = todo[:max_runs] if max_runs is not None else todo
    results.update(study=to_dict(cfg)["study"], code_hash=code_hash(),
                   provenance=provenance({"profile": cfg.profile}, exclude=(out,)))
    generate_dataset(run_config(cfg, Run("eq", 1, "linear", 1, 0)).data)
    for group in _launches(todo):
        t0 = time.monotonic()
        try:
            _launch_group(cfg, group, timeout)
        finally:  # whatever finished is kept, even when a later run of the launch failed
            done = _harvest(cfg, results, group, time.monotonic() - t0)
            log.info("study: %d run(s) finished (%s); %d of %d in %s", len(done), ", ".join(done),
                     len(results["runs"]), len(plan(cfg)), out)
            _save(out, results, allow_dirty)
    if any(r.workers == 2 for r in plan(cfg)) and "communication" not in results:
        results["communication"] = analysis.measure_communication(cfg)
    _save(out, results, allow_dirty)
    return results


def _save(out: Path, results: dict, allow_dirty: bool = False, mark: bool = True) -> None:
    """Write the results file with the verdicts and the communication table of the runs so far
    (derived: recomputed at every save; NaN - too few seeds - written as null), through the
    guard of :func:`gan3d.records.write` (``mark``: see there)."""
    from . import analysis

    ks = sorted({r["sync_every"] for r in results["runs"].values()} | {1})
    try:
        results["verdicts"] = finite_json(analysis.verdicts(results))
        results["communication_table"] = finite_json(analysis.communication_table(results, ks))
    except Exception as exc:  # noqa: BLE001 - the runs are hours of work: write them regardless
        log.warning("study: the verdicts could not be computed (%s: %s); the runs are saved "
                    "without them", type(exc).__name__, exc)
    write(ensure_dir(out.parent) / out.name, stamp(results, "convergence"),
          allow_dirty=allow_dirty, mark=mark)


def finite_json(value):
    """``value`` with every non-finite float as None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return value


def _launches(runs: list[Run]) -> list[list[Run]]:
    """Consecutive runs with the same worker count share a launch (at most 8 per launch)."""
    groups: list[list[Run]] = []
    for run in runs:
        if groups and groups[-1][0].workers == run.workers and len(groups[-1]) < 8:
            groups[-1].append(run)
        else:
            groups.append([run])
    return groups


def _launch_group(cfg: Config, group: list[Run], timeout: float) -> None:
    workdir = ensure_dir(resolve_path(cfg.study.workdir))
    for run in group:  # a run stopped midway starts again from scratch
        shutil.rmtree(workdir / run.id, ignore_errors=True)
    p = group[0].workers
    threads = max(1, runtime.cpu_count() // p)
    name = f"launch-{group[0].id}"
    job = {"task": "trains", "threads": threads, "out": str(workdir / f"{name}.out.json"),
           "configs": [to_dict(run_config(cfg, r)) for r in group]}
    write_json(workdir / f"{name}.job.json", job)
    log.info("study: %d worker(s) x %d thread(s): %s", p, threads, ", ".join(r.id for r in group))
    launch(p, [sys.executable, "-m", "gan3d.parallel.jobs", str(workdir / f"{name}.job.json")],
           timeout=timeout, stream=False)


def verify(cfg: Config, reference: str | Path, *, showers: int = 256,
           kinds: list[str] | None = None, allow_dirty: bool = False) -> dict | None:
    """:func:`gan3d.convergence.verify.verify_code` on ``study.output``, saved when it passes."""
    from .verify import verify_code

    out = resolve_path(cfg.study.output)
    results = load(out)
    check_writable(out, allow_dirty)
    entry = verify_code(cfg, reference, results, showers=showers, kinds=kinds,
                        allow_dirty=allow_dirty)
    if entry is not None:  # the runs' provenance is theirs; the check records its checkout
        _save(out, results, allow_dirty, mark=False)
    return entry


def status(cfg: Config, results: dict | None = None) -> dict[str, Any]:
    """How far the study is: runs done, missing, stale."""
    results = results if results is not None else load(cfg.study.output)
    ids = [r.id for r in plan(cfg)]
    done = [i for i in ids if i in results.get("runs", {})]
    return {"planned": len(ids), "done": len(done), "missing": [i for i in ids if i not in done],
            "stale": stale(results)}


def runs_table(results: dict, cfg: Config) -> str:
    """Markdown: a study's runs (of ``cfg``'s study settings), each with its showers, final
    profile distance, final targets met and weight synchronisations."""
    from . import analysis

    rows = [[rid, f"{r['showers']:,}", f"{analysis.final_values(r, 'profile_distance'):.3f}",
             f"{analysis.final_values(r, 'mon_targets_met'):.1f}",
             sum(x["syncs"] or 0 for x in r["rows"])] for rid, r in sorted(results["runs"].items())]
    return (f"This profile's study ({cfg.study.seeds} seed(s), {cfg.study.showers:,} showers per "
            "run):\n\n" + console.table(rows, ["run", "showers", "final profile distance",
                                                "final targets met", "syncs"]))


def describe(results: dict, state: dict, where: str) -> str:
    """Markdown: where a study's results come from (``where``), how far it is (``state``, a
    :func:`status`), whether the training code that made them is this checkout's, was shown to
    train to the same bits (a check of ``gan3d study --verify-code``) or is stale, and the
    showers each run saw."""
    check = results.get("checks", {}).get(code_hash(), {})
    kinds = "; ".join(f"{k}: {c['compared']}, {c['equality']}"
                      for k, c in check.get("kinds", {}).items())
    if state["stale"]:
        freshness = (f"**stale**: {len(state['stale'])} run(s) were made by other training code - "
                     "check it (`gan3d study --profile study --verify-code COMMIT`) or rerun them "
                     "(`--restart`)")
    elif check:
        freshness = (f"made by training code `{check['same_as']}` (commit "
                     f"`{str(check['reference']['commit'])[:7]}`), shown to train every kind of "
                     f"run it holds to the same bits as this checkout's `{code_hash()}` ({kinds}; "
                     f"short runs of {next(iter(check['kinds'].values()))['showers']} showers)")
    else:
        freshness = "made by this checkout's training code"
    seen = sorted({r["showers"] for r in results["runs"].values()})
    return (f"`{where}`: **{state['done']} of {state['planned']} runs**, {freshness}; each run saw "
            f"{', '.join(f'{s:,}' for s in seen)} training showers (all workers together)"
            + (f"; not run yet: {', '.join(state['missing'])} (`gan3d study --profile study` "
               "continues)" if state["missing"] else "") + ".")
