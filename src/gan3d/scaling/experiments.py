"""Scaling experiments: time training over worker counts, whole runs with their evaluation, all-reduces.

Every experiment runs a job of :mod:`gan3d.parallel.jobs` (``python -m gan3d.parallel.jobs``,
its tasks the probes of :mod:`gan3d.scaling.probes`) on N MPI ranks with
:func:`gan3d.parallel.jobs.launch_job` (so it runs unchanged under a cluster's mpirun) and writes
one JSON file with the resolved configuration, the machine and the provenance::

    gan3d scale --profile quick                      # -> results/scaling/scaling_weak.json
    python bench/bench_allreduce.py                  # -> results/bench/allreduce.json

* :func:`run` - time per step after warm-up steps, several repeats, medians; speed-up and
  efficiency in ``weak`` (fixed per-worker batch, as the paper) or ``strong`` (fixed global batch)
  scaling. Worker counts above the core count run oversubscribed and are marked so.
* :func:`overall_time` - full trainings with test-loss evaluation ``serial`` and ``distributed``.
* :func:`record_timeline` - Horovod's timeline of a short multi-worker run, split per step.
* :func:`allreduce_benchmark` - all-reduce time and bandwidth over message sizes;
* :func:`layer_profile` - every layer's passes of one worker's step against the roofline.

One worker always gets the same number of threads (cores / largest worker count that fits), so a
worker stands for a fixed piece of hardware, as one GPU did in the paper.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import console
from ..config import Config, to_dict
from ..data.files import n_train_files
from ..data.generate import generate_dataset
from ..exceptions import ConfigError
from ..io import atomic_path, ensure_dir, provenance, read_json, resolve_path, write_json
from ..parallel import runtime
from ..parallel.jobs import launch_job
from . import energy, perfmodel, speedup, timeline, topology

log = console.get_logger(__name__)

__all__ = [
    "BENCH_SIZES", "FIT_RANGE", "run", "overall_time", "record_timeline", "allreduce_benchmark",
    "machine_info", "model_workload", "threads_per_worker", "per_worker_batch", "timed_epoch_means",
    "layer_profile", "load_or_run",
]

BENCH_SIZES = tuple(1024 * 4**k for k in range(9))  # 1 KiB .. 64 MiB
FIT_RANGE = (16 * 1024, 16 * 1024**2)  # bytes: brackets the gradients (0.29 MB, 3.5 MB)


def machine_info() -> dict:
    """Cores, the fabric of this machine and its load (1, 5, 15 min), for every results file."""
    fabric = topology.read_machine()
    return {"cores": runtime.cpu_count(), "topology": topology.summary(fabric), "fabric": fabric,
            "load_average": os.getloadavg()}  # other work on the machine shows up here


def threads_per_worker(workers: Sequence[int]) -> int:
    """Intra-op threads per worker: the cores shared by the largest count that fits (>= 1)."""
    return max(1, runtime.cpu_count() // min(max(workers), runtime.cpu_count()))


def per_worker_batch(cfg: Config, p: int, mode: str, workers: Sequence[int]) -> int:
    """Showers per worker and step: ``train.batch_size`` (weak) or the global batch
    ``train.batch_size x max(workers)`` split over ``p`` (strong)."""
    if mode == "weak":
        return cfg.train.batch_size
    total = cfg.train.batch_size * max(workers)
    if total % p:
        raise ConfigError(f"strong scaling: global batch {total} (train.batch_size x {max(workers)}) "
                          f"does not split over {p} workers; choose counts that divide it")
    return total // p


def model_workload(cfg: Config, *, exact: bool = False) -> perfmodel.Workload:
    """The 3DGAN step's cost with this configuration's train/test split.

    ``exact`` counts FLOPs and parameters on freshly built Keras models; otherwise
    :data:`perfmodel.REFERENCE_COUNTS` (the same numbers, checked by the tests) is used.
    Each step all-reduces D's gradients twice and G's twice (:mod:`gan3d.gan.step`).
    """
    counts = None
    if exact:
        from ..gan import model  # imports TensorFlow: only for the exact count

        g, d = model.build_generator(), model.build_discriminator()
        counts = {"d_forward_flops": model.forward_flops(d), "g_forward_flops": model.forward_flops(g),
                  "d_trainable_params": sum(int(np.prod(v.shape)) for v in d.trainable_variables),
                  "g_trainable_params": sum(int(np.prod(v.shape)) for v in g.trainable_variables)}
    d = cfg.data
    per_file = d.n_showers / d.n_files
    train_files = n_train_files(d.n_files, d.test_fraction)
    return perfmodel.threedgan_workload(counts, train_showers=int(per_file * train_files),
                                        test_showers=int(d.n_showers - per_file * train_files))


# ---------------------------------------------------------------------------------------------
# Reading the probes' results


def _step_times(res: dict) -> list[float]:
    """Per-step seconds from a ``measure_step_rate`` result (a list, or the mean of one run)."""
    if res.get("step_times_s"):
        return [float(t) for t in res["step_times_s"]]
    if "step_time_s" in res:
        return [float(res["step_time_s"])]
    return [float(res["seconds"]) / float(res["steps"])]


# ---------------------------------------------------------------------------------------------
# Time per step over worker counts


def run(cfg: Config, *, workers: Sequence[int] | None = None, mode: str | None = None,
        output: str | Path | None = None, timeout: float = 3600.0,
        network: str | None = None) -> dict:
    """Time training steps for each worker count; write ``scaling_<mode>.json``; return it.

    Per count: ``scale.repeats`` launches, each ``scale.warmup_steps`` untimed then
    ``scale.steps`` timed steps; the median step time over repeats is reported with speed-up and
    efficiency against the smallest count. Weak: efficiency = t(p0)/t(p). Strong: = p0 t(p0)/(p t(p)).
    """
    workers = tuple(sorted(set(workers or cfg.scale.workers)))
    mode = mode or cfg.scale.mode
    if mode not in ("weak", "strong") or not workers or min(workers) < 1:
        raise ConfigError(f"scaling needs mode weak|strong and positive worker counts, got "
                          f"{mode!r} {workers}")
    if network is not None:
        from ..parallel import netns

        try:  # an unknown profile is refused before anything runs
            netns.link_profile(network)
        except ConfigError as exc:
            raise ConfigError(f"--network: {exc}") from None
        reason = netns.unavailable()
        if reason:
            raise ConfigError(f"--network {network}: cannot emulate a network here: {reason}")
    folder = ensure_dir(resolve_path(output or cfg.scale.output))
    threads, cores, s = threads_per_worker(workers), runtime.cpu_count(), cfg.scale
    jobs = {}
    for p in workers:
        cfg_p = cfg.replace(**{"train.batch_size": per_worker_batch(cfg, p, mode, workers),
                               "train.workers": p})
        jobs[p] = {"task": "steps", "config": to_dict(cfg_p), "steps": s.steps,
                   "warmup": s.warmup_steps, "threads": threads}
    results = _repeat(jobs, s.repeats, folder, timeout, network)
    points = []
    for p in workers:
        pt = _point(p, jobs[p]["config"]["train"]["batch_size"],
                    [_step_times(res) for res in results[p]], cores, threads)
        # Of the time rank 0's threads wanted a CPU, the share they waited for one (other load).
        waits = [r["scheduler"]["runqueue_wait_s"] / (r["scheduler"]["runqueue_wait_s"]
                                                      + r["scheduler"]["cpu_s"])
                 for r in results[p] if r.get("scheduler", {}).get("cpu_s")]
        pt["runqueue_wait_fraction"] = statistics.fmean(waits) if waits else None
        pt["energy"] = energy.per_shower([res.get("energy") for res in results[p]])
        points.append(pt)
    _speedups(points, mode)
    result = {"kind": "scaling", "mode": mode, "points": points, "threads_per_worker": threads,
              "workload": model_workload(cfg).__dict__, "config": to_dict(cfg),
              "machine": machine_info(), "network": network, "provenance": provenance()}
    write_json(folder / (f"scaling_{mode}_{network}.json" if network else f"scaling_{mode}.json"),
               result)
    return result


def _repeat(jobs: dict[int, dict], repeats: int, folder: Path, timeout: float,
            network: str | None = None) -> dict[int, list]:
    """Rank 0's results of ``repeats`` launches of each job, repeats outermost: a drifting
    machine load then hits every worker count alike."""
    out: dict[int, list] = {p: [] for p in jobs}
    with console.progress(total=len(jobs) * repeats, desc="scaling runs", unit="run") as bar:
        for r in range(repeats):
            for p, job in jobs.items():
                out[p].append(launch_job(p, job, folder, f"steps_p{p}_r{r}", timeout=timeout,
                                         network=network))
                step_s = statistics.median(_step_times(out[p][-1]))
                bar.set_postfix_str(f"p={p}: {step_s:.3f} s/step")
                bar.update()
    return out


def _point(p: int, b: int, runs: list[list[float]], cores: int, threads: int) -> dict:
    medians = [statistics.median(r) for r in runs]
    steps = [t for r in runs for t in r]
    mean = statistics.fmean(steps)
    return {"workers": p, "batch_per_worker": b, "global_batch": b * p,
            "oversubscribed": p * threads > cores, "threads_per_worker": threads,
            "step_time_s": statistics.median(medians), "repeat_step_times_s": medians,
            "step_times_s": steps,
            "step_time_cv": statistics.stdev(steps) / mean if len(steps) > 1 else 0.0,
            "showers_per_s": b * p / statistics.median(medians)}


def _speedups(points: list[dict], mode: str) -> None:
    """Add speed-up (throughput ratio) and efficiency against the smallest count, in place."""
    base = points[0]
    for pt in points:
        ratio = pt["workers"] / base["workers"]
        pt["speedup"] = pt["showers_per_s"] / base["showers_per_s"] if mode == "weak" else \
            base["step_time_s"] / pt["step_time_s"]
        pt["efficiency"] = pt["speedup"] / ratio


# ---------------------------------------------------------------------------------------------
# Whole trainings: serial against distributed evaluation


def timed_epoch_means(path: str | Path) -> dict:
    """Mean seconds per timed epoch (train, eval, total) from a training's ``history.jsonl``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: the training wrote no history")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    timed = [r for r in rows if r.get("timed", True)]
    if not timed:
        raise ConfigError(f"{path}: no timed epoch; raise train.epochs above "
                          f"train.timing_warmup_epochs")
    mean = lambda k: statistics.fmean(float(r[k]) for r in timed)  # noqa: E731
    return {"epochs": len(timed), "train_s": mean("time_train_s"), "eval_s": mean("time_eval_s"),
            "epoch_s": mean("time_epoch_s"), "eval_mode": timed[0].get("eval_mode"),
            "workers": int(timed[0].get("workers", 1))}


