"""Figures of the scaling study (paper Figures 1-3, the overall time, the model's projection).

Each function takes the JSON results of :mod:`gan3d.scaling.experiments` (or a fabric of
:mod:`gan3d.scaling.topology`) and an optional ``ax`` (see :mod:`gan3d.plots`), and returns the
Figure; what was measured here, what the paper published and what is modelled is told apart by
:data:`gan3d.plots.LABELS` in every legend.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Sequence

import numpy as np
from matplotlib.patches import FancyBboxPatch, Patch

from ..scaling import perfmodel as pm
from . import LABELS, Figure, panels, styled

__all__ = ["node_fabric", "step_breakdown", "allreduce_bandwidth", "speedup_efficiency",
           "overall_time", "model_projection", "roofline"]

_KIND_COLOUR = {"nvlink": "#009E73", "smp": "#E69F00", "memory": "#777777", "pcie": "#0072B2",
                "infiniband": "#CC79A7", "network": "#CC79A7"}
_BOX_COLOUR = {"cpu": "#DCE9F5", "memory": "#EEEEEE", "gpu": "#D9F2E6", "nic": "#F6E0EE",
               "network": "#FFFFFF"}
_PART_COLOUR = {"compute": "#0072B2", "wait": "#E69F00", "comm": "#D55E00"}
_ROW = {"memory": 3.0, "cpu": 2.0, "gpu": 0.9}


def _positions(fabric: dict) -> dict[str, tuple[float, float]]:
    """Socket columns: memory above the socket, GPUs below it, NICs beside the memory on the
    outer side (so no link crosses a box), the outside network on top."""
    groups = sorted({c["group"] for c in fabric["components"] if c["group"] is not None})
    col = {g: 4.8 * i for i, g in enumerate(groups)}
    centre = float(np.mean(list(col.values()))) if col else 0.0
    pos: dict[str, tuple[float, float]] = {}
    for g in groups:
        for kind, y in _ROW.items():
            members = [c for c in fabric["components"] if c["kind"] == kind and c["group"] == g]
            for i, c in enumerate(members):
                pos[c["id"]] = (col[g] + (i - (len(members) - 1) / 2) * 2.3, y)
        side = -1.0 if col[g] <= centre else 1.0
        nics = [c for c in fabric["components"] if c["kind"] == "nic" and c["group"] == g]
        for i, c in enumerate(nics):
            pos[c["id"]] = (col[g] + side * 2.3, 3.0 - 0.75 * i)
    for c in fabric["components"]:
        if c["kind"] == "network":
            pos[c["id"]] = (centre, 4.5)
    return pos


@styled
def node_fabric(fabric: dict, *, title: str | None = None, note: str | None = None,
                ax=None) -> Figure:
    """Draw a node fabric (:mod:`gan3d.scaling.topology` description): boxes for sockets, memory,
    GPUs and NICs, lines for links coloured by kind and labelled with their bandwidth (one direction).
    (``ax``: 1 Axes.)"""
    pos = _positions(fabric)
    ncols = max(1, len({c["group"] for c in fabric["components"] if c["group"] is not None}))
    fig, ax = panels(ax, width=max(4.8, 4.4 * ncols), height=4.6)
    for link in fabric["links"]:
        if link["a"] not in pos or link["b"] not in pos:
            continue
        (x0, y0), (x1, y1) = pos[link["a"]], pos[link["b"]]
        ax.plot([x0, x1], [y0, y1], color=_KIND_COLOUR.get(link["kind"], "black"), lw=2.2, zorder=1)
        if link.get("label"):
            # A link between side-by-side boxes is too short for its label: put it underneath.
            t = 0.5
            lx, ly = x0 + t * (x1 - x0), y0 + t * (y1 - y0) - (0.45 if y0 == y1 and abs(x1 - x0) < 3 else 0)
            ax.text(lx, ly, textwrap.fill(link["label"], 18), fontsize=6,
                    ha="center", va="center", zorder=3,
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.9))
    for c in fabric["components"]:
        x, y = pos[c["id"]]
        ax.add_patch(FancyBboxPatch((x - 0.95, y - 0.3), 1.9, 0.6, boxstyle="round,pad=0.04",
                                    fc=_BOX_COLOUR.get(c["kind"], "white"), ec="black", lw=0.8,
                                    zorder=2))
        text = textwrap.fill(c["label"], 26) + ("\n" + textwrap.fill(c["detail"], 34)
                                                 if c.get("detail") else "")
        ax.text(x, y, text, fontsize=5.8, ha="center", va="center", zorder=4)
    xs = [p[0] for p in pos.values()] or [0.0]
    ax.set_xlim(min(xs) - 1.3, max(xs) + 1.3)
    ax.set_ylim(-0.1, 5.0)
    ax.set_axis_off()
    kinds = sorted({lk["kind"] for lk in fabric["links"]})
    ax.legend(handles=[Patch(color=_KIND_COLOUR.get(k, "black"), label=k) for k in kinds],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6)
    ax.set_title(title or fabric["name"], fontsize=9)
    fig.text(0.01, 0.01, note or f"source: {fabric.get('source', '')}", fontsize=6, ha="left")
    return fig


@styled
def step_breakdown(tl: dict, model: dict | None = None, *, ax=None) -> Figure:
    """Figure 2 (this machine): where a step goes on each rank, from Horovod's timeline.

    Left: the last steps of the run as spans (computation, waiting for the other rank,
    all-reduce). Right: mean seconds per step and rank, stacked, next to the model's split
    (``model``: ``compute_s``, ``wait_s``, ``comm_s``) when given. (``ax``: 2 Axes.)
    """
    fig, (a0, a1) = panels(ax, 1, 2, width=9.0, height=3.4, gridspec_kw={"width_ratios": [2, 1]})
    for r, kind, t0, t1 in tl["strip"]:
        a0.barh(r, t1 - t0, left=t0, height=0.6, color=_PART_COLOUR[kind], lw=0)
    a0.set_yticks(range(tl["workers"]), [f"rank {r}" for r in range(tl["workers"])])
    a0.set_xlabel("time (s)")
    a0.set_title(f"{LABELS['measured']}: last steps of a {tl['workers']}-worker run", fontsize=9)
    per = tl["per_step"]
    bars = {k: np.mean([s[f"{k}_s"] for s in per], axis=0) for k in ("compute", "wait")}
    comm = float(np.mean([s["comm_s"] for s in per]))
    names = [f"rank {r}" for r in range(tl["workers"])]
    cols = [(names[r], bars["compute"][r], bars["wait"][r], comm) for r in range(tl["workers"])]
    if model:
        cols.append((LABELS["model"], model["compute_s"], model["wait_s"], model["comm_s"]))
    for i, (_, c, w, m) in enumerate(cols):
        for bottom, h, kind in ((0, c, "compute"), (c, w, "wait"), (c + w, m, "comm")):
            a1.bar(i, h, bottom=bottom, color=_PART_COLOUR[kind], width=0.6,
                   hatch="//" if model and i == len(cols) - 1 else None)
    a1.set_xticks(range(len(cols)), [c[0] for c in cols], fontsize=7)
    a1.set_ylabel("seconds per step")
    frac = tl["mean"]
    a1.set_title(f"all-reduce {100 * frac['comm_fraction']:.1f} %, waiting "
                 f"{100 * frac['wait_fraction']:.1f} % of a step", fontsize=9)
    a0.legend(handles=[Patch(color=_PART_COLOUR[k], label=lab) for k, lab in
                       (("compute", "computation"), ("wait", "waiting for others"),
                        ("comm", "all-reduce"))], loc="upper center",
              bbox_to_anchor=(0.5, -0.25), ncols=3)
    return fig


@styled
def allreduce_bandwidth(bench: dict, *, ax=None) -> Figure:
    """Figure 2 (b): all-reduce time and bus bandwidth against message size, Horovod and MPI,
    with the fitted model and the 3DGAN's gradient messages marked. (``ax``: 2 Axes.)"""
    fig, (a0, a1) = panels(ax, 1, 2, width=8.6, height=3.3)
    n = np.asarray(bench["sizes_bytes"], float)
    grid = np.geomspace(n.min(), n.max(), 100)
    for k, marker in (("horovod", "o"), ("mpi", "s")):
        t = np.asarray(bench["time_s"][k])
        f = bench["fit"][k]
        a0.loglog(n, 1e3 * t, marker, label=f"{LABELS['measured']}: {k}")
        a0.loglog(grid, 1e3 * (f["intercept_s"] + f["slope_s_per_byte"] * grid), "--", lw=1,
                  color=a0.lines[-1].get_color(), label=f"{LABELS['model']} fit ({k})")
        a1.semilogx(n, np.asarray(bench["bus_bandwidth_Bps"][k]) / 1e9, marker + "-",
                    label=f"{LABELS['measured']}: {k}")
    if "memcpy_Bps" in bench:
        a1.axhline(bench["memcpy_Bps"] / 1e9, color="black", lw=0.8, ls="-.",
                   label=f"{LABELS['measured']}: one core's memory copy (ceiling)")
    for ax in (a0, a1):
        for name, b in bench["gradient_bytes"].items():
            ax.axvline(b, color="grey", lw=0.8, ls=":")
            ax.text(b, 0.97, f" {name} gradients\n {b / 1e6:.2f} MB", transform=ax.get_xaxis_transform(),
                    fontsize=6, va="top")
        ax.set_xlabel("message size (bytes)")
    a0.set_ylabel("time per all-reduce (ms)")
    a1.set_ylabel("bus bandwidth 2(p-1)/p n/t (GB/s)")
    a0.legend(fontsize=6)
    a1.legend(fontsize=6)
    a0.set_title(f"all-reduce on {bench['workers']} ranks", fontsize=9)
    a1.set_title(f"MPI fit: {bench['fit']['mpi']['bandwidth_Bps'] / 1e9:.2f} GB/s, "
                 f"Horovod +{1e3 * bench['horovod_overhead_s']:.1f} ms per call", fontsize=9)
    return fig


