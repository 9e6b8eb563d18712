"""Is this a shower sample in GeV? Value checks of every read, and what each failure likely means.

Files from another writer can be readable and still wrong in ways that would silently train a
wrong GAN: cells in MeV, a file that was already preprocessed (cells x100, energies /100), the two
columns of ``target`` swapped, no showers, or only empty ones. Every slab of showers read by
:func:`gan3d.data.files.read_showers` goes through :func:`check_values`, which raises a
:class:`~gan3d.exceptions.DataValueError` naming the file, the numbers and the likely cause.

The plausibility test is the *visible fraction*: ECAL sum / primary energy. The real CLIC data
follow the published fit, 0.018-0.022 (:func:`gan3d.data.calorimeter.sampling_fraction_fit`);
the median over a slab of showers must lie in :data:`VISIBLE_FRACTION_WINDOW`, five times that
either side, which no unit mistake passes (MeV cells give ~20, a preprocessed file ~200, swapped
columns ~0.4) and which leaves room for other calorimeters' sampling. Showers that a GAN wrote
(files marked so by :func:`gan3d.data.files.shower_file`) are exempt: validation must be able to
read implausible showers and say what is wrong with them.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import DataValueError

__all__ = ["VISIBLE_FRACTION_WINDOW", "TYPICAL_VISIBLE_FRACTION", "visible_fraction",
           "implausible", "check_values", "constant_energy"]

TYPICAL_VISIBLE_FRACTION = 0.02  # the real CLIC data (published fit: 0.018-0.022)
VISIBLE_FRACTION_WINDOW = (0.004, 0.1)  # x5 either side of the real data's
_PDG_ELECTRON = 11.0


def visible_fraction(ecal: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """ECAL sum / primary energy of every shower that deposited anything: (n_nonzero,)."""
    sums = np.asarray(ecal).sum(axis=(1, 2, 3), dtype=np.float64)
    keep = sums > 0
    return sums[keep] / np.asarray(energy, np.float64)[keep]


def implausible(ecal: np.ndarray, energy: np.ndarray) -> str | None:
    """None if ``ecal`` (n, 25, 25, 25) and ``energy`` (n,) look like showers in GeV; else what
    is wrong and its likely cause, in one sentence."""
    frac = visible_fraction(ecal, energy)
    if frac.size == 0:
        return "every shower is empty (all cells zero); the file holds no showers to learn from"
    median = float(np.median(frac))
    lo, hi = VISIBLE_FRACTION_WINDOW
    if lo <= median <= hi:
        return None
    energy = np.asarray(energy, np.float64)
    if np.allclose(energy, _PDG_ELECTRON):
        cause = ("every primary energy reads 11 GeV, the PDG code of an electron: are the two "
                 "columns of 'target' swapped? The energy must be column 1")
    elif median > hi and energy.max() <= 5.0 + 1e-6:
        cause = ("energies of at most 5 and sums ~10^4 x too large: was the file already "
                 "preprocessed (cells x100, energies /100)? Store cells and energies in GeV")
    elif median > hi and 100 <= median / TYPICAL_VISIBLE_FRACTION <= 10_000:
        cause = "cells ~1000 x too large: are the cell energies in MeV? Store them in GeV"
    elif median > hi:
        cause = "the cells hold more energy than their primary energy allows: check both units"
    else:
        cause = ("the cells hold too little energy for their primary energy: are the primary "
                 "energies in MeV, or the cells in another unit? Store both in GeV")
    return (f"median visible fraction ECAL sum / E = {median:.3g}, outside the plausible "
            f"[{lo}, {hi}] (real CLIC showers: about {TYPICAL_VISIBLE_FRACTION}); {cause}")


def check_values(ecal: np.ndarray, energy: np.ndarray, where: str, start: int,
                 energy_range: tuple[float, float], *, generated: bool = False) -> None:
    """Raise :class:`DataValueError` naming ``where`` (a file) and the first bad shower (index
    from ``start``) for NaN/inf or negative cells, primary energies outside ``energy_range``
    GeV, and, unless the showers are ``generated`` by a GAN, an implausible sample."""
    def first(bad_rows):
        return start + int(np.argmax(bad_rows))
    finite = np.isfinite(ecal).all(axis=(1, 2, 3))
    if not finite.all():
        raise DataValueError(f"{where}: NaN or infinite cell energies in {np.sum(~finite)} "
                             f"showers (first: shower {first(~finite)})")
    negative = (ecal < 0).any(axis=(1, 2, 3))
    if negative.any():
        raise DataValueError(f"{where}: negative cell energies in {np.sum(negative)} showers "
                             f"(first: shower {first(negative)}); cells must be energies >= 0 GeV")
    lo, hi = energy_range
    bad = ~((energy >= lo) & (energy <= hi))  # also catches NaN
    if bad.any():
        i = first(bad)
        raise DataValueError(f"{where}: primary energy {float(energy[i - start]):g} GeV of shower "
                             f"{i} is outside [{lo:g}, {hi:g}] GeV (wrong unit, or a broken file)")
    problem = None if generated or len(energy) == 0 else implausible(ecal, energy)
    if problem:
        raise DataValueError(f"{where}: showers {start}-{start + len(energy) - 1}: {problem}")


def constant_energy(energy: np.ndarray) -> float | None:
    """The one primary energy (GeV) of a sample whose energies do not vary, else None.

    Legitimate (fixed-energy samples exist) but worth a warning: an energy-conditioned GAN
    trained on them learns nothing about the energy."""
    energy = np.asarray(energy, np.float64)
    if energy.size >= 2 and np.ptp(energy) <= 1e-6 * max(abs(float(energy[0])), 1.0):
        return float(energy[0])
    return None