def overall_time(cfg: Config, *, workers: Sequence[int] = (1, 2), output: str | Path | None = None,
                 repeats: int = 1, timeout: float = 7200.0) -> dict:
    """Full trainings incl. the test loss, evaluation ``serial`` and ``distributed``, per count.

    The runs are interleaved ``repeats`` times (a drifting machine load then hits every variant
    alike) and each variant's per-epoch times are the medians over its repeats. Writes
    ``overall_time.json`` and ``overall_time.md`` (the table) in ``output``; the analysis (speed-
    ups, Amdahl, the paper's 9.07x) is :func:`gan3d.scaling.speedup.analyse_overall`.
    """
    workers = tuple(sorted(set(workers)))
    folder = ensure_dir(resolve_path(output or cfg.scale.output))
    if cfg.data.source == "synthetic":  # made here, once, not inside the timed MPI job
        generate_dataset(cfg.data, progress=False)
    threads = threads_per_worker(workers)
    plan = [(p, m) for p in workers for m in ("serial", "distributed") if not (p == 1 and m != "serial")]
    every: dict[str, list[dict]] = {f"{m}_p{p}": [] for p, m in plan}
    with console.progress(total=repeats * len(plan), desc="whole trainings", unit="run") as bar:
        for r in range(repeats):
            for p, mode in plan:
                every[f"{mode}_p{p}"].append(_overall_run(cfg, p, mode, folder, threads, timeout))
                bar.set_postfix_str(f"p={p} eval={mode}: "
                                    f"{every[f'{mode}_p{p}'][-1]['epoch_s']:.1f} s/epoch")
                bar.update()
    runs = {name: dict(hs[0], **{k: statistics.median(h[k] for h in hs)
                                 for k in ("train_s", "eval_s", "epoch_s")}, repeats=hs)
            for name, hs in every.items()}
    runs["distributed_p1"] = runs["serial_p1"]  # one worker: both modes are the same run
    result = {"kind": "overall_time", "runs": runs,
              "analysis": speedup.analyse_overall(runs, workers),
              "threads_per_worker": threads, "config": to_dict(cfg), "machine": machine_info(),
              "provenance": provenance()}
    write_json(folder / "overall_time.json", result)
    with atomic_path(folder / "overall_time.md") as tmp:
        tmp.write_text(speedup.overall_table(result["analysis"]))
    return result


