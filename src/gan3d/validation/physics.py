"""Shower features as pure NumPy, and known distortions to test a validator with.

Every function takes calorimeter images ``ecal`` of shape ``(N, X, Y, Z)`` (the CLIC grid is
25 x 25 x 25; the last axis is depth, layer 0 at the front) with cell energies in GeV, and where
needed the primary energies ``energy`` of shape ``(N,)`` in GeV. Positions are in cell units.
The features follow 3DGAN's validation (sums, profiles, moments, hits, position of the maximum,
cell spectrum) and the CaloChallenge 2022 high-level set (per-layer energy, centre, width,
sparsity). Nothing here imports TensorFlow: features of 10^4 showers take about a second.

Empty showers (no energy at all) have undefined moments: those come out as NaN, and the metrics
drop non-finite values. Empty *layers* are common at the back of low-energy showers; their
centre and width are set to 0, as CaloChallenge does, so the high-level vector stays finite.
"""

from __future__ import annotations

import numpy as np

from ..data.calorimeter import CELL_THRESHOLD_GEV, HIT_THRESHOLD_GEV, sampling_fraction_fit
from ..data.showers import layer_table

__all__ = [
    "HIT_THRESHOLD",
    "ZERO_THRESHOLD",
    "resolution_fit",
    "sample_summary",
    "ecal_sum",
    "sampling_fraction",
    "profiles",
    "moments",
    "hits",
    "max_position",
    "cell_spectrum",
    "layer_centres",
    "layer_widths",
    "layer_sparsity",
    "shower_features",
    "high_level_features",
    "low_level_features",
    "scale_energy",
    "widen_transverse",
    "shift_layers",
]

HIT_THRESHOLD = HIT_THRESHOLD_GEV  # a cell above this counts as a hit (3DGAN validation practice)
ZERO_THRESHOLD = CELL_THRESHOLD_GEV  # the reference trainer sets cells below this to zero

_AXES = {"x": (2, 3), "y": (1, 3), "z": (1, 2)}  # axes summed over (of an (N,X,Y,Z) array)


def _as_ecal(ecal) -> np.ndarray:
    """A float array of shape (N, X, Y, Z); a trailing channel axis of size 1 is dropped."""
    a = np.asarray(ecal)
    if a.ndim == 5 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.ndim != 4:
        raise ValueError(f"expected showers of shape (N, X, Y, Z), got {a.shape}")
    return a if np.issubdtype(a.dtype, np.floating) else a.astype(np.float32)


def ecal_sum(ecal) -> np.ndarray:
    """Total visible energy per shower, shape (N,), GeV (float64 to keep sums exact)."""
    return _as_ecal(ecal).sum(axis=(1, 2, 3), dtype=np.float64)


def sampling_fraction(ecal, energy) -> np.ndarray:
    """Visible over primary energy, ``ECAL_sum / Ep``, shape (N,), dimensionless (about 0.02)."""
    return ecal_sum(ecal) / np.asarray(energy, dtype=np.float64).reshape(-1)


def profiles(ecal) -> dict[str, np.ndarray]:
    """Energy profiles along x, y (transverse) and z (longitudinal): each (N, n_cells), GeV."""
    a = _as_ecal(ecal)
    return {axis: a.sum(axis=over, dtype=np.float64) for axis, over in _AXES.items()}


def _profile_moments(profile: np.ndarray, orders) -> np.ndarray:
    """Moments of (N, n) profiles: order 1 the barycentre (cell index), higher ones central."""
    idx = np.arange(profile.shape[1], dtype=np.float64)
    total = profile.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = profile / total[:, None]  # NaN rows for empty showers, on purpose
        mean = w @ idx
        out = []
        for k in orders:
            out.append(mean if k == 1 else (w * (idx - mean[:, None]) ** k).sum(axis=1))
    return np.stack(out, axis=1)


def moments(ecal, orders=(1, 2, 3)) -> dict[str, np.ndarray]:
    """Energy-weighted moments along x, y, z: each (N, len(orders)).

    Order 1 is the barycentre in cell-index units (0 ... n-1); order k > 1 is the k-th central
    moment in cells^k (order 2 is the variance: the square of the shower width).
    """
    return {axis: _profile_moments(p, orders) for axis, p in profiles(ecal).items()}


