"""The convergence study's statistics: the equivalence test, fixed before any run, and the
communication that local SGD saves (measured here, modelled at the paper's 12 GPUs).

**The test.** For each monitor, a run's *final value* is the mean of its last two evaluations
(``FINAL_POINTS``; one evaluation of a GAN is noisy). A candidate configuration is compared with
its reference (1 worker for ``eq`` and ``lr``, the per-step all-reduce k = 1 for ``sync``) by two
one-sided Welch t-tests at alpha = 0.05 (TOST): the 90 % confidence interval of the difference
of the means, candidate - reference, is

* inside (-margin, +margin): **equivalent**;
* entirely outside it: **different**;
* otherwise: **inconclusive** (with a few seeds the interval is wide: this is the honest verdict
  when the seed-to-seed spread is large against the margin).

The margins (:data:`MARGINS`) are half of the physics monitors' targets
(:data:`gan3d.validation.monitors.TARGETS`): a difference smaller than half of what separates a
usable generator from an unusable one is called no difference. Losses get 20 % of the reference
mean (a GAN's losses measure the two players against each other, not the showers). Beside the
verdict: the distance between the mean curves in units of the seeds' spread (``curve_z``), and how many
seeds per configuration a conclusive *equivalent* would need at the spread seen
(``seeds_needed``).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np
from scipy import stats as _stats

from .. import console
from ..config import Config, to_dict
from ..parallel.netns import PROFILES
from ..scaling import perfmodel

__all__ = ["MARGINS", "FINAL_POINTS", "final_values", "tost", "paired_tost", "seeds_needed",
           "paired_seeds_needed", "compare", "verdicts", "curves",
           "measure_communication", "communication_table", "reference_of", "label", "row_label",
           "verdict_table", "tally", "savings_table"]

FINAL_POINTS = 2
# monitor: (margin, kind): "abs" in the monitor's unit, "rel" as a share of the reference mean.
MARGINS = {
    "sampling_fraction": (0.05, "abs"),   # mean |relative deviation|; target 0.10
    "ecal_sum_spread": (0.15, "abs"),     # target 0.30
    "max_layer": (0.5, "abs"),            # layers; target 1.0
    "transverse_width": (0.10, "abs"),    # target 0.20
    "profile_distance": (0.05, "abs"),    # 0 identical .. 1 disjoint
    "mon_targets_met": (2.0, "abs"),      # of 20 (energy, target) pairs
    "d_loss": (0.20, "rel"),
    "g_loss": (0.20, "rel"),
}
ALPHA = 0.05


def label(config_id: str) -> str:
    """A configuration's name in words: "2 workers, lr x N, local SGD k=16", ..."""
    parts = config_id.split("-")
    text = f"{parts[0][:-1]} worker{'s' if parts[0] != '1w' else ''}"
    rules = {"linear": "lr x N", "none": "plain lr", "sqrt": "lr x sqrt N",
             "warmup": "lr x N, warm-up"}
    if len(parts) > 1 and parts[1] != "bf16":
        text += f", {rules.get(parts[1], parts[1])}"
    for part in parts[2:]:
        if part.startswith("wu"):
            text += f", warm-up {part[2:]}"
        elif part.startswith("k"):
            text += f", local SGD k={part[1:]}"
    return text + (", bfloat16" if config_id.endswith("-bf16") else "")


def row_label(row: dict) -> str:
    """A comparison's candidate, and its reference where that is not 1 worker."""
    ref = row.get("reference")
    return label(row["candidate"]) + (f" vs {label(ref)}" if ref and ref != "1w" else "")


def reference_of(config_id: str, block: str) -> str:
    """The configuration a candidate is compared with."""
    return "2w-linear" if block == "sync" else "1w"


def final_values(run: dict, name: str) -> float:
    rows = [r for r in run["rows"] if r.get(name) is not None]
    tail = rows[-FINAL_POINTS:]
    return float(np.mean([r[name] for r in tail])) if tail else float("nan")