def _overall_run(cfg: Config, p: int, mode: str, folder: Path, threads: int,
                 timeout: float) -> dict:
    """One fresh training on ``p`` workers with evaluation ``mode``; its timed-epoch means."""
    out = folder / "overall" / f"{mode}_p{p}"
    shutil.rmtree(out, ignore_errors=True)  # a fresh training, never a resumed one
    cfg_r = cfg.replace(**{"train.eval_mode": mode, "train.workers": p, "train.output": str(out)})
    res = launch_job(p, {"task": "train", "config": to_dict(cfg_r), "threads": threads},
                     folder, f"train_{mode}_p{p}", timeout=timeout)
    return dict(timed_epoch_means(out / "history.jsonl"), scheduler=res.get("scheduler"))


# ---------------------------------------------------------------------------------------------
# Horovod timeline and the all-reduce benchmark


def record_timeline(cfg: Config, *, workers: int = 2, steps: int | None = None,
                    output: str | Path | None = None, timeout: float = 3600.0) -> dict:
    """A short ``workers``-rank run with ``HOROVOD_TIMELINE``; per-step compute/all-reduce/waiting.

    Horovod's response cache is switched off for this run (``HOROVOD_CACHE_CAPACITY=0``): with it,
    repeated collectives skip the negotiation whose per-rank ticks measure the waiting.

    Writes ``timeline.json`` (Horovod's Chrome trace) and ``timeline_breakdown.json``.
    """
    folder = ensure_dir(resolve_path(output or cfg.scale.output))
    trace = folder / "timeline.json"
    trace.unlink(missing_ok=True)
    steps = steps or cfg.scale.steps
    cfg_p = cfg.replace(**{"train.workers": workers})
    job = {"task": "steps", "config": to_dict(cfg_p), "steps": steps,
           "warmup": cfg.scale.warmup_steps, "threads": threads_per_worker([workers])}
    res = launch_job(workers, job, folder, f"timeline_p{workers}", timeout=timeout,
                     extra=["-x", f"HOROVOD_TIMELINE={trace}", "-x", "HOROVOD_CACHE_CAPACITY=0"])
    parsed = timeline.breakdown(timeline.load(trace), workers, last_steps=steps)
    result = {"kind": "timeline", "workers": workers, "batch_per_worker": cfg.train.batch_size,
              "measured_step_time_s": statistics.median(_step_times(res)), **parsed,
              "scheduler": res.get("scheduler"),
              "config": to_dict(cfg), "machine": machine_info(), "provenance": provenance()}
    write_json(folder / "timeline_breakdown.json", result)
    return result


