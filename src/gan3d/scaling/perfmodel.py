"""An analytic performance model of data-parallel 3DGAN training: compute + ring all-reduce.

In the spirit of the roofline-plus-collectives scalability analysis of Castelló et al. (HPML 2019),
one synchronous step of ``p`` workers, each on a per-worker batch of ``b`` showers, takes

    t(p, b) = b F / (R s_p)                            computation (F FLOP per shower, R FLOP/s)
            + sigma_p * cv * b F / R                   waiting for the slowest worker (jitter)
            + (1 - overlap) * sum_k A(n_k, p)          the all-reduces that are not hidden

    A(n, p) = o + 2 (p - 1) alpha + 2 (p - 1) / p * n / beta      (ring all-reduce of n bytes)

with ``s_p`` the share of the 1-worker rate a worker keeps while the others of its node compute
too (1 for separate GPUs), ``o`` a per-call framework overhead (Horovod's negotiation), ``alpha``
the per-hop latency and
``beta`` the bandwidth (bytes/s, one direction) of the slowest link in the ring, and ``sigma_p`` the
expected maximum of ``p`` standard normal variables (0 for one worker). Whole runs follow Amdahl's
law with the serial fraction ``s`` (the test-loss evaluation when it runs on one worker only):
``S(p) = 1 / (s + (1 - s) / (p e))`` with ``e`` the training-only efficiency.

Everything here is plain arithmetic on NumPy/SciPy: no TensorFlow. Units: seconds, bytes, FLOP.
The FLOP counts come from :mod:`gan3d.gan.model` (``REFERENCE_COUNTS`` records them; a test checks).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from scipy import integrate, optimize, special, stats

__all__ = [
    "Link", "Hardware", "Workload", "StepTime", "REFERENCE_COUNTS", "PAPER",
    "threedgan_workload", "ring_link", "allreduce_time", "expected_max_normal", "step_time",
    "efficiency", "epoch_time", "amdahl_speedup", "serial_fraction", "fit_allreduce",
    "calibrate", "paper_hardware", "paper_sustained_rate", "paper_jitter", "crossover_workers",
]

# Counted by gan3d.gan.model.forward_flops / trainable parameters of build_generator/discriminator.
REFERENCE_COUNTS = {
    "d_forward_flops": 1_572_204_748,   # FLOP per shower, discriminator forward
    "g_forward_flops": 511_759_385,     # FLOP per shower, generator forward
    "d_trainable_params": 73_402,
    "g_trainable_params": 872_808,
}

# What the paper publishes (text of Hesam et al. 2019) and the hardware it names.
PAPER = {
    "time_1_s": 20 * 3600 + 16 * 60,        # 20 h 16 min, full training on 1 GPU, incl. test loss
    "time_12_s": 2 * 3600 + 14 * 60,        # 2 h 14 min on 12 GPUs
    "workers": 12,
    "train_efficiency": 0.989,              # training only, 12 GPUs
    "epochs": 40,
    "batch": 512,                           # per GPU
    "train_showers": 180_000,               # 90 % of 200,000
    "test_showers": 20_000,
    "gpus_per_node": 4,
    "p100_peak_flops": 10.6e12,             # P100 SXM2, float32
    "nvlink_link_Bps": 20e9,                # NVLink 1.0, one link, one direction
    "nvlink_links_gpu_gpu": 2,              # S822LC: two links between paired GPUs
    "infiniband_Bps": 100e9 / 8,            # EDR, 100 Gb/s
}


@dataclass(frozen=True)
class Link:
    """One hop of the ring: ``bandwidth`` in bytes/s (one direction), ``latency`` in s per message."""

    bandwidth: float
    latency: float


@dataclass(frozen=True)
class Hardware:
    """A worker and its network. ``rate`` is the sustained FLOP/s per worker on this workload.

    ``workers_per_node`` workers share the fast ``intra`` link; a ring across nodes is limited by
    ``inter``. ``overhead`` is the framework's cost per all-reduce call (s), ``overlap`` the share of
    communication hidden behind computation (0..1), ``jitter`` the coefficient of variation of a
    worker's step compute time, ``shared`` the factor on ``rate`` when several workers compute on
    one node at once (cores share caches, memory bandwidth, power; separate GPUs do not: 1).
    """

    name: str
    rate: float
    intra: Link
    inter: Link | None = None
    workers_per_node: int = 1_000_000
    overhead: float = 0.0
    overlap: float = 0.0
    jitter: float = 0.0
    shared: float = 1.0
    peak: float | None = None


@dataclass(frozen=True)
class Workload:
    """What one step costs: FLOP per shower, bytes of each all-reduce, and the evaluation's cost."""

    step_flops: float                      # FLOP per shower of the per-worker batch, one step
    allreduce_bytes: tuple[float, ...]     # each all-reduce of one step, bytes
    eval_flops: float = 0.0                # FLOP per test shower (forward passes only)
    train_showers: int = PAPER["train_showers"]
    test_showers: int = PAPER["test_showers"]


