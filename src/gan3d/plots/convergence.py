"""Figures of the convergence study (notebook 02, :mod:`gan3d.convergence`): 1 worker against N
with error bars over seeds, local SGD's synchronisation frequency, the learning-rate rules.

``results`` is the study's results file (:func:`gan3d.convergence.study.load`), ``rows`` the
comparisons of :func:`gan3d.convergence.analysis.verdicts`. Every function takes an optional
``ax`` (see :mod:`gan3d.plots`) and returns the Figure.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..convergence import analysis
from ..convergence.analysis import label, row_label  # noqa: F401 - the figures' labels
from ..records import number
from . import LABELS, colours, panels, styled

__all__ = ["monitor_bands", "verdict_forest", "verdict_grid", "sync_frequency", "lr_rules"]

NAMES = {
    "profile_distance": "longitudinal-profile distance",
    "sampling_fraction": "|sampling-fraction deviation|",
    "ecal_sum_spread": "|ECAL-sum spread deviation|",
    "max_layer": "|shower-max deviation| (layers)",
    "transverse_width": "|transverse-width deviation|",
    "mon_targets_met": "targets met (of 20)",
    "d_loss": "discriminator loss",
    "g_loss": "generator loss",
}
_VERDICT_COLOUR = {"equivalent": "tab:green", "different": "tab:red", "inconclusive": "0.55",
                   "too few seeds": "0.8"}


@styled
def monitor_bands(results: dict, configs: Sequence[str],
                  monitors: Sequence[str] = ("profile_distance", "sampling_fraction", "g_loss"),
                  *, ax=None):
    """Mean over seeds (line) and +- one standard deviation (band, outlined in its colour so
    that overlapping bands stay apart) of each monitor against the showers seen, one colour per
    configuration (past the colour cycle, dashed with squares); two panels a row, to read at a
    page's width (``ax``: len(monitors) Axes)."""
    from matplotlib.colors import to_rgba

    cols = min(len(monitors), 2)
    rows = -(-len(monitors) // cols)
    fig, axes = panels(ax, rows, cols, width=4.6 * cols, height=3.0 * rows + 0.9)
    axes = np.ravel(axes)
    cycle = colours(len(configs))
    repeat = len(dict.fromkeys(cycle))  # past the colour cycle, a line changes style instead
    for i, (colour, cid) in enumerate(zip(cycle, configs)):
        fmt = ("-o", "--s", ":^")[i // repeat % 3]
        for a, name in zip(axes, monitors):
            c = analysis.curves(results, cid, name)
            if not c["n"]:
                continue
            x, m, s = np.asarray(c["showers"]), np.asarray(c["mean"]), np.asarray(c["sd"])
            a.plot(x, m, fmt, ms=3, color=colour, label=f"{label(cid)} ({c['n']} seed{'s' if c['n'] != 1 else ''})")
            a.fill_between(x, m - s, m + s, facecolor=to_rgba(colour, 0.10),
                           edgecolor=to_rgba(colour, 0.6), lw=0.8, ls="--")
    for i, (a, name) in enumerate(zip(axes, monitors)):
        a.set_xlabel("training showers seen (all workers)" if i >= len(monitors) - cols else "")
        a.set_title(NAMES.get(name, name))
        if name.endswith("loss"):
            a.set_yscale("log")
    handles, labels_ = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels_, loc="outside lower center", ncol=min(len(labels_), 3),
                   frameon=False, fontsize="small")
    fig.suptitle(f"{LABELS['measured']}: mean over seeds, and the seed-to-seed spread "
                 "(dashed band: +- 1 sd)", fontsize="medium")
    return fig


@styled
def verdict_forest(rows: Sequence[dict], *, title: str = "", ax=None):
    """Each comparison's difference of means with its 90 % interval, in units of its margin (the
    dashed lines at +-1): inside them is *equivalent* (TOST), beyond *different*, across
    *inconclusive* (``ax``: one Axes)."""
    fig, ax = panels(ax, 1, 1, width=7.0, height=0.32 * max(len(rows), 6) + 1.2)
    for i, r in enumerate(rows):
        m = number(r["margin"]) or np.nan
        colour = _VERDICT_COLOUR[r["verdict"]]
        lo, hi = number(r.get("low")) / m, number(r.get("high")) / m  # null (1 seed): no bar
        if np.isfinite(lo) and np.isfinite(hi):
            ax.plot([lo, hi], [i, i], "-", color=colour, lw=2.5)
        ax.plot(number(r["diff"]) / m, i, "o", color=colour, ms=5)
    ax.set_xscale("symlog", linthresh=1.0)  # linear inside the margins, compressed beyond
    ax.axvline(0, color="k", lw=0.8)
    for x in (-1, 1):
        ax.axvline(x, color="k", ls="--", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{row_label(r)}: {NAMES.get(r['monitor'], r['monitor'])}"
                        for r in rows], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("(candidate - reference) / margin (symmetric log beyond +-1); bar: 90 % "
                  "interval over seeds")
    for verdict, colour in _VERDICT_COLOUR.items():
        if verdict != "too few seeds":
            ax.plot([], [], "-", color=colour, lw=2.5, label=verdict)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title or f"{LABELS['measured']}: equivalence tests (TOST, alpha 0.05)")
    return fig


