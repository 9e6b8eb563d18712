"""The "A trains like B" claims: one rule over a study's 8 quantities (:func:`decide_equivalence`)
applied to the convergence study, the precision study and the warm-start study (whose bfloat16
and local-SGD blocks decide ``bfloat16-like-float32`` and ``local-sgd`` once they hold their
planned seeds), with the seeds an undecided quantity would need."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .outcome import Evidence, MissingEvidence, Outcome, percent

__all__ = ["seeds_to_decide", "decide_equivalence", "n_like_one", "bf16", "local_sgd",
           "warm_start", "lr_rule", "long_pair", "long_like_one", "GOAL", "FPD_MARGIN", "DRAWS",
           "LR_RULES", "LR_WORKERS", "LR_SEEDS", "WARM_SEEDS"]

# The physics-grade goal of a long run's generator (notebook 04, 256 showers per energy).
GOAL = {"targets_met": 18, "worst_resolution_ratio": 1.5, "fpd": 5.0}


def _convergence_rows(ev: Evidence, candidate: str, reference: str) -> list[dict]:
    from ...convergence import analysis

    study = ev.json("studies/convergence.json")
    cmp = analysis.compare(study, candidate, reference)
    return [{"monitor": k, **v} for k, v in cmp.items()]


def seeds_to_decide(row: dict) -> float | None:
    """Seeds per configuration at which the 90 % interval of ``row`` (a TOST row with ``diff``,
    ``margin``, ``sd`` and ``ref_sd``) would decide, if the difference and the spread stayed as
    measured: inside +-margin (equivalent) when |diff| < margin, outside it (different)
    otherwise; n = 2 (1.645 s / | margin - |diff| |)^2 with the pooled standard deviation s. A
    paired row (``diff_sd``) carries its own count, from the spread of the differences."""
    if "diff_sd" in row:  # a paired row says it itself (analysis.paired_seeds_needed)
        n = row.get("seeds_needed")
        return float(n) if n is not None and math.isfinite(n) else None
    try:
        d, m = abs(float(row["diff"])), float(row["margin"])
        s = math.sqrt((float(row["sd"]) ** 2 + float(row["ref_sd"]) ** 2) / 2)
    except (KeyError, TypeError, ValueError):
        return None
    gap = abs(m - d)
    if not (math.isfinite(s) and math.isfinite(gap)) or gap == 0:
        return None
    return float(max(2, math.ceil(2 * (1.645 * s / gap) ** 2)))


def decide_equivalence(rows: list[dict], kind: str, label: str) -> Outcome:
    """The rule of every "A trains like B" claim, over the study's 8 quantities: reproduced
    when >= 6 are equivalent and none different; not reproduced when >= 2 are different;
    otherwise inconclusive, with the seeds each undecided quantity would need."""
    verdicts = [r["verdict"] for r in rows]
    eq, diff = verdicts.count("equivalent"), verdicts.count("different")
    undecided = [r for r in rows if r["verdict"] not in ("equivalent", "different")]
    seeds = max((n for r in rows for n in np.atleast_1d(r.get("n", []))), default=0)
    value = f"{eq} equivalent, {diff} different, {len(undecided)} inconclusive of {len(rows)}"
    different = [r["monitor"] for r in rows if r["verdict"] == "different"]
    excluded = [r["monitor"] for r in undecided if r.get("low", 0) > 0 or r.get("high", 0) < 0]
    detail = f"{label}: {value} at {seeds} seeds per configuration"
    if different:
        detail += "; different: " + ", ".join(different)
    if excluded:
        detail += ("; the 90 % interval excludes zero, yet reaches inside the margin, for "
                   + ", ".join(excluded))
    if eq >= 6 and diff == 0:
        verdict = "reproduced"
    elif diff >= 2:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    need = ""
    if verdict == "inconclusive":
        parts = []
        for r in undecided:
            n = seeds_to_decide(r)
            towards = "equivalent" if abs(r.get("diff", 0)) < r.get("margin", 0) else "different"
            parts.append(f"{r['monitor']} ~{int(n)} ({towards})" if n else
                         f"{r['monitor']} (no estimate)")
        need = ("seeds per configuration to decide each undecided quantity, if its difference "
                "and spread stay as measured: " + ", ".join(parts))
    return Outcome(verdict, kind, value, detail, need, study=value,
                   numbers={"equivalent": eq, "different": diff, "undecided": len(undecided),
                            "seeds": seeds, "rows": [
                                {**{k: r.get(k) for k in ("monitor", "verdict", "diff", "low",
                                                          "high", "margin")},
                                 "seeds_to_decide": seeds_to_decide(r)} for r in rows]})


def n_like_one(ev: Evidence) -> Outcome:
    rows = _convergence_rows(ev, "2w-linear", "1w")
    return decide_equivalence(rows, "study", "2 workers (lr x 2) against 1 worker")


def bf16(ev: Evidence) -> Outcome:
    """From the warm-start study's bfloat16 block once it holds its planned seeds (:data:`WARM_SEEDS`,
    5; a generator that makes showers, 8,192 showers a run, the monitors at 256 showers per
    energy, paired by seed); until then from ``studies/precision.json`` (from scratch, 1,600
    showers, where the seeds' spread swamps the margins). Fixed before the block's first run."""
    rows, w = _warm_block(ev, "1w-bf16")
    if rows:
        return decide_equivalence(rows, "study",
                                  f"1 worker in bfloat16 against float32, {_forked(w)}")
    p = ev.json("studies/precision.json")
    tost = p["comparison"]["tost"]
    rows = [{"monitor": k, **v} for k, v in tost.items()]
    return decide_equivalence(rows, "study", "bfloat16 against float32 (1 worker)")


def local_sgd(ev: Evidence) -> Outcome:
    """The physics from the warm-start study's local-SGD block (2 workers, lr x 2, k = 16 against
    the same with k = 1, paired by seed) once it holds its planned seeds; until then from
    ``studies/convergence.json`` (from scratch, 1,024 showers). The saving is measured in the
    convergence study. Fixed before the block's first run."""
    c = ev.json("studies/convergence.json")
    table = {r["k"]: r for r in c.get("communication_table", [])}
    rows, w = _warm_block(ev, "2w-linear-k16", "2w-linear")
    if rows:
        phys = decide_equivalence(rows, "study", "local SGD k = 16 against k = 1 (2 workers, "
                                  f"lr x 2), {_forked(w)}")
    else:
        rows = _convergence_rows(ev, "2w-linear-k16", "2w-linear")
        phys = decide_equivalence(rows, "study", "local SGD k = 16 against k = 1 (2 workers)")
    saved = table.get(16, {}).get("measured saved")
    comm = (f"; communication saved at k = 16: {percent(saved)} of the step (measured)"
            if saved else "")
    return dataclasses.replace(phys, value=phys.value + comm, study=phys.value + comm,
                               detail=phys.detail + ("; the saving is measured, the equal physics "
                                                     "is what decides"))


