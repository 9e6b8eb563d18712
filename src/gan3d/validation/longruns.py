"""The long runs' generators against the goal of a physics-grade generator (notebook 04).

:func:`records` reads the long runs notebook 04 validates (shipped generators, training folders or
checkpoints), :func:`assess` measures each against the goal (at 256 showers per energy >= 18 of
the 20 targets, energy resolution within 1.5x of the reference's in every bin, FPD <= 5), and
:func:`tables` shows what each run cost and where it stands. The sessions that trained the
committed runs (:data:`RUNS`) are recorded in ``studies/README.md``, whose numbers
``python tools/pages longruns`` renders from the checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .. import console

__all__ = ["RUNS", "BUDGET", "RULES", "lr_rule", "like_one_table", "label", "records", "assess", "tables", "are_committed"]

log = console.get_logger(__name__)

# The committed long runs by name (studies/README.md's tables): the pair, and the third run, 2
# workers under the plain lr (the rule the warm-start study found to train 2 workers like one)
RUNS = {"1 worker": "studies/long-1w-bf16", "2 workers": "studies/long-2w-bf16",
        "2 workers, plain lr": "studies/long-2w-none-bf16"}
BUDGET = 227_200  # showers each run goes to: 201,600 at lr 1e-3 (x 2), then 25,600 at a tenth
RULES = {"linear": "", "none": ", plain lr", "sqrt": ", lr x sqrt N"}  # the paper's rule: unnamed


def lr_rule(rec: Mapping) -> str:
    """The learning-rate rule a long run trains under (``train.lr_rule``; the paper's, ``linear``,
    where the record does not say)."""
    return ((rec.get("config") or {}).get("train") or {}).get("lr_rule") or "linear"


def label(rec: Mapping) -> str:
    """A long run's name by its workers and training showers (``rec``: a
    :func:`gan3d.validation.study.generator_record`)."""
    w = rec["workers"]
    rule = RULES.get(lr_rule(rec), f", lr rule {lr_rule(rec)}") if w > 1 else ""
    return f"{w} worker{'s' if w > 1 else ''}{rule}, long run ({rec['showers_seen']:,} showers)"


def records(paths: Sequence[str]) -> dict[str, dict]:
    """Label -> what each long run's generator says of its run (a shipped pair's name, an
    exported folder, a training folder or a checkpoint; ``source``: the path given). A path that
    holds none of these is left out, with a warning."""
    from .study import generator_record

    out = {}
    for path in paths:
        rec = generator_record(path)
        if rec is None:
            log.warning("%s: no exported generator and no checkpoint there, left out", path)
            continue
        out[label(rec)] = dict(rec, source=path)
    return out


def _own(r: Mapping) -> tuple[dict, list[dict]]:
    """Where a run left the learning curve (its first fork, {} if trained from scratch) and its
    own epochs after it."""
    fork = r["forks"][0] if r["forks"] else {}
    return fork, [x for x in r["history"] if x["epoch"] > fork.get("epoch", 0)]


def _cost(r: Mapping) -> dict:
    """A run's own learning rates in turn, hours of training and median showers/s."""
    from .trend import lr_changes

    _, own = _own(r)
    return {"rates": [own[0]["lr"], *(b["lr"] for _, b in lr_changes(own))],
            "hours": sum(x.get("time_epoch_s") or 0 for x in own) / 3600,
            "rate": float(np.median([x["showers_per_s"] for x in own if x.get("showers_per_s")]))}


def _monitors(net, showers: int, seed: int) -> dict:
    """The monitors of ``showers`` generated showers per monitor energy, latents of ``seed``,
    against as many reference showers."""
    from ..gan.model import generate_showers
    from .monitors import MONITOR_ENERGIES, compare

    es, n = MONITOR_ENERGIES, showers
    gen = generate_showers(net, np.repeat(np.asarray(es), n), seed=seed, batch_size=4 * n)
    return compare({e: gen[i * n:(i + 1) * n] for i, e in enumerate(es)}, n_reference=n)


def assess(long: Mapping[str, Mapping], per_bin: Mapping[str, Mapping], metrics: dict, *,
           showers: int, seed: int, draws: int) -> dict[str, dict]:
    """Per long run (``long``: :func:`records`): its showers, hours and throughput, the targets
    met by ``showers`` generated showers per monitor energy with the latents of ``seed`` and of
    the ``draws - 1`` seeds after it, its worst energy resolution over the reference's (the
    validation's bins, ``per_bin``), FPD and AUC of the inclusive sample (``metrics``: the
    validation's), whether it meets the goal, and the showers its trend would need to reach each
    goal (estimated, :func:`gan3d.validation.trend.showers_to_goal`)."""
    from .monitors import history_row
    from .study import headline, load_networks, resolution_table
    from .trend import GOAL_TARGETS, RESOLUTION_RATIO, showers_to_goal

    res = resolution_table(per_bin)
    head = headline(metrics)
    ref_res = np.asarray(res["reference"]["resolution"])
    out = {}
    for lab, r in long.items():
        fork, _ = _own(r)
        cost = _cost(r)
        net, _ = load_networks(r["path"])
        mon = history_row(_monitors(net, showers, seed))
        met_draws = [mon["mon_targets_met"]] + [  # the same goal on other latent draws
            _monitors(net, showers, seed + k)["targets_met"] for k in range(1, draws)]
        worst = float(np.max(np.asarray(res[lab]["resolution"]) / ref_res))
        fpd, fpd_err, auc = head[lab]["fpd"], head[lab]["fpd_error"], head[lab]["auc_high"]
        met = mon["mon_targets_met"] >= GOAL_TARGETS and worst <= RESOLUTION_RATIO and fpd <= 5
        out[lab] = {"showers_seen": r["showers_seen"], "epoch": r["epoch"],
                    "workers": r["workers"], "lr_rule": lr_rule(r), "hours": cost["hours"],
                    "median_showers_per_s": cost["rate"], "forked_at": fork.get("epoch"),
                    "targets_met": mon["mon_targets_met"], "targets_met_draws": met_draws,
                    "worst_resolution_ratio": worst, "fpd": fpd, "fpd_error": fpd_err, "auc": auc,
                    "goal_met": met}
    for lab, r in long.items():  # estimated: an extrapolation of the monitors
        out[lab]["showers_to_goal"] = showers_to_goal(r["history"])
    return out