# The grid's short column heads, and its cells' colours by verdict (light, so the text reads).
HEADS = {"sampling_fraction": "sampling\nfraction", "ecal_sum_spread": "ECAL-sum\nspread",
         "max_layer": "shower\nmaximum", "transverse_width": "transverse\nwidth",
         "profile_distance": "profile\ndistance", "mon_targets_met": "targets\nmet",
         "d_loss": "D loss", "g_loss": "G loss"}
GRID_VERDICTS = ("equivalent", "inconclusive", "different", "too few seeds")
_CELL = {"equivalent": "#a6dba0", "inconclusive": "#e0e0e0", "different": "#f4a582",
         "too few seeds": "#ffffff"}
_RULES = ("linear", "sqrt", "none")  # the order of the lr rules' lines: by lr, largest first


@styled
def verdict_grid(rows: Sequence[dict], *, title: str = "", ax=None):
    """The paired tests as a table one reads at a glance: a line per comparison (candidate
    against its reference, with its seeds), a column per quantity; each cell coloured by its
    verdict and holding the mean difference and its 90 % interval in units of the margin
    (inside +-1 entirely: equivalent; outside entirely: different), and at its right how many
    quantities the line decided each way. The learning-rate rules come first, side by side by
    workers and rule, then the other configurations (``ax``: one Axes)."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    from ..convergence.warmstart import parse

    def order(pair: tuple[str, str | None]) -> tuple:
        c = parse(pair[0])
        rule = c["workers"] > 1 and c["sync_every"] == 1 and c["precision"] == "float32"
        return (pair[1] not in (None, "1w"), not rule, c["workers"],
                _RULES.index(c["rule"]) if rule else 0, c.get("warmup") or 0)

    pairs = sorted(dict.fromkeys((r["candidate"], r.get("reference")) for r in rows), key=order)
    names = list(dict.fromkeys(r["monitor"] for r in rows))
    cell = {(r["candidate"], r.get("reference"), r["monitor"]): r for r in rows}
    fig, ax = panels(ax, 1, 1, width=9.5, height=0.55 * max(len(pairs), 3) + 1.6)
    codes = np.full((len(pairs), len(names)), GRID_VERDICTS.index("too few seeds"))
    for i, (cand, ref) in enumerate(pairs):
        for j, name in enumerate(names):
            r = cell.get((cand, ref, name))
            if r is None:
                continue
            codes[i, j] = GRID_VERDICTS.index(r["verdict"]) if r["verdict"] in GRID_VERDICTS \
                else GRID_VERDICTS.index("too few seeds")
            m = number(r["margin"]) or np.nan
            lo, hi = number(r.get("low")) / m, number(r.get("high")) / m
            text = f"{number(r['diff']) / m:+.1f}"
            if np.isfinite(lo) and np.isfinite(hi):
                text += f"\n[{lo:+.1f}, {hi:+.1f}]"
            ax.text(j, i, text, ha="center", va="center", fontsize=7.5)
    for i, p in enumerate(pairs):
        said = [r["verdict"] for r in rows if (r["candidate"], r.get("reference")) == p]
        tally = (f"{said.count('equivalent')} equivalent\n{said.count('different')} different"
                 if set(said) - {"too few seeds"} else "too few seeds\nfor a verdict")
        ax.text(len(names) - 0.4, i, tally, ha="left", va="center", fontsize=7.5)
    ax.imshow(codes, cmap=ListedColormap([_CELL[v] for v in GRID_VERDICTS]), vmin=-0.5,
              vmax=len(GRID_VERDICTS) - 0.5, aspect="auto")
    ax.set_xticks(range(len(names)), [HEADS.get(n, n) for n in names], fontsize="small")
    ax.xaxis.tick_top()
    seeds = {p: max((int(number(r.get("n")) or 0) for r in rows
                     if (r["candidate"], r.get("reference")) == p), default=0) for p in pairs}
    def line(cand: str, ref: str | None) -> str:
        n = seeds[cand, ref]
        vs = f"\nvs {label(ref)}" if ref and ref != "1w" else ""
        return f"{label(cand)}{vs} ({n} seed{'s' * (n != 1)})"

    ax.set_yticks(range(len(pairs)), [line(*p) for p in pairs], fontsize="small")
    ax.set_xticks(np.arange(len(names) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(pairs) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.grid(which="major", visible=False)
    ax.tick_params(which="both", length=0)
    ax.legend(handles=[Patch(facecolor=_CELL[v], edgecolor="0.6", label=v)
                       for v in GRID_VERDICTS[:3]], loc="upper center", ncol=3,
              bbox_to_anchor=(0.5, -0.02), fontsize="small", frameon=False)
    ax.set_title(title or f"{LABELS['measured']}: each against 1 worker unless named, paired "
                 "by seed\nmean difference [90 % interval] in units of the margin",
                 fontsize="medium", pad=30)
    return fig


@styled
def sync_frequency(results: dict, ks: Sequence[int],
                   monitors: Sequence[str] = ("profile_distance", "sampling_fraction"), *,
                   workers: int = 12, ax=None):
    """Local SGD. Left: communication per step against k - measured here (2 ranks, shared
    memory) and modelled (ring all-reduce at ``workers`` workers over the package's networks).
    Right panels: each monitor's final value (mean +- sd over seeds) against k, with the k = 1
    spread as a band (``ax``: 1 x (1 + len(monitors)) Axes)."""
    fig, axes = panels(ax, 1, 1 + len(monitors), width=4.2 * (1 + len(monitors)), height=3.4)
    table = analysis.communication_table(results, ks, workers)
    measured = [(r["k"], r["measured_s"]) for r in table if r.get("measured_s")]
    if measured:
        axes[0].plot(*zip(*measured), "-o", color="k", label=f"{LABELS['measured']} (2 ranks)")
    for colour, net in zip(colours(len(analysis.NETWORKS)), analysis.NETWORKS):
        axes[0].plot(ks, [r[net] for r in table], "--s", color=colour, ms=4,
                     label=f"{LABELS['model']}, {workers} workers, {net}")
    axes[0].set(xscale="log", yscale="log", xlabel="k (steps between model averages)",
                ylabel="communication per step (s)", title="communication")
    axes[0].set_xticks(list(ks), [str(k) for k in ks])
    axes[0].legend(fontsize="x-small")
    for a, name in zip(axes[1:], monitors):
        ys, es = [], []
        for k in ks:
            cid = "2w-linear" + (f"-k{k}" if k > 1 else "")
            vals = [analysis.final_values(r, name) for r in results.get("runs", {}).values()
                    if r["config_id"] == cid]
            ys.append(np.mean(vals) if vals else np.nan)
            es.append(np.std(vals, ddof=1) if len(vals) > 1 else 0.0)
        a.errorbar(ks, ys, yerr=es, fmt="o-", capsize=3, color="C0",
                   label=f"{LABELS['measured']}, 2 workers (mean +- sd)")
        if np.isfinite(ys[0]):
            a.axhspan(ys[0] - es[0], ys[0] + es[0], color="C0", alpha=0.15, lw=0)
        a.set(xscale="log", xlabel="k", title=f"final {NAMES.get(name, name)}")
        a.set_xticks(list(ks), [str(k) for k in ks])
    axes[1].legend(fontsize="x-small")
    return fig


@styled
def lr_rules(results: dict, workers: Sequence[int],
             monitors: Sequence[str] = ("profile_distance", "sampling_fraction", "g_loss"),
             *, ax=None):
    """Final monitors (mean +- sd over seeds) per learning-rate rule, grouped by worker count,
    against the 1-worker spread (band) (``ax``: 1 x len(monitors) Axes)."""
    fig, axes = panels(ax, 1, len(monitors), width=4.2 * len(monitors), height=3.4)
    axes = np.atleast_1d(axes)
    rules = ("linear", "sqrt", "warmup", "none")
    runs = list(results.get("runs", {}).values())
    for a, name in zip(axes, monitors):
        ref = [analysis.final_values(r, name) for r in runs if r["config_id"] == "1w"]
        if ref:
            m, s = np.mean(ref), (np.std(ref, ddof=1) if len(ref) > 1 else 0.0)
            a.axhspan(m - s, m + s, color="0.6", alpha=0.3, lw=0, label="1 worker, mean +- sd")
            a.axhline(m, color="0.4", lw=0.8)
        for j, (colour, rule) in enumerate(zip(colours(len(rules)), rules)):
            xs, ys, es = [], [], []
            for i, n in enumerate(workers):
                vals = [analysis.final_values(r, name) for r in runs
                        if r["config_id"] == f"{n}w-{rule}"]
                if vals:
                    xs.append(i + (j - 1.5) * 0.12)
                    ys.append(np.mean(vals))
                    es.append(np.std(vals, ddof=1) if len(vals) > 1 else 0.0)
            a.errorbar(xs, ys, yerr=es, fmt="o", capsize=3, color=colour,
                       label=label(f"2w-{rule}").split(", ", 1)[1])
        cores = results.get("provenance", {}).get("machine", {}).get("cores") or 10**6
        a.set_xticks(range(len(workers)), [
            f"{n} workers\n(global batch x{n})" + ("\noversubscribed" if n > cores else "")
            for n in workers])
        a.set_title(f"final {NAMES.get(name, name)}")
        if name.endswith("loss"):
            a.set_yscale("log")
    axes[0].legend(fontsize="x-small")
    fig.suptitle(f"{LABELS['measured']}: learning-rate rules at equal showers seen",
                 fontsize="medium")
    return fig