@dataclass(frozen=True)
class StepTime:
    """One step's time split into its parts (seconds); ``total`` is their sum."""

    compute: float
    wait: float
    comm: float

    @property
    def total(self) -> float:
        return self.compute + self.wait + self.comm


def threedgan_workload(counts: dict | None = None, *, frozen_weight_grads: bool = False,
                       allreduces: Sequence[str] = ("D", "D", "G", "G"), **sizes) -> Workload:
    """The 3DGAN step from layer counts (default :data:`REFERENCE_COUNTS`).

    Step FLOPs follow :func:`gan3d.gan.model.step_flops`: ``(6 + 2k) D + 7 G`` with k = 2
    (frozen D's weight gradients pruned) or 3. Evaluation per test shower: D on it, G and D on a
    fake, and the combined G+D (``3 D + 2 G``). ``allreduces`` lists the gradient all-reduces of one step: the
    paper's Keras ``train_on_batch`` calls gave D, D, G, G (4 bytes per trainable parameter).
    """
    c = dict(REFERENCE_COUNTS, **(counts or {}))
    d, g = c["d_forward_flops"], c["g_forward_flops"]
    k = 3 if frozen_weight_grads else 2
    nbytes = {"D": 4.0 * c["d_trainable_params"], "G": 4.0 * c["g_trainable_params"]}
    return Workload(step_flops=float((6 + 2 * k) * d + 7 * g),
                    allreduce_bytes=tuple(nbytes[a] for a in allreduces),
                    eval_flops=float(3 * d + 2 * g), **sizes)


# ---------------------------------------------------------------------------------------------
# Collectives and steps


def ring_link(hw: Hardware, p: int) -> Link:
    """The slowest link a ring of ``p`` workers crosses: ``inter`` once it spans two nodes."""
    if p <= hw.workers_per_node or hw.inter is None:
        return hw.intra
    return Link(min(hw.intra.bandwidth, hw.inter.bandwidth), max(hw.intra.latency, hw.inter.latency))


def allreduce_time(nbytes: float, p: int, link: Link, overhead: float = 0.0,
                   algorithm: Literal["ring", "tree"] = "ring",
                   endpoint: float | None = None) -> float:
    """Seconds for an all-reduce of ``nbytes`` over ``p`` workers (0 for one worker).

    ``ring``: 2(p-1) latency hops and 2(p-1)/p of the message over each link (bandwidth-optimal).
    ``tree``: recursive halving/doubling (Rabenseifner), 2 log2(p) hops, the same volume.
    ``endpoint``: bytes/s at which a worker reduces and copies the message (CPU collectives);
    the ring is a pipeline, so the slower of link and endpoint sets the pace:
    max(2(p-1)/p n / bandwidth, n / endpoint). None: the link alone (GPUs, fast CPUs).
    """
    if p <= 1:
        return 0.0
    hops = 2 * (p - 1) if algorithm == "ring" else 2 * math.ceil(math.log2(p))
    transfer = 2 * (p - 1) / p * nbytes / link.bandwidth
    if endpoint:
        transfer = max(transfer, nbytes / endpoint)
    return overhead + hops * link.latency + transfer


_X = np.linspace(-12.0, 12.0, 48_001)  # integration grid for expected_max_normal


@functools.lru_cache(maxsize=4096)
def expected_max_normal(p: int) -> float:
    """E[max of p independent standard normals]: 0 for p = 1, 0.564 for 2, 1.629 for 12.

    The integral of x p phi(x) Phi(x)^(p-1) on a fine grid, with Phi^(p-1) taken in logs so that
    it stays exact for millions of workers.
    """
    p = int(p)
    if p <= 1:
        return 0.0
    log_density = np.log(p) + stats.norm.logpdf(_X) + (p - 1) * special.log_ndtr(_X)
    return float(integrate.trapezoid(_X * np.exp(log_density), _X))