def _paper_curve(paper_wl: pm.Workload, cv: float, workers: np.ndarray) -> np.ndarray:
    hw = dataclasses.replace(pm.paper_hardware(paper_wl), jitter=cv)
    return pm.efficiency(list(workers), pm.PAPER["batch"], paper_wl, hw)


def _paper_on(a0, a1, paper: dict, grid: np.ndarray) -> None:
    """The paper's published point and the model with its hardware, on speed-up/efficiency axes."""
    wl = pm.threedgan_workload()
    e = _paper_curve(wl, paper["jitter_cv_inferred"], grid)
    e0 = _paper_curve(wl, 0.0, grid)
    a0.plot(grid, grid * e, ":", label=f"{LABELS['model']}, paper hardware")
    a1.plot(grid, 100 * e, ":", color=a0.lines[-1].get_color(),
            label=f"{LABELS['model']}, paper hardware + jitter {100 * paper['jitter_cv_inferred']:.2f} %")
    a1.plot(grid, 100 * e0, "-", lw=0.8, color=a0.lines[-1].get_color(),
            label=f"{LABELS['model']}, paper hardware, no jitter")
    n, pe = pm.PAPER["workers"], pm.PAPER["train_efficiency"]
    for ax, y in ((a0, n * pe), (a1, 100 * pe)):
        ax.plot([n], [y], "*", ms=11, color="black", label=f"{LABELS['paper']}: 98.9 % at 12 (text)")