def allreduce_benchmark(*, workers: int = 2, sizes: Sequence[int] = BENCH_SIZES, repeats: int = 20,
                        output: str | Path = "results/bench/allreduce.json",
                        timeout: float = 900.0) -> dict:
    """All-reduce time over message ``sizes`` (bytes) on ``workers`` ranks, Horovod and plain MPI.

    Bandwidth by the ring formula 2(p-1)/p n / t; latency and bandwidth fitted with
    :func:`perfmodel.fit_allreduce` over :data:`FIT_RANGE`; Horovod's per-call overhead (mostly
    the wait for its next coordination cycle, ``HOROVOD_CYCLE_TIME``) is its intercept minus MPI's.
    """
    path = resolve_path(output)
    folder = ensure_dir(path.parent)
    raw = launch_job(workers, {"task": "allreduce", "sizes": list(sizes), "repeats": repeats,
                               "threads": threads_per_worker([workers])}, folder,
                     f"allreduce_p{workers}", timeout=timeout)
    p, n = workers, raw["sizes"]
    lo, hi = FIT_RANGE if sum(FIT_RANGE[0] <= s <= FIT_RANGE[1] for s in n) >= 2 else (0, float("inf"))
    fits = {k: perfmodel.fit_allreduce(n, raw[f"{k}_s"], p, lo, hi) for k in ("horovod", "mpi")}
    wl = perfmodel.threedgan_workload()
    result = {"kind": "allreduce", "workers": p, "sizes_bytes": n, "repeats": repeats,
              "time_s": {k: raw[f"{k}_s"] for k in fits},
              "bus_bandwidth_Bps": {k: [2 * (p - 1) / p * b / t for b, t in zip(n, raw[f"{k}_s"])]
                                    for k in fits},
              "fit": fits, "horovod_overhead_s": max(0.0, fits["horovod"]["intercept_s"]
                                                      - fits["mpi"]["intercept_s"]),
              "gradient_bytes": {"G": wl.allreduce_bytes[2], "D": wl.allreduce_bytes[0]},
              "memcpy_Bps": raw["memcpy_Bps"],  # one core's copy bandwidth: the ceiling here
              "compute": raw["compute"],  # per-worker FLOP/s alone and with all ranks busy
              "machine": machine_info(), "provenance": provenance()}
    write_json(path, result)
    return result


