"""Figures of training (notebook 02): loss curves of several runs, time per epoch, and
generated showers next to reference ones.

``histories`` map a run's label (e.g. ``"1 worker"``) to its ``history.jsonl`` rows
(:func:`gan3d.gan.history.read_history`); showers are (N, 25, 25, 25) arrays in GeV, depth last.
Each function takes an optional ``ax`` (see :mod:`gan3d.plots`) and returns the Figure.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.ticker import MaxNLocator

from ..validation.monitors import MONITOR_ENERGIES, TARGETS
from ..validation.trend import lr_changes
from . import LABELS, colours, panels, styled

__all__ = ["loss_curves", "epoch_times", "shower_comparison", "monitor_curves", "run_label",
           "runs_learning_curves"]

_PARTS = {"loss": "weighted total", "bce": "real/fake BCE", "aux": "energy MAPE (%)",
          "ecal": "ECAL-sum MAPE (%)"}


@styled
def loss_curves(histories: Mapping[str, Sequence[dict]], parts: Sequence[str] = ("loss", "bce"),
                *, ax=None):
    """Discriminator (top row) and generator (bottom row) losses per epoch, one panel per part
    (``loss``, ``bce``, ``aux``, ``ecal``); training solid, test dashed, one colour per run
    (``ax``: 2 x len(parts) Axes)."""
    fig, axes = panels(ax, 2, len(parts), width=4.0 * len(parts), height=5.6, sharex=True)
    axes = np.asarray(axes).reshape(2, len(parts))
    for colour, (label, rows) in zip(colours(len(histories)), histories.items()):
        epochs = [r["epoch"] for r in rows]
        for i, net in enumerate(("d", "g")):
            for j, part in enumerate(parts):
                ax = axes[i, j]
                ax.plot(epochs, [r[f"{net}_{part}"] for r in rows], "-o", color=colour, ms=3,
                        label=f"{label}, train")
                test = [r.get(f"test_{net}_{part}") for r in rows]
                if any(v is not None for v in test):
                    ax.plot(epochs, [np.nan if v is None else v for v in test], "--s", ms=3,
                            color=colour, label=f"{label}, test")
                ax.set_title(f"{'discriminator' if net == 'd' else 'generator'}: {_PARTS[part]}")
                ax.set_yscale("log" if part != "bce" else "linear")
    for ax in axes[1]:
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0, 0].legend(fontsize="small")
    return fig


def run_label(label: str, rows: Sequence[dict]) -> str:
    """``"2 workers (2 x 1 thread)"``: a run's label with the workers and threads it had."""
    last = rows[-1] if rows else {}
    workers, threads = last.get("workers"), last.get("threads")
    if workers is None or threads is None:
        return label
    return f"{label} ({workers} x {threads} thread{'s' if threads != 1 else ''})"


@styled
def epoch_times(histories: Mapping[str, Sequence[dict]], *, ax=None):
    """Left: training throughput per epoch (showers/s of all workers together). Right: wall time
    per epoch split into training and evaluation (s), with the showers each run trained per
    epoch. Runs side by side, labelled with workers x threads; the untimed warm-up epochs hollow
    (left) or hatched (right). (``ax``: 2 Axes.)

    Throughput is what compares runs: with a step cap an epoch of N workers trains N times the
    showers of one worker's, and on a machine with fewer cores than workers x threads the
    workers share them - so a longer epoch does not mean slower training."""
    fig, (a0, a1) = panels(ax, 1, 2, width=10.0, height=3.6)
    n = len(histories)
    width = 0.8 / max(n, 1)
    for k, (colour, (label, rows)) in enumerate(zip(colours(n), histories.items())):
        epochs = np.array([r["epoch"] for r in rows])
        rate = np.array([r["showers_per_s"] for r in rows])
        timed = np.array([bool(r["timed"]) for r in rows])
        name = run_label(label, rows)
        a0.plot(epochs, rate, "-", color=colour, label=name)
        a0.plot(epochs[timed], rate[timed], "o", color=colour)
        a0.plot(epochs[~timed], rate[~timed], "o", color=colour, mfc="white")
        x = epochs + (k - (n - 1) / 2) * width
        train = np.array([r["time_train_s"] for r in rows])
        evals = np.array([r["time_eval_s"] for r in rows])
        hatch = ["//" if not t else "" for t in timed]
        per_epoch = rows[-1]["steps"] * rows[-1]["batch_size"] * rows[-1]["workers"]
        a1.bar(x, train, width, color=colour, hatch=hatch,
               label=f"{name}: training, {per_epoch} showers")
        a1.bar(x, evals, width, bottom=train, color=colour, alpha=0.4, hatch=hatch,
               label=f"{label}: test evaluation")
    a0.set_ylim(bottom=0)
    a0.set_ylabel("training throughput (showers/s, all workers)")
    a0.set_xlabel("epoch (hollow: timing warm-up)")
    a1.set_ylabel("wall time per epoch (s)")
    a1.set_xlabel("epoch (hatched: timing warm-up, excluded as in the paper)")
    for a in (a0, a1):
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
        a.legend(fontsize="small")
    return fig