def _by_config(results: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run in results.get("runs", {}).values():
        out.setdefault(run["config_id"], []).append(run)
    return out


def tost(candidate: Sequence[float], reference: Sequence[float], margin: float) -> dict:
    """Welch's two one-sided tests: difference of means, its 90 % interval, and the verdict."""
    a, b = np.asarray(candidate, float), np.asarray(reference, float)
    out = {"n": [len(a), len(b)], "margin": margin, "diff": float(a.mean() - b.mean()) if len(a)
           and len(b) else float("nan")}
    if len(a) < 2 or len(b) < 2:
        return dict(out, low=float("nan"), high=float("nan"), verdict="too few seeds")
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se > 0 else 1e9
    t = float(_stats.t.ppf(1 - ALPHA, df))
    low, high = out["diff"] - t * se, out["diff"] + t * se
    if -margin < low and high < margin:
        verdict = "equivalent"
    elif low > margin or high < -margin:
        verdict = "different"
    else:
        verdict = "inconclusive"
    return dict(out, low=low, high=high, se=se, df=df, verdict=verdict)


def paired_tost(candidate: Sequence[float], reference: Sequence[float], margin: float) -> dict:
    """The paired test (seed by seed, ``candidate[i]`` with ``reference[i]``): the differences d,
    their mean and standard deviation, the 90 % t interval of the mean (n - 1 degrees of
    freedom), the verdict against +-``margin`` as in :func:`tost`, the correlation of the pairs
    (how much the pairing cancelled) and :func:`paired_seeds_needed`."""
    a, b = np.asarray(candidate, float), np.asarray(reference, float)
    if len(a) != len(b):
        raise ValueError(f"a paired test needs as many candidate as reference values "
                         f"({len(a)} and {len(b)})")
    d = a - b
    out = {"n": len(d), "margin": margin, "mean": _mean(a), "sd": _sd(a), "ref_mean": _mean(b),
           "ref_sd": _sd(b), "diff": _mean(d), "diff_sd": _sd(d), "diffs": d.tolist()}
    if len(d) < 2 or not np.isfinite(d).all():
        return dict(out, low=float("nan"), high=float("nan"), verdict="too few seeds",
                    corr=float("nan"), seeds_needed=float("nan"))
    se = float(d.std(ddof=1)) / math.sqrt(len(d))
    t = float(_stats.t.ppf(1 - ALPHA, len(d) - 1))
    low, high = out["diff"] - t * se, out["diff"] + t * se
    verdict = ("equivalent" if -margin < low and high < margin else
               "different" if low > margin or high < -margin else "inconclusive")
    both = a.std() > 0 and b.std() > 0
    return dict(out, low=low, high=high, se=se, verdict=verdict,
                corr=float(np.corrcoef(a, b)[0, 1]) if both else float("nan"),
                seeds_needed=paired_seeds_needed(out["diff"], out["diff_sd"], margin))


def paired_seeds_needed(diff: float, sd: float, margin: float, cap: int = 10_000) -> float:
    """Seeds with which the paired interval would decide at the mean difference ``diff`` and
    the spread ``sd`` seen: the least n with t(n - 1) sd / sqrt(n) < | margin - |diff| | (inside
    the margin: equivalent; outside: different). NaN where |diff| = margin or a value is not
    finite; ``cap`` + 1 for "more than ``cap``"."""
    gap = abs(margin - abs(diff))
    if not (math.isfinite(diff) and math.isfinite(sd) and gap > 0):
        return float("nan")
    for n in range(2, cap + 1):
        if float(_stats.t.ppf(1 - ALPHA, n - 1)) * sd / math.sqrt(n) < gap:
            return float(n)
    return float(cap + 1)


def seeds_needed(a: Sequence[float], b: Sequence[float], margin: float) -> float:
    """Seeds per configuration with which a true difference of zero would be called equivalent
    (the 90 % interval narrower than +-margin), at the spread of ``a`` and ``b``: n >= 2 (t s /
    margin)^2 with the pooled standard deviation s and t ~ 1.65 (many seeds). NaN with < 2 each
    or when a value is not finite (a monitor of a generator that deposited no energy)."""
    if len(a) < 2 or len(b) < 2 or not margin > 0:
        return float("nan")
    pooled = math.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)
    if not math.isfinite(pooled):
        return float("nan")
    return float(max(2, math.ceil(2 * (1.645 * pooled / margin) ** 2)))


def compare(results: dict, candidate: str, reference: str) -> dict:
    """Per monitor of :data:`MARGINS`: means and standard deviations over seeds, the TOST result
    and the curve distance, candidate against reference."""
    groups = _by_config(results)
    cand, ref = groups.get(candidate, []), groups.get(reference, [])
    out = {}
    for name, (margin, kind) in MARGINS.items():
        a = [final_values(r, name) for r in cand]
        b = [final_values(r, name) for r in ref]
        m = margin * abs(float(np.mean(b))) if kind == "rel" and b else margin
        res = tost(a, b, m)
        res.update(mean=_mean(a), sd=_sd(a), ref_mean=_mean(b), ref_sd=_sd(b),
                   curve_z=_curve_z(cand, ref, name), seeds_needed=seeds_needed(a, b, m))
        out[name] = res
    return out


