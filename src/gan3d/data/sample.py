"""Showers to look at: a sample with fixed-energy subsets, and reference showers for a GAN's,
synthetic or read from files."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import showers
from ..io import resolve_path
from .files import list_files, read_showers, split_files

__all__ = ["load_sample", "reference_showers"]


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