def step_time(p: int, batch: float, wl: Workload, hw: Hardware,
              algorithm: Literal["ring", "tree"] = "ring") -> StepTime:
    """Model time of one synchronous step of ``p`` workers with per-worker ``batch`` showers."""
    rate = hw.rate * (hw.shared if min(p, hw.workers_per_node) > 1 else 1.0)
    compute = batch * wl.step_flops / rate
    wait = expected_max_normal(p) * hw.jitter * compute
    link = ring_link(hw, p)
    comm = sum(allreduce_time(n, p, link, hw.overhead, algorithm) for n in wl.allreduce_bytes)
    return StepTime(compute, wait, (1.0 - hw.overlap) * comm)


def efficiency(workers: Sequence[int], batch: float, wl: Workload, hw: Hardware,
               mode: Literal["weak", "strong"] = "weak", **kw) -> np.ndarray:
    """Scaling efficiency per worker count (1 = ideal).

    weak: the per-worker ``batch`` is fixed (the paper), efficiency = t(1) / t(p);
    strong: the global batch ``batch`` is split, efficiency = t(1) / (p t(p)).
    """
    t1 = step_time(1, batch, wl, hw, **kw).total
    out = []
    for p in workers:
        if mode == "weak":
            out.append(t1 / step_time(p, batch, wl, hw, **kw).total)
        else:
            out.append(t1 / (p * step_time(p, batch / p, wl, hw, **kw).total))
    return np.asarray(out)


def epoch_time(p: int, batch: float, wl: Workload, hw: Hardware,
               eval_mode: Literal["serial", "distributed", "none"] = "serial") -> dict:
    """Seconds of one epoch: the training pass over ``train_showers`` plus the test-loss evaluation.

    ``serial`` evaluates all ``test_showers`` on one worker while the others wait; ``distributed``
    splits them over the ``p`` workers (plus one small all-reduce of the losses).
    """
    steps = wl.train_showers / (p * batch)
    train = steps * step_time(p, batch, wl, hw).total
    full = wl.test_showers * wl.eval_flops / hw.rate
    if eval_mode == "none":
        ev = 0.0
    elif eval_mode == "serial":
        ev = full
    else:
        ev = full / p + allreduce_time(64.0, p, ring_link(hw, p), hw.overhead)
    return {"train": train, "eval": ev, "total": train + ev, "steps": steps}


# ---------------------------------------------------------------------------------------------
# Amdahl's law


def amdahl_speedup(p, serial: float, train_efficiency: float = 1.0):
    """Speed-up of a run whose fraction ``serial`` (of the 1-worker time) does not parallelise."""
    p = np.asarray(p, dtype=float)
    return 1.0 / (serial + (1.0 - serial) / (p * train_efficiency))


def fit_serial_fraction(workers: Sequence[float], speedups: Sequence[float]) -> float:
    """The serial fraction s of Amdahl's law, 1/S = s + (1 - s)/N, fitted by least squares in
    1/S to measured ``speedups`` at ``workers`` (one worker's point, S = 1, is left out: it says
    nothing about s)."""
    n, s = np.asarray(workers, float), np.asarray(speedups, float)
    n, s = n[n > 1], s[n > 1]
    return float(np.sum((1 / s - 1 / n) * (1 - 1 / n)) / np.sum((1 - 1 / n) ** 2))


def serial_fraction(speedup: float, p: float, train_efficiency: float = 1.0) -> float:
    """Invert :func:`amdahl_speedup`: the serial fraction that gives ``speedup`` on ``p`` workers."""
    q = 1.0 / (p * train_efficiency)
    if math.isclose(q, 1.0):
        raise ValueError("one worker at full efficiency carries no information about the serial part")
    return (1.0 / speedup - q) / (1.0 - q)


# ---------------------------------------------------------------------------------------------
# Calibration on measurements