def _warm_block(ev: Evidence, candidate: str, reference: str | None = None
                ) -> tuple[list[dict], dict]:
    """The warm-start study's rows of ``candidate`` against ``reference`` (the study's own, 1w,
    when None; another configuration's rows are recomputed, paired by seed) if every one has
    the planned seeds (:data:`WARM_SEEDS`), else ``[]``: the file then does not count as evidence."""
    from ...convergence import warmstart

    relpath = "studies/warm_start.json"
    w = ev.peek(relpath)
    try:
        rows = (w.get("verdicts", []) if reference is None else  # else warmstart.ALSO's
                [r for r in warmstart.also_verdicts(w) if r["reference"] == reference])
        rows = [r for r in rows if r["candidate"] == candidate]
        # the seeds planned when these blocks were fixed (the study's default then): not the
        # file's warm.seeds, which is the last command's setting (9 for the lr-rule blocks)
        if not rows or min(int(r.get("n") or 0) for r in rows) < WARM_SEEDS:
            return [], {}
    except (AttributeError, TypeError, KeyError, ValueError):  # no file, or not a study's
        return [], {}
    ev.record(relpath, w)
    return rows, w


def _forked(w: dict) -> str:
    """How a warm-start run was made, for a claim's value."""
    return (f"{w.get('warm', {}).get('showers', 0):,} showers per run forked from "
            f"{w['parent']['showers_seen']:,} showers of training, paired by seed")


