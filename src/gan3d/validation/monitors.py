"""Physics monitors of a generator while it trains: a few numbers per fixed energy, against the
reference showers, cheap enough to compute every epoch.

For each monitor energy (default 50, 100, 200 and 400 GeV) the generator makes ``n`` showers from
fixed latent vectors (the same every epoch, so the curves show the generator, not the draw), and
the synthetic calorimeter makes ``n`` reference showers at the same energy (once, cached). Per
energy, :func:`shower_numbers` gives:

==========================  ===============================================================
``sampling_fraction``       mean visible / primary energy
``ecal_sum``                mean visible energy (GeV)
``ecal_sum_spread``         standard deviation / mean of the visible energy
``max_layer``               mean over showers of the layer holding most of the energy
``transverse_width``        mean over showers of sqrt((var x + var y) / 2), cells
``longitudinal_width``      mean over showers of the standard deviation along the depth, layers
``hits``                    mean number of cells above the hit threshold
==========================  ===============================================================

and against the reference: ``profile_distance`` (half the L1 distance between the normalised
mean longitudinal profiles: 0 identical, 1 disjoint) and the separation powers of the sampling
fraction and of the depth barycentre (:func:`gan3d.validation.metrics.separation_power`).

:data:`TARGETS` are the thresholds a generator worth validating meets at every energy. Nothing
here imports TensorFlow: the caller hands in the generated showers.
"""

from __future__ import annotations

import functools
from typing import Mapping, Sequence

import numpy as np

from ..data.showers import generate
from .metrics import separation_power
from .physics import hits, moments, sampling_fraction

__all__ = ["MONITOR_ENERGIES", "TARGETS", "shower_numbers", "reference_numbers", "compare",
           "history_row", "showers_needed", "targets_table"]

MONITOR_ENERGIES = (50.0, 100.0, 200.0, 400.0)
# monitor: (kind, tolerance). rel: |value / reference - 1| <= tol; abs: |value - reference| <= tol.
TARGETS = {
    "sampling_fraction": ("rel", 0.10),
    "max_layer": ("abs", 1.0),
    "transverse_width": ("rel", 0.20),
    "ecal_sum": ("rel", 0.05),
    "ecal_sum_spread": ("rel", 0.30),
}
NUMBERS = ("sampling_fraction", "ecal_sum", "ecal_sum_spread", "max_layer", "transverse_width",
           "longitudinal_width", "hits")


def shower_numbers(ecal, energy: float) -> dict:
    """The monitors of showers ``ecal`` (n, 25, 25, 25) GeV, all of primary energy ``energy`` GeV;
    ``profile`` is the normalised mean longitudinal profile (kept for :func:`compare`)."""
    x = np.asarray(ecal)
    if x.ndim == 5:
        x = x[..., 0]
    e = np.full(len(x), float(energy))
    layers = x.sum(axis=(1, 2), dtype=np.float64)  # (n, Z)
    total = layers.sum(axis=1)
    m = moments(x, orders=(1, 2))
    frac = sampling_fraction(x, e)
    mean_profile = layers.mean(axis=0)
    return {
        "sampling_fraction": float(np.nanmean(frac)),
        "ecal_sum": float(total.mean()),
        "ecal_sum_spread": float(total.std() / total.mean()) if total.mean() > 0 else float("nan"),
        "max_layer": float(np.argmax(layers, axis=1).mean()),
        "transverse_width": float(np.nanmean(np.sqrt((m["x"][:, 1] + m["y"][:, 1]) / 2))),
        "longitudinal_width": float(np.nanmean(np.sqrt(m["z"][:, 1]))),
        "hits": float(hits(x).mean()),
        "profile": (mean_profile / mean_profile.sum() if mean_profile.sum() > 0
                    else np.zeros_like(mean_profile)),
        "_frac": frac, "_depth": m["z"][:, 0],
    }