def _runs_table(long: Mapping[str, Mapping]) -> str:
    rows = []
    for lab, r in long.items():
        fork, _ = _own(r)
        cost, prov = _cost(r), r["provenance"] or {}
        start = (f"forked at epoch {fork['epoch']} ({fork['showers_seen']:,} showers)" if fork
                 else "from scratch")
        start += "".join(f"; forked again at epoch {f['epoch']} ({f['showers_seen']:,}) to change "
                         + ", ".join(k for k in f["changed"]) for f in r["forks"][1:])
        shipped = r.get("exported_from")  # the checkpoint the shipped weights came from
        where = (f"`{r['source']}` (weights of `{shipped['checkpoint']}`)" if shipped
                 else f"`{r['source']}`")
        rows.append([lab, f"{where} epoch {r['epoch']}", start, r["workers"],
                     " -> ".join(f"{v:g}" for v in cost["rates"]), r["history"][-1]["batch_size"],
                     r["precision"], f"{r['showers_seen']:,}", f"{cost['hours']:.1f}",
                     f"{cost['rate']:.1f}", f"`{str(prov.get('commit'))[:7]}`"])
    return console.table(rows, ["run", "checkpoint", "start", "workers", "lr", "batch per worker",
                                "precision", "showers seen", "hours of its own training",
                                "median showers/s", "commit"])


def tables(long: Mapping[str, Mapping], assessed: Mapping[str, dict], *, showers: int,
           seed: int, draws: int, bin_showers: int) -> str:
    """Markdown: what each long run cost (its checkpoint, start, workers, learning rates, batch,
    precision, showers, hours, throughput, commit), then each against the goal (``assessed``:
    :func:`assess` at ``showers`` per energy, latents of ``seed`` and ``draws`` draws), and how
    to read it (``bin_showers``: the validation's showers per bin)."""
    goal = console.table(
        [[lab, a["targets_met"], f"{np.median(a['targets_met_draws']):g} "
          f"[{min(a['targets_met_draws'])}, {max(a['targets_met_draws'])}]; >= 18 in "
          f"{sum(d >= 18 for d in a['targets_met_draws'])}", f"{a['worst_resolution_ratio']:.2f}x",
          f"{a['fpd']:.3g} +- {a['fpd_error']:.2g}", f"{a['auc']:.3f}",
          "**yes**" if a["goal_met"] else "no"] for lab, a in assessed.items()],
        ["generator", f"targets met (of 20, {showers} showers per energy)",
         f"over {draws} latent draws: median [min, max]; draws with >= 18",
         "resolution / reference's, worst bin", "FPD", "AUC", "goal met"])
    return (_runs_table(long) + "\n\n" + goal + "\n\nResolution: sigma/mean of the sampling "
            f"fraction in the validation's energy bins ({bin_showers} showers per bin), the "
            "generator's over the reference's; FPD and AUC: the inclusive sample of section 2. "
            f"The goal is judged at the latents of seed {seed}, fixed before the runs; the targets "
            f"met on {draws} latent draws (seeds {seed}-{seed + draws - 1}, the same for both "
            "generators) say how much of it is the draw.")


def are_committed(long: Mapping[str, Mapping]) -> bool:
    """Whether the long runs are the committed ones (:data:`RUNS`), shipped or as trained."""
    runs_of = sorted(str(Path(r["exported_from"]["checkpoint"]).parent)
                     if r.get("exported_from") else r["source"] for r in long.values())
    return runs_of == sorted(RUNS.values())


def like_one_table(judged: Mapping[str, Mapping]) -> str:
    """Markdown: each N-worker long run against the 1-worker one (``judged``: label -> the
    verdict of :func:`gan3d.report.claims.equivalence.long_like_one`, the rule fixed before the
    third long run): the paired difference of targets met over the latent draws and of FPD, each
    with its 90 % interval against its margin, and the verdict."""
    def cell(x: Mapping) -> str:
        return (f"{x['diff']:+.2f} [{x['low']:+.2f}, {x['high']:+.2f}], margin +-{x['margin']:g}: "
                f"{x['verdict']}")

    rows = [[lab, cell(j["targets"]), cell(j["fpd"]), f"**{j['verdict']}**"] if "targets" in j
            else [lab, "-", "-", f"**{j['verdict']}**: {j['why']}"] for lab, j in judged.items()]
    return console.table(rows, ["generator", "targets met minus the 1-worker one's, paired over "
                                "the latent draws [90 %]", "FPD minus the 1-worker one's [90 %]",
                                "like 1 worker?"])
