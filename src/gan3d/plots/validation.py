"""Figures of the physics validation, in the style of 3DGAN's: reference showers (grey, filled)
against each generator (coloured lines), with the same primary energies.

Every function takes :class:`gan3d.validation.study.Summary` objects keyed by label (the
reference first) or the metrics JSON of :func:`gan3d.validation.study.validate`, and an optional
``ax`` (see :mod:`gan3d.plots`), and returns the Figure.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from ..data.calorimeter import HIT_THRESHOLD_GEV, N_LAYERS
from ..validation.study import metric_value, resolution_table
from . import LABELS, colours, panels, styled

__all__ = [
    "sampling_fraction",
    "ecal_sum_per_bin",
    "profiles",
    "profiles_per_bin",
    "energy_resolution",
    "moments",
    "hits_and_spectrum",
    "energy_regression",
    "metric_overview",
    "validator_check",
    "speed",
]

_REF = dict(color="0.55", alpha=0.45)  # the reference: grey and filled, generators on top


def _grid(ax, nrows: int, ncols: int, **kwargs):
    """A Figure and its axes as a 2-D array whatever the shape (:func:`panels` squeezes)."""
    fig, axes = panels(ax, nrows, ncols, **kwargs)
    return fig, np.asarray(axes, dtype=object).reshape(nrows, ncols)


def _colour(k: int) -> str:
    """The k-th colour of the house cycle (generators; the reference is grey)."""
    return colours(k + 1)[k]


def _styles(labels) -> dict[str, dict]:
    """Reference (first label) grey and filled; generators in the cycle's colours."""
    out, k = {}, 0
    for i, lab in enumerate(labels):
        out[lab] = dict(_REF, histtype="stepfilled") if i == 0 else dict(
            color=_colour(k), histtype="step", linewidth=1.6)
        k += i > 0
    return out


def _hist(ax, samples: Mapping[str, np.ndarray], bins, xlabel: str, log: bool = False):
    """Normalised histograms of one feature for every sample on ``ax``."""
    pooled = np.concatenate([v[np.isfinite(v)] for v in samples.values()])
    if isinstance(bins, int):
        lo, hi = np.quantile(pooled, [0.002, 0.998]) if pooled.size else (0.0, 1.0)
        bins = np.linspace(lo, hi if hi > lo else lo + 1, bins + 1)
    for (lab, v), st in zip(samples.items(), _styles(samples).values()):
        ax.hist(v[np.isfinite(v)], bins=bins, density=True, label=lab, **st)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("showers (normalised)")
    if log:
        ax.set_yscale("log")


@styled
def sampling_fraction(samples, fit: Callable | None = None, n_bins: int = 12, *, ax=None):
    """Mean and spread of ECAL sum / Ep in bins of Ep (GeV), per sample; ``fit(E)`` drawn too
    (e.g. :func:`gan3d.data.calorimeter.sampling_fraction_fit`, the published 3DGAN fit).
    (``ax``: 1 Axes.)"""
    fig, ax = panels(ax, width=5.0)
    lo = min(s.energy.min() for s in samples.values())
    hi = max(s.energy.max() for s in samples.values())
    edges = np.linspace(lo, hi, n_bins + 1)
    mid = 0.5 * (edges[1:] + edges[:-1])
    for i, (lab, s) in enumerate(samples.items()):
        sf, idx = s.features["sampling_fraction"], np.digitize(s.energy, edges[1:-1])
        mean = np.array([np.nanmean(sf[idx == k]) if np.any(idx == k) else np.nan
                         for k in range(n_bins)])
        std = np.array([np.nanstd(sf[idx == k]) if np.any(idx == k) else np.nan
                        for k in range(n_bins)])
        if i == 0:
            ax.fill_between(mid, mean - std, mean + std, label=f"{lab} (mean ± std)", **_REF)
        else:
            ax.errorbar(mid + (i - 1) * 0.01 * (hi - lo), mean, std, fmt="o-", color=_colour(i - 1),
                        capsize=2, label=lab)
    if fit is not None:
        e = np.linspace(lo, hi, 200)
        ax.plot(e, fit(e), "k--", lw=1, label="3DGAN fit to the CLIC data")
    ax.set_xlabel("primary energy $E_p$ (GeV)")
    ax.set_ylabel("sampling fraction $E_{ECAL}/E_p$")
    ax.legend()
    return fig


