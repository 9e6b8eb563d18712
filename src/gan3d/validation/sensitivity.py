"""What "passes" means: the smallest distortions the validator sees, and at what sample size.

A generator "passes" a metric when its value is inside what two reference samples give each other
by chance. How small a flaw can hide inside that noise depends on the sample size. For each known
distortion of reference showers (sampling fraction +1 % and +2 %, showers 5 % wider, the
longitudinal profile 0.3 layer deeper) and each sample size ``n``, :func:`sensitivity` draws
``trials`` independent pairs of reference samples (same primary energies within a pair), distorts
the second sample of every pair, and compares:

* the **null**: separation power of the distortion's feature between the two undistorted
  samples; its 95th percentile over the trials is the threshold;
* the **power**: the fraction of trials in which the distorted sample's separation power from
  the first sample exceeds that threshold.

A distortion is **visible** at ``n`` when its power reaches 0.5. Everything is measured on the
synthetic calorimeter (pure NumPy).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import console
from ..data.showers import generate
from .metrics import separation_power
from .physics import scale_energy, shift_layers, shower_features, widen_transverse

__all__ = ["DISTORTIONS", "sensitivity", "sensitivity_table"]


def _deeper(x: np.ndarray, layers: float) -> np.ndarray:
    """The profile ``layers`` (0 < layers < 1) deeper on average: a mix of it and its shift."""
    return (1 - layers) * x + layers * shift_layers(x, 1)


# name -> (distortion, the shower feature that should see it)
DISTORTIONS: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "sampling fraction +1 %": (lambda x: scale_energy(x, 1.01), "sampling_fraction"),
    "sampling fraction +2 %": (lambda x: scale_energy(x, 1.02), "sampling_fraction"),
    "5 % wider": (lambda x: widen_transverse(x, 1.05), "x_var"),
    "0.3 layer deeper": (lambda x: _deeper(x, 0.3), "z_mean"),
}


def sensitivity(sizes: Sequence[int] = (100, 300, 1000), trials: int = 8, seed: int = 0,
                energy_range: tuple[float, float] = (10.0, 500.0),
                progress: bool = True) -> dict:
    """Power of the validator against :data:`DISTORTIONS` at each sample size (module docstring).

    Returns ``{"sizes", "trials", "threshold": {feature: {n: 95th percentile of the null}},
    "power": {distortion: {n: fraction}}, "median": {distortion: {n: median separation
    power}}, "visible_from": {distortion: smallest n with power >= 0.5, or None}, "effect":
    {distortion: relative change of its feature's mean}}`` (``5 % wider`` re-bins the cells, so
    the x variance of these narrow showers grows by more than 10 %: the effect says by how much).
    """
    rng = np.random.default_rng(seed)
    features = sorted({f for _, f in DISTORTIONS.values()})
    null = {f: {n: [] for n in sizes} for f in features}
    seen = {d: {n: [] for n in sizes} for d in DISTORTIONS}
    effect = {d: [] for d in DISTORTIONS}
    bar = console.progress(total=len(sizes) * trials, desc="validator sensitivity",
                           disable=None if progress else True)
    for n in sizes:
        for _ in range(trials):
            e = rng.uniform(*energy_range, n)
            first, second = generate(e, rng=rng), generate(e, rng=rng)
            f1, f2 = shower_features(first, e), shower_features(second, e)
            for f in features:
                null[f][n].append(separation_power(f1[f], f2[f]))
            for name, (distort, f) in DISTORTIONS.items():
                changed = shower_features(distort(second), e)[f]
                seen[name][n].append(separation_power(f1[f], changed))
                effect[name].append(np.nanmean(changed) / np.nanmean(f2[f]) - 1)
            bar.update()
    bar.close()
    threshold = {f: {n: float(np.percentile(null[f][n], 95)) for n in sizes} for f in features}
    power = {d: {n: float(np.mean(np.array(seen[d][n]) > threshold[f][n])) for n in sizes}
             for d, (_, f) in DISTORTIONS.items()}
    median = {d: {n: float(np.median(seen[d][n])) for n in sizes} for d in DISTORTIONS}
    visible = {d: next((n for n in sizes if power[d][n] >= 0.5), None) for d in DISTORTIONS}
    return {"sizes": list(sizes), "trials": trials, "seed": seed,
            "features": {d: f for d, (_, f) in DISTORTIONS.items()}, "threshold": threshold,
            "power": power, "median": median, "visible_from": visible,
            "effect": {d: float(np.median(v)) for d, v in effect.items()}}


def sensitivity_table(result: dict) -> str:
    """Markdown: per distortion, the power at each sample size and where it becomes visible."""
    sizes = result["sizes"]
    rows = []
    for d, f in result["features"].items():
        p = result["power"][d]
        first = result["visible_from"][d]
        rows.append([d, f"separation power of {f} (mean {result['effect'][d]:+.1%})",
                     *(f"{p.get(n, p.get(str(n))):.2f}" for n in sizes),  # JSON: str keys
                     f"n = {first}" if first else f"beyond n = {sizes[-1]}"])
    head = ["distortion", "feature", *(f"power at n = {n}" for n in sizes), "visible from"]
    return (console.table(rows, head) + f"\n\nPower: share of {result['trials']} trials above "
            "the 95th percentile of reference against reference at the same n.")