def warm_start(ev: Evidence) -> Outcome:
    w = ev.json("studies/warm_start.json")
    rows = [r for r in w.get("verdicts", []) if r["candidate"] == "2w-linear"]
    if not rows:
        raise MissingEvidence("studies/warm_start.json has no pair of 2-worker (lr x 2) and "
                              "1-worker runs yet", "`gan3d warm-start` makes them")
    return decide_equivalence(rows, "study", f"2 workers (lr x 2) against 1 worker, {_forked(w)}")


# The lr-rule claim's candidates, fixed before their runs: the rule's part of a warm-start
# configuration's name (lr x N with and without a warm-up over the first of the run's 4
# evaluation intervals, lr x sqrt(N), the plain lr), the worker counts it must hold at, and the
# seeds a block needs before it counts.
LR_RULES = {"linear": "lr x N", "linear-wu1": "lr x N with a warm-up", "sqrt": "lr x sqrt(N)",
            "none": "lr"}
LR_WORKERS = (2, 4)
LR_SEEDS = 5
WARM_SEEDS = 5  # a warm-start block of the first claims (the paper's rule, local SGD) counts from here


def lr_rule(ev: Evidence) -> Outcome:
    """Which learning-rate rule makes N workers train like one, at 2 and at 4 workers: each
    block ``<N>w-<rule>`` of the warm-start study (paired by seed against 1 worker) that holds
    >= :data:`LR_SEEDS` seeds is decided by :func:`decide_equivalence` (>= 6 of 8 equivalent and
    none different). *Reproduced* - a rule is found, and named - when one rule holds at every
    count of :data:`LR_WORKERS`; *not reproduced* when every rule of :data:`LR_RULES` fails
    (2 or more different) at one count or more; otherwise inconclusive, with the blocks a
    decision needs. Fixed before the sqrt, warm-up and 4-worker runs."""
    w = ev.json("studies/warm_start.json")
    rows = w.get("verdicts", [])
    decided: dict[tuple[str, int], Outcome] = {}
    for rule in LR_RULES:
        for n in LR_WORKERS:
            block = [r for r in rows if r["candidate"] == f"{n}w-{rule}"]
            if block and min(int(r.get("n") or 0) for r in block) >= LR_SEEDS:
                decided[rule, n] = decide_equivalence(block, "study", f"{n}w-{rule}")

    def said(rule: str, n: int) -> str:
        o = decided.get((rule, n))
        if o is None:
            have = max((int(r.get("n") or 0) for r in rows if r["candidate"] == f"{n}w-{rule}"),
                       default=0)
            return f"{n}w {have} of {LR_SEEDS} seeds"
        eq, diff, seeds = (o.numbers[k] for k in ("equivalent", "different", "seeds"))
        return f"{n}w {eq} eq / {diff} diff at {seeds} seeds: {o.verdict}"

    value = "; ".join(f"{LR_RULES[r]}: " + ", ".join(said(r, n) for n in LR_WORKERS)
                      for r in LR_RULES)
    holds = [r for r in LR_RULES if all(decided.get((r, n)) is not None
                                        and decided[r, n].verdict == "reproduced"
                                        for n in LR_WORKERS)]
    fails = [r for r in LR_RULES if any(decided.get((r, n)) is not None
                                        and decided[r, n].verdict == "not reproduced"
                                        for n in LR_WORKERS)]
    numbers = {f"{n}w-{r}": o.numbers for (r, n), o in decided.items()}
    detail = (f"{_forked(w)}; each block against 1 worker, decided at >= {LR_SEEDS} seeds by the "
              "rule of every 'trains like' claim" if "parent" in w else "")
    if holds:
        return Outcome("reproduced", "study", f"holds: {', '.join(LR_RULES[r] for r in holds)}"
                       f" ({value})", detail, numbers=numbers)
    if len(fails) == len(LR_RULES):
        return Outcome("not reproduced", "study", f"no rule holds ({value})", detail,
                       numbers=numbers)
    open_ = [f"{n}w-{r}" for r in LR_RULES if r not in fails for n in LR_WORKERS
             if (r, n) not in decided]
    needs = (f"blocks with >= {LR_SEEDS} seeds of {', '.join(open_)} (`gan3d warm-start "
             "--set warm.configs=[1w,<block>]`, studies/README.md)" if open_ else
             "more seeds in the undecided blocks (their rows say how many)")
    return Outcome("inconclusive", "study", value, detail, needs, numbers=numbers)