def verdicts(results: dict) -> list[dict]:
    """Every comparison of the study: one row per (candidate, monitor)."""
    rows = []
    seen = set()
    for run in sorted(results.get("runs", {}).values(), key=lambda r: (r["block"], r["config_id"])):
        cid = run["config_id"]
        ref = reference_of(cid, run["block"])
        if cid == ref or (cid, ref) in seen:
            continue
        seen.add((cid, ref))
        for name, res in compare(results, cid, ref).items():
            rows.append({"block": run["block"], "candidate": cid, "reference": ref,
                         "monitor": name, **res})
    return rows


def curves(results: dict, config_id: str, name: str) -> dict:
    """Mean and standard deviation over seeds of monitor ``name`` at every evaluation."""
    runs = _by_config(results).get(config_id, [])
    if not runs:
        return {"showers": [], "mean": [], "sd": [], "n": 0}
    length = min(len(r["rows"]) for r in runs)
    values = np.array([[r["rows"][i].get(name) for i in range(length)] for r in runs], float)
    return {"showers": [runs[0]["rows"][i]["showers_seen"] for i in range(length)],
            "mean": np.nanmean(values, axis=0).tolist(),
            "sd": (np.nanstd(values, axis=0, ddof=1) if len(runs) > 1
                   else np.zeros(length)).tolist(), "n": len(runs)}


def _curve_z(cand: list[dict], ref: list[dict], name: str) -> float:
    """Mean over evaluations of |mean difference| / pooled seed standard deviation."""
    if len(cand) < 2 or len(ref) < 2:
        return float("nan")
    n = min(min(len(r["rows"]) for r in cand), min(len(r["rows"]) for r in ref))
    a = np.array([[r["rows"][i].get(name) for i in range(n)] for r in cand], float)
    b = np.array([[r["rows"][i].get(name) for i in range(n)] for r in ref], float)
    pooled = np.sqrt((a.var(axis=0, ddof=1) + b.var(axis=0, ddof=1)) / 2)
    z = np.abs(a.mean(axis=0) - b.mean(axis=0)) / np.where(pooled > 0, pooled, np.nan)
    return float(np.nanmean(z)) if np.isfinite(z).any() else float("nan")


def _mean(x):
    return float(np.mean(x)) if len(x) else float("nan")


def _sd(x):
    return float(np.std(x, ddof=1)) if len(x) > 1 else float("nan")


# ---------------------------------------------------------------------------------------------
# Communication: per step with the gradient all-reduce (k = 1) against local SGD's averaging


def state_bytes(counts: dict | None = None) -> float:
    """Bytes local SGD averages: G's and D's weights and RMSprop mean squares, float32
    (BatchNorm statistics, < 1 % more, left out)."""
    c = dict(perfmodel.REFERENCE_COUNTS, **(counts or {}))
    return 2 * 4.0 * (c["d_trainable_params"] + c["g_trainable_params"])


def measure_communication(cfg: Config, repeats: int = 20) -> dict:
    """Median all-reduce seconds on 2 ranks here (Horovod, as training calls it) of one step's
    messages - the losses (32 B), D's and G's gradients - and of local SGD's state."""
    import tempfile
    from pathlib import Path

    from ..parallel.jobs import launch_job

    c = perfmodel.REFERENCE_COUNTS
    sizes = [32, 4 * c["d_trainable_params"], 4 * c["g_trainable_params"], int(state_bytes())]
    with tempfile.TemporaryDirectory() as tmp:
        res = launch_job(2, {"task": "allreduce", "sizes": sizes, "repeats": repeats, "threads": 1},
                         Path(tmp), "comm", timeout=900)
    t = dict(zip(["loss", "d", "g", "state"], res["horovod_s"]))
    return {"ranks": 2, "sizes": dict(zip(["loss", "d", "g", "state"], sizes)), "horovod_s": t,
            "k1_step_s": t["loss"] + 2 * t["d"] + 2 * t["g"], "sync_s": t["loss"] + t["state"],
            "config": to_dict(cfg)["study"]}