@styled
def speedup_efficiency(scale: dict, *, model_here: Sequence[dict] | None = None,
                       paper: dict | None = None, max_workers: int = 12, ax=None) -> Figure:
    """Figure 3: speed-up and efficiency against workers, measured here (oversubscribed counts
    hollow), the paper's published 98.9 % at 12 GPUs (the only number its text gives), and the
    model: calibrated here, and with the paper's hardware (jitter inferred from the 98.9 %).
    (``ax``: 2 Axes.)"""
    fig, (a0, a1) = panels(ax, 1, 2, width=8.6, height=3.4)
    pts = scale["points"]
    p = np.array([q["workers"] for q in pts])
    sp, eff = np.array([q["speedup"] for q in pts]), np.array([q["efficiency"] for q in pts])
    over = np.array([q["oversubscribed"] for q in pts])
    grid = np.arange(1, max(max_workers, int(p.max())) + 1)
    a0.plot(grid, grid, color="grey", lw=0.8, label="ideal")
    a1.axhline(100, color="grey", lw=0.8)
    for ax, y in ((a0, sp), (a1, 100 * eff)):
        ax.plot(p[~over], y[~over], "o", ms=6, label=f"{LABELS['measured']} ({scale['mode']})")
        if over.any():
            ax.plot(p[over], y[over], "o", mfc="none", ms=6, color=ax.lines[-1].get_color(),
                    label=f"{LABELS['measured']}, oversubscribed")
    waits = [f"{q['workers']} worker{'s' if q['workers'] > 1 else ''} "
             f"{100 * q['runqueue_wait_fraction']:.0f} %" for q in pts
             if q.get("runqueue_wait_fraction") is not None]
    if waits:  # how busy the machine was: measured, not modelled; one line, not on the points
        a1.text(0.02, 0.03, "measured here, time a worker waited for a CPU: " + ", ".join(waits),
                transform=a1.transAxes, fontsize=6.5)
    if model_here:
        t1 = model_here[0]["predicted_s"]
        mp = np.array([m["workers"] for m in model_here])
        mt = np.array([m["predicted_s"] for m in model_here])
        msp = mp * t1 / mt if scale["mode"] == "weak" else t1 / mt
        a0.plot(mp, msp, "x", ms=7, label=f"{LABELS['model']}, calibrated here")
        a1.plot(mp, 100 * msp / mp, "x", ms=7, label=f"{LABELS['model']}, calibrated here")
    if paper:
        _paper_on(a0, a1, paper, grid)
    a0.set_xlabel("workers")
    a1.set_xlabel("workers")
    a0.set_ylabel("speed-up")
    a1.set_ylabel("scaling efficiency (%)")
    a1.set_ylim(min(90.0, float(np.nanmin(100 * eff)) - 5), 105)
    ticks = [t for t in (1, 2, 4, 8, 12, 16, 32, 64) if t <= grid[-1]]
    for ax in (a0, a1):  # workers on a log axis: the measured 1 and 2 spread as far as 6 to 12
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    a0.set_yscale("log", base=2)  # log-log: the ideal speed-up is the diagonal
    a0.set_yticks(ticks, [str(t) for t in ticks])
    a0.minorticks_off()
    seen: dict = {}  # one legend for both panels, below them, each entry once
    for ax in (a0, a1):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=2, fontsize=6.5,
               frameon=False)
    a0.set_title(f"training only, per-worker batch {pts[0]['batch_per_worker']}"
                 if scale["mode"] == "weak" else f"training only, global batch {pts[0]['global_batch']}",
                 fontsize=9)
    return fig