def _trend(run: dict) -> str:
    """What the trend of a long run's monitors says of the showers its unmet goals would need
    (:mod:`gan3d.validation.trend`, written by notebook 04): an estimate, said so."""
    from ...validation import trend

    est = run.get("showers_to_goal") or {}
    parts = [f"{what}: {trend.need(est[key], key)}"
             for key, what in (("targets_met", f">= {trend.GOAL_TARGETS} targets"),
                               ("resolution", f"resolution <= {trend.RESOLUTION_RATIO:g}x"))
             if key in est and not est[key]["met"]]
    return ("; estimated from its monitors' trend, showers to " + ", ".join(parts)
            + " (FPD is not in the history)") if parts else ""


def long_pair(ev: Evidence) -> Outcome:
    """The paper's claim where the generators are shower simulators: the 1- and 2-worker long
    runs as notebook 04 validates them (``results/validation/long_runs.json``, 256 showers per
    energy). Decided only at equal budgets and once the 1-worker generator meets :data:`GOAL`
    (>= 18 of 20 targets, energy resolution within 1.5x of the reference's in every bin, FPD <=
    5): then *reproduced* when the 2-worker one meets the resolution and FPD goal and its
    targets met lie within the studies' margin (2) of the 1-worker's, else *not reproduced*.
    One pair, no seeds: a point comparison, said so. Fixed before the long runs reach the goal."""
    from ...convergence.analysis import MARGINS

    found = ev.json("results/validation/long_runs.json")
    runs, budget = found.get("runs", {}), found.get("budget")
    # the pair: 1 worker and 2 under the paper's rule (a third run, another rule, is judged by
    # long_like_one in notebook 04)
    by = {r.get("workers"): r for r in runs.values() if r.get("lr_rule", "linear") == "linear"}
    if 1 not in by or 2 not in by:
        raise MissingEvidence("results/validation/long_runs.json lacks the 1- or the 2-worker "
                              "long run", "notebook 04 validates the committed long runs")
    one, two = by[1], by[2]

    def said(r: dict) -> str:
        d = r.get("targets_met_draws") or []
        spread = (f" (on {len(d)} latent draws: median {np.median(d):g}, {min(d)}-{max(d)})"
                  if len(d) > 1 else "")
        err = f" +- {r['fpd_error']:.2g}" if r.get("fpd_error") is not None else ""
        return (f"{r['targets_met']} of 20 targets{spread}, resolution "
                f"{r['worst_resolution_ratio']:.2f}x the reference's in its worst bin, FPD "
                f"{r['fpd']:.3g}{err}, AUC {r['auc']:.3f}")

    value = (f"1 worker at {one['showers_seen']:,} showers: {said(one)}; 2 workers at "
             f"{two['showers_seen']:,}: {said(two)}")
    d1, d2 = one.get("targets_met_draws") or [], two.get("targets_met_draws") or []
    if len(d1) == len(d2) > 1:  # the same latent seeds on both sides: a paired difference
        gap = np.subtract(d1, d2)
        value += (f"; 1 worker minus 2 workers, paired over the {len(gap)} draws: median "
                  f"{np.median(gap):+g} targets ({gap.min():+d} to {gap.max():+d}), more than the "
                  f"margin of 2 in {int(np.sum(gap > 2))}")
    numbers = {w: {k: r.get(k) for k in ("showers_seen", *GOAL, "auc", "goal_met")}
               for w, r in (("1w", one), ("2w", two))}
    rule = ("the 1-worker generator meets the goal (>= 18 of 20 targets, resolution <= 1.5x, FPD "
            "<= 5); the 2-worker one meets its resolution and FPD and its targets met lie within "
            "2 of the 1-worker's (one pair: a point comparison, at the latents of notebook 04's "
            "goal seed; their spread over other latent draws is reported beside it)")
    if one["showers_seen"] != two["showers_seen"]:
        return Outcome("inconclusive", "measured", value, rule, needs=(
            f"both runs at the same number of showers (now {one['showers_seen']:,} and "
            f"{two['showers_seen']:,}): `studies/README.md` says how each resumes"),
            numbers=numbers)
    if not one.get("goal_met"):
        planned = f"the long runs go on to {budget:,}; " if budget else ""
        return Outcome("inconclusive", "measured", value, rule, needs=(
            "a 1-worker generator of physics grade: more showers of training "
            f"({planned}`studies/README.md`)" + _trend(one)), numbers=numbers)
    margin = MARGINS["mon_targets_met"][0]
    ok = (two["targets_met"] >= one["targets_met"] - margin
          and two["worst_resolution_ratio"] <= GOAL["worst_resolution_ratio"]
          and two["fpd"] <= GOAL["fpd"])
    return Outcome("reproduced" if ok else "not reproduced", "measured", value, rule,
                   numbers=numbers)


