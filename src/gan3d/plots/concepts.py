"""Figures of the hands-on lesson (notebook 05): a ring all-reduce step by step, its time against
the model, learning-rate scaling, and Amdahl's law measured and fitted; and what the lesson says
of each check, from its numbers.

Each figure function takes what the lesson measured and an optional ``ax`` (see
:mod:`gan3d.plots`), and returns the Figure; measured points and model curves are told apart in
every legend. Each ``*_reading`` returns Markdown.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.patches import Circle, FancyArrowPatch

from . import LABELS, colours, panels, styled

__all__ = ["ring_steps", "ring_timing", "lr_curves", "amdahl", "broadcast_reading", "ring_reading",
           "data_parallel_reading", "lr_reading", "amdahl_reading", "summary_line"]


def _node_xy(size: int) -> np.ndarray:
    angle = np.pi / 2 - 2 * np.pi * np.arange(size) / size  # rank 0 on top, clockwise
    return np.c_[np.cos(angle), np.sin(angle)]


@styled
def ring_steps(trace: Sequence[Sequence], size: int, *, ax=None):
    """One panel per step of a ring all-reduce of ``size`` ranks: every rank sends one chunk to
    its right neighbour. ``trace``: ``(phase, step, rank, chunk sent, to rank)`` per rank and step
    (reduce-scatter: the receiver adds; all-gather: it keeps). (``ax``: 2 (size - 1) Axes.)"""
    steps = 2 * (size - 1)
    fig, axes = panels(ax, 1, steps, width=2.6 * steps, height=2.9)
    axes = np.atleast_1d(axes)
    xy = _node_xy(size)
    chunk_colour = colours(size)
    for k, a in enumerate(axes):
        phase = "reduce-scatter" if k < size - 1 else "all-gather"
        s = k if k < size - 1 else k - (size - 1)
        for r, (x, y) in enumerate(xy):
            a.add_patch(Circle((x, y), 0.22, fc="white", ec="black", lw=1.0, zorder=2))
            a.text(x, y, f"rank {r}", ha="center", va="center", fontsize=7, zorder=3)
        for ph, st, rank, chunk, to in trace:
            if ph != phase or st != s:
                continue
            (x0, y0), (x1, y1) = xy[rank], xy[to]
            a.add_patch(FancyArrowPatch((x0, y0), (x1, y1), connectionstyle="arc3,rad=0.25",
                                        arrowstyle="-|>", mutation_scale=10, shrinkA=14,
                                        shrinkB=14, color=chunk_colour[chunk], lw=1.6))
            mx, my = (x0 + x1) / 2, (y0 + y1) / 2
            a.text(mx * 1.25 if size > 2 else mx + (0.35 if rank == 0 else -0.35), my * 1.25,
                   f"chunk {chunk}", fontsize=6.5, color=chunk_colour[chunk], ha="center")
        a.set_title(f"{phase}\nstep {s + 1} of {size - 1}", fontsize=8)
        a.set_xlim(-1.6, 1.6)
        a.set_ylim(-1.6, 1.6)
        a.set_aspect("equal")
        a.set_axis_off()
    return fig


@styled
def ring_timing(sizes: Sequence[int], times: Mapping[str, Sequence[float]], model: Mapping,
                size: int, *, ax=None):
    """Seconds per all-reduce against message bytes for each implementation in ``times``
    (measured), and the ring model ``2(N-1) alpha + 2(N-1)/N n / BW`` fitted to the hand-written
    ring (``model``: ``latency_s``, ``bandwidth_Bps``). (``ax``: 1 Axes.)"""
    fig, ax = panels(ax, width=5.4, height=3.6)
    n = np.asarray(sizes, float)
    for (name, t), c in zip(times.items(), colours(len(times))):
        ax.loglog(n, 1e3 * np.asarray(t), "o", color=c, label=f"{LABELS['measured']}: {name}")
    grid = np.geomspace(n.min(), n.max(), 100)
    p = size
    t_model = 2 * (p - 1) * model["latency_s"] + 2 * (p - 1) / p * grid / model["bandwidth_Bps"]
    ax.loglog(grid, 1e3 * t_model, "--", color="0.3",
              label=f"{LABELS['model']}: 2(N-1)α + 2(N-1)/N·n/BW, α = "
                    f"{1e6 * model['latency_s']:.0f} µs, BW = {model['bandwidth_Bps'] / 1e9:.2f} GB/s")
    ax.set_xlabel("message size n (bytes)")
    ax.set_ylabel("time per all-reduce (ms)")
    ax.set_title(f"all-reduce on {size} engines", fontsize=9)
    ax.legend(fontsize=6.5)
    return fig


@styled
def lr_curves(curves: Mapping[str, Sequence[float]], samples_per_point: int, *, ax=None):
    """Training loss against training samples seen, one line per learning-rate rule (measured).
    (``ax``: 1 Axes.)"""
    fig, ax = panels(ax, width=5.4, height=3.6)
    for (name, loss), c in zip(curves.items(), colours(len(curves))):
        x = samples_per_point * np.arange(1, len(loss) + 1)
        ax.semilogy(x, loss, "-", color=c, label=name)
    ax.set_xlabel("training samples seen (all workers)")
    ax.set_ylabel("training loss (mean squared error)")
    ax.legend(fontsize=7)
    return fig


@styled
def amdahl(workers: Sequence[int], speedups: Mapping[str, Sequence[float]], serial_fit: float,
           *, ax=None):
    """Speed-up against workers for each variant (measured), the ideal, and Amdahl's law
    ``1 / (s + (1 - s)/N)`` with the fitted serial share ``serial_fit``. (``ax``: 1 Axes.)"""
    fig, ax = panels(ax, width=5.2, height=3.6)
    w = np.asarray(workers, float)
    grid = np.linspace(1, max(w.max(), 8), 100)
    ax.plot(grid, grid, color="0.6", lw=0.8, label="ideal")
    ax.plot(grid, 1 / (serial_fit + (1 - serial_fit) / grid), "--", color="0.3",
            label=f"{LABELS['model']}: Amdahl, fitted s = {100 * serial_fit:.1f} %")
    for (name, sp), c in zip(speedups.items(), colours(len(speedups))):
        ax.plot(w, sp, "o", ms=7, color=c, label=f"{LABELS['measured']}: {name}")
    ax.set_xlabel("workers N")
    ax.set_ylabel("speed-up of a step")
    ax.legend(fontsize=7)
    return fig


def broadcast_reading(before: Sequence[float], after: Sequence[float]) -> str:
    """The ranks' weight checksums before and after the broadcast of rank 0's."""
    return (f"Before: {len(set(before))} different checksums; after the broadcast: all equal to "
            f"rank 0's ({after[0]:.4f}).")


def ring_reading(sizes: Sequence[int], ring_s: Sequence[float], mpi_s: Sequence[float],
                 model: Mapping, predicted: Sequence[float]) -> str:
    """The ring model fitted to the hand-written ring (``model``: ``latency_s``,
    ``bandwidth_Bps``; ``predicted``: its seconds at ``sizes``), its worst error against the
    measurement, and MPI's own all-reduce against the ring at the largest message."""
    ring, mpi, pred = (np.asarray(x, float) for x in (ring_s, mpi_s, predicted))
    big = int(np.argmax(sizes))
    worst = int(np.argmax(np.abs(pred / ring - 1)))
    return (f"Fitted to the hand-written ring: α = {1e6 * model['latency_s']:.0f} µs per step and "
            f"BW = {model['bandwidth_Bps'] / 1e9:.2f} GB/s; the model is at most "
            f"{100 * abs(pred[worst] / ring[worst] - 1):.0f} % off a measurement (at "
            f"{sizes[worst] // 1024} KiB: two parameters cannot follow the caches and the "
            f"shared-memory protocols of one machine). At {sizes[big] // 1024} KiB MPI's own "
            f"all-reduce takes {mpi[big] / ring[big]:.2f}× the ring's time: it picks its algorithm "
            "by message size.")