@styled
def overall_time(analysis: dict, *, max_workers: int = 16, ax=None) -> Figure:
    """The overall-time result: seconds per epoch (training + test-loss evaluation) per run, and
    speed-ups against Amdahl's law here and for the paper (published 9.07x at 12 GPUs).
    (``ax``: 2 Axes.)"""
    fig, (a0, a1) = panels(ax, 1, 2, width=8.6, height=3.4)
    rows = analysis["rows"]
    names = [f"{r['workers']} w\n{r['eval_mode'] if r['workers'] > 1 else ''}" for r in rows]
    x = np.arange(len(rows))
    a0.bar(x, [r["train_s"] for r in rows], 0.6, label="training")
    a0.bar(x, [r["eval_s"] for r in rows], 0.6, bottom=[r["train_s"] for r in rows],
           label="test-loss evaluation")
    a0.set_xticks(x, names, fontsize=7)
    a0.set_ylabel("seconds per epoch")
    a0.set_title(f"{LABELS['measured']}", fontsize=9)
    a0.legend(fontsize=6)
    p = np.arange(1, max_workers + 1)
    s_here, pp = analysis["serial_fraction_measured"], analysis["paper"]
    a1.plot(p, p, color="grey", lw=0.8, label="ideal")
    a1.plot(p, pm.amdahl_speedup(p, s_here), "--",
            label=f"{LABELS['model']}: Amdahl, s = {100 * s_here:.1f} % (measured here)")
    a1.plot(p, pm.amdahl_speedup(p, pp["serial_fraction_fitted"], pm.PAPER["train_efficiency"]), ":",
            label=f"{LABELS['model']}: Amdahl, s = {100 * pp['serial_fraction_fitted']:.2f} % (paper, fitted)")
    for mode, marker in (("serial", "o"), ("distributed", "D")):
        sel = [r for r in rows if r["eval_mode"] == mode or r["workers"] == 1]
        a1.plot([r["workers"] for r in sel], [r["speedup"] for r in sel], marker, ms=6,
                label=f"{LABELS['measured']}: {mode} evaluation")
    n = pm.PAPER["workers"]
    a1.plot([n], [pp["published_speedup"]], "*", ms=11, color="black",
            label=f"{LABELS['paper']}: {pp['published_speedup']:.2f}x")
    a1.plot([n], [pp["model_speedup_distributed"]], "*", ms=11, mfc="none", color="black",
            label=f"{LABELS['model']}: paper with distributed evaluation")
    a1.set_xlabel("workers")
    a1.set_ylabel("speed-up of the whole training")
    a1.legend(fontsize=6, loc="upper left")
    return fig