def hits(ecal, threshold: float = HIT_THRESHOLD) -> np.ndarray:
    """Number of cells above ``threshold`` GeV per shower, shape (N,), int."""
    a = _as_ecal(ecal)
    return (a.reshape(len(a), -1) > threshold).sum(axis=1)


def max_position(ecal) -> np.ndarray:
    """Cell index (x, y, z) of the most energetic cell per shower, shape (N, 3), int."""
    a = _as_ecal(ecal)
    flat = a.reshape(len(a), -1).argmax(axis=1)
    return np.stack(np.unravel_index(flat, a.shape[1:]), axis=1)


def cell_spectrum(ecal, bins=None) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of single-cell energies above :data:`ZERO_THRESHOLD`, per shower.

    Returns ``(counts, edges)``: ``counts`` (n_bins,) is the mean number of cells per shower in
    each bin; ``edges`` (n_bins + 1,) GeV, logarithmic from the cell threshold to 100 GeV unless
    given.
    """
    a = _as_ecal(ecal)
    edges = np.geomspace(ZERO_THRESHOLD, 100.0, 57) if bins is None else np.asarray(bins)
    cells = a[a > ZERO_THRESHOLD]
    counts, edges = np.histogram(cells, bins=edges)
    return counts / max(len(a), 1), edges


def _layer_maps(a: np.ndarray):
    """Per-layer x and y marginals (N, X, Z), (N, Y, Z) and layer energies (N, Z)."""
    px = a.sum(axis=2, dtype=np.float64)
    py = a.sum(axis=1, dtype=np.float64)
    return px, py, px.sum(axis=1)


def _layer_stats(marginal: np.ndarray, energy: np.ndarray):
    """Centre and width (cells, relative to the grid centre) of (N, n, Z) marginals."""
    n = marginal.shape[1]
    pos = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
    safe = np.where(energy > 0, energy, 1.0)
    centre = np.einsum("nic,i->nc", marginal, pos) / safe
    second = np.einsum("nic,i->nc", marginal, pos ** 2) / safe
    width = np.sqrt(np.clip(second - centre ** 2, 0.0, None))
    empty = energy <= 0
    centre[empty], width[empty] = 0.0, 0.0  # CaloChallenge convention for empty layers
    return centre, width


def layer_centres(ecal) -> np.ndarray:
    """Energy-weighted x and y centre of each layer, (N, Z, 2), cells from the grid centre."""
    px, py, e = _layer_maps(_as_ecal(ecal))
    return np.stack([_layer_stats(px, e)[0], _layer_stats(py, e)[0]], axis=-1)


def layer_widths(ecal) -> np.ndarray:
    """Energy-weighted x and y standard deviation of each layer, (N, Z, 2), cells."""
    px, py, e = _layer_maps(_as_ecal(ecal))
    return np.stack([_layer_stats(px, e)[1], _layer_stats(py, e)[1]], axis=-1)


def layer_sparsity(ecal, threshold: float = ZERO_THRESHOLD) -> np.ndarray:
    """Fraction of cells above ``threshold`` GeV in each layer, (N, Z), in [0, 1]."""
    a = _as_ecal(ecal)
    return (a > threshold).mean(axis=(1, 2))


def shower_features(ecal, energy) -> dict[str, np.ndarray]:
    """The scalar per-shower features compared one by one (histograms, separation power).

    Keys and units: ``ecal_sum`` GeV; ``sampling_fraction``; ``hits`` (cells above
    :data:`HIT_THRESHOLD`);
    ``{x,y,z}_mean`` cell index; ``{x,y,z}_var`` cells^2; ``{x,y,z}_skew`` (third central
    moment, cells^3); ``{x,y,z}_max`` cell index of the hottest cell. Each (N,).
    """
    a = _as_ecal(ecal)
    out = {"ecal_sum": ecal_sum(a), "sampling_fraction": sampling_fraction(a, energy),
           "hits": hits(a).astype(np.float64)}
    for axis, m in moments(a, orders=(1, 2, 3)).items():
        out[f"{axis}_mean"], out[f"{axis}_var"], out[f"{axis}_skew"] = m.T
    peak = max_position(a).astype(np.float64)
    for i, axis in enumerate("xyz"):
        out[f"{axis}_max"] = peak[:, i]
    return out


def high_level_features(ecal, energy) -> tuple[np.ndarray, list[str]]:
    """The CaloChallenge high-level vector and its names: ``(N, 6 Z + 1)`` and a list.

    Per layer: energy / Ep, x centre, y centre, x width, y width (cells), sparsity; then
    E_tot / Ep. For the 25-layer grid that is 151 features, all finite.
    """
    a = _as_ecal(ecal)
    ep = np.asarray(energy, dtype=np.float64).reshape(-1, 1)
    px, py, e_layer = _layer_maps(a)
    cx, wx = _layer_stats(px, e_layer)
    cy, wy = _layer_stats(py, e_layer)
    blocks = {"e_layer": e_layer / ep, "centre_x": cx, "centre_y": cy, "width_x": wx,
              "width_y": wy, "sparsity": layer_sparsity(a)}
    names = [f"{k}_{i}" for k in blocks for i in range(a.shape[3])] + ["e_total"]
    x = np.concatenate([*blocks.values(), e_layer.sum(axis=1, keepdims=True) / ep], axis=1)
    return x, names


def low_level_features(ecal, energy) -> np.ndarray:
    """Voxel energies over the primary energy plus ``log10(Ep / GeV)``: ``(N, X*Y*Z + 1)``."""
    a = _as_ecal(ecal)
    ep = np.asarray(energy, dtype=np.float64).reshape(-1)
    vox = a.reshape(len(a), -1) / ep[:, None].astype(a.dtype)
    return np.concatenate([vox, np.log10(ep)[:, None].astype(vox.dtype)], axis=1)


# ---------------------------------------------------------------------------------------------
# Known distortions: each changes one physical property and leaves the rest alone, so that a
# test can check that the metric that should see it does.


def scale_energy(ecal, factor: float) -> np.ndarray:
    """Every cell times ``factor``: the sampling fraction (and ECAL sum) shift by ``factor``."""
    return _as_ecal(ecal) * np.float32(factor)


def _stretch_matrix(n: int, factor: float, centre: float) -> np.ndarray:
    """(n, n) matrix M with new = M @ old: cell i's energy spread uniformly over its interval
    stretched by ``factor`` about ``centre`` (cell units), then binned back into cells."""
    edges = np.arange(n + 1, dtype=np.float64) - 0.5
    lo = centre + (edges[:-1] - centre) * factor  # image of old cell i: [lo_i, hi_i]
    hi = centre + (edges[1:] - centre) * factor
    overlap = np.clip(np.minimum(hi[None, :], edges[1:, None])
                      - np.maximum(lo[None, :], edges[:-1, None]), 0.0, None)
    return overlap / (hi - lo)[None, :]


def widen_transverse(ecal, factor: float = 1.2, centre: float | None = None) -> np.ndarray:
    """Showers ``factor`` times wider in x and y about ``centre`` (default: the grid centre).

    Energy is conserved except for what the stretch pushes beyond the grid edge. Shapes
    (N, X, Y, Z) in and out, GeV.
    """
    a = _as_ecal(ecal)
    nx, ny = a.shape[1], a.shape[2]
    mx = _stretch_matrix(nx, factor, (nx - 1) / 2 if centre is None else centre)
    my = _stretch_matrix(ny, factor, (ny - 1) / 2 if centre is None else centre)
    out = np.einsum("ai,nijz->najz", mx.astype(a.dtype), a, optimize=True)
    return np.einsum("bj,najz->nabz", my.astype(a.dtype), out, optimize=True)


def shift_layers(ecal, shift: int = 1) -> np.ndarray:
    """Longitudinal profile moved ``shift`` layers deeper (negative: shallower); the layers
    that come free are empty and the energy pushed past the last layer is lost (leakage)."""
    a = _as_ecal(ecal)
    out = np.zeros_like(a)
    if shift >= 0:
        out[..., shift:] = a[..., : a.shape[3] - shift]
    else:
        out[..., :shift] = a[..., -shift:]
    return out


# ---------------------------------------------------------------------------------------------
# A sample's headline numbers per energy bin: the laws any shower sample must follow

def resolution_fit(energy_gev, rel_sigma, n_showers) -> dict:
    """Fit sigma/E = a / sqrt(E/GeV) (+) b to relative resolutions ``rel_sigma`` at ``energy_gev``.

    Least squares in (sigma/E)^2 = a^2/E + b^2, weighted by the 1/sqrt(2 n) relative error of a
    standard deviation of ``n_showers`` showers. Returns ``a`` (GeV^0.5) and ``b``.
    """
    e, rel = np.asarray(energy_gev, float), np.asarray(rel_sigma, float)
    weight = np.sqrt(np.broadcast_to(np.asarray(n_showers, float), e.shape) / 2) / rel**2
    design = np.c_[1 / e, np.ones_like(e)] * weight[:, None]
    (a2, b2), *_ = np.linalg.lstsq(design, rel**2 * weight, rcond=None)
    return {"a": float(np.sqrt(max(a2, 0.0))), "b": float(np.sqrt(max(b2, 0.0)))}


def relative_resolution(sampling_fraction) -> tuple[float, float]:
    """Relative energy resolution sigma/mean of ``sampling_fraction`` (ECAL sum / Ep per shower,
    so that the spread of Ep inside an energy bin does not count) and its standard error,
    sigma/mean / sqrt(2 (n - 1)) (that of a standard deviation of n normal values)."""
    sf = np.asarray(sampling_fraction, np.float64)
    sf = sf[np.isfinite(sf)]
    if sf.size < 2 or sf.mean() == 0:
        return float("nan"), float("nan")
    rel = float(sf.std(ddof=1) / abs(sf.mean()))
    return rel, rel / np.sqrt(2 * (sf.size - 1))


def _bin_numbers(x: np.ndarray, e: np.ndarray) -> dict:
    """The numbers of :func:`sample_summary` for showers ``x`` (n, 25, 25, 25) of energies ``e``
    (n,)."""
    z = x.sum(axis=(1, 2), dtype=np.float64)  # (n, 25) energy per layer
    px = x.sum(axis=(2, 3), dtype=np.float64)  # (n, 25) energy per x cell
    frac, reco = z.sum(axis=1) / e, z @ (1.0 / layer_table()["sampling"]) / e
    w, cells = px / px.sum(axis=1, keepdims=True), np.arange(px.shape[1])
    fit = float(sampling_fraction_fit(e).mean())
    return {"n": len(e), "sampling_fraction": float(frac.mean()),
            "sampling_fraction_sem": float(frac.std() / np.sqrt(len(frac))), "fit": fit,
            "ratio_to_fit": float(frac.mean() / fit),
            "max_layer": int(np.argmax(z.mean(axis=0))),
            "mean_depth_layers": float(z.sum(axis=0) @ np.arange(z.shape[1]) / z.sum()),
            "hits": float(hits(x).mean()),
            "x_second_moment_cells2": float((w @ cells**2 - (w @ cells) ** 2).mean()),
            "resolution_visible": float(frac.std() / frac.mean()),
            "resolution_reconstructed": float(reco.std() / reco.mean())}


def sample_summary(ecal, energy, energies, halfwidth: float = 5.0) -> dict:
    """Headline numbers per energy bin [E - halfwidth, E + halfwidth] GeV of showers ``ecal``
    (N, 25, 25, 25) GeV with primary energies ``energy`` (N,) GeV.

    Per bin: showers, mean sampling fraction (and its standard error) against the published
    fit (:func:`~gan3d.data.calorimeter.sampling_fraction_fit`), layer of the maximum of the mean
    longitudinal profile, mean depth (layers), hits (cells above :data:`HIT_THRESHOLD`), x second
    moment (cells^2), and the relative resolution of the visible sum and of the reconstructed
    energy (visible / layer sampling fraction), both per unit Ep.
    Then the fits a/sqrt(E) (+) b of both resolutions. Bins with fewer than 2 showers are left out.
    """
    x, e = np.asarray(ecal), np.asarray(energy, np.float64)
    rows = []
    for centre in energies:
        sel = np.abs(e - centre) <= halfwidth
        if sel.sum() >= 2:
            rows.append({"energy": float(centre), **_bin_numbers(x[sel], e[sel])})
    out = {"bins": rows, "halfwidth_gev": halfwidth}
    if len(rows) >= 2:
        energies_, counts = [r["energy"] for r in rows], [r["n"] for r in rows]
        for kind in ("visible", "reconstructed"):
            out[f"resolution_fit_{kind}"] = resolution_fit(
                energies_, [r[f"resolution_{kind}"] for r in rows], counts)
        out["max_abs_deviation_from_fit"] = max(abs(r["ratio_to_fit"] - 1) for r in rows)
    return out
