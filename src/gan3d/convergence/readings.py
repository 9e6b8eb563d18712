"""What notebook 02 says beside its figures, from the numbers: its training runs (settings,
throughput, the two backends' last epochs, the physics monitors met), the shipped reference
generator's targets, and the warm-start study (where its results come from, its paired
comparisons, how many quantities each configuration decided). Markdown strings; tables through
:func:`gan3d.console.table`.

``histories`` maps a run's label ("1 worker", "N workers") to its history rows
(:func:`gan3d.gan.history.read_history`).
"""

from __future__ import annotations

import collections
from typing import Mapping, Sequence

import numpy as np

from .. import console
from ..config import Config
from ..records import shown
from . import warmstart
from .analysis import label, row_label

__all__ = ["training_line", "throughput", "throughput_reading", "jax_summary", "backends_table",
           "monitors_reading", "showers_needed", "warm_rows", "warm_configs", "warm_description",
           "warm_table", "training_summary", "FINAL_LOSSES"]

FINAL_LOSSES = ("d_loss", "g_loss", "test_d_loss", "test_g_loss")


def training_line(cfg: Config) -> str:
    """One line on the training settings of ``cfg``: epochs, batch, steps, learning rate, loss
    weights, evaluation."""
    t = cfg.train
    return (f"profile {cfg.profile}: {t.epochs} epochs, batch {t.batch_size} per worker, "
            f"{t.steps_per_epoch or 'all'} steps per epoch, lr {t.learning_rate:g} "
            f"(x workers: {t.scale_lr}), loss weights {list(t.loss_weights)}, eval {t.eval_mode}")


def _rate(rows: Sequence[Mapping]) -> float:
    """Showers per second over the timed epochs (over all, where none is timed)."""
    timed = [r for r in rows if r["timed"]] or rows
    return sum(r["showers_per_s"] for r in timed) / len(timed)


def throughput(histories: Mapping[str, Sequence[Mapping]]) -> dict[str, float]:
    """Per run: training showers per second, the mean over its timed epochs."""
    return {k: _rate(rows) for k, rows in histories.items()}


def throughput_reading(histories: Mapping[str, Sequence[Mapping]], workers: int) -> str:
    """Markdown: the throughput of the 1-worker and the ``workers``-worker run, their threads,
    and why their ratio is not the paper's scaling efficiency."""
    rate = throughput(histories)
    r1, rn = rate["1 worker"], rate[f"{workers} workers"]
    h1, hn = histories["1 worker"][-1], histories[f"{workers} workers"][-1]
    return (f"Training throughput over the timed epochs: **{r1:.2f}** showers/s on 1 worker with "
            f"{h1['threads']} thread(s), **{rn:.2f}** on {workers} workers with {hn['threads']} "
            f"thread(s) each (ratio {rn / r1:.2f}). An epoch of {workers} workers trains "
            f"{hn['steps'] * hn['batch_size'] * workers} showers against "
            f"{h1['steps'] * h1['batch_size']} for one worker, so its epochs are not comparable by "
            "length; showers per second are. The workers share this machine's cores, so the ratio "
            "is not the paper's scaling efficiency (notebook 03 measures that, a worker being the "
            "same hardware at every count).")


def jax_summary(run: Mapping) -> dict:
    """What notebook 02 keeps of a run on the JAX backend (a
    :func:`gan3d.parallel.cluster.train_on_engines` result): its output, workers, showers/s over
    the timed epochs and its last epoch's losses."""
    from ..gan.history import read_history

    rows = read_history(run["history"])
    return {"output": run["output"], "workers": run["workers"], "showers_per_s": _rate(rows),
            "final": {n: rows[-1][n] for n in FINAL_LOSSES}}


def backends_table(histories: Mapping[str, Sequence[Mapping]], workers: int, jax: Mapping) -> str:
    """Markdown: the last epoch of the ``workers``-worker Horovod run against the JAX run's
    (:func:`jax_summary`), losses and showers/s over the timed epochs."""
    rows = histories[f"{workers} workers"]
    runs = [("Horovod", workers, rows[-1], _rate(rows)),
            ("JAX", jax["workers"], jax["final"], jax["showers_per_s"])]
    return "Last epoch of each backend:\n\n" + console.table(
        [[name, n, *(f"{row[k]:.3g}" for k in FINAL_LOSSES), f"{rate:.2f}"]
         for name, n, row, rate in runs],
        ["backend", "workers", "d_loss", "g_loss", "test d_loss", "test g_loss",
         "showers/s (timed epochs)"])