@styled
def ecal_sum_per_bin(per_bin: Mapping[str, Mapping], *, ax=None):
    """ECAL-sum distributions (GeV), one panel per energy bin (keys like ``"100"``; the
    inclusive sample only if there are no bins). (``ax``: one Axes per bin.)"""
    keys = [k for k in per_bin if k != "inclusive"] or list(per_bin)
    fig, axes = _grid(ax, 1, len(keys), width=3.0 * len(keys), height=3.0)
    for ax, key in zip(axes[0], keys):
        _hist(ax, {lab: s.features["ecal_sum"] for lab, s in per_bin[key].items()}, 30,
              "ECAL sum (GeV)")
        ax.set_title(f"$E_p$ = {key} GeV" if key != "inclusive" else "all energies")
    axes[0, 0].legend()
    return fig


@styled
def profiles(samples, *, ax=None):
    """Mean shower profiles along x, y (transverse) and z (longitudinal), GeV per cell or
    layer; top row linear, bottom row logarithmic. (``ax``: 2 x 3 Axes.)"""
    fig, axes = panels(ax, 2, 3, width=11.0, height=6.0)
    names = {"x": "x (cell)", "y": "y (cell)", "z": "layer (depth)"}
    for col, axis in enumerate("xyz"):
        for row in range(2):
            ax = axes[row, col]
            for i, (lab, s) in enumerate(samples.items()):
                p = s.profiles[axis]
                if i == 0:
                    ax.fill_between(np.arange(p.size), p, step="mid", label=lab, **_REF)
                else:
                    ax.step(np.arange(p.size), p, where="mid", color=_colour(i - 1), label=lab)
            ax.set_xlabel(names[axis])
            ax.set_ylabel("mean energy (GeV)")
            if row == 1:
                ax.set_yscale("log")
    axes[0, 0].legend()
    return fig


@styled
def profiles_per_bin(per_bin: Mapping[str, Mapping], *, ax=None):
    """Per energy bin (keys like ``"100"``; ``"inclusive"`` left out when there are bins): the
    mean longitudinal (layer) and transverse (x) profiles, GeV, log scale, each over a ratio
    panel GAN / reference (1 = equal; the grey band is x 0.8-1.25), as 3DGAN's papers show them.
    (``ax``: 2 x len(bins) rows of 2 Axes: profile then ratio, per bin.)"""
    keys = [k for k in per_bin if k != "inclusive"] or list(per_bin)
    fig, axes = _grid(ax, 2 * len(keys), 2, width=10.0, height=3.3 * len(keys),
                      gridspec_kw={"height_ratios": [3, 1] * len(keys)})
    for b, key in enumerate(keys):
        samples = per_bin[key]
        ref = next(iter(samples.values()))
        where = f"$E_p$ = {key} GeV" if key != "inclusive" else "all energies"
        for col, (axis, xlabel) in enumerate((("z", "layer (depth)"), ("x", "x (cell)"))):
            top, bottom = axes[2 * b, col], axes[2 * b + 1, col]
            cells = np.arange(ref.profiles[axis].size)
            for i, (lab, s) in enumerate(samples.items()):
                p = s.profiles[axis]
                if i == 0:
                    top.fill_between(cells, p, step="mid", label=lab, **_REF)
                    continue
                top.step(cells, p, where="mid", color=_colour(i - 1), label=lab)
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.where(ref.profiles[axis] > 0, p / ref.profiles[axis], np.nan)
                bottom.step(cells, np.clip(ratio, 1e-2, 1e2), where="mid", color=_colour(i - 1))
            top.set_yscale("log")
            top.set_ylabel("mean energy (GeV)")
            top.set_title(f"{where}: {'longitudinal' if axis == 'z' else 'transverse'} profile",
                          fontsize=8)
            bottom.axhspan(0.8, 1.25, **_REF, lw=0)
            bottom.axhline(1.0, color="black", lw=0.6)
            bottom.set_yscale("log")
            bottom.set_ylim(0.05, 20)
            bottom.set_ylabel(f"{LABELS['gan']} / ref.", fontsize=7)
            bottom.set_xlabel(xlabel)
    axes[0, 0].legend(fontsize="x-small")
    return fig