def data_parallel_reading(rel_inference: float, rel_batchnorm: float) -> str:
    """How far the ranks' averaged gradient is from the whole batch's, with BatchNorm's
    statistics fixed and with each rank's own."""
    return (f"With fixed BatchNorm statistics the averaged gradient equals the whole batch's to "
            f"float rounding (relative difference {rel_inference:.1g}); with each rank's own batch "
            f"statistics it moves by **{100 * rel_batchnorm:.1f} %**: N workers × b is not exactly "
            "one worker × N·b.")


def lr_reading(plain: float, scaled: float, workers: int) -> str:
    """The loss after one epoch of ``workers`` workers over one worker's, with the plain and the
    scaled learning rate."""
    return (f"After one epoch, {workers} workers with the plain rate are at {plain:.2f}× the "
            f"one-worker loss, with lr × {workers} at {scaled:.2f}×: scaling the rate recovers the "
            "progress per epoch, and warm-up costs a little of it at the start, which buys "
            "stability where a large rate on untrained weights would diverge.")


def amdahl_reading(serial_fit: float, serial: float, speedups: Mapping[str, Sequence[float]],
                   workers: int) -> str:
    """The fitted serial share against the injected one, and the speed-ups at ``workers`` with
    serial and with distributed evaluation."""
    serial_s = speedups["serial evaluation (waits injected)"][-1]
    distributed_s = speedups["distributed evaluation (waits injected)"][-1]
    return (f"Fitted serial share **{100 * serial_fit:.1f} %** against the {100 * serial:.0f} % "
            f"injected. With serial evaluation {workers} workers reach {serial_s:.2f}×; evaluating "
            f"on every worker, {distributed_s:.2f}× (the paper's fix, "
            "`train.eval_mode=distributed`).")


def summary_line(checks: Mapping, serial: float) -> str:
    """What the lesson verified, in one line (``checks``: its checks; ``serial``: the injected
    serial share)."""
    return " ".join([
        "broadcast: all ranks equal after, differ before;",
        f"ring = library to {checks['ring_equals_library']['max_abs_difference']:.1g};",
        f"data parallel {checks['data_parallel']['rel_inference']:.1g} (BN fixed) vs "
        f"{checks['data_parallel']['rel_batchnorm']:.2g} (per-rank BN);",
        f"Amdahl fit {100 * checks['amdahl']['serial_fitted']:.1f} % of {100 * serial:.0f} %"])