@styled
def model_projection(wl: pm.Workload, hw: pm.Hardware, *, batches: Sequence[int] = (1, 8, 64, 512),
                     here: tuple[pm.Workload, pm.Hardware, int] | None = None,
                     pmax: int = 4096, ax=None) -> Figure:
    """The model projected to many workers: efficiency against workers for per-worker batches
    (left; dots where the all-reduce starts to take as long as the computation), and one step's
    computation against all-reduce time (right) with the paper's hardware and this machine's.
    (``ax``: 2 Axes.)"""
    fig, (a0, a1) = panels(ax, 1, 2, width=8.6, height=3.4)
    p = np.unique(np.geomspace(1, pmax, 80).astype(int))
    for b in batches:
        a0.semilogx(p, 100 * pm.efficiency(list(p), b, wl, hw), label=f"batch {b} per worker")
        cross = pm.crossover_workers(b, wl, hw, pmax=pmax)
        if cross:
            e = 100 * pm.efficiency([cross], b, wl, hw)[0]
            a0.plot([cross], [e], "o", color=a0.lines[-1].get_color())
    a0.plot([pm.PAPER["workers"]], [100 * pm.PAPER["train_efficiency"]], "*", ms=10, color="black",
            label=f"{LABELS['paper']}: 98.9 %")
    a0.set_xlabel("workers")
    a0.set_ylabel("scaling efficiency (%)")
    a0.set_title(f"{LABELS['model']}: {hw.name}", fontsize=9)
    a0.legend(fontsize=6)
    cases = [(wl, hw, pm.PAPER["batch"], "paper hardware")]
    if here:
        cases.append((*here, "this machine"))
    for w, h, b, name in cases:
        comp = [pm.step_time(int(q), b, w, h).compute for q in p]
        comm = [pm.step_time(int(q), b, w, h).comm for q in p]
        line = a1.loglog(p, comp, "-", label=f"{name}: computation, batch {b}")[0]
        a1.loglog(p[1:], comm[1:], "--", color=line.get_color(), label=f"{name}: all-reduce")
    a1.set_xlabel("workers")
    a1.set_ylabel("seconds per step")
    a1.set_title(f"{LABELS['model']}: where communication takes over", fontsize=9)
    a1.legend(fontsize=6)
    return fig


