"""Speed-up arithmetic on recorded results: the overall-time study, the model against measurement,
the paper's numbers, and the headline summary of notebook 03, with what the notebook says of them.

Pure functions of the JSON results written by :mod:`gan3d.scaling.experiments` and
``bench/bench_allreduce.py`` (no TensorFlow, no MPI), so that figures and checks are cheap to redo.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from .. import console
from . import perfmodel as pm

__all__ = ["analyse_overall", "overall_table", "calibrated_hardware", "model_check", "paper_check",
           "summary", "paper_model", "step_model", "step_allreduce", "bench_lines", "bench_reading",
           "check_lines",
           "model_reading", "overall_reading", "crossover_lines", "crossover_reading",
           "headline_lines"]


def analyse_overall(runs: dict, workers: Sequence[int]) -> dict:
    """Speed-ups of whole trainings against the 1-worker run, with Amdahl's law.

    ``runs`` maps ``"<eval_mode>_p<p>"`` to :func:`gan3d.scaling.experiments.timed_epoch_means`
    summaries (mean seconds per timed epoch: ``train_s``, ``eval_s``, ``epoch_s``); the work per
    epoch is fixed
    (one pass over the training set), so ideal times fall as 1/p. Returns ``rows`` (one per run),
    the measured serial fraction (evaluation share of the 1-worker epoch), per p > 1 the fitted
    serial fraction, Amdahl's prediction, the gain from distributed evaluation and the gap between
    overall and training-only efficiency, and the paper's 12-GPU result explained the same way.
    """
    base = runs["serial_p1"]
    s_measured = base["eval_s"] / base["epoch_s"]
    rows, checks = [], []
    for p in workers:
        for mode in ("serial",) if p == 1 else ("serial", "distributed"):  # 1 worker: one run
            r = runs[f"{mode}_p{p}"]
            sp, tsp = base["epoch_s"] / r["epoch_s"], base["train_s"] / r["train_s"]
            rows.append({"workers": p, "eval_mode": mode, "epoch_s": r["epoch_s"],
                         "train_s": r["train_s"], "eval_s": r["eval_s"], "speedup": sp,
                         "efficiency": sp / p, "train_speedup": tsp, "train_efficiency": tsp / p})
    for p in (w for w in workers if w > 1):
        ser = next(r for r in rows if r["workers"] == p and r["eval_mode"] == "serial")
        dis = next(r for r in rows if r["workers"] == p and r["eval_mode"] == "distributed")
        e = ser["train_efficiency"]
        checks.append({
            "workers": p,
            "serial_fraction_fitted": pm.serial_fraction(ser["speedup"], p, e),
            "amdahl_speedup": float(pm.amdahl_speedup(p, s_measured, e)),
            "measured_speedup_serial": ser["speedup"],
            "measured_speedup_distributed": dis["speedup"],
            "gain_distributed_over_serial": dis["speedup"] / ser["speedup"],
            "efficiency_gap_serial_points": 100 * (ser["train_efficiency"] - ser["efficiency"]),
            "efficiency_gap_distributed_points": 100 * (dis["train_efficiency"] - dis["efficiency"]),
        })
    return {"rows": rows, "serial_fraction_measured": s_measured, "per_workers": checks,
            "paper": paper_check()["overall"]}


def overall_table(analysis: dict) -> str:
    """The overall-time result as a markdown table (times in seconds per epoch)."""
    lines = [console.table(
        [[r["workers"], r["eval_mode"], f"{r['epoch_s']:.2f}", f"{r['train_s']:.2f}",
          f"{r['eval_s']:.2f}", f"{r['speedup']:.2f}x", f"{100 * r['efficiency']:.1f} %",
          f"{100 * r['train_efficiency']:.1f} %"] for r in analysis["rows"]],
        ["workers", "evaluation", "s/epoch", "train s", "eval s", "speed-up", "efficiency",
         "training-only efficiency"])]
    p = analysis["paper"]
    lines += ["", f"Serial fraction measured here (1 worker): "
              f"{100 * analysis['serial_fraction_measured']:.1f} %."]
    for c in analysis["per_workers"]:
        lines.append(f"At {c['workers']} workers: Amdahl predicts {c['amdahl_speedup']:.2f}x with "
                     f"serial evaluation, measured {c['measured_speedup_serial']:.2f}x (fitted serial "
                     f"fraction {100 * c['serial_fraction_fitted']:.1f} %); distributed evaluation "
                     f"{c['measured_speedup_distributed']:.2f}x, a gain of "
                     f"{100 * (c['gain_distributed_over_serial'] - 1):+.1f} %.")
    lines.append(f"Paper (12 P100): {p['published_speedup']:.2f}x published; serial fraction "
                 f"{100 * p['serial_fraction_fitted']:.2f} % fitted (inferred) against "
                 f"{100 * p['serial_fraction_flops']:.2f} % from the FLOP counts, which predicts "
                 f"{p['model_speedup']:.2f}x; with distributed evaluation the model gives "
                 f"{p['model_speedup_distributed']:.2f}x.")
    return "\n".join(lines) + "\n"


def calibrated_hardware(scale: dict, bench: dict, wl: pm.Workload) -> pm.Hardware:
    """This machine in the model: the rate from the smallest worker count's median step time (it
    must be 1 worker), the link from the all-reduce benchmark (MPI latency and bandwidth, Horovod's
    per-call overhead) and the sharing of the node's cores from its compute probe, the jitter from
    the spread of the 1-worker steps. Nothing of a multi-worker training run enters."""
    one = scale["points"][0]
    if one["workers"] != 1:
        raise ValueError("calibration needs a 1-worker measurement in the scaling results")
    fit = bench["fit"]["mpi"]
    shared = bench.get("compute", {}).get("shared_factor", 1.0)
    return pm.calibrate(one["step_time_s"], one["batch_per_worker"], wl,
                        bandwidth=fit["bandwidth_Bps"], latency=fit["latency_s"],
                        overhead=bench["horovod_overhead_s"], jitter=one.get("step_time_cv", 0.0),
                        shared=shared if shared == shared else 1.0)  # NaN: not measured


def model_check(scale: dict, bench: dict, wl: pm.Workload) -> list[dict]:
    """Predicted against measured time per step for every worker count (relative error)."""
    hw = calibrated_hardware(scale, bench, wl)
    out = []
    for pt in scale["points"]:
        st = pm.step_time(pt["workers"], pt["batch_per_worker"], wl, hw)
        out.append({"workers": pt["workers"], "measured_s": pt["step_time_s"],
                    "predicted_s": st.total, "compute_s": st.compute, "wait_s": st.wait,
                    "comm_s": st.comm, "rel_error": st.total / pt["step_time_s"] - 1.0,
                    "oversubscribed": pt["oversubscribed"]})
    return out


def paper_check(wl: pm.Workload | None = None) -> dict:
    """The model with the paper's hardware against its 98.9 % (training) and 9.07x (overall)."""
    wl = wl or pm.threedgan_workload()
    P = pm.PAPER
    hw = pm.paper_hardware(wl)
    p, b = P["workers"], P["batch"]
    eff = float(pm.efficiency([p], b, wl, hw)[0])
    cv = pm.paper_jitter(wl, hw)
    hj = dataclasses.replace(hw, jitter=cv)
    e1 = pm.epoch_time(1, b, wl, hj, "serial")
    s_flops = e1["eval"] / e1["total"]
    published = P["time_1_s"] / P["time_12_s"]
    t12 = pm.epoch_time(p, b, wl, hj, "serial")["total"]
    t12d = pm.epoch_time(p, b, wl, hj, "distributed")["total"]
    st = pm.step_time(p, b, wl, hw)
    return {
        "sustained_flops": hw.rate, "fraction_of_peak": hw.rate / P["p100_peak_flops"],
        "step_time_1_s": pm.step_time(1, b, wl, hw).total, "comm_per_step_12_s": st.comm,
        "model_efficiency_12": eff, "published_efficiency_12": P["train_efficiency"],
        "jitter_cv_inferred": cv,
        "overall": {"published_speedup": published,
                    "serial_fraction_fitted": pm.serial_fraction(published, p, P["train_efficiency"]),
                    "serial_fraction_flops": s_flops,
                    "model_speedup": e1["total"] / t12, "model_speedup_distributed": e1["total"] / t12d,
                    "amdahl_limit_flops": 1.0 / s_flops},
    }