# The rule that decides whether a long N-worker run under the winning lr rule trains like
# ``long-1w`` (both forked from the learning curve at epoch 26, compared at the same showers),
# fixed before that run: over the :data:`DRAWS` latent draws of notebook 04, paired by draw, the
# 90 % interval of targets met (N workers minus 1) must lie inside the studies' margin (+-2),
# and the FPD difference's 90 % interval (from the two FPDs' errors) inside +-FPD_MARGIN. The
# weaker rule first proposed - the paired median within the margin and FPD not significantly
# worse - passed ``long-2w`` (lr x 2): 1 to 3 targets fewer than ``long-1w`` in every one of the
# 10 draws (median 1), FPD 5.11 +- 0.97 against 3.47 +- 0.32 (1.64 worse; no difference's 90 %
# bound is 1.69). By this rule its FPD is undecided, so it is not shown to train like one worker.
FPD_MARGIN = 1.0  # a fifth of the goal's FPD <= 5
DRAWS = 10


def long_like_one(one: dict, other: dict) -> dict:
    """``other``'s long run against the 1-worker ``one`` (rows of notebook 04's
    ``long_runs.json``: ``targets_met_draws``, ``fpd``, ``fpd_error``, ``showers_seen``) by the
    rule above: ``{"targets": paired test, "fpd": {diff, low, high, margin, verdict},
    "verdict"}`` - *equivalent* when both are, *different* when either is, else *inconclusive*;
    *not comparable* at unequal showers or without :data:`DRAWS` paired draws."""
    from ...convergence.analysis import MARGINS, paired_tost

    d1, d2 = one.get("targets_met_draws") or [], other.get("targets_met_draws") or []
    if one.get("showers_seen") != other.get("showers_seen") or not len(d1) == len(d2) == DRAWS:
        return {"verdict": "not comparable", "why": (
            f"the rule compares {DRAWS} paired draws at equal showers; got {len(d1)} and "
            f"{len(d2)} draws at {one.get('showers_seen')} and {other.get('showers_seen')} "
            "showers")}
    targets = paired_tost(d2, d1, MARGINS["mon_targets_met"][0])
    diff = float(other["fpd"]) - float(one["fpd"])
    half = 1.645 * math.hypot(float(one.get("fpd_error") or 0), float(other.get("fpd_error") or 0))
    low, high = diff - half, diff + half
    fpd = {"diff": diff, "low": low, "high": high, "margin": FPD_MARGIN, "verdict": (
        "equivalent" if -FPD_MARGIN < low and high < FPD_MARGIN else
        "different" if low > FPD_MARGIN or high < -FPD_MARGIN else "inconclusive")}
    both = {targets["verdict"], fpd["verdict"]}
    verdict = ("equivalent" if both == {"equivalent"} else
               "different" if "different" in both else "inconclusive")
    return {"targets": targets, "fpd": fpd, "verdict": verdict}