@styled
def shower_comparison(reference, generated, energies: Sequence[float], *,
                      gan_label: str | None = None, ax=None):
    """Each row one primary energy: the reference shower's and the GAN shower's depth-x projection
    (summed over y, log colour) and both longitudinal profiles (GeV per layer); ``gan_label``
    names the generator (e.g. with its training budget) (``ax``: len(energies) x 3 Axes)."""
    names = {"reference": LABELS["reference"], "gan": gan_label or LABELS["gan"]}
    ref, gen = np.asarray(reference), np.asarray(generated)
    rows = len(energies)
    fig, axes = panels(ax, rows, 3, width=11.0, height=2.8 * rows)
    axes = np.asarray(axes).reshape(rows, 3)
    c_ref, c_gan = colours(2)
    for i, e in enumerate(energies):
        vmax = max(ref[i].sum(axis=1).max(), gen[i].sum(axis=1).max(), 2e-5)
        for j, (shower, who) in enumerate(((ref[i], "reference"), (gen[i], "gan"))):
            image = shower.sum(axis=1)  # (x, depth)
            im = axes[i, j].imshow(np.ma.masked_less_equal(image, 0), origin="lower",
                                   aspect="auto", norm=LogNorm(vmin=1e-5, vmax=vmax))
            axes[i, j].set_title(f"{names[who]}, {e:.0f} GeV: {shower.sum():.2f} GeV visible",
                                 fontsize=7 if gan_label else None)
            axes[i, j].set_xlabel("layer (depth)")
            axes[i, j].set_ylabel("x (cell)")
            axes[i, j].grid(False)
        fig.colorbar(im, ax=axes[i, 1], label="GeV per cell, summed over y")
        layers = np.arange(ref.shape[-1])
        for shower, who, c in ((ref[i], "reference", c_ref), (gen[i], "gan", c_gan)):
            axes[i, 2].step(layers, shower.sum(axis=(0, 1)), where="mid", color=c, label=names[who])
        axes[i, 2].set_xlabel("layer (depth)")
        axes[i, 2].set_ylabel("energy per layer (GeV)")
        axes[i, 2].legend(fontsize="small")
    return fig


_MONITOR_TITLES = {
    "sampling_fraction": "sampling fraction: GAN / reference - 1",
    "ecal_sum_spread": "ECAL-sum spread: GAN / reference - 1",
    "max_layer": "shower-maximum layer: GAN - reference",
    "transverse_width": "transverse width: GAN / reference - 1",
    "longitudinal_width": "longitudinal width: GAN / reference - 1",
    "profile_distance": "longitudinal profile distance (0 same, 1 disjoint)",
}