def step_model(batch: float, wl: pm.Workload, hw: pm.Hardware, workers: int = 2) -> dict:
    """The model's step on ``workers`` workers at ``batch`` per worker: seconds of computation,
    of waiting for the slowest worker and of all-reduce (what a step breakdown is drawn against)."""
    st = pm.step_time(workers, batch, wl, hw)
    return {"compute_s": st.compute, "wait_s": st.wait, "comm_s": st.comm}


def paper_model(paper: dict | None = None) -> tuple[pm.Workload, pm.Hardware]:
    """The 3DGAN's workload and the paper's hardware with the per-step jitter inferred from its
    published efficiency (``paper``: a :func:`paper_check`, computed if not given)."""
    paper = paper or paper_check()
    wl = pm.threedgan_workload()
    return wl, dataclasses.replace(pm.paper_hardware(wl), jitter=paper["jitter_cv_inferred"])


def summary(scale: dict, bench: dict, tl: dict, overall: dict, wl: pm.Workload,
            batches: Sequence[int] = (1, 8, 64, 512)) -> dict:
    """Headline numbers of the scaling study (``scaling_summary.json`` of notebook 03).

    Every number says where it comes from: ``measured`` here, ``published`` by the paper,
    ``model`` (performance model), ``inferred`` (solved from published numbers with the model).
    """
    check = model_check(scale, bench, wl)
    two = next((c for c in check if c["workers"] == 2), None)
    paper = paper_check()
    wlp, hwp = paper_model(paper)
    per = {c["workers"]: c for c in overall["analysis"]["per_workers"]}
    o2 = per.get(2)
    return {
        "machine": {"cores": scale["machine"]["cores"], "cpu": scale["machine"]["topology"]["cpu"],
                    "load_average": scale["machine"].get("load_average")},
        "measured_training": [{k: p[k] for k in ("workers", "oversubscribed", "batch_per_worker",
                                                 "step_time_s", "speedup", "efficiency")}
                              for p in scale["points"]],
        "model_here": {"predicted_step_2_s": two and two["predicted_s"],
                       "measured_step_2_s": two and two["measured_s"],
                       "rel_error_2": two and two["rel_error"],
                       "within_10_percent": bool(two and abs(two["rel_error"]) <= 0.10)},
        "timeline_measured": {k: tl["mean"][k] for k in
                              ("step_s", "compute_fraction", "wait_fraction", "comm_fraction")},
        "compute_bound_here": tl["mean"]["comm_fraction"] < 0.10,
        "compute_sharing_measured": bench.get("compute"),
        "allreduce_measured": {"bandwidth_GBps": bench["fit"]["mpi"]["bandwidth_Bps"] / 1e9,
                               "latency_us": 1e6 * bench["fit"]["mpi"]["latency_s"],
                               "horovod_overhead_ms": 1e3 * bench["horovod_overhead_s"]},
        "paper_model": {"model_efficiency_12": paper["model_efficiency_12"],
                        "published_efficiency_12": paper["published_efficiency_12"],
                        "jitter_cv_inferred": paper["jitter_cv_inferred"],
                        "sustained_fraction_of_peak_inferred": paper["fraction_of_peak"],
                        **paper["overall"]},
        "overall_measured": o2 and {
            "efficiency_gap_serial_points": o2["efficiency_gap_serial_points"],
            "efficiency_gap_distributed_points": o2["efficiency_gap_distributed_points"],
            "gain_distributed_over_serial": o2["gain_distributed_over_serial"],
            "serial_fraction_measured": overall["analysis"]["serial_fraction_measured"],
            "serial_fraction_fitted": o2["serial_fraction_fitted"],
            "amdahl_speedup": o2["amdahl_speedup"],
            "measured_speedup_serial": o2["measured_speedup_serial"],
            "distributed_within_3_points": abs(o2["efficiency_gap_distributed_points"]) <= 3.0},
        "crossover_workers_model": {str(b): pm.crossover_workers(b, wlp, hwp) for b in batches},
    }


