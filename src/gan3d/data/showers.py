"""Synthetic electron showers in the CLIC silicon-tungsten ECAL, from the GFLASH parametrisation.

The real 3DGAN data (Geant4 showers of the CLIC ECAL) cannot be downloaded here, so the package
makes its own: a vectorised NumPy version of the Grindhammer-Peters parametrisation (GFLASH) on
the 25 x 25 x 25 cell grid of the real files, fast enough to write the paper's 200,000 showers in
minutes. Each shower is built in four steps:

1. **Longitudinal profile.** A gamma distribution in depth t (radiation lengths) whose depth of
   maximum T and shape alpha are drawn per shower from a correlated normal in (ln T, ln alpha),
   with the GFLASH sampling-calorimeter means, widths and correlation. The energy of a layer is
   a difference of regularised incomplete gamma functions; what passes the 23 X0 leaks out.
2. **Layer structure.** 17 layers of 2.4 mm W then 8 layers of 4.8 mm W, each with 0.5 mm of
   silicon. Depth is counted in the effective radiation length of each section; the back section
   has twice the tungsten for the same silicon, hence half the sampling fraction.
3. **Radial profile.** A core plus a tail, f(r) ~ 2 r R^2 / (r^2 + R^2)^2, whose radii and core
   weight evolve with depth relative to the shower's centre of gravity. The share of such a
   profile landing in each cell has a closed form; it is tabulated once on a grid of radii and
   interpolated, so the mean shower is a few array operations.
4. **Sampling fluctuations.** Per cell, n ~ Poisson(mean / quantum) visible quanta, each of
   Gamma-distributed size, so that the visible energy fluctuates with the stochastic term
   ``RESOLUTION / sqrt(E)`` and the cell spectrum stays continuous. Cells below the threshold are
   zeroed, as the reference trainer does.

Tuned constants (everything else is GFLASH or material data):

* ``SAMPLING_FRONT`` - visible fraction of the energy deposited in a front layer. Tuned so that
  the mean ECAL sum / primary energy follows the published 3DGAN fit of the real data
  (:func:`gan3d.data.calorimeter.sampling_fraction_fit`) over 10-500 GeV (it does within 2 %);
  the 17 % fall of the sampling fraction over that range is not tuned, it comes out of leakage
  and the deeper showers reaching the coarser back section.
* ``BACK_TO_FRONT`` - ratio of back to front sampling fraction, 0.5 from the layer structure
  (twice the tungsten, same silicon); kept, not tuned.
* ``RESOLUTION`` - stochastic term of the visible-energy resolution, 17 %/sqrt(E/GeV), the
  value usually quoted for Si-W sampling; it sets the size of the visible quantum.
* ``QUANTUM_SHAPE`` - shape of the Gamma distribution of one quantum's energy (1 = exponential):
  a guess that gives a smooth cell spectrum; the resolution accounts for its extra variance.

The detector's geometry and thresholds are those of :mod:`gan3d.data.calorimeter`; writing data
sets to disk is :mod:`gan3d.data.generate`.

Units: energies in GeV, depths in radiation lengths (X0), radii in Moliere radii or in cells
(pitch 5.1 mm) as named. Arrays of showers are float32 (N, 25, 25, 25) with depth last.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import special

from .calorimeter import (BACK_LAYERS, BACK_W_MM, CELL_THRESHOLD_GEV, FRONT_LAYERS, FRONT_W_MM,
                          N_CELLS, N_LAYERS, PITCH_MM, SILICON_MM)

__all__ = [
    "GENERATOR_VERSION", "SAMPLING_FRONT", "BACK_TO_FRONT", "RESOLUTION", "QUANTUM_SHAPE",
    "Medium", "effective_medium", "layer_table", "profile_parameters", "layer_fractions",
    "radial_parameters", "cell_fractions", "mean_deposits", "fluctuate", "generate",
    "generator_parameters",
]

GENERATOR_VERSION = 1  # bump whenever generated showers change, so that stale data are remade

# Tuned constants (see the module docstring for why each has its value).
SAMPLING_FRONT = 0.0238
BACK_TO_FRONT = 0.5
RESOLUTION = 0.17  # GeV^0.5
QUANTUM_SHAPE = 1.0

_SMALL_MEAN = np.float32(2.0)  # Poisson means above this go to NumPy
CHUNK = 128  # showers per vectorised block: about 50 MB of temporaries, flat in N

# Material data (PDG): Z, radiation length (mm), critical energy for electrons (MeV).
_W = (74.0, 3.504, 7.97)
_SI = (14.0, 93.7, 40.19)
_DENSITY = {"W": 19.3, "Si": 2.33}  # g/cm3
_ES_MEV = 21.2  # scale energy of multiple scattering


@dataclass(frozen=True)
class Medium:
    """GFLASH effective medium of one absorber+silicon layer (lengths in mm, energies in MeV)."""

    x0_mm: float
    rm_mm: float
    ec_mev: float
    z: float
    fs: float  # layer thickness in units of X0_eff
    ehat: float  # e/mip ratio


def effective_medium(d_abs_mm: float, d_act_mm: float = SILICON_MM) -> Medium:
    """The GFLASH (Geant4) effective medium of ``d_abs_mm`` tungsten plus ``d_act_mm`` silicon.

    As in Geant4's GFlashSamplingShowerParameterisation, X0 enters Rm and Ec in mm, which is
    the convention the GFLASH sampling constants were fitted with.
    """
    m_w, m_si = d_abs_mm * _DENSITY["W"], d_act_mm * _DENSITY["Si"]
    w_w, w_si = m_w / (m_w + m_si), m_si / (m_w + m_si)  # mass fractions
    rho = (m_w + m_si) / (d_abs_mm + d_act_mm)
    x0 = 1.0 / (w_w * rho / (_W[1] * _DENSITY["W"]) + w_si * rho / (_SI[1] * _DENSITY["Si"]))
    ec_over_x0 = w_w * _W[2] / _W[1] + w_si * _SI[2] / _SI[1]
    return Medium(x0_mm=x0, rm_mm=_ES_MEV / ec_over_x0, ec_mev=x0 * ec_over_x0,
                  z=w_w * _W[0] + w_si * _SI[0], fs=x0 / (d_abs_mm + d_act_mm),
                  ehat=1.0 / (1.0 + 0.007 * (_W[0] - _SI[0])))


@functools.cache
def layer_table() -> dict:
    """Geometry in the units the parametrisation needs (cached).

    Returns ``medium`` (front section, used for the shower shape), ``edges`` (26,) layer
    boundaries in X0, ``mid`` (25,) layer centres in X0, ``sampling`` (25,) visible fraction of
    the deposited energy, ``rm_cells`` (25,) Moliere radius in cells, per layer.
    """
    front, back = effective_medium(FRONT_W_MM), effective_medium(BACK_W_MM)
    thick = np.r_[np.full(FRONT_LAYERS, (FRONT_W_MM + SILICON_MM) / front.x0_mm),
                  np.full(BACK_LAYERS, (BACK_W_MM + SILICON_MM) / back.x0_mm)]
    edges = np.r_[0.0, np.cumsum(thick)]
    sampling = np.r_[np.full(FRONT_LAYERS, SAMPLING_FRONT),
                     np.full(BACK_LAYERS, SAMPLING_FRONT * BACK_TO_FRONT)]
    rm = np.r_[np.full(FRONT_LAYERS, front.rm_mm), np.full(BACK_LAYERS, back.rm_mm)] / PITCH_MM
    return {"medium": front, "edges": edges, "mid": 0.5 * (edges[1:] + edges[:-1]),
            "sampling": sampling, "rm_cells": rm}


def _mean_log_params(energy_gev: np.ndarray, med: Medium):
    """GFLASH sampling-calorimeter means, widths and correlation of (ln T, ln alpha)."""
    lny = np.log(energy_gev * 1e3 / med.ec_mev)
    t_hom = lny - 0.812
    a_hom = 0.81 + (0.458 + 2.26 / med.z) * lny
    mean_lt = np.log(t_hom - 0.55 / med.fs - 0.69 * (1 - med.ehat))
    mean_la = np.log(a_hom - 0.476 / med.fs)
    sig_lt = np.minimum(0.5, 1.0 / (-2.5 + 1.25 * lny))
    sig_la = np.minimum(0.5, 1.0 / (-0.82 + 0.79 * lny))
    rho = 0.784 - 0.023 * lny
    return mean_lt, mean_la, sig_lt, sig_la, rho


def profile_parameters(energy_gev, rng: np.random.Generator) -> dict:
    """Draw each shower's longitudinal shape: correlated (ln T, ln alpha) as in GFLASH.

    ``energy_gev`` (N,) GeV. Returns (N,) float64 arrays ``T`` (depth of maximum, X0),
    ``alpha``, ``beta`` (1/X0) and ``mean_alpha`` (exp <ln alpha>, for the radial depth scale).
    """
    e = np.asarray(energy_gev, dtype=np.float64)
    mean_lt, mean_la, sig_lt, sig_la, rho = _mean_log_params(e, layer_table()["medium"])
    z1, z2 = rng.standard_normal((2, e.size))
    c1, c2 = np.sqrt((1 + rho) / 2), np.sqrt((1 - rho) / 2)
    t_max = np.maximum(np.exp(mean_lt + sig_lt * (c1 * z1 + c2 * z2)), 1.0)
    alpha = np.maximum(np.exp(mean_la + sig_la * (c1 * z1 - c2 * z2)), 1.1)
    return {"T": t_max, "alpha": alpha, "beta": (alpha - 1) / t_max, "mean_alpha": np.exp(mean_la)}


def layer_fractions(alpha, beta) -> tuple[np.ndarray, np.ndarray]:
    """Share of each shower's energy deposited in each layer, and the share leaking out the back.

    ``alpha``, ``beta`` (N,). Returns ``fractions`` (N, 25) and ``leakage`` (N,); per shower
    they sum to 1 (energy conservation before sampling).
    """
    edges = layer_table()["edges"]
    cdf = special.gammainc(np.asarray(alpha)[:, None], np.asarray(beta)[:, None] * edges)
    return np.diff(cdf, axis=1), 1.0 - cdf[:, -1]


def radial_parameters(energy_gev, tau) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GFLASH core radius, tail radius (Moliere radii) and core weight at relative depth ``tau``.

    ``energy_gev`` broadcastable against ``tau`` (e.g. (N, 1) and (N, 25)); homogeneous values
    plus the sampling-calorimeter corrections. Returns three arrays of the broadcast shape.
    """
    med = layer_table()["medium"]
    z, lne, tau = med.z, np.log(energy_gev), np.asarray(tau)
    r_core = 0.0251 + 0.00319 * lne + (0.1162 - 0.000381 * z) * tau
    k4 = 0.3585 + 0.0412 * lne
    r_tail = (0.659 - 0.00309 * z) * (np.exp(-2.59 * (tau - 0.645)) + np.exp(k4 * (tau - 0.645)))
    p3 = 1.313 - 0.0686 * lne
    u = (0.401 + 0.00187 * z - tau) / p3
    p_core = (2.632 - 0.00094 * z) * np.exp(u - np.exp(u))
    g = np.exp(-tau) / med.fs
    r_core = r_core - 0.0203 * (1 - med.ehat) + 0.0397 * g
    r_tail = r_tail - 0.14 * (1 - med.ehat) - 0.495 * g
    p_core = p_core + (1 - med.ehat) * (0.348 - 0.642 * np.exp(-((tau - 1) ** 2)) / med.fs)
    # Far from the fitted range the corrections can push radii to zero: keep them physical.
    r_core = np.maximum(r_core, 0.01)
    return r_core, np.maximum(r_tail, r_core), np.clip(p_core, 0.0, 1.0)


