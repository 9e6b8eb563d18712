"""How many showers a run's trend would need to reach a goal: an estimate, from its history.

A long run that has not met a goal yet should say how far it is and how fast it is coming. For
each goal quantity of a physics-grade generator that the training history records every epoch
(the physics monitors, :mod:`gan3d.validation.monitors`, at the monitor energies):

* ``targets_met`` - the (energy, target) pairs met, of 20; goal >= :data:`GOAL_TARGETS`;
* each target of :data:`~gan3d.validation.monitors.TARGETS` - its worst energy's
  |deviation| / tolerance; goal <= 1 (met at every energy);
* ``resolution`` - the worst energy's |ECAL-sum spread / reference's - 1| / 0.5: the energy
  resolution within 1.5x of the reference's (the spread is sigma / mean of the visible energy);
  goal <= 1.

The model, fitted by least squares to the epochs from :data:`WINDOW` of the showers seen on
(the later half; a fork's parent's epochs count: they are its trajectory too) and at the newest
epoch's learning rate (:func:`at_current_lr`: a lowered learning rate starts a trend of its own,
so a fit across the change would mix two): the deviations
fall as a power of the showers seen, ``log y = a + b log S``; the targets met rise linearly in
``log S``. Where the line reaches the goal is the estimate. Its 90 % interval comes from a
moving-block bootstrap over the epochs (blocks of :data:`BLOCK` epochs, since neighbouring epochs
are correlated; on 21 epochs of independent noise such an interval covers the truth about 80 %
of the time, not 90 %). Where more than 5 % of the resamples do not improve, or reach the goal
only beyond :data:`HORIZON` times the showers seen, the upper end is unbounded. This is an
extrapolation of noisy monitors (64 showers per energy in the long runs): a planning number, not
a measurement, and labelled so wherever it is shown. FPD, which the history does not hold, is
left out.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import console
from .monitors import MONITOR_ENERGIES, TARGETS

__all__ = ["GOAL_TARGETS", "RESOLUTION_RATIO", "WINDOW", "BLOCK", "HORIZON", "series", "estimate",
           "lr_changes", "at_current_lr", "showers_to_goal", "need", "table", "section"]

GOAL_TARGETS = 18  # of 20 (energy, target) pairs
RESOLUTION_RATIO = 1.5  # the generator's energy resolution over the reference's, every energy
WINDOW = 0.5  # fit the epochs after this fraction of the showers seen
BLOCK = 3  # epochs per bootstrap block
MIN_EPOCHS = 6  # fewer epochs in the window: no estimate
HORIZON = 100  # estimates beyond this many times the showers seen are not given


def series(rows: Sequence[dict], energies: Sequence[float] = MONITOR_ENERGIES
           ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per goal quantity, (showers seen, value) over the history ``rows`` that hold monitors."""
    rows = [r for r in rows if r.get("mon_targets_met") is not None and r.get("showers_seen")]
    s = np.array([r["showers_seen"] for r in rows], float)

    def worst(name: str, tol: float) -> np.ndarray:
        return np.array([max(abs(r.get(f"mon_{name}_{e:g}", np.nan)) for e in energies) / tol
                         for r in rows])

    out = {"targets_met": (s, np.array([r["mon_targets_met"] for r in rows], float))}
    for name, (_, tol) in TARGETS.items():
        out[name] = (s, worst(name, tol))
    out["resolution"] = (s, worst("ecal_sum_spread", RESOLUTION_RATIO - 1))
    return out


def _crossing(x: np.ndarray, y: np.ndarray, goal: float, rising: bool) -> float:
    """``exp(x)`` where the least-squares line through (x, y) reaches ``goal``; inf if the line
    does not move towards it or reaches it only beyond :data:`HORIZON` times the last ``exp(x)``."""
    b, a = np.polyfit(x, y, 1)
    if (b <= 0) if rising else (b >= 0):
        return float("inf")
    at = (goal - a) / b
    return float(np.exp(at)) if at <= x.max() + np.log(HORIZON) else float("inf")


def estimate(showers: np.ndarray, values: np.ndarray, *, goal: float, rising: bool,
             log_values: bool, window: float = WINDOW, block: int = BLOCK, n_boot: int = 2000,
             seed: int = 0) -> dict:
    """The showers at which the trend of ``values`` reaches ``goal`` (see the module's text).

    Returns ``now`` (median of the last 3 epochs), ``met`` (``now`` meets the goal),
    ``exponent`` (the fitted slope per unit of ``log S``), ``showers`` (the estimate; inf: not
    improving), ``low``/``high`` (its 90 % interval) and ``epochs`` (those fitted)."""
    s, v = np.asarray(showers, float), np.asarray(values, float)
    now = float(np.median(v[-3:])) if len(v) else float("nan")
    met = bool(now >= goal) if rising else bool(now <= goal)
    keep = (s >= window * s.max()) & np.isfinite(v) if len(s) else np.zeros(0, bool)
    if log_values:
        keep &= v > 0
    x, y = np.log(s[keep]), v[keep]
    if log_values:
        y, goal = np.log(y), float(np.log(goal))
    out = {"now": now, "met": met, "epochs": int(keep.sum()), "exponent": float("nan"),
           "showers": float("nan"), "low": float("nan"), "high": float("nan")}
    if len(x) < MIN_EPOCHS:
        return out
    out["exponent"] = float(np.polyfit(x, y, 1)[0])
    out["showers"] = _crossing(x, y, goal, rising)
    rng = np.random.default_rng(seed)
    starts = np.arange(len(x) - block + 1)
    n_blocks = int(np.ceil(len(x) / block))
    boot = []
    for _ in range(n_boot):
        idx = np.concatenate([np.arange(i, i + block) for i in rng.choice(starts, n_blocks)])
        if np.ptp(x[idx]) > 0:
            boot.append(_crossing(x[idx], y[idx], goal, rising))
    boot = np.sort(boot)  # inf (not improving, or beyond the horizon) sorts last
    out["low"] = float(boot[int(np.floor(0.05 * (len(boot) - 1)))])
    out["high"] = float(boot[int(np.ceil(0.95 * (len(boot) - 1)))])  # inf: > 5 % never get there
    return out