# ---------------------------------------------------------------------------------------------
# What notebook 03 says of these numbers


def step_allreduce(bench: dict, wl: pm.Workload, *, overhead: bool = True) -> float:
    """Seconds of one step's gradient all-reduces on 2 workers by the ring model fitted to the
    MPI benchmark (``bench``), with Horovod's per-call overhead or the transfer alone."""
    fit = bench["fit"]["mpi"]
    link = pm.Link(fit["bandwidth_Bps"], fit["latency_s"])
    extra = bench["horovod_overhead_s"] if overhead else 0.0
    return sum(pm.allreduce_time(n, 2, link, extra) for n in wl.allreduce_bytes)


def bench_lines(bench: dict, wl: pm.Workload) -> str:
    """The all-reduce benchmark's numbers: the computation's rate alone and shared (where the
    benchmark measured it), the MPI link, Horovod's overhead and one step's gradients."""
    fit, lines = bench["fit"]["mpi"], []
    c = bench.get("compute")  # absent in benchmark files of older versions
    if c:
        lines.append(f"The step's computation per worker: {c['alone_flops'] / 1e9:.1f} GFLOP/s "
                     f"alone, {c['together_flops'] / 1e9:.1f} GFLOP/s with both workers busy "
                     f"(x{c['shared_factor']:.2f}).")
    lines.append(f"MPI: {fit['bandwidth_Bps'] / 1e9:.2f} GB/s, {1e6 * fit['latency_s']:.0f} us per "
                 f"hop; Horovod adds {1e3 * bench['horovod_overhead_s']:.1f} ms per call. One "
                 f"step's gradients (2 x D + 2 x G): {step_allreduce(bench, wl) * 1e3:.1f} ms on 2 "
                 "workers.")
    return "\n".join(lines)