@styled
def energy_resolution(per_bin: Mapping[str, Mapping], *, ax=None):
    """Relative energy resolution sigma/mean of ECAL sum / Ep per energy bin (keys like
    ``"100"``), each sample with its standard error and its fit a/sqrt(E) (+) b (in the legend),
    over a ratio panel GAN / reference (the grey band is x 0.8-1.25, the 20 % a calorimeter
    simulation is asked to stay within). (``ax``: 2 Axes, resolution then ratio.)"""
    table = resolution_table(per_bin)
    fig, axes = _grid(ax, 2, 1, width=5.5, height=5.0, gridspec_kw={"height_ratios": [3, 1]})
    top, bottom = axes[0, 0], axes[1, 0]
    labels = list(table)
    ref = table[labels[0]] if labels else None
    for i, lab in enumerate(labels):
        row = table[lab]
        e, r, err = (np.asarray(row[k], float) for k in ("energy", "resolution", "error"))
        fit = row.get("fit")
        text = f"{lab}" + (f": {fit['a']:.2f}/$\\sqrt{{E}}$ ⊕ {fit['b']:.3f}" if fit else "")
        if i == 0:
            top.fill_between(e, r - err, r + err, label=text, **_REF)
            continue
        shift = 1 + 0.02 * (i - 1)
        top.errorbar(e * shift, r, err, fmt="o-", color=_colour(i - 1), capsize=2, label=text)
        ratio = r / np.asarray(ref["resolution"], float)
        ratio_err = ratio * np.hypot(err / r, np.asarray(ref["error"], float) / np.asarray(ref["resolution"], float))
        bottom.errorbar(e * shift, ratio, ratio_err, fmt="o", color=_colour(i - 1), capsize=2)
    top.set_xscale("log")
    top.set_yscale("log")
    top.set_ylabel("resolution $\\sigma / \\mu$ of $E_{ECAL}/E_p$")
    top.legend(fontsize="x-small")
    bottom.axhspan(0.8, 1.25, **_REF, lw=0)
    bottom.axhline(1.0, color="black", lw=0.6)
    bottom.set_xscale("log")
    bottom.set_yscale("log")
    bottom.set_ylabel(f"{LABELS['gan']} / ref.", fontsize=7)
    bottom.set_xlabel("primary energy $E_p$ (GeV)")
    return fig


@styled
def moments(samples, *, ax=None):
    """Distributions of the first (barycentre, cell), second (variance, cell^2) and third
    (central, cell^3) moments of the energy along x, y and z. (``ax``: 3 x 3 Axes.)"""
    fig, axes = panels(ax, 3, 3, width=11.0, height=8.4)
    kinds = (("mean", "barycentre", "cell"), ("var", "variance", "cell$^2$"),
             ("skew", "third moment", "cell$^3$"))
    for col, axis in enumerate("xyz"):
        for row, (suffix, what, unit) in enumerate(kinds):
            _hist(axes[row, col], {lab: s.features[f"{axis}_{suffix}"] for lab, s in samples.items()},
                  30, f"{what} along {axis} ({unit})")
    axes[0, 0].legend()
    return fig