def _square_cdf(x, y, r):
    """Mass of the profile 2 r R^2/(r^2+R^2)^2 in the quadrant [0, x] x [0, y] (signed x, y)."""
    a, b = np.sqrt(x * x + r * r), np.sqrt(y * y + r * r)
    return (x / a * np.arctan(y / a) + y / b * np.arctan(x / b)) / (2 * np.pi)


@functools.cache
def _fraction_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cell fractions (n_r, 25, 25) for radii on a log grid (cells), with their differences."""
    log_r = np.linspace(np.log(1e-3), np.log(200.0), 512)
    r = np.exp(log_r)[:, None, None]
    e = np.arange(N_CELLS + 1) - N_CELLS / 2  # cell edges, shower axis at the grid centre
    corners = _square_cdf(e[None, :, None], e[None, None, :], r)
    table = np.diff(np.diff(corners, axis=1), axis=2).astype(np.float32)
    return log_r, table, np.diff(table, axis=0, append=table[-1:])


def cell_fractions(radius_cells) -> np.ndarray:
    """Share of a core or tail component of radius ``radius_cells`` (...) in each cell.

    Returns (..., 25, 25) float32; the sum over cells is the component's containment in the
    25 x 25 window (< 1). Interpolated linearly in ln R from a table of the closed form.
    """
    log_r, table, delta = _fraction_table()
    step = log_r[1] - log_r[0]
    x = np.clip((np.log(radius_cells) - log_r[0]) / step, 0.0, len(log_r) - 1.0)
    i = np.minimum(x.astype(np.intp), len(log_r) - 2)
    w = (x - i).astype(np.float32)[..., None, None]
    return table[i] + w * delta[i]


def _layer_means(e: np.ndarray, rng: np.random.Generator):
    """Mean deposits layer-first (N, 25, 25, 25) float32, layer energies (N, 25), back leakage."""
    geo = layer_table()
    shape = profile_parameters(e, rng)
    frac, leak = layer_fractions(shape["alpha"], shape["beta"])
    # Depth relative to the centre of gravity, scaled to the mean shower's T (Geant4 GFLASH).
    cog = (shape["alpha"] / shape["beta"])[:, None]
    tau = geo["mid"][None, :] / cog * (shape["mean_alpha"] / (shape["mean_alpha"] - 1))[:, None]
    r_core, r_tail, p_core = radial_parameters(e[:, None], tau)
    layer_e = (e[:, None] * frac).astype(np.float32)
    core = cell_fractions(r_core * geo["rm_cells"])
    tail = cell_fractions(r_tail * geo["rm_cells"])
    core *= (layer_e * p_core)[..., None, None]
    tail *= (layer_e * (1 - p_core))[..., None, None]
    core += tail
    return core, layer_e, e * leak


def mean_deposits(energy_gev, rng: np.random.Generator) -> dict:
    """Mean deposited energy per cell of showers with freshly drawn shapes (no sampling yet).

    ``energy_gev`` (N,). Returns ``cells`` float32 (N, 25, 25, 25) deposited GeV, ``leak_back``
    and ``leak_side`` (N,) GeV: energy out of the back and out of the 25 x 25 window, so that
    cells + leak_back + leak_side = energy.
    """
    cells, layer_e, leak = _layer_means(np.asarray(energy_gev, dtype=np.float64), rng)
    side = layer_e.sum(axis=1, dtype=np.float64) - cells.sum(axis=(1, 2, 3), dtype=np.float64)
    return {"cells": np.moveaxis(cells, 1, -1), "leak_back": leak, "leak_side": side}


def _poisson(lam: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Exact Poisson draws for a flat float32 array of means, returned sparse: (where n > 0, n).

    NumPy's sampler costs ~80 ns a draw; most cells have means far below 1. With x ~ Exp(1),
    v = exp(-x) is uniform and n = 0 exactly when v < exp(-lam), i.e. x > lam: one cheap
    comparison per cell. The few cells with n >= 1 continue up the CDF from the same v; those
    with large means go to NumPy instead, conditioned on n >= 1 by redrawing zeros.
    """
    x = rng.standard_exponential(lam.shape, dtype=np.float32)
    idx = np.flatnonzero(x < lam)
    lam, v = lam[idx], np.exp(-x[idx])
    n = np.zeros(idx.size, dtype=np.int64)
    big = np.flatnonzero(lam > _SMALL_MEAN)
    n[big] = rng.poisson(lam[big])
    while (zero := big[n[big] == 0]).size:
        n[zero] = rng.poisson(lam[zero])
    todo = np.flatnonzero(lam <= _SMALL_MEAN)
    lam, v = lam[todo], v[todo]
    pk = np.exp(-lam)
    cdf, k = pk.copy(), 0
    while todo.size:
        k += 1
        pk *= lam / k
        cdf += pk
        more = v > cdf
        n[todo[~more]] = k
        todo, lam, v, pk, cdf = todo[more], lam[more], v[more], pk[more], cdf[more]
        if k > 60:  # float32 round-off left v above a CDF of ~1: give the rest one quantum
            n[todo] = 1
            break
    return idx, n