def bench_reading(bench: dict, wl: pm.Workload) -> str:
    """Markdown: what a step's gradient all-reduces take here, and how much of it is Horovod's
    coordination against the MPI transfer."""
    per_step, copy = step_allreduce(bench, wl), step_allreduce(bench, wl, overhead=False)
    share = 1 - copy / per_step if per_step > 0 else 0.0
    return (f"Reading: the gradients of a step ({sum(wl.allreduce_bytes) / 1e6:.1f} MB in "
            f"{len(wl.allreduce_bytes)} all-reduces) take {1e3 * per_step:.1f} ms here, "
            f"{100 * share:.0f} % of it Horovod's coordination and {100 * (1 - share):.0f} % the "
            "MPI transfer itself (model fitted to the measurements above).")


def check_lines(check: Sequence[dict]) -> str:
    """Per worker count of :func:`model_check`: the step measured against the model."""
    return "\n".join(f"{c['workers']} worker(s): measured {c['measured_s']:.3f} s/step, model "
                     f"{c['predicted_s']:.3f} s/step ({100 * c['rel_error']:+.1f} %)"
                     + (" [oversubscribed]" if c["oversubscribed"] else "") for c in check)


def model_reading(check: Sequence[dict], paper: dict) -> str:
    """Markdown: the model's 2-worker prediction against the measurement (``check``: a
    :func:`model_check`), and what it says of the paper's 12 GPUs (``paper``: a
    :func:`paper_check`)."""
    wl = pm.threedgan_workload()
    st12 = pm.step_time(12, pm.PAPER["batch"], wl, pm.paper_hardware(wl))
    two = next((c for c in check if c["workers"] == 2), None)
    verdict = ("no 2-worker measurement to check it against" if two is None else
               f"its 2-worker prediction is {100 * two['rel_error']:+.1f} % off the measurement "
               f"({'within' if abs(two['rel_error']) <= 0.10 else 'OUTSIDE'} the 10 % it should "
               "meet)")
    return ("Reading: the model is calibrated on the 1-worker run and the benchmark only "
            "(all-reduce, and how much of its speed a worker keeps when both cores compute at "
            f"once); {verdict}. With the paper's hardware the model puts communication at "
            f"{100 * st12.comm / st12.total:.2f} % of a {st12.total:.1f}-second step at 12 GPUs, "
            f"and reaches {100 * paper['model_efficiency_12']:.2f} % from computation and "
            "all-reduce alone against the published 98.9 %: a per-step jitter of "
            f"{100 * paper['jitter_cv_inferred']:.2f} % (inferred) accounts for the difference, "
            "i.e. waiting for the slowest GPU, not NVLink or InfiniBand.")