def monitors_reading(row: Mapping, workers: int) -> str:
    """Markdown: the physics-monitor targets a quick run met at its last epoch (``row``), or
    that it had none (``train.monitor_showers: 0``)."""
    if "mon_targets_met" not in row:
        return (f"The quick {workers}-worker run trained without physics monitors "
                "(`train.monitor_showers: 0`).")
    return (f"The quick {workers}-worker run after {row['showers_seen']:,} showers: "
            f"**{row['mon_targets_met']} of {row['mon_targets']}** (energy, target) pairs met.")


def showers_needed(info: Mapping) -> str:
    """Markdown: the training showers after which the shipped reference generator met each
    target for good (``info``: :func:`gan3d.gan.reference.info`)."""
    needed = {k: (f"{v:,}" if v else "not met at the end") for k, v in info["showers_needed"].items()}
    return ("Training showers after which each target was met at every energy and stayed met: "
            + "; ".join(f"{k} {v}" for k, v in needed.items()) + f". {info['note']}")


def warm_rows(warm: dict) -> list[dict]:
    """The warm-start study's comparisons: every configuration against 1 worker, as the study
    saved them, then local SGD against k = 1 (:data:`gan3d.convergence.warmstart.ALSO`)."""
    return warm.get("verdicts", []) + warmstart.also_verdicts(warm)