@styled
def hits_and_spectrum(samples, *, ax=None):
    """Hits per shower (cells above the hit threshold), the single-cell energy spectrum (GeV,
    log-log) and the layer of the hottest cell. (``ax``: 3 Axes.)"""
    fig, axes = panels(ax, 1, 3, width=11.0, height=3.4)
    _hist(axes[0], {lab: s.features["hits"] for lab, s in samples.items()}, 30,
          f"hits (cells > {HIT_THRESHOLD_GEV:g} GeV)")
    for i, (lab, s) in enumerate(samples.items()):
        counts, edges = s.spectrum
        if i == 0:
            axes[1].stairs(counts, edges, fill=True, label=lab, **_REF)
        else:
            axes[1].stairs(counts, edges, color=_colour(i - 1), label=lab)
    axes[1].set(xscale="log", yscale="log", xlabel="cell energy (GeV)",
                ylabel="cells per shower and bin")
    _hist(axes[2], {lab: s.features["z_max"] for lab, s in samples.items()},
          np.arange(-0.5, N_LAYERS + 0.5), "layer of the hottest cell")
    axes[0].legend()
    return fig


@styled
def energy_regression(reference, generators: Mapping, *, ax=None):
    """The discriminator's regressed primary energy (GeV) against the true one, on reference
    and on GAN showers, one panel per generator that has a discriminator. (``ax``: one Axes per
    such generator, at least one.)"""
    labs = [lab for lab, s in generators.items() if s.discriminator is not None]
    fig, axes = _grid(ax, 1, max(len(labs), 1), width=4.2 * max(len(labs), 1))
    for ax, lab in zip(axes[0], labs):
        ref = (reference.discriminator or {}).get(lab)
        if ref is not None:
            ax.scatter(ref["true_energy_gev"], ref["energy_gev"], s=6, color="0.45",
                       label=f"D on {LABELS['reference']}")
        g = generators[lab].discriminator
        ax.scatter(g["true_energy_gev"], g["energy_gev"], s=6, color=_colour(0),
                   label="D on GAN showers")
        hi = float(np.max(g["true_energy_gev"]))
        ax.plot([0, hi], [0, hi], "k--", lw=1, label="ideal")
        ax.set(title=lab, xlabel="true $E_p$ (GeV)", ylabel="regressed $E_p$ (GeV)")
        ax.legend()
    if not labs:
        axes[0, 0].text(0.5, 0.5, "no discriminator.keras in the checkpoints", ha="center",
                        transform=axes[0, 0].transAxes)
    return fig


# Each metric's panel: a title that says what is measured, and its y axis.
METRIC_TITLES = {
    "auc_high": ("classifier on the 151 high-level features", "AUC (0.5: cannot tell them apart)"),
    "fpd": ("Frechet physics distance (FPD)", "FPD (0: same distribution)"),
    "three_dgan": ("3DGAN metric: moments and profiles", "relative error (0: same means)"),
    "sep:sampling_fraction": ("sampling-fraction histograms", "separation power (0: same shape)"),
}


