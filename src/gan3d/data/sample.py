"""Showers to look at: a sample with fixed-energy subsets, and reference showers for a GAN's,
synthetic or read from files; what notebook 01 reads from a sample's headline numbers (a
:func:`gan3d.validation.physics.sample_summary`), as sentences and a table."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import console
from . import showers
from ..io import resolve_path
from .files import list_files, read_showers, split_files

__all__ = ["load_sample", "reference_showers", "describe", "depth_reading", "sampling_reading",
           "hits_reading", "resolution_reading", "headline_table"]


def load_sample(source: str, n_showers: int, energies: Sequence[float] = (), *,
                energy_range: tuple[float, float] = (10.0, 500.0), halfwidth: float = 5.0,
                seed: int = 0) -> dict:
    """Showers to look at: ``ecal`` (N, 25, 25, 25) GeV and ``energy`` (N,) GeV, plus
    ``by_energy`` {E: showers (n, 25, 25, 25)} for each of ``energies`` (GeV) and ``primary``
    {E: their primary energies (n,)}.

    ``source="synthetic"``: ``n_showers`` from :func:`gan3d.data.showers.generate` with energies
    uniform in ``energy_range``, and ``n_showers // len(energies)`` more at each fixed energy.
    Otherwise ``source`` is a folder of shower files: the first ``n_showers`` (sorted files),
    and per energy those within +- ``halfwidth`` GeV of it.
    """
    if source == "synthetic":
        rng = np.random.default_rng(seed)
        energy = rng.uniform(*energy_range, n_showers).astype(np.float32)
        n_each = max(n_showers // max(len(energies), 1), 2)
        primary = {float(e): np.full(n_each, float(e), np.float32) for e in energies}
        by_energy = {e: showers.generate(p, rng=rng) for e, p in primary.items()}
        return {"ecal": showers.generate(energy, rng=rng), "energy": energy,
                "by_energy": by_energy, "primary": primary, "source": source}
    parts, have = [], 0
    for path in list_files(source):
        if have >= n_showers:
            break
        parts.append(read_showers(path, stop=n_showers - have))
        have += len(parts[-1][1])
    ecal, energy = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    near = {float(e): np.abs(energy - e) <= halfwidth for e in energies}
    near = {e: sel for e, sel in near.items() if sel.sum() >= 2}
    return {"ecal": ecal, "energy": energy, "source": str(source),
            "by_energy": {e: ecal[sel] for e, sel in near.items()},
            "primary": {e: energy[sel] for e, sel in near.items()}}


def reference_showers(data_cfg, energies: Sequence[float], seed: int = 0
                      ) -> tuple[np.ndarray, np.ndarray]:
    """One reference shower per energy of ``energies`` (GeV), to draw next to a GAN's:
    ``(ecal (n, 25, 25, 25) GeV, primary energies (n,) GeV)``.

    Synthetic data (``data_cfg.source``): showers generated at exactly those energies. CLIC
    files: of the held-out test files, the shower whose primary energy is nearest each energy
    (its own energy is returned, so that the GAN can be asked for the same one).
    """
    if data_cfg.source == "synthetic":
        e = np.asarray(energies, np.float64)
        return showers.generate(e, seed), e
    test = split_files(list_files(resolve_path(data_cfg.path)), data_cfg.test_fraction)[1]
    ecal, energy = (np.concatenate(x) for x in zip(*(read_showers(f) for f in test)))
    pick = [int(np.argmin(np.abs(energy - e))) for e in energies]
    return ecal[pick], energy[pick].astype(np.float64)


def describe(sample: dict) -> str:
    """One line on a :func:`load_sample` sample: its showers, source, energy range and the
    showers at each fixed energy."""
    energy, by_energy = sample["energy"], sample["by_energy"]
    return (f"{len(energy)} showers from {sample['source']}, {energy.min():.0f}-{energy.max():.0f} "
            "GeV; at fixed energies: " + ", ".join(f"{e:g} GeV x {len(x)}"
                                                   for e, x in by_energy.items()))


def _column(summary: dict, key: str) -> np.ndarray:
    return np.array([r[key] for r in summary["bins"]])


def _log_slope(e: np.ndarray, y: np.ndarray) -> float:
    """The slope of ``y`` against ln E (nan with fewer than two energies)."""
    return np.polyfit(np.log(e), y, 1)[0] if len(e) >= 2 else float("nan")


def depth_reading(summary: dict) -> str:
    """Markdown: how the mean depth of the energy and the transverse width change with energy
    (the shower maximum moves like ln E, the width is the Moliere radius's)."""
    e, depth = _column(summary, "energy"), _column(summary, "mean_depth_layers")
    width = _column(summary, "x_second_moment_cells2")
    return (f"Reading: from {e.min():g} to {e.max():g} GeV the mean depth of the energy moves from "
            f"layer {depth[0]:.1f} to {depth[-1]:.1f}, **{_log_slope(e, depth):.2f} layers per "
            f"factor e** of energy (a shower's maximum moves like ln E), while the transverse "
            f"second moment only goes from {width[0]:.2f} to {width[-1]:.2f} cells²: the Molière "
            "radius, not the energy, sets the width.")


def sampling_reading(summary: dict) -> str:
    """Markdown: the largest deviation of the mean sampling fraction from the published fit at
    the fixed energies, against the +-3 % band."""
    worst = 100 * summary["max_abs_deviation_from_fit"]
    return (f"Reading: at the fixed energies the mean sampling fraction differs from the published "
            f"fit by at most **{worst:.1f} %** ({'inside' if worst <= 3 else 'OUTSIDE'} the grey "
            "± 3 % band). Only one constant (the front sampling fraction) was tuned; the fall with "
            "energy comes out of the shower physics: leakage and the coarser back section.")


def hits_reading(summary: dict) -> str:
    """Markdown: the hit cells at the lowest and highest energy and the power of E they follow."""
    e, hits = _column(summary, "energy"), _column(summary, "hits")
    power = _log_slope(e, np.log(hits))
    return (f"Reading: more energy, more hit cells: {hits[0]:.0f} at {e[0]:g} GeV, {hits[-1]:.0f} "
            f"at {e[-1]:g} GeV, roughly like **E^{power:.2f}**. The spectrum spans many decades, "
            "from single quanta to the core cells: a GAN has to get both ends right.")


def resolution_reading(summary: dict) -> str | None:
    """Markdown: the fitted resolutions a/sqrt(E) (+) b of the reconstructed energy and of the
    plain visible sum; None where the summary has no fits (fewer than two energies)."""
    reco, vis = summary.get("resolution_fit_reconstructed"), summary.get("resolution_fit_visible")
    if not (reco and vis):
        return None
    return (f"Reading: the reconstructed energy has a resolution of **{100 * reco['a']:.1f} %/√E ⊕ "
            f"{100 * reco['b']:.1f} %**, the stochastic term of a Si–W sampling calorimeter with a "
            f"small constant term from leakage; the plain sum's is {100 * vis['a']:.1f} %/√E ⊕ "
            f"{100 * vis['b']:.1f} %. A shower that starts late puts more of itself in the back "
            "section, which samples half as much; the real detector's files store that plain sum "
            "too.")


def headline_table(summary: dict) -> str:
    """The headline numbers per energy as a Markdown table, then the largest deviation from the
    published fit and the fitted resolution of the reconstructed energy."""
    table = console.table(
        [[f"{r['energy']:g}", r["n"], f"{r['sampling_fraction']:.4f}", f"{r['ratio_to_fit']:.3f}",
          r["max_layer"], f"{r['hits']:.0f}", f"{r['x_second_moment_cells2']:.2f}",
          f"{r['resolution_reconstructed']:.4f}"] for r in summary["bins"]],
        ["E (GeV)", "n", "E_vis/E", "/ fit", "max layer", "hits", "<x2> (cell2)", "sigma/E reco"])
    fit = summary.get("resolution_fit_reconstructed")
    if not fit:
        return table
    return (f"{table}\n\nmax deviation from the published fit: "
            f"{100 * summary['max_abs_deviation_from_fit']:.1f} %; resolution (reconstructed): "
            f"{100 * fit['a']:.1f} %/sqrt(E) + {100 * fit['b']:.1f} %")
