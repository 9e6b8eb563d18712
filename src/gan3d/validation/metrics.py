"""How far generated showers are from reference showers: NumPy, SciPy and scikit-learn only.

* :func:`separation_power` and :func:`wasserstein` compare one feature at a time;
  :func:`separation_power_null` is what two samples of the *same* distribution score.
* :func:`three_dgan_metric` is 3DGAN's scalar metric (relative errors of mean moments and of
  mean profiles), with each term labelled as what it is and counted once.
* :func:`classifier_test` trains a classifier to tell the two apart: ROC AUC (0.5 ideal) and the
  JSD estimated from its calibrated cross-entropy (0 ideal), on held-out showers.
* :func:`fpd` and :func:`kpd` are the Frechet and kernel physics distances of CaloChallenge 2022 /
  JetNet on the high-level feature vector, with the extrapolation and errors described there.

Every function takes reference first, generated second.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from threadpoolctl import threadpool_limits

from . import physics

__all__ = [
    "histogram_edges",
    "separation_power",
    "separation_power_null",
    "wasserstein",
    "three_dgan_metric",
    "classifier_test",
    "normalise_features",
    "frechet_distance",
    "fpd",
    "mmd2_unbiased",
    "kpd",
]


def _finite(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    return x[np.isfinite(x)]


def histogram_edges(ref, gen, n_bins: int = 30) -> np.ndarray:
    """Shared bin edges: integer bins for small-integer features, else ``n_bins`` equal bins
    between the pooled 0.5 % and 99.5 % quantiles with open outer bins catching the tails."""
    pooled = np.concatenate([_finite(ref), _finite(gen)])
    if pooled.size == 0:
        return np.array([-np.inf, np.inf])
    if np.all(pooled == np.round(pooled)) and np.ptp(pooled) <= 2 * n_bins:
        return np.arange(pooled.min() - 0.5, pooled.max() + 1.0)
    lo, hi = np.quantile(pooled, [0.005, 0.995])
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    return np.concatenate([[-np.inf], np.linspace(lo, hi, n_bins - 1), [np.inf]])


def separation_power(ref, gen, bins=None) -> float:
    """S = 1/2 sum_i (p_i - q_i)^2 / (p_i + q_i) of the normalised histograms p (reference) and
    q (generated) of a 1-D feature: 0 for identical histograms, 1 for disjoint ones.
    Non-finite values are dropped; ``bins`` defaults to :func:`histogram_edges`."""
    r, g = _finite(ref), _finite(gen)
    if r.size == 0 or g.size == 0:
        return float("nan")
    edges = histogram_edges(r, g) if bins is None else bins
    p = np.histogram(r, bins=edges)[0] / r.size
    q = np.histogram(g, bins=edges)[0] / g.size
    s = p + q
    nz = s > 0
    return float(0.5 * np.sum((p[nz] - q[nz]) ** 2 / s[nz]))


def separation_power_null(n_bins: int, n_ref: int, n_gen: int) -> float:
    """Expected separation power of two samples of one distribution: (k-1)(1/n1 + 1/n2)/4 for
    k occupied bins (from the multinomial variance of each bin, to first order)."""
    return (max(n_bins, 1) - 1) * (1.0 / n_ref + 1.0 / n_gen) / 4.0


def wasserstein(ref, gen, normalise: bool = True) -> float:
    """1-D Wasserstein (earth mover's) distance; divided by the reference's standard deviation
    when ``normalise`` so that features of different units can share a table."""
    r, g = _finite(ref), _finite(gen)
    if r.size == 0 or g.size == 0:
        return float("nan")
    w = stats.wasserstein_distance(r, g)
    scale = r.std() if normalise else 1.0
    return float(w / scale) if scale > 0 else float(w)


def three_dgan_metric(ref_ecal, gen_ecal, orders=(1, 2), min_share: float = 1e-3) -> dict:
    """3DGAN's scalar metric for one energy bin, done right.

    ``position_error``: mean over axes x, y, z and over the moment ``orders`` of
    |<m_gen> - <m_ref>| / |<m_ref>|, <.> the mean over showers. ``profile_error``: mean over
    axes and cells of |<P_gen> - <P_ref>| / <P_ref> for the mean energy profiles, using only
    cells holding at least ``min_share`` of the reference profile (relative errors of nearly
    empty edge cells measure noise, and the original divided by zero there). ``total`` is their
    sum. The original code counted the moment term twice and swapped the two labels.
    Inputs (N, X, Y, Z) GeV; all outputs dimensionless, 0 ideal.
    """
    m_ref = physics.moments(ref_ecal, orders)
    m_gen = physics.moments(gen_ecal, orders)
    p_ref, p_gen = physics.profiles(ref_ecal), physics.profiles(gen_ecal)
    pos, prof = [], []
    for axis in "xyz":
        a, b = np.nanmean(m_ref[axis], axis=0), np.nanmean(m_gen[axis], axis=0)
        pos.append(np.abs(b - a) / np.abs(a))
        ra, rb = p_ref[axis].mean(axis=0), p_gen[axis].mean(axis=0)
        keep = ra >= min_share * ra.sum()
        prof.append(np.abs(rb[keep] - ra[keep]) / ra[keep])
    position = float(np.mean(np.concatenate(pos)))
    profile = float(np.mean(np.concatenate(prof)))
    return {"position_error": position, "profile_error": profile, "total": position + profile}


def _auc_error(auc: float, n_pos: int, n_neg: int) -> float:
    """Standard error of a ROC AUC (Hanley & McNeil 1982)."""
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc))
    return float(np.sqrt(max(var, 0.0) / (n_pos * n_neg)))


def _classifier(kind: str, seed: int, n_train: int):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    big = n_train >= 200  # below that, early stopping would hold out a handful of showers
    if kind == "hgb":  # trees: no scaling needed, robust on tabular high-level features
        return HistGradientBoostingClassifier(
            max_iter=200, learning_rate=0.1, early_stopping=big, random_state=seed,
            min_samples_leaf=min(20, max(2, n_train // 20)))  # leaves small samples can fill
    if kind == "mlp":  # a small dense network for the 15,626 low-level inputs
        return make_pipeline(StandardScaler(), MLPClassifier(
            hidden_layer_sizes=(64, 32), alpha=1e-3, early_stopping=big, max_iter=200,
            random_state=seed))
    raise ValueError(f"classifier kind must be 'hgb' or 'mlp', got {kind!r}")


def classifier_test(ref_x, gen_x, kind: str = "hgb", seed: int = 0,
                    split=(0.6, 0.2, 0.2)) -> dict:
    """Train a classifier on reference (label 0) against generated (label 1) features.

    ``ref_x`` (N1, F), ``gen_x`` (N2, F). Both classes are cut to the same size so that 0.5 and
    ln 2 are the baselines; showers are split into train / calibration / test by ``split``. The
    test-set ROC AUC (0.5: indistinguishable, 1: fully separated) of the classifier's own scores
    comes with its standard error; the JSD = (ln 2 - BCE) / ln 2 is computed on the test set after
    isotonic calibration of those scores on the calibration set (0: indistinguishable, 1:
    disjoint). The AUC is taken before calibration: a monotone map cannot improve a ranking, and
    the step function fitted to a small calibration set ties showers of both classes, which
    pulled the AUC of small samples down.
    """
    from sklearn.isotonic import IsotonicRegression
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    n = min(len(ref_x), len(gen_x))
    x = np.concatenate([np.asarray(ref_x)[rng.permutation(len(ref_x))[:n]],
                        np.asarray(gen_x)[rng.permutation(len(gen_x))[:n]]]).astype(np.float32)
    y = np.concatenate([np.zeros(n), np.ones(n)])
    x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    order = rng.permutation(2 * n)
    a, b = int(split[0] * 2 * n), int((split[0] + split[1]) * 2 * n)
    tr, ca, te = order[:a], order[a:b], order[b:]
    if min(len(tr), len(ca), len(te)) < 4 or len(set(y[te])) < 2:
        raise ValueError(f"classifier test needs more showers: got {n} per sample")
    # One thread: on a shared small machine, OpenMP/BLAS threads of these small problems
    # spend more time waiting for each other than computing (measured 10x slower with 2).
    with threadpool_limits(1):
        clf = _classifier(kind, seed, len(tr)).fit(x[tr], y[tr])
        iso = IsotonicRegression(y_min=1e-6, y_max=1 - 1e-6, out_of_bounds="clip")
        iso.fit(clf.predict_proba(x[ca])[:, 1], y[ca])
        score = clf.predict_proba(x[te])[:, 1]
        p = iso.predict(score)
    auc = float(roc_auc_score(y[te], score))
    bce = float(-np.mean(y[te] * np.log(p) + (1 - y[te]) * np.log(1 - p)))
    return {"auc": auc, "auc_err": _auc_error(auc, int(y[te].sum()), int((1 - y[te]).sum())),
            "jsd": (np.log(2) - bce) / np.log(2), "bce": bce, "kind": kind,
            "n_train": len(tr), "n_calibration": len(ca), "n_test": len(te)}


def normalise_features(ref_x, gen_x) -> tuple[np.ndarray, np.ndarray]:
    """Divide each feature by the reference's max |x| (CaloChallenge practice; constant-zero
    features are left as they are)."""
    r, g = np.asarray(ref_x, np.float64), np.asarray(gen_x, np.float64)
    scale = np.abs(r).max(axis=0)
    scale[scale == 0] = 1.0
    return r / scale, g / scale


def _sqrtm_psd(c: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(c)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distance(x, y) -> float:
    """Frechet distance of Gaussians fitted to samples x (N1, F) and y (N2, F):
    |mu1 - mu2|^2 + Tr(C1 + C2 - 2 (C1^1/2 C2 C1^1/2)^1/2), via symmetric eigendecompositions
    (stable for singular covariances, unlike a general matrix square root)."""
    mu1, mu2 = x.mean(axis=0), y.mean(axis=0)
    c1, c2 = np.atleast_2d(np.cov(x, rowvar=False)), np.atleast_2d(np.cov(y, rowvar=False))
    s1 = _sqrtm_psd(c1)
    cross = np.linalg.eigvalsh(s1 @ c2 @ s1)
    tr_sqrt = np.sqrt(np.clip(cross, 0.0, None)).sum()
    return float(np.sum((mu1 - mu2) ** 2) + np.trace(c1) + np.trace(c2) - 2.0 * tr_sqrt)


def _fd_curve(r, g, ns, n_batches, rng) -> np.ndarray:
    """Mean FD over ``n_batches`` subsets drawn without replacement, at each size in ``ns``."""
    n_max = min(len(r), len(g))
    return np.array([np.mean([frechet_distance(r[rng.choice(len(r), n, replace=False)],
                                               g[rng.choice(len(g), n, replace=False)])
                              for _ in range(n_batches if n < n_max else 1)]) for n in ns])


def _intercept(ns, fd, degree: int) -> float:
    """FD at n -> infinity: least squares of FD against powers of 1/n up to ``degree``."""
    design = np.vander(1.0 / np.asarray(ns, np.float64), degree + 1, increasing=True)
    return float(np.linalg.lstsq(design, fd, rcond=None)[0][0])


def fpd(ref_x, gen_x, n_points: int = 8, n_batches: int = 10, min_fraction: float = 0.2,
        degree: int = 2, n_bootstrap: int = 10, seed: int = 0) -> dict:
    """Frechet physics distance extrapolated to infinite sample size, with its error.

    ``ref_x`` (N1, F), ``gen_x`` (N2, F), normalised first by :func:`normalise_features`.
    FD is biased upwards at finite sample size n, by about b/n - c/n^2 (the second term is not
    negligible when F is not small against n: 151 features and 10^3 showers). FD is computed on
    ``n_batches`` subsets drawn without replacement (each then a sample of independent draws of
    that size) at ``n_points`` sizes from ``min_fraction`` of the smaller sample up to all of
    it; a polynomial fit in 1/n of ``degree`` (2; CaloChallenge/JetNet use 1 with 10^5 showers)
    gives the intercept ``value``, FD at n -> infinity. ``error`` is the standard deviation of
    that intercept over ``n_bootstrap`` bootstrap replicas of both samples, which carries how
    much the two samples themselves fluctuate (the fit's residuals do not).
    """
    r, g = normalise_features(ref_x, gen_x)
    rng = np.random.default_rng(seed)
    n_max = min(len(r), len(g))
    ns = np.unique(np.linspace(max(int(min_fraction * n_max), 4), n_max, n_points).astype(int))
    with threadpool_limits(1, user_api="blas"):  # small matrices: threads only cost here
        fd = _fd_curve(r, g, ns, n_batches, rng)
        boot = [_intercept(ns, _fd_curve(r[rng.integers(0, len(r), len(r))],
                                         g[rng.integers(0, len(g), len(g))], ns,
                                         max(n_batches // 5, 1), rng), degree)
                for _ in range(n_bootstrap)]
    return {"value": _intercept(ns, fd, degree), "error": float(np.std(boot, ddof=1)),
            "sizes": ns.tolist(), "fd_mean": fd.tolist()}


def mmd2_unbiased(x, y, degree: int = 3) -> float:
    """Unbiased MMD^2 with the polynomial kernel k(a, b) = (a.b / d + 1)^degree; x (n, d),
    y (m, d). Diagonal terms are left out of the within-sample means (that is the unbiased part)."""
    d = x.shape[1]
    kxx = (x @ x.T / d + 1.0) ** degree
    kyy = (y @ y.T / d + 1.0) ** degree
    kxy = (x @ y.T / d + 1.0) ** degree
    n, m = len(x), len(y)
    t_xx = (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
    t_yy = (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
    return float(t_xx + t_yy - 2.0 * kxy.mean())


def kpd(ref_x, gen_x, n_batches: int = 10, batch_size: int = 1000, degree: int = 3,
        seed: int = 0) -> dict:
    """Kernel physics distance: the median over ``n_batches`` random batches (of at most
    ``batch_size`` per sample) of the unbiased MMD^2 with a cubic polynomial kernel; ``error``
    is half the 16-84 % interquantile range. Compatible with 0 for identical distributions."""
    r, g = normalise_features(ref_x, gen_x)
    rng = np.random.default_rng(seed)
    size = max(2, min(batch_size, len(r) // 2, len(g) // 2))  # halves: batches must differ
    with threadpool_limits(1, user_api="blas"):
        vals = np.array([mmd2_unbiased(r[rng.choice(len(r), size, replace=False)],
                                       g[rng.choice(len(g), size, replace=False)], degree)
                         for _ in range(n_batches)])
    lo, hi = np.quantile(vals, [0.16, 0.84])
    return {"value": float(np.median(vals)), "error": float((hi - lo) / 2), "batch_size": size}