_NET_COLOUR = {"D": "#0072B2", "G": "#D55E00"}


@styled
def roofline(profile: dict, *, top: int = 12, ax=None) -> Figure:
    """The step layer by layer against this machine's roofline (:mod:`gan3d.scaling.roofline`).

    Left: achieved GFLOP/s of each layer (all its passes in a step) against its arithmetic
    intensity, under the measured ceilings min(matmul peak, intensity x bandwidth); marker area
    is the layer's share of the step. Right: the ``top`` slowest layers' measured time per step
    next to their limit, then the step: measured, its layers' sum, and its limit. (``ax``: 2 Axes.)
    """
    fig, (a0, a1) = panels(ax, 1, 2, width=10.0, height=4.2, gridspec_kw={"width_ratios": [1, 1.1]})
    roof, rows, step = profile["ceilings"], profile["layers"], profile["step"]
    peak, bw = roof["peak_gflop_s"], roof["bandwidth_gb_s"]
    arith = [r for r in rows if r["flops"] > 0]
    x = np.geomspace(min(0.05, min(r["intensity"] for r in arith) / 2),
                     max(1e3, max(r["intensity"] for r in arith) * 2), 200)
    a0.loglog(x, np.minimum(peak, x * bw), color="black", lw=1.2,
              label=f"{LABELS['measured']}: ceilings ({peak:.0f} GFLOP/s, {bw:.1f} GB/s)")
    total = step["measured_s"]
    for net in ("D", "G"):
        sel = [r for r in arith if r["net"] == net]
        a0.scatter([r["intensity"] for r in sel], [r["gflop_s"] for r in sel],
                   s=[20 + 600 * r["time_s"] / total for r in sel], color=_NET_COLOUR[net],
                   alpha=0.7, label=f"{LABELS['measured']}: {'discriminator' if net == 'D' else 'generator'} layers")
    for r in sorted(arith, key=lambda r: -r["time_s"])[:6]:
        a0.annotate(f"{r['net']} {r['layer']}", (r["intensity"], r["gflop_s"]), fontsize=6,
                    xytext=(4, -8), textcoords="offset points")
    a0.set_xlabel("arithmetic intensity (FLOP/byte, modelled)")
    a0.set_ylabel("achieved GFLOP/s")
    a0.set_title(f"batch {profile['batch']}, {profile['precision']}, {roof['threads']} thread(s)",
                 fontsize=9)
    a0.legend(fontsize=6, loc="lower right")
    slow = sorted(rows, key=lambda r: -r["time_s"])[:top]
    names = [f"{r['net']} {r['layer']}" for r in slow] + ["the other layers", "outside the layers"]
    rest = sum(r["time_s"] for r in rows) - sum(r["time_s"] for r in slow)
    rest_limit = sum(r["limit_s"] for r in rows) - sum(r["limit_s"] for r in slow)
    measured = [r["time_s"] for r in slow] + [rest, max(0.0, step["outside_layers_s"])]
    limits = [r["limit_s"] for r in slow] + [rest_limit, 0.0]
    y = np.arange(len(names))[::-1]
    a1.barh(y + 0.2, measured, height=0.4, color="#0072B2", label=f"{LABELS['measured']}")
    a1.barh(y - 0.2, limits, height=0.4, color="#999999",
            label=f"{LABELS['model']}: limit max(FLOP/peak, bytes/bandwidth)")
    a1.set_yticks(y, names, fontsize=6)
    a1.set_xlabel("seconds per step")
    a1.set_title(f"step {step['measured_s']:.2f} s measured, limit {step['limit_s']:.2f} s "
                 f"({100 * step['of_limit']:.0f} % of the limit reached)", fontsize=9)
    a1.legend(fontsize=6, loc="lower right")
    return fig