@styled
def monitor_curves(rows: Sequence[dict], *, energies: Sequence[float] = MONITOR_ENERGIES,
                   title: str | None = None, ax=None):
    """The physics monitors of one run (history rows with ``mon_*`` keys) against the training
    showers seen: one panel per monitor, one line per energy, the target band shaded (the
    ECAL-sum mean follows the sampling fraction and is left out). (``ax``: 2 x 3 Axes.)"""
    fig, axes = panels(ax, 2, 3, width=12.0, height=6.4, sharex=True)
    seen = np.array([r["showers_seen"] for r in rows], dtype=float)
    for a, (name, text) in zip(np.ravel(axes), _MONITOR_TITLES.items()):
        for colour, e in zip(colours(len(energies)), energies):
            y = np.array([r.get(f"mon_{name}_{e:g}", np.nan) for r in rows], dtype=float)
            a.plot(seen, y, "-o", ms=2.5, color=colour, label=f"{e:g} GeV")
        if name in TARGETS:
            tol = TARGETS[name][1]
            a.axhspan(-tol, tol, color="#009E73", alpha=0.15, lw=0, label="target")
            if TARGETS[name][0] == "rel":
                a.set_yscale("symlog", linthresh=max(tol, 0.1))
        a.axhline(0.0, color="black", lw=0.6)
        a.set_title(text, fontsize=8)
    for a in np.asarray(axes)[1]:
        a.set_xlabel("training showers seen")
    np.ravel(axes)[0].legend(fontsize="x-small")
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


_RUN_PANELS = {"mon_targets_met": "targets met (of 20)",
               "profile_distance": "longitudinal-profile distance",
               "sampling_fraction": "|sampling-fraction deviation|",
               "ecal_sum_spread": "|ECAL-sum spread deviation|"}


@styled
def runs_learning_curves(runs: Mapping[str, Sequence[dict]], *, ax=None):
    """Several runs' physics monitors against the training showers seen (all workers): per
    evaluation, the targets met and the mean over the monitor energies of each deviation
    (:func:`gan3d.convergence.plan.summarise_history`), one colour per run, two panels a row
    (``ax``: 4 Axes). A dotted line in the run's colour marks each change of its learning rate
    (a fork's lr x N, a later fork that lowered it), at the showers seen when the new rate
    began; the legend below the panels names each change and the dashed targets."""
    from matplotlib.lines import Line2D

    from ..convergence.plan import summarise_history

    fig, axes = panels(ax, 2, 2, width=9.4, height=6.6)
    axes = np.ravel(axes)
    handles = []
    for colour, (label, every) in zip(colours(len(runs)), runs.items()):
        rows = [r for r in summarise_history(list(every)) if r.get("mon_targets_met") is not None]
        x = np.array([r["showers_seen"] for r in rows], float)
        for a, name in zip(axes, _RUN_PANELS):
            a.plot(x, [r[name] for r in rows], "-", lw=1.2, color=colour, label=label)
        handles.append(Line2D([], [], color=colour, lw=1.2, label=label))
        for before, after in lr_changes(every):
            for a in axes:
                a.axvline(before["showers_seen"], color=colour, ls=":", lw=1.0)
            handles.append(Line2D([], [], color=colour, ls=":", lw=1.0,
                                  label=f"lr {before['lr']:g} -> {after['lr']:g} from "
                                        f"{before['showers_seen']:,} showers ({label})"))
    for i, (a, (name, text)) in enumerate(zip(axes, _RUN_PANELS.items())):
        a.set_title(text, fontsize=9)
        a.set_xlabel("training showers seen (all workers)" if i >= 2 else "")
        if name in TARGETS:
            a.axhline(TARGETS[name][1], color="#009E73", ls="--", lw=0.8)
    if any(name in TARGETS for name in _RUN_PANELS):
        handles.append(Line2D([], [], color="#009E73", ls="--", lw=0.8,
                              label="target of the monitor (physics-grade)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize="x-small",
               frameon=False)
    fig.suptitle(f"{LABELS['measured']}: the physics monitors of each epoch (64 showers per "
                 "monitor energy)", fontsize=9)
    return fig