def fluctuate(mean_visible, rng: np.random.Generator) -> np.ndarray:
    """Sampling fluctuations of visible cell energies; ``mean_visible`` (...) GeV, same shape out.

    n ~ Poisson(mean / q) quanta per cell, each of energy Gamma(QUANTUM_SHAPE) with mean q, so
    that the variance is ``RESOLUTION**2 * SAMPLING_FRONT`` x mean for any quantum shape; cells
    under ``CELL_THRESHOLD_GEV`` are zeroed. Returns float32.
    """
    k = QUANTUM_SHAPE
    quantum = RESOLUTION**2 * SAMPLING_FRONT / (1 + 1 / k)  # visible GeV per quantum
    mean = np.ascontiguousarray(mean_visible, dtype=np.float32)
    hit, n = _poisson(mean.reshape(-1) / np.float32(quantum), rng)
    values = (rng.standard_gamma(k * n) * (quantum / k)).astype(np.float32)
    values[values < CELL_THRESHOLD_GEV] = 0.0
    out = np.zeros(mean.size, dtype=np.float32)
    out[hit] = values
    return out.reshape(mean.shape)


def generate(energies, seed=None, *, rng: np.random.Generator | None = None) -> np.ndarray:
    """Showers for primary energies ``energies`` (N,) GeV: float32 (N, 25, 25, 25) visible GeV.

    Deterministic for a given ``seed`` (or pass a NumPy ``rng``). Works in blocks of ``CHUNK``
    showers so that memory stays flat whatever N.
    """
    e = np.atleast_1d(np.asarray(energies, dtype=np.float64))
    if e.ndim != 1 or not np.all(np.isfinite(e)) or np.any(e <= 0.1):
        raise ValueError("energies must be a 1-D array of finite primary energies above 0.1 GeV")
    rng = rng if rng is not None else np.random.default_rng(seed)
    out = np.empty((e.size, N_CELLS, N_CELLS, N_LAYERS), dtype=np.float32)
    sampling = layer_table()["sampling"].astype(np.float32)[:, None, None]
    for lo in range(0, e.size, CHUNK):
        cells = _layer_means(e[lo:lo + CHUNK], rng)[0]  # layer-first: contiguous for fluctuate
        cells *= sampling  # visible = deposited x sampling fraction of the layer
        out[lo:lo + CHUNK] = np.moveaxis(fluctuate(cells, rng), 1, -1)  # depth last, as in files
    return out


def generator_parameters() -> dict:
    """Everything that determines the generated showers (recorded in data manifests)."""
    return {"version": GENERATOR_VERSION, "sampling_front": SAMPLING_FRONT,
            "back_to_front": BACK_TO_FRONT, "resolution": RESOLUTION,
            "quantum_shape": QUANTUM_SHAPE, "threshold_gev": CELL_THRESHOLD_GEV,
            "pitch_mm": PITCH_MM, "layers": [[FRONT_LAYERS, FRONT_W_MM], [BACK_LAYERS, BACK_W_MM]],
            "silicon_mm": SILICON_MM, "chunk": CHUNK}
