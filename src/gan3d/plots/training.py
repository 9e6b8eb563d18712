"""Figures of training (notebook 02): loss curves of several runs, time per epoch, and
generated showers next to reference ones.

``histories`` map a run's label (e.g. ``"1 worker"``) to its ``history.jsonl`` rows
(:func:`gan3d.history.read_history`); showers are (N, 25, 25, 25) arrays in GeV, depth last.
Each function returns a Figure in the house style.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.ticker import MaxNLocator

from . import LABELS, new_figure, style, styled

__all__ = ["loss_curves", "epoch_times", "shower_comparison"]

_PARTS = {"loss": "weighted total", "bce": "real/fake BCE", "aux": "energy MAPE (%)",
          "ecal": "ECAL-sum MAPE (%)"}


_styled = styled  # every artist inside the house style, so colours and sizes follow it


def _colours(n: int) -> list[str]:
    with style():
        cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


@_styled
def loss_curves(histories: Mapping[str, Sequence[dict]], parts: Sequence[str] = ("loss", "bce")):
    """Discriminator (top row) and generator (bottom row) losses per epoch, one panel per part
    (``loss``, ``bce``, ``aux``, ``ecal``); training solid, test dashed, one colour per run."""
    fig, axes = new_figure(2, len(parts), width=4.0 * len(parts), height=5.6, sharex=True)
    axes = np.asarray(axes).reshape(2, len(parts))
    for colour, (label, rows) in zip(_colours(len(histories)), histories.items()):
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


@_styled
def epoch_times(histories: Mapping[str, Sequence[dict]]):
    """Wall time per epoch split into training and evaluation (s), runs side by side; the
    untimed warm-up epochs are hatched."""
    fig, ax = new_figure(1, 1, width=6.0)
    n = len(histories)
    width = 0.8 / max(n, 1)
    for k, (colour, (label, rows)) in enumerate(zip(_colours(n), histories.items())):
        x = np.array([r["epoch"] for r in rows]) + (k - (n - 1) / 2) * width
        train = np.array([r["time_train_s"] for r in rows])
        evals = np.array([r["time_eval_s"] for r in rows])
        hatch = ["//" if not r["timed"] else "" for r in rows]
        ax.bar(x, train, width, color=colour, hatch=hatch, label=f"{label}: training")
        ax.bar(x, evals, width, bottom=train, color=colour, alpha=0.4, hatch=hatch,
               label=f"{label}: test evaluation")
    ax.set_xlabel("epoch (hatched: timing warm-up, excluded as in the paper)")
    ax.set_ylabel("wall time per epoch (s)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize="small")
    return fig


@_styled
def shower_comparison(reference, generated, energies: Sequence[float]):
    """Each row one primary energy: the reference shower's and the GAN shower's depth-x projection
    (summed over y, log colour) and both longitudinal profiles (GeV per layer)."""
    ref, gen = np.asarray(reference), np.asarray(generated)
    rows = len(energies)
    fig, axes = new_figure(rows, 3, width=11.0, height=2.8 * rows)
    axes = np.asarray(axes).reshape(rows, 3)
    colours = _colours(2)
    for i, e in enumerate(energies):
        vmax = max(ref[i].sum(axis=1).max(), gen[i].sum(axis=1).max(), 2e-5)
        for j, (shower, who) in enumerate(((ref[i], "reference"), (gen[i], "gan"))):
            image = shower.sum(axis=1)  # (x, depth)
            im = axes[i, j].imshow(np.ma.masked_less_equal(image, 0), origin="lower",
                                   aspect="auto", norm=LogNorm(vmin=1e-5, vmax=vmax))
            axes[i, j].set_title(f"{LABELS[who]}, {e:.0f} GeV: {shower.sum():.2f} GeV visible")
            axes[i, j].set_xlabel("layer (depth)")
            axes[i, j].set_ylabel("x (cell)")
            axes[i, j].grid(False)
        fig.colorbar(im, ax=axes[i, 1], label="GeV per cell, summed over y")
        layers = np.arange(ref.shape[-1])
        for shower, who, c in ((ref[i], "reference", colours[0]), (gen[i], "gan", colours[1])):
            axes[i, 2].step(layers, shower.sum(axis=(0, 1)), where="mid", color=c, label=LABELS[who])
        axes[i, 2].set_xlabel("layer (depth)")
        axes[i, 2].set_ylabel("energy per layer (GeV)")
        axes[i, 2].legend(fontsize="small")
    return fig