def fit_allreduce(sizes: Sequence[float], times: Sequence[float], p: int,
                  lo: float = 0.0, hi: float = math.inf) -> dict:
    """Fit ``t = a + b n`` to all-reduce times (s) of messages of ``sizes`` bytes on ``p`` workers.

    Only sizes in ``[lo, hi]`` are used: one line rarely fits 1 KiB to 64 MiB (caches, protocol
    switches), so fit the range the model needs. Weighted by 1/t, so that small and large messages
    count alike (relative error). Returns the intercept ``a`` (s), the slope ``b`` (s/byte), the
    ring's ``latency`` = a / (2(p-1)) and ``bandwidth`` = 2(p-1)/p / b (bytes/s), and the fit's
    largest relative residual.
    """
    n, t = np.asarray(sizes, float), np.asarray(times, float)
    keep = (n >= lo) & (n <= hi)
    n, t = n[keep], t[keep]
    if p < 2 or n.size < 2 or np.any(t <= 0):
        raise ValueError("need >= 2 positive timings on >= 2 workers to fit latency and bandwidth")
    w = 1.0 / t
    (a, b), *_ = np.linalg.lstsq(np.stack([w, n * w], axis=1), np.ones_like(t), rcond=None)
    a, b = max(float(a), 0.0), max(float(b), 1e-30)
    resid = float(np.max(np.abs((a + b * n) / t - 1.0)))
    return {"intercept_s": a, "slope_s_per_byte": b, "latency_s": a / (2 * (p - 1)),
            "bandwidth_Bps": 2 * (p - 1) / p / b, "max_rel_residual": resid,
            "range_bytes": [float(n.min()), float(n.max())]}


def calibrate(step_time_1: float, batch: float, wl: Workload, *, bandwidth: float,
              latency: float, overhead: float = 0.0, jitter: float = 0.0, shared: float = 1.0,
              name: str = "this machine", peak: float | None = None) -> Hardware:
    """Hardware for this machine: the sustained rate from a measured 1-worker step time (s) at
    per-worker ``batch``, the link from the all-reduce benchmark (all workers on one node), the
    sharing factor from the same benchmark's compute probe."""
    return Hardware(name=name, rate=batch * wl.step_flops / step_time_1,
                    intra=Link(bandwidth, latency), overhead=overhead, jitter=jitter,
                    shared=shared, peak=peak)


# ---------------------------------------------------------------------------------------------
# The paper's hardware


def paper_sustained_rate(wl: Workload) -> float:
    """FLOP/s per P100 implied by the paper's 20 h 16 min for 40 epochs on one GPU (with evaluation).

    (inferred) Every second of the run is charged to the arithmetic, so this is an effective rate.
    """
    per_epoch = wl.train_showers * wl.step_flops + wl.test_showers * wl.eval_flops
    return PAPER["epochs"] * per_epoch / PAPER["time_1_s"]


def paper_hardware(wl: Workload, *, latency: float = 5e-6, overhead: float = 0.0,
                   overlap: float = 0.0, jitter: float = 0.0) -> Hardware:
    """3 IBM S822LC nodes: 4 P100 per node joined by NVLink (2 links x 20 GB/s between paired GPUs),
    EDR InfiniBand (12.5 GB/s) between nodes. ``latency`` per hop (s) is an assumption of a few
    microseconds; the rate is :func:`paper_sustained_rate`."""
    nv = Link(PAPER["nvlink_links_gpu_gpu"] * PAPER["nvlink_link_Bps"], latency)
    ib = Link(PAPER["infiniband_Bps"], latency)
    return Hardware(name="paper: 12 P100 (S822LC)", rate=paper_sustained_rate(wl), intra=nv, inter=ib,
                    workers_per_node=PAPER["gpus_per_node"], overhead=overhead, overlap=overlap,
                    jitter=jitter, peak=PAPER["p100_peak_flops"])


def paper_jitter(wl: Workload, hw: Hardware, target: float = PAPER["train_efficiency"]) -> float:
    """(inferred) The per-step jitter (coefficient of variation) that brings the model's 12-GPU
    efficiency down to ``target``; 0 when computation and communication alone are already below."""
    def gap(cv: float) -> float:
        h = dataclasses.replace(hw, jitter=cv)
        return float(efficiency([PAPER["workers"]], PAPER["batch"], wl, h)[0]) - target

    if gap(0.0) <= 0:
        return 0.0
    return float(optimize.brentq(gap, 0.0, 1.0, xtol=1e-7))


# ---------------------------------------------------------------------------------------------
# Projection


def crossover_workers(batch: float, wl: Workload, hw: Hardware, *, pmax: int = 10**7,
                      algorithm: Literal["ring", "tree"] = "ring", share: float = 0.5) -> int | None:
    """The smallest worker count at which the exposed all-reduce time reaches ``share`` of the
    step (0.5, the default: as long as the computation, efficiency below one half from
    communication alone), or None below ``pmax``."""
    ratio = share / (1 - share)

    def dominated(p: int) -> bool:
        st = step_time(p, batch, wl, hw, algorithm)
        return st.comm >= ratio * st.compute

    if not dominated(pmax):
        return None
    lo, hi = 1, pmax  # dominated(lo) is False, dominated(hi) is True; comm grows with p
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if dominated(mid) else (mid, hi)
    return hi