# The links of the package's emulated networks (gan3d.parallel.netns), for the model.
NETWORKS = {{"edr": "EDR", "10gbe": "10 GbE", "1gbe": "1 GbE"}[key]:
            perfmodel.Link(PROFILES[key].rate_Bps, PROFILES[key].latency_s)
            for key in ("edr", "10gbe", "1gbe")}


def communication_table(results: dict, ks: Sequence[int], workers: int = 12) -> list[dict]:
    """Per k: communication seconds per step measured here (2 ranks; k > 1 from the runs' own
    synchronisations, k = 1 from the all-reduce measurement) and modelled (ring all-reduce,
    :func:`gan3d.scaling.perfmodel.allreduce_time`) at ``workers`` workers per network, with the
    share saved against k = 1."""
    c = perfmodel.REFERENCE_COUNTS
    grads = [4.0 * c["d_trainable_params"]] * 2 + [4.0 * c["g_trainable_params"]] * 2
    comm = results.get("communication", {})
    measured_sync = {}
    for run in results.get("runs", {}).values():
        k, rows = run["sync_every"], run["rows"]
        syncs = sum(r.get("syncs") or 0 for r in rows)
        if k > 1 and syncs:
            measured_sync.setdefault(k, []).append(sum(r.get("time_sync_s") or 0 for r in rows)
                                                   / syncs)
    out = []
    for k in ks:
        row: dict = {"k": k}
        if k == 1:
            row["measured_s"] = comm.get("k1_step_s")
        elif k in measured_sync:
            row["measured_s"] = statistics.median(measured_sync[k]) / k
        for net, link in NETWORKS.items():
            step = sum(perfmodel.allreduce_time(b, workers, link) for b in grads)
            sync = perfmodel.allreduce_time(state_bytes(), workers, link)
            row[net] = step if k == 1 else sync / k
            row[f"{net} saved"] = 1 - row[net] / step
        if row.get("measured_s") is not None and comm.get("k1_step_s"):
            row["measured saved"] = 1 - row["measured_s"] / comm["k1_step_s"]
        out.append(row)
    return out


def verdict_table(rows: Sequence[dict], block: str) -> str:
    """Markdown: the comparisons of :func:`verdicts` in ``block`` ("eq", "sync", "lr"), one row
    each, then :func:`tally`'s line per candidate."""
    table = console.table(
        [[r["candidate"], r["reference"], r["monitor"], f"{r['n'][0]}, {r['n'][1]}",
          f"{r['mean']:.3g} +- {r['sd']:.2g}", f"{r['ref_mean']:.3g} +- {r['ref_sd']:.2g}",
          f"[{r['low']:.3g}, {r['high']:.3g}]", f"{r['margin']:.3g}", f"{r['curve_z']:.2f}",
          f"{r['seeds_needed']:.0f}", f"**{r['verdict']}**"] for r in rows if r["block"] == block],
        ["candidate", "reference", "monitor", "seeds", "candidate mean +- sd",
         "reference mean +- sd", "90 % interval of the difference", "margin",
         "curve distance (sd)", "seeds needed", "verdict"])
    return table + "\n\n" + tally(rows, block)


def tally(rows: Sequence[dict], block: str) -> str:
    """Markdown, one line per candidate of ``block``: how many monitors got each verdict, and
    which."""
    found: dict = {}
    for r in rows:
        if r["block"] == block:
            found.setdefault((r["candidate"], r["reference"]), {}).setdefault(
                r["verdict"], []).append(r["monitor"])
    return "\n".join(f"* **{label(c)}** against {label(ref)}: "
                     + "; ".join(f"{v} {len(m)} ({', '.join(m)})" for v, m in sorted(by.items()))
                     for (c, ref), by in found.items())


def savings_table(comm: Sequence[dict]) -> str:
    """Markdown: :func:`communication_table`'s rows, per k the communication per step measured
    here and modelled per network at 12 workers (ms), with the share saved against k = 1."""
    nets = list(NETWORKS)
    return console.table(
        [[r["k"], f"{1e3 * r['measured_s']:.2f}" if r.get("measured_s") else "-",
          *(f"{1e3 * r[n]:.3g} ({100 * r[n + ' saved']:.0f} %)" for n in nets)] for r in comm],
        ["k", "measured here (ms/step)", *(f"{n}, 12 workers (ms/step, saved)" for n in nets)])