@styled
def metric_overview(result: dict, names=("auc_high", "fpd", "three_dgan", "sep:sampling_fraction"),
                    *, ax=None):
    """Each metric per energy bin for every generator, with the independent reference sample
    as the "ideal at this sample size" baseline (grey). FPD with its error bar; metrics that span
    decades on a log axis (values of 0 and below are not drawn there).
    (``ax``: one Axes per metric.)"""
    keys = result["bins"]
    x = np.arange(len(keys))
    cols = 2 if len(names) > 2 else len(names)  # two a row: readable at a page's width
    rows_n = -(-len(names) // cols)
    fig, axes = _grid(ax, rows_n, cols, width=4.6 * cols, height=3.3 * rows_n + 0.9)
    rows = [("reference (2nd sample)", result["reference"], "0.45")]
    rows += [(lab, g["bins"], _colour(i))
             for i, (lab, g) in enumerate(result["generators"].items())]
    for ax, name in zip(axes.ravel(), names):
        positive = False
        for j, (lab, per_bin, color) in enumerate(rows):
            y = np.array([metric_value(per_bin[k], name) for k in keys], float)
            err = np.array([per_bin[k]["fpd"]["error"] for k in keys]) if name == "fpd" else None
            ax.errorbar(x + 0.08 * j, y, err, fmt="o", color=color, capsize=2, label=lab)
            positive |= bool(np.any(np.isfinite(y) & (y > 0)))
        ax.set_xticks(x, keys, rotation=45)
        title, ylabel = METRIC_TITLES.get(name, (name, name))
        ax.set(xlabel="energy bin (GeV)" if ax in axes[-1] else "", title=title, ylabel=ylabel)
        if positive and (name in ("fpd", "three_dgan") or name.startswith("sep:")):
            ax.set_yscale("log", nonpositive="mask")  # values span decades (none: linear)
        if name == "auc_high":
            ax.set_ylim(0.4, 1.02)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 3),
               frameon=False, fontsize="small")
    fig.suptitle("measured here: each generator against reference showers (grey: a second "
                 "reference sample, the floor at this sample size)", fontsize="medium")
    return fig


@styled
def validator_check(cases: Mapping[str, Mapping[str, float]], reference: str = "reference", *,
                    ax=None):
    """Metrics (one panel each) for a reference-vs-reference case and known distortions: the
    metric that should flag a distortion stands far above the reference bar.
    (``ax``: one Axes per metric.)"""
    metric_names = list(next(iter(cases.values())))
    fig, axes = _grid(ax, 1, len(metric_names), width=2.6 * len(metric_names), height=3.4)
    names = list(cases)
    for ax, m in zip(axes[0], metric_names):
        vals = np.array([cases[c][m] for c in names], dtype=float)
        bars = ax.bar(np.arange(len(names)), np.nan_to_num(vals),
                      color=["0.55" if c == reference else _colour(i) for i, c in enumerate(names)])
        ax.bar_label(bars, labels=[f"{v:.2g}" for v in vals], fontsize=7)
        ax.set_xticks(np.arange(len(names)), names, rotation=60, ha="right")
        ax.set_title(m)
        if m == "AUC":
            ax.set_ylim(0, 1.12)
            ax.axhline(0.5, color="k", lw=0.8, ls=":")
        elif np.isnan(vals).all():  # FPD of samples smaller than twice the features
            ax.text(0.5, 0.5, "not computed:\nsamples too small", transform=ax.transAxes,
                    ha="center", va="center", fontsize=8)
        else:  # values span decades; symlog keeps a value compatible with 0 visible
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.set_ylim(min(0.0, np.nanmin(vals)), 5 * np.nanmax(np.abs(vals)))
    return fig


@styled
def speed(table: dict, *, ax=None):
    """Showers per second (log scale) of GAN inference by precision and batch size, of the
    synthetic generator, and published Geant4 numbers where available. (``ax``: 1 Axes.)"""
    rows = table["rows"]
    gan = [r["source"].startswith("GAN") for r in rows]
    labels = [f"{r['source']} {r['precision']} b={r['batch_size']}" if g
              else f"{r['source']} (NumPy)" for r, g in zip(rows, gan)]
    values = [r["showers_per_s"] for r in rows]
    c32, c16, cfold, csyn = colours(4)
    colors = [(cfold if "folded" in r["source"] else c32 if r["precision"] == "float32" else c16)
              if g else csyn for r, g in zip(rows, gan)]
    for pub in table.get("published", []):
        if pub.get("showers_per_s"):
            labels.append(pub["label"])
            values.append(pub["showers_per_s"])
            colors.append("0.3")
    fig, ax = panels(ax, width=6.0, height=0.32 * len(labels) + 1.2)
    ax.barh(np.arange(len(labels)), values, color=colors)
    ax.set_yticks(np.arange(len(labels)), labels)
    ax.invert_yaxis()
    ax.set(xscale="log", xlabel="showers per second (one process)")
    return fig