@functools.lru_cache(maxsize=8)
def _reference(energies: tuple, n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {e: shower_numbers(generate(np.full(n, e), rng=rng), e) for e in energies}


def reference_numbers(energies: Sequence[float] = MONITOR_ENERGIES, n: int = 64,
                      seed: int = 1234) -> dict:
    """:func:`shower_numbers` of ``n`` synthetic reference showers per energy (cached)."""
    return _reference(tuple(float(e) for e in energies), int(n), int(seed))


def _deviation(name: str, value: float, ref: float) -> float:
    kind, _ = TARGETS.get(name, ("rel", None))
    if kind == "abs":
        return value - ref
    return value / ref - 1 if ref else float("nan")


def compare(generated: Mapping[float, np.ndarray], reference: Mapping[float, dict] | None = None,
            n_reference: int = 64) -> dict:
    """The monitors of ``generated`` showers ({energy: (n, 25, 25, 25) GeV}) against the
    reference at the same energies: per energy, per monitor ``value``, ``reference``,
    ``deviation`` (relative, or absolute for layers) and ``met`` (for :data:`TARGETS`); then
    ``profile_distance``, ``sep_sampling_fraction``, ``sep_depth``. ``targets_met`` counts the
    (energy, target) pairs met, out of ``targets``."""
    energies = tuple(float(e) for e in generated)
    ref = reference or reference_numbers(energies, n_reference)
    out, met = {}, 0
    for e, showers in generated.items():
        g, r = shower_numbers(showers, e), ref[float(e)]
        row = {}
        for name in NUMBERS:
            dev = _deviation(name, g[name], r[name])
            row[name] = {"value": g[name], "reference": r[name], "deviation": dev}
            if name in TARGETS:
                row[name]["met"] = bool(np.isfinite(dev) and abs(dev) <= TARGETS[name][1])
                met += row[name]["met"]
        row["profile_distance"] = float(0.5 * np.abs(g["profile"] - r["profile"]).sum())
        row["sep_sampling_fraction"] = separation_power(r["_frac"], g["_frac"])
        row["sep_depth"] = separation_power(r["_depth"], g["_depth"])
        out[f"{e:g}"] = row
    return {"energies": list(energies), "per_energy": out, "targets_met": met,
            "targets": len(TARGETS) * len(energies)}


def history_row(result: dict) -> dict:
    """Flat ``mon_<monitor>_<energy>`` keys for a history row (deviations; profile distance and
    separation powers as they are), and ``mon_targets_met``."""
    row = {"mon_targets_met": result["targets_met"], "mon_targets": result["targets"]}
    for e, r in result["per_energy"].items():
        for name, v in r.items():
            row[f"mon_{name}_{e}"] = v["deviation"] if isinstance(v, dict) else v
    return row


def showers_needed(rows: Sequence[dict], energies: Sequence[float] = MONITOR_ENERGIES) -> dict:
    """From history-like rows (``showers_seen`` and :func:`history_row` keys, in training order):
    per target, the showers seen when it was first met at every energy and stayed met to the end
    (None if it is not met at the end)."""
    out = {}
    for name, (_, tol) in TARGETS.items():
        ok = [all(abs(r.get(f"mon_{name}_{e:g}", np.nan)) <= tol for e in energies) for r in rows]
        first = None
        for i in range(len(rows) - 1, -1, -1):
            if not ok[i]:
                break
            first = rows[i]["showers_seen"]
        out[name] = first
    return out


def targets_table(result: dict) -> str:
    """Markdown: per energy, each target's GAN value against the reference, and met or not."""
    head = "| energy | " + " | ".join(TARGETS) + " | longitudinal profile distance |"
    lines = [head, "|---" * (len(TARGETS) + 2) + "|"]
    for e, row in result["per_energy"].items():
        cells = []
        for name in TARGETS:
            v = row[name]
            cells.append(f"{v['value']:.4g} vs {v['reference']:.4g} "
                         f"{'**met**' if v['met'] else 'missed'}")
        lines.append(f"| {e} GeV | " + " | ".join(cells) + f" | {row['profile_distance']:.3f} |")
    lines.append(f"\n{result['targets_met']} of {result['targets']} (energy, target) pairs met.")
    return "\n".join(lines)