def _by_config(warm: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in warm["runs"].values():
        out.setdefault(r["config_id"], []).append(r)
    return out


def warm_configs(warm: dict) -> list[str]:
    """The configurations of the warm-start study's runs, in the order they were run."""
    return list(_by_config(warm))


def warm_description(warm: dict, path: str, cfg: Config) -> str:
    """Markdown: the warm-start results file ``path``: its runs per configuration and their
    throughput, the checkpoint they fork, the commit and machine that made them, what is not run
    yet (of ``cfg``'s warm-start plan) and what was left out; or that it holds no runs yet."""
    if not warm["runs"]:
        return f"`{path}` holds no runs yet: `gan3d warm-start` makes them (resumable)."
    state = warmstart.status(cfg, warm)
    prov, machine, parent = warm["provenance"], warm.get("machine", {}), warm["parent"]
    last = machine.get("cpu_model") or "an unnamed CPU"

    def cpu(run: dict) -> str:  # runs record their CPU; the file's machine is its last writer's
        return run.get("machine") or last

    def rate(rs: list[dict]) -> str:  # throughput per CPU: machines differ by 2-3x
        by = collections.defaultdict(list)
        for x in rs:
            by[cpu(x)].append(x["showers_per_s"])
        return ", ".join(f"{np.median(v):.1f} showers/s" + (f" on {m}" if len(by) > 1 else "")
                         for m, v in by.items())

    runs = ", ".join(f"{label(c)}: {len(rs)} seed(s), {rate(rs)}"
                     for c, rs in _by_config(warm).items())
    cpus = collections.Counter(cpu(r) for r in warm["runs"].values())
    made = ("" if len(cpus) == 1 else "; runs made on "
            + ", ".join(f"{m} ({n})" for m, n in cpus.most_common()))
    yes = {True: "yes", False: "no"}
    return (f"`{path}`: **{len(warm['runs'])} runs** ({runs}), forked from `{parent['path']}` (epoch "
            f"{parent['epoch']}, {parent['showers_seen']:,} showers, SHA-256 "
            f"{parent['sha256'][:12]}); last written by commit `{str(prov.get('commit'))[:7]}` "
            f"({'clean' if prov.get('clean') else 'uncommitted changes'}) on "
            f"{last} ({machine.get('cores', '?')} cores, "
            f"AVX-512 {yes[bool(machine.get('avx512'))]}, bfloat16 "
            f"{yes[bool(machine.get('bfloat16'))]}){made}"
            + (f"; not run yet: {', '.join(state['missing'])} (`gan3d warm-start` continues)"
               if state["missing"] else "")
            + "".join(f"; {c} left out: {why}" for c, why in warm.get("skipped", {}).items())
            + ".")


def warm_table(warm: dict, rows: Sequence[dict]) -> str:
    """Markdown: the warm-start study's paired comparisons (``rows``: :func:`warm_rows`), then per
    configuration how many quantities it decided against 1 worker, and local SGD's against k = 1
    (the ledger's ``local-sgd``)."""
    table = console.table(
        [[row_label(r), r["monitor"], r["n"], f"{shown(r['mean'])} +- {shown(r['sd'], '.2g')}",
          f"{shown(r['ref_mean'])} +- {shown(r['ref_sd'], '.2g')}",
          f"{shown(r['diff'])} +- {shown(r['diff_sd'], '.2g')}",
          f"[{shown(r['low'])}, {shown(r['high'])}]", f"{r['margin']:.3g}",
          shown(r["corr"], ".2f"), f"**{r['verdict']}**",
          "-" if r["verdict"] in warmstart.DECIDED else shown(r["seeds_needed"], ".0f")]
         for r in rows],
        ["candidate", "quantity", "seeds", "candidate mean +- sd", "reference mean +- sd",
         "paired difference +- sd", "90 % interval", "margin", "correlation", "verdict",
         "seeds needed"])
    lines = []
    for c in warm_configs(warm):
        if c == "1w":
            continue
        counts = collections.Counter(r["verdict"] for r in rows
                                     if r["candidate"] == c and r["reference"] == "1w")
        lines.append(f"* **{label(c)}** against 1 worker: {warmstart.decided(warm, c)} of "
                     f"{len(warmstart.QUANTITIES)} quantities decided "
                     f"({'; '.join(f'{v} {k}' for k, v in sorted(counts.items()))})")
    k16 = [r for r in rows if r["reference"] == "2w-linear"]
    text = table + "\n\n" + "\n".join(lines)
    if k16:
        text += ("\n* **local SGD k = 16** against 2 workers with k = 1 (the ledger's `local-sgd`): "
                 f"{sum(r['verdict'] in warmstart.DECIDED for r in k16)} of {len(k16)} quantities "
                 "decided")
    return text


def training_summary(cfg: Config, workers: int, one: Mapping, many: Mapping,
                     histories: Mapping[str, Sequence[Mapping]], *, jax: Mapping | None,
                     shown_energies: Sequence[float], reference_label: str, reference: Mapping,
                     convergence: Mapping) -> dict:
    """What notebook 02 writes to ``training_summary.json``: its settings, the 1- and
    ``workers``-worker runs (``one``, ``many``: :func:`gan3d.parallel.cluster.train_on_engines`
    results) with their throughput and last losses, the JAX run (:func:`jax_summary`), the
    reference showers drawn, the quick run's monitors, the shipped reference generator
    (``reference``: :func:`gan3d.gan.reference.info`), the studies shown (``convergence``), the
    configuration and provenance."""
    from ..config import to_dict
    from ..io import provenance

    rate = throughput(histories)
    r1, rn = rate["1 worker"], rate[f"{workers} workers"]
    h1, hn = histories["1 worker"][-1], histories[f"{workers} workers"][-1]
    return {
        "profile": cfg.profile, "workers": workers, "epochs": cfg.train.epochs,
        "batch_per_worker": cfg.train.batch_size,
        "runs": {"1": {"output": one["output"], "final": one["final"], "showers_per_s": r1,
                       "threads": h1["threads"]},
                 str(workers): {"output": many["output"], "final": many["final"],
                                "showers_per_s": rn, "threads": hn["threads"]}},
        "throughput_ratio": rn / r1,
        "jax": jax,
        "final_losses": {k: {n: rows[-1][n] for n in FINAL_LOSSES} for k, rows in histories.items()},
        "reference_showers": {"source": cfg.data.source, "energies_gev": list(shown_energies)},
        "quick_monitors": {"showers_seen": hn["showers_seen"],
                           "targets_met": hn.get("mon_targets_met"),  # None: monitors off
                           "targets": hn.get("mon_targets")},
        "reference_generator": {"label": reference_label, "showers_seen": reference["showers_seen"],
                                "targets_met": reference["final_monitors"]["targets_met"],
                                "showers_needed": reference["showers_needed"]},
        "convergence": dict(convergence),
        "config": to_dict(cfg), "provenance": provenance(),
    }
