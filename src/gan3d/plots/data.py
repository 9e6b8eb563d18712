"""Figures of the shower data (notebook 01): what a shower looks like and the laws it follows.

Inputs are showers ``ecal`` (N, 25, 25, 25) in GeV (depth last) with primary energies
``energy`` (N,) GeV, or ``samples``: a mapping {primary energy (GeV): showers at that energy}.
Each function takes an optional ``ax`` (see :mod:`gan3d.plots`) and returns the Figure.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
from matplotlib.colors import LogNorm

from ..data.calorimeter import (CELL_THRESHOLD_GEV, FRONT_LAYERS, HIT_THRESHOLD_GEV, N_CELLS,
                                N_LAYERS)
from . import colours, panels, styled

__all__ = ["example_showers", "shower_3d", "profiles", "sampling_fraction", "hits_and_spectrum",
           "fluctuations"]

# (axis summed over in one shower (x, y, z), transpose?, horizontal label, vertical label)
_PROJECTIONS = ((2, True, "x (cell)", "y (cell)"), (1, False, "layer (depth)", "x (cell)"),
                (0, False, "layer (depth)", "y (cell)"))


def _by_energy(samples: Mapping) -> dict:
    """One house colour per primary energy of ``samples``."""
    return dict(zip(samples, colours(len(samples))))


@styled
def example_showers(ecal, energy, *, n: int = 3, ax=None):
    """Projections of ``n`` showers: x-y (summed over depth), depth-x and depth-y, log colour
    (``ax``: n x 3 Axes)."""
    x = np.asarray(ecal)[:n]
    fig, axes = panels(ax, len(x), 3, width=10.0, height=2.9 * len(x))
    axes = np.asarray(axes).reshape(len(x), 3)
    for i, shower in enumerate(x):
        for j, (axis, transpose, xlabel, ylabel) in enumerate(_PROJECTIONS):
            image = shower.sum(axis=axis)
            image = image.T if transpose else image  # imshow draws rows upwards
            im = axes[i, j].imshow(np.ma.masked_less_equal(image, 0), origin="lower",
                                   norm=LogNorm(vmin=1e-5, vmax=max(image.max(), 2e-5)),
                                   aspect="auto")
            axes[i, j].set_xlabel(xlabel)
            axes[i, j].set_ylabel(ylabel)
            axes[i, j].grid(False)
        axes[i, 0].set_title(f"$E_p$ = {float(energy[i]):.0f} GeV, visible {shower.sum():.2f} GeV")
        fig.colorbar(im, ax=axes[i, :], label="energy (GeV)", shrink=0.9)
    return fig


@styled
def shower_3d(shower, energy: float, *, threshold: float = HIT_THRESHOLD_GEV, ax=None):
    """One shower in 3-D: cells above ``threshold`` GeV, colour and size by log energy
    (``ax``: one Axes with ``projection="3d"``)."""
    fig, ax = panels(ax, width=5.5, height=4.6, subplot_kw={"projection": "3d"})
    s = np.asarray(shower)
    ix, iy, iz = np.nonzero(s > threshold)
    e = s[ix, iy, iz]
    size = 4 + 40 * (np.log10(e / threshold) / max(np.log10(s.max() / threshold), 1e-9))
    pts = ax.scatter(iz, ix, iy, c=np.log10(e), s=size, cmap="viridis", alpha=0.7, linewidths=0)
    ax.set_xlabel("layer (depth)")
    ax.set_ylabel("x (cell)")
    ax.set_zlabel("y (cell)")
    ax.set_xlim(0, N_LAYERS - 1)
    ax.set_ylim(0, N_CELLS - 1)
    ax.set_zlim(0, N_CELLS - 1)
    ax.set_title(f"$E_p$ = {energy:.0f} GeV: {len(e)} cells above {threshold:g} GeV")
    fig.colorbar(pts, ax=ax, label="log10(cell energy / GeV)", shrink=0.7)
    return fig


@styled
def profiles(samples: Mapping[float, np.ndarray], *, ax=None):
    """Mean longitudinal (per layer) and transverse (per x cell) profiles by primary energy,
    divided by the primary energy so that the shapes compare; log scale (``ax``: 2 Axes)."""
    fig, axes = panels(ax, 1, 2, width=9.0)
    colour = _by_energy(samples)
    for e, x in samples.items():
        x = np.asarray(x, np.float64)
        axes[0].step(np.arange(N_LAYERS), x.sum(axis=(1, 2)).mean(axis=0) / e, where="mid",
                     color=colour[e], label=f"{e:g} GeV")
        axes[1].step(np.arange(N_CELLS), x.sum(axis=(2, 3)).mean(axis=0) / e, where="mid",
                     color=colour[e])
    axes[0].axvline(FRONT_LAYERS - 0.5, color="0.5", lw=0.8, ls=":")
    axes[0].text(FRONT_LAYERS - 0.2, 0.98, "4.8 mm W", transform=axes[0].get_xaxis_transform(),
                 va="top",
                 fontsize=7, color="0.4")
    for ax, label in zip(axes, ("layer (depth)", "x (cell)")):
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("mean visible energy / $E_p$")
    axes[0].legend(title="$E_p$")
    return fig


@styled
def sampling_fraction(energy, ecal, fit=None, *, n_bins: int = 14, ax=None):
    """ECAL sum / Ep against Ep: showers (dots), binned mean and spread, ``fit(E)`` (dashed),
    and in a lower panel the binned mean over the fit with a +-3 % band (``ax``: 2 Axes)."""
    e = np.asarray(energy, np.float64)
    frac = np.asarray(ecal).sum(axis=(1, 2, 3), dtype=np.float64) / e
    fig, (top, bottom) = panels(ax, 2, 1, width=5.2, height=5.0, sharex=True,
                                gridspec_kw={"height_ratios": (3, 1.3)})
    top.plot(e, frac, ".", ms=2, alpha=0.3, color="0.55", label="showers")
    edges = np.linspace(e.min(), e.max() + 1e-9, n_bins + 1)
    idx = np.digitize(e, edges[1:-1])
    keep = [k for k in range(n_bins) if np.sum(idx == k) >= 2]
    mid = np.array([e[idx == k].mean() for k in keep])
    mean = np.array([frac[idx == k].mean() for k in keep])
    std = np.array([frac[idx == k].std() for k in keep])
    c0 = colours(1)[0]
    top.errorbar(mid, mean, std, fmt="o", color=c0, capsize=2, label="binned mean ± std")
    if fit is not None:
        grid = np.linspace(e.min(), e.max(), 200)
        top.plot(grid, fit(grid), "k--", lw=1.2, label="3DGAN fit to the CLIC data")
        bottom.axhspan(0.97, 1.03, color="0.85")
        bottom.axhline(1.0, color="k", lw=0.8, ls="--")
        bottom.plot(mid, mean / fit(mid), "o", color=c0)
        bottom.set_ylabel("mean / fit")
    top.set_ylabel("sampling fraction $E_{ECAL}/E_p$")
    bottom.set_xlabel("primary energy $E_p$ (GeV)")
    top.legend()
    return fig


@styled
def hits_and_spectrum(samples: Mapping[float, np.ndarray], *,
                      threshold: float = HIT_THRESHOLD_GEV, ax=None):
    """Hits (cells above ``threshold`` GeV) per shower, and the cell-energy spectrum, by energy
    (``ax``: 2 Axes)."""
    fig, axes = panels(ax, 1, 2, width=9.0)
    colour = _by_energy(samples)
    edges = np.geomspace(CELL_THRESHOLD_GEV, 10.0, 57)
    for e, x in samples.items():
        x = np.asarray(x)
        hits = (x > threshold).sum(axis=(1, 2, 3))
        axes[0].hist(hits, bins=30, histtype="step", color=colour[e], label=f"{e:g} GeV")
        counts, _ = np.histogram(x[x > 0], bins=edges)
        axes[1].stairs(counts / len(x), edges, color=colour[e])
    axes[0].set_xlabel(f"hits per shower (cells > {threshold:g} GeV)")
    axes[0].set_ylabel("showers")
    axes[0].legend(title="$E_p$")
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].axvline(threshold, color="0.5", lw=0.8, ls=":")
    axes[1].set_xlabel("cell energy (GeV)")
    axes[1].set_ylabel("cells per shower and bin")
    return fig


@styled
def fluctuations(samples: Mapping[float, np.ndarray], summary: Mapping, *, ax=None):
    """Shower-to-shower fluctuations: visible energy / Ep by energy, and the relative resolution
    against Ep with the fits a/sqrt(E) (+) b of :func:`gan3d.validation.physics.sample_summary`
    (``ax``: 2 Axes)."""
    fig, axes = panels(ax, 1, 2, width=9.0)
    colour = _by_energy(samples)
    for e, x in samples.items():
        frac = np.asarray(x).sum(axis=(1, 2, 3), dtype=np.float64) / e
        axes[0].hist(frac / frac.mean(), bins=40, range=(0.75, 1.25), histtype="step",
                     density=True, color=colour[e], label=f"{e:g} GeV")
    axes[0].set_xlabel("visible energy / its mean at that $E_p$")
    axes[0].set_ylabel("showers (normalised)")
    axes[0].legend(title="$E_p$")
    rows = summary["bins"]
    e = np.array([r["energy"] for r in rows])
    grid = np.geomspace(e.min() * 0.8, e.max() * 1.2, 100)
    c0, c1 = colours(2)
    for kind, c, label in (("visible", c1, "visible sum"),
                           ("reconstructed", c0, "visible / layer sampling fraction")):
        axes[1].plot(e, [100 * r[f"resolution_{kind}"] for r in rows], "o", color=c, label=label)
        f = summary.get(f"resolution_fit_{kind}")
        if f:
            axes[1].plot(grid, 100 * np.hypot(f["a"] / np.sqrt(grid), f["b"]), "-", color=c,
                         lw=1, label=f"{100 * f['a']:.1f} %/√E ⊕ {100 * f['b']:.1f} %")
    axes[1].set_xscale("log")
    axes[1].set_xticks(e, [f"{v:g}" for v in e], minor=False)
    axes[1].minorticks_off()
    axes[1].set_xlabel("primary energy $E_p$ (GeV)")
    axes[1].set_ylabel("relative resolution σ/E (%)")
    axes[1].legend()
    return fig