def lr_changes(rows: Sequence[dict]) -> list[tuple[dict, dict]]:
    """(the last epoch at the old rate, the first at the new) for each change of ``lr`` in a
    run's history ``rows`` (a fork's lr x N, a later fork that lowered it, a warm-up's ramp)."""
    rows = [r for r in rows if r.get("lr") is not None]
    return [(a, b) for a, b in zip(rows, rows[1:])
            if not math.isclose(a["lr"], b["lr"], rel_tol=1e-9)]


def at_current_lr(rows: Sequence[dict]) -> list[dict]:
    """The newest epochs of ``rows`` trained at the newest epoch's learning rate: all of them
    for a run at one rate, those since the last change (:func:`lr_changes`) for the others."""
    rows, changes = list(rows), lr_changes(rows)
    return rows[rows.index(changes[-1][1]):] if changes else rows


def showers_to_goal(rows: Sequence[dict], energies: Sequence[float] = MONITOR_ENERGIES,
                    **kwargs) -> dict[str, dict]:
    """:func:`estimate` for every goal quantity of :func:`series` of a run's history ``rows``,
    from the epochs at its current learning rate (:func:`at_current_lr`)."""
    out = {}
    for name, (s, v) in series(at_current_lr(rows), energies).items():
        if name == "targets_met":
            out[name] = estimate(s, v, goal=GOAL_TARGETS, rising=True, log_values=False,
                                 **kwargs)
        else:
            out[name] = estimate(s, v, goal=1.0, rising=False, log_values=True, **kwargs)
        out[name]["goal"] = GOAL_TARGETS if name == "targets_met" else 1.0
    return out


def _showers(x: float) -> str:
    return f"{x:,.0f}" if np.isfinite(x) else f"> {HORIZON}x now"


def _kind(r: dict, name: str) -> str:
    """``met``, ``few`` (too few epochs), ``flat`` (not improving) or ``estimate``."""
    if r["met"]:
        return "met"
    if np.isnan(r["showers"]):
        return "few"
    if (r["exponent"] <= 0) if name == "targets_met" else (r["exponent"] >= 0):
        return "flat"
    return "estimate"


def need(r: dict, name: str) -> str:
    """What :func:`estimate`'s ``r`` for goal quantity ``name`` says: ``met now``, too few
    epochs, not improving, or the showers estimated with their interval."""
    return {"met": "met now", "few": f"too few epochs ({r['epochs']})",
            "flat": "not improving at this stage",
            "estimate": f"{_showers(r['showers'])} [{_showers(r['low'])}, "
                        f"{_showers(r['high'])}]"}[_kind(r, name)]


def table(runs: dict[str, dict[str, dict]], budget: int | None = None) -> str:
    """Markdown: per run and goal quantity, where it stands, its trend and the showers it would
    need (estimated). ``budget`` adds whether the estimate falls within it."""
    what = {"targets_met": f"targets met (goal >= {GOAL_TARGETS} of 20)",
            "resolution": f"resolution: worst energy's spread deviation / {RESOLUTION_RATIO - 1:g}"}
    what |= {n: f"{n}: worst energy's deviation / {tol:g}" for n, (_, tol) in TARGETS.items()}
    head = ["run", "quantity", "now (last 3 epochs)", "goal", "trend per doubling of showers",
            "epochs fitted", "showers to goal, estimated [90 % interval]"]
    head += [f"within {budget:,}?"] if budget else []
    rows = []
    for run, quantities in runs.items():
        for name, r in quantities.items():
            kind = _kind(r, name)
            within = "" if not budget else {"met": "yes", "few": "-", "flat": "no"}.get(kind) or (
                "yes" if r["high"] <= budget else "no" if r["low"] > budget else "undecided")
            trend = "-" if np.isnan(r["exponent"]) else (
                f"{r['exponent'] * np.log(2):+.2f}" if name == "targets_met"
                else f"x {2 ** r['exponent']:.2f}")
            goal = f">= {r['goal']:g}" if name == "targets_met" else f"<= {r['goal']:g}"
            rows.append([run, what[name], f"{r['now']:.3g}", goal, trend, r["epochs"],
                         need(r, name)] + ([within] if budget else []))
    return console.table(rows, head)


def section(runs: dict[str, dict[str, dict]], budget: int | None = None) -> str:
    """Markdown: how the estimates of :func:`table` are made, then the table."""
    return ("**Estimated**: the showers each run's trend would need to reach each goal - a power "
            "law (the targets met: a line in log showers) fitted to the monitors of the later half "
            "of its epochs, those at its current learning rate only (64 showers per energy), 90 % "
            "interval by a block bootstrap over epochs (`gan3d.validation.trend`). A planning "
            "number, not a measurement.\n\n" + table(runs, budget=budget))
