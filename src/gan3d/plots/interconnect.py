"""Figures of the interconnect: emulated multi-node networks (:mod:`gan3d.scaling.interconnect`,
:mod:`gan3d.scaling.algorithms`): all-reduce time against message size per network and per
algorithm, measured against their models, and the models' choice of algorithm beyond this machine.

Every function takes the study's JSON and an optional ``ax`` (see :mod:`gan3d.plots`), and
returns the Figure.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ..scaling import algorithms as algs
from ..scaling import perfmodel as pm
from . import LABELS, Figure, colours, panels, styled

__all__ = ["network_allreduce", "allreduce_algorithms", "network_projection"]


@styled
def network_allreduce(result: dict, *, ranks: int = 2, ax=None) -> Figure:
    """Horovod all-reduce over emulated networks (:mod:`gan3d.scaling.interconnect`): left, time
    against message size per network, measured (markers) and the ring model calibrated on the
    measured link (lines), the 3DGAN's gradient sizes marked; right, the model's error per size.
    (``ax``: 2 Axes.)"""
    fig, (a0, a1) = panels(ax, 1, 2, width=10.5, height=4.0)
    rows = [r for r in result["rows"] if r["ranks"] == ranks]
    for colour, r in zip(colours(len(rows)), rows):
        n = np.array([int(k) for k in r["time_s"]])
        t = np.array(list(r["time_s"].values()))
        m = np.array([r["predicted_s"][str(k)] for k in n])
        link = min(r["links"], key=lambda x: x["bandwidth_Bps"])
        name = (f"{r['profile']}" + (f" + one {r['slow_link']} link" if r["slow_link"] else "")
                + f" ({link['bandwidth_Bps'] / 1e9:.2g} GB/s, {link['latency_s'] * 1e6:.0f} us)")
        a0.loglog(n, t, "o", ms=3.5, color=colour, label=f"{LABELS['measured']}: {name}")
        a0.loglog(n, m, "-", lw=1.0, color=colour)
        a1.semilogx(n, 100 * (m / t - 1), "-o", ms=3, color=colour)
    wl = pm.threedgan_workload()
    for nbytes, what in ((wl.allreduce_bytes[0], "D gradients"), (wl.allreduce_bytes[2], "G gradients")):
        a0.axvline(nbytes, color="0.6", lw=0.8, ls=":")
        a0.annotate(what, (nbytes, a0.get_ylim()[0]), rotation=90, fontsize=6, va="bottom")
    a0.plot([], [], "-", color="black", label=f"{LABELS['model']}: ring, calibrated on the link")
    a0.set_xlabel("message (bytes)")
    a0.set_ylabel("all-reduce time (s)")
    a0.set_title(f"Horovod (Gloo, TCP), {ranks} ranks in separate network namespaces", fontsize=9)
    a0.legend(fontsize=6)
    a1.axhspan(-15, 15, color="#009E73", alpha=0.12, lw=0)
    a1.axhline(0, color="black", lw=0.6)
    a1.set_xlabel("message (bytes)")
    a1.set_ylabel("model / measured - 1 (%)")
    a1.set_title("model error (band: +-15 %)", fontsize=9)
    return fig


@styled
def allreduce_algorithms(result: dict, *, profile: str = "1gbe", ranks: int = 4,
                         bandwidth_Bps: float = 1.25e9, ax=None) -> Figure:
    """MPI all-reduce algorithms (:mod:`gan3d.scaling.algorithms`): left, time against message
    size over the emulated ``profile`` with ``ranks`` ranks, measured (markers) and each
    algorithm's textbook cost from the measured link (lines); right, the textbook costs' fastest
    algorithm for the 3DGAN's G gradients (one fused all-reduce) against link latency and
    workers at ``bandwidth_Bps``. (``ax``: 2 Axes.)"""
    fig, (a0, a1) = panels(ax, 1, 2, width=11.0, height=4.2)
    rows = [r for r in result["rows"] if r["profile"] == profile and r["ranks"] == ranks
            and r["per_host"] == 1]
    names = list(algs.ALGORITHMS)
    palette = dict(zip(names, colours(len(names))))
    link = rows[0]["link"] if rows else None
    for r in rows:
        n = np.array([int(k) for k in r["time_s"]])
        t = np.array(list(r["time_s"].values()))
        colour = palette[r["algorithm"]]
        a0.loglog(n, t, "o", ms=3.5, color=colour,
                  label=f"{LABELS['measured']}: {algs.ALGORITHMS[r['algorithm']][1]}")
        if "model_s" in r:
            a0.loglog(n, [r["model_s"][str(k)] for k in n], "-", lw=1.0, color=colour)
    wl = pm.threedgan_workload()
    g_bytes = wl.allreduce_bytes[2]
    a0.axvline(g_bytes, color="0.6", lw=0.8, ls=":")
    a0.plot([], [], "-", color="black", label=f"{LABELS['model']}: textbook cost, measured link")
    a0.set_xlabel("message (bytes)")
    a0.set_ylabel("all-reduce time (s)")
    where = (f"{profile}, {link['bandwidth_Bps'] / 1e9:.2g} GB/s, {link['latency_s'] * 1e6:.0f} us"
             if link else profile)
    a0.set_title(f"Open MPI, {ranks} ranks in separate namespaces ({where})", fontsize=9)
    a0.legend(fontsize=6)
    gammas = [r["gamma_s_per_byte"] for r in result["rows"] if r.get("gamma_s_per_byte")]
    latencies = np.logspace(-6, -3, 25)
    workers = [2, 4, 8, 12, 16, 32, 64, 128, 256]
    win = algs.winners(g_bytes, workers, latencies, bandwidth_Bps,
                       float(np.median(gammas)) if gammas else 0.0)
    order = list(algs.MODELLED)
    grid = np.array([[order.index(c["best"]) for c in row] for row in win["grid"]])
    cmap = ListedColormap([palette[a] for a in order])
    a1.pcolormesh(latencies * 1e6, np.arange(len(workers)), grid, cmap=cmap,
                  vmin=-0.5, vmax=len(order) - 0.5, shading="nearest")
    a1.set_xscale("log")
    a1.set_yticks(range(len(workers)), [str(w) for w in workers])
    a1.set_xlabel("link latency (us)")
    a1.set_ylabel("workers")
    a1.set_title(f"{LABELS['model']}: fastest for the G gradients ({g_bytes / 1e6:.1f} MB) "
                 f"at {bandwidth_Bps / 1e9:.3g} GB/s", fontsize=9)
    used = sorted(set(grid.ravel()))
    a1.legend(handles=[Patch(color=palette[order[i]], label=algs.ALGORITHMS[order[i]][1])
                       for i in used], fontsize=6, loc="upper left", frameon=True,
              facecolor="white", framealpha=1.0)
    return fig


@styled
def network_projection(steps: dict | None, projection: dict, *, ax=None) -> Figure:
    """Left: the whole 3DGAN step on 2 computing ranks per emulated network (measured), split
    into the ring model's all-reduce time and the rest. Right: the model's weak-scaling
    efficiency against workers for the paper's GPUs with nodes joined by each network, per batch
    (:func:`gan3d.scaling.multinode.projection`). (``ax``: 2 Axes.)"""
    fig, (a0, a1) = panels(ax, 1, 2, width=11.0, height=4.0)
    if steps:
        rows = steps["rows"]
        x = np.arange(len(rows))
        comm = np.array([r["model_comm_s"] for r in rows])
        step = np.array([r["step_s"] for r in rows])
        a0.bar(x, step - comm, color="#0072B2", label=f"{LABELS['measured']}: step less all-reduces")
        a0.bar(x, comm, bottom=step - comm, color="#D55E00", label=f"{LABELS['model']}: all-reduces")
        a0.set_xticks(x, [f"{r['profile']}\n{r['link']['bandwidth_Bps'] / 1e9:.2g} GB/s" for r in rows])
        for xi, r in zip(x, rows):
            a0.annotate(f"{r['model_comm_s'] / r['step_s']:.1%}", (xi, r["step_s"]), ha="center",
                        va="bottom", fontsize=7)
        a0.set_ylabel("seconds per step")
        a0.set_title(f"3DGAN step, {steps['workers']} ranks in separate namespaces, batch "
                     f"{steps['config']['batch_size']} per rank", fontsize=9)
        a0.legend(fontsize=6, loc="lower right")
    else:
        a0.text(0.5, 0.5, "no measured steps (run bench/bench_interconnect.py as root)",
                ha="center", va="center", transform=a0.transAxes, fontsize=8)
    ps = projection["workers"]
    styles = dict(zip([str(b) for b in projection["batches"]], ["-", "--", ":", "-."]))
    for colour, r in zip(colours(len(projection["rows"])), projection["rows"]):
        for b, eff in r["efficiency"].items():
            a1.semilogx(ps, eff, styles.get(b, "-"), color=colour, lw=1.2,
                        label=f"{r['profile']}, batch {b}")
    a1.axhline(0.9, color="0.5", lw=0.6, ls=":")
    a1.set_ylim(0, 1.05)
    a1.set_xlabel("workers (4 GPUs per node)")
    a1.set_ylabel("weak-scaling efficiency")
    a1.set_title(f"{LABELS['model']}: paper's GPUs, nodes joined by each network", fontsize=9)
    a1.legend(fontsize=6, ncol=2)
    return fig