def overall_reading(analysis: dict) -> str:
    """Markdown: the overall time by Amdahl's law, with the serial fraction measured here and
    the paper's fitted one (``analysis``: an :func:`analyse_overall`)."""
    pp = analysis["paper"]
    return (f"Reading: with serial evaluation every worker waits while one evaluates, Amdahl's law "
            f"with the serial fraction measured here, "
            f"{100 * analysis['serial_fraction_measured']:.1f} % of the 1-worker epoch. The "
            f"paper's {pp['published_speedup']:.2f}× at 12 GPUs follows from the same law with "
            f"{100 * pp['serial_fraction_fitted']:.2f} % (fitted); evaluating on every worker "
            f"(`train.eval_mode=distributed`) gives {pp['model_speedup_distributed']:.2f}× in the "
            "model.")


def crossover_lines(cross: dict) -> str:
    """Per batch (``cross``: batch -> :func:`gan3d.scaling.perfmodel.crossover_workers`): the
    workers from which the all-reduce takes as long as the computation."""
    return "\n".join(f"batch {b:4d} per worker: all-reduce as long as computation from "
                     f"{p if p else 'beyond 10 million'} workers (paper hardware, ring)"
                     for b, p in cross.items())


def crossover_reading(cross: dict) -> str:
    """Markdown: why communication takes over first at small batches, per batch of ``cross``."""
    return ("Reading: the all-reduce time grows with the number of workers (its latency term) "
            "while the computation per step shrinks with the per-worker batch, so communication "
            "takes over first at small batches: "
            + ", ".join(f"batch {b} from {p if p else '> 10^7'} workers" for b, p in cross.items())
            + " (model).")


def headline_lines(result: dict) -> str:
    """The checks of a :func:`summary`: the model against the 2-worker measurement and, where
    measured, the efficiency lost to serial and to distributed evaluation."""
    here, o = result["model_here"], result["overall_measured"] or {}
    lines = [f"model vs measured, 2 workers: {here['predicted_step_2_s']} s vs "
             f"{here['measured_step_2_s']} s (within 10 %: {here['within_10_percent']})"]
    if o:
        lines.append(f"overall, 2 workers: serial evaluation loses "
                     f"{o['efficiency_gap_serial_points']:.1f} points of efficiency, distributed "
                     f"{o['efficiency_gap_distributed_points']:.1f} (within 3: "
                     f"{o['distributed_within_3_points']})")
    return "\n".join(lines)