def layer_profile(cfg: Config, *, threads: int | None = None, repeats: int = 3,
                  output: str | Path | None = None, timeout: float = 1800.0) -> dict:
    """The roofline profile of one worker's step (:mod:`gan3d.scaling.roofline`) at the
    configuration's batch and precision, on one rank with ``threads`` threads (default: every
    core); written to ``output`` (a JSON file) when given."""
    threads = threads or runtime.cpu_count()
    job = {"task": "roofline", "config": to_dict(cfg), "repeats": repeats, "threads": threads}
    with tempfile.TemporaryDirectory(prefix="gan3d-roofline-") as tmp:
        res = launch_job(1, job, Path(tmp), "roofline", timeout=timeout)
    result = {"kind": "roofline", **res, "config": to_dict(cfg), "machine": machine_info(),
              "provenance": provenance()}
    if output is not None:
        write_json(resolve_path(output), result)
    return result


def load_or_run(path: str | Path, make, *, config: Config | None = None,
                sections: Sequence[str] = ("data", "train", "scale"), run_missing: bool = True) -> dict:
    """The results at ``path`` if they exist and were made with the same ``sections`` of ``config``
    (when given); else ``make()`` when ``run_missing``, else :class:`ConfigError` saying what to do."""
    path = resolve_path(path)
    if path.is_file():
        old = read_json(path)
        want = json.loads(json.dumps({k: to_dict(config)[k] for k in sections})) if config else {}
        if all(old.get("config", {}).get(k) == v for k, v in want.items()):  # tuples: lists
            return old
        why = f"{path} was made with other {'/'.join(sections)} settings"
    else:
        why = f"{path} does not exist"
    if not run_missing:
        raise ConfigError(f"{why}; set run_missing=True (or run `gan3d scale`) to measure it")
    log.info("%s: measuring it now", why)
    return make()
