"""Training benchmark: showers/s of the full 3DGAN step on 1 and 2 MPI ranks, and how close to
the machine's arithmetic ceiling it runs.

Every configuration is launched through the package (``gan3d.parallel.launch.launch``: the package's
mpirun binding, MPI yielding, Horovod cycle time, threads = cores / ranks), so the numbers are
what a user gets without tuning anything by hand. Measured in one run, for float32 and (where
the CPU has bfloat16 arithmetic; else a short probe says why not) bfloat16:

* ``1 rank x 1 thread`` - one worker pinned to one core (all its threads), the other core idle:
  the weak-scaling baseline;
* ``1 rank x 2 threads`` - one process using the whole machine;
* ``2 ranks x 1 thread`` - data parallel, one rank per core, gradients all-reduced every update;
* ``2 x (1 rank x 1 thread)`` - two independent 1-worker processes at once, one per core, with no
  communication: what sharing the node (memory bandwidth, caches, the host's noise) costs any
  two jobs, data parallel or not;
* the ceiling: a 2048 x 2048 matmul in TensorFlow, timed by every rank right after its steps,
  with the same threads and neighbours (GFLOP/s, summed over the ranks).

Scaling efficiency = showers/s of 2 ranks / (2 x showers/s of 1 rank x 1 thread), the paper's
definition (per-worker batch fixed, each worker with the same resources); it needs an otherwise
idle machine. It factors into the node's share, ``contention`` = independent pair / (2 x one
alone), and what data parallelism itself costs, ``parallel efficiency`` = 2 ranks / independent
pair (all-reduce, Horovod's coordination, and the ranks waiting for the slower one at every
all-reduce). Ratios are taken within each interleaved repeat, then the median. The CPU
efficiency = CPU seconds per shower of 1 rank x 1 thread / those of 2 ranks (all their threads,
MPI and Horovod included) is blind to other users of the machine and still catches what data
parallelism costs in work (all-reduce, busy polling). Achieved GFLOP/s use
``gan3d.gan.model.step_flops`` (needed arithmetic; frozen-D weight gradients not counted). The
machine may be shared: each number is the median of ``--steps`` timed steps after ``--warmup``,
then the median over ``--repeats`` launches interleaved across the variants; compare ratios
within one run::

    python bench/bench_training.py                     # writes results/bench/training.json
    python bench/bench_training.py --batch 16 --steps 8 --precisions float32

``--batches 8 16 32 64`` measures the scaling efficiency against the per-rank batch instead: 1
rank x 1 thread, 2 ranks x 1 thread and the independent pair at every batch, all interleaved
within each repeat (batch by batch, configuration by configuration), medians of the per-repeat
ratios; writes ``results/bench/training_batches.json``::

    python bench/bench_training.py --batches 8 16 32 64 --steps 3 --repeats 3

``--against DIR`` measures a change instead, before against after: 1 rank x 2 threads and 2 ranks
x 1 thread, each with this checkout and with the ``gan3d`` package in DIR (a copy of an earlier
commit, ``git archive <commit> src/gan3d | tar -x -C old``), interleaved within each repeat;
speed-up = median of the per-repeat ratios; writes ``results/bench/training_against.json``::

    python bench/bench_training.py --against old/src --batch 32 --steps 3 --repeats 3

``--set KEY=VALUE`` (repeatable) adds a setting to every run, and with ``--against`` to this
checkout's runs only: against this checkout's own package it measures an option against its
default in one run::

    python bench/bench_training.py --against src --set train.cpu_layers=fast --precisions float32
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _output  # bench/_output.py: the result file's options and checks

CONFIGS = ((1, 1), (1, 2), (2, 1), ("pair", 1))  # (ranks, threads per rank); "pair": 2 x (1, 1)


def matmul_peak(dtype: str) -> float:
    """GFLOP/s of a 2048 x 2048 matmul with this process's threads, the best of 5 (the roofline's
    peak)."""
    from gan3d.scaling.roofline import matmul_rate

    return matmul_rate(dtype)


def probe_bf16(opts) -> dict:
    """One short 1-rank run per precision (batch 2), to show why bfloat16 is skipped."""
    small = argparse.Namespace(**{**vars(opts), "batch": 2, "steps": 1, "warmup": 1})
    f32, b16 = (run_config(1, 2, p, small) for p in ("float32", "bfloat16"))
    ratio = b16["seconds_per_step"] / f32["seconds_per_step"]
    return {"why": f"this CPU has no AVX512_BF16/AMX: a bfloat16 step took {ratio:.0f}x as "
                   "long as float32 (batch 2, 1 step; TensorFlow falls back to Eigen)",
            "seconds_per_step": {"float32": f32["seconds_per_step"],
                                 "bfloat16": b16["seconds_per_step"]},
            "matmul_gflop_s": {"float32": f32["peak_gflop_s"], "bfloat16": b16["peak_gflop_s"]}}


def worker(args: dict, out: str) -> None:
    """Runs in every rank: pin, time the step, then the matmul ceiling."""
    from gan3d.config import resolve
    from gan3d.parallel import jobs
    from gan3d.scaling.probes import measure_step_rate

    # A worker is `threads` cores, at every count: mpirun gives a lone rank every core.
    jobs.pin_threads(args["threads"])
    if args.get("core") is not None:  # one of an independent pair: its own core
        jobs.pin_to({args["core"]})
    cfg = resolve("quick", {"train.batch_size": args["batch"], "train.precision": args["precision"],
                            **args.get("overrides", {})})
    result = measure_step_rate(cfg, steps=args["steps"], warmup=args["warmup"],
                               threads=args["threads"])
    # The ceiling under the same conditions (threads, neighbours), measured by every rank at once.
    result["peak_gflop_s"] = matmul_peak(args["precision"])
    result["cores"] = sorted(os.sched_getaffinity(0))
    Path(out, f"rank{result['rank']}.json").write_text(json.dumps(result))


def run_pair(args: dict) -> list[dict]:
    """Two independent 1-rank workers at once, each on its own core (no MPI between them)."""
    from gan3d.parallel import runtime

    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for core in range(2):
            Path(tmp, str(core)).mkdir()
            cmd = [sys.executable, __file__, "--worker", json.dumps({**args, "core": core}),
                   str(Path(tmp, str(core)))]
            procs.append(subprocess.Popen(cmd, env=runtime.mpi_environment(), text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outs = [p.communicate(timeout=1800)[0] for p in procs]
        for p, text in zip(procs, outs):
            if p.returncode != 0:
                raise RuntimeError(f"independent worker failed ({p.returncode}):\n{text[-3000:]}")
        return [json.loads(Path(tmp, str(core), "rank0.json").read_text()) for core in range(2)]


def run_config(ranks: int, threads: int, precision: str, opts) -> dict:
    """Launch one configuration through the package; the ranks' results, merged."""
    from gan3d.parallel.launch import launch

    args = {"batch": opts.batch, "precision": precision, "steps": opts.steps,
            "warmup": opts.warmup, "threads": threads, "overrides": opts.overrides}
    if ranks == "pair":
        per_rank = run_pair(args)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            launch(ranks, [sys.executable, __file__, "--worker", json.dumps(args), tmp],
                               timeout=1800, stream=False)
            per_rank = [json.loads(Path(tmp, f"rank{r}.json").read_text()) for r in range(ranks)]
    if ranks == "pair":  # independent: each at its own pace
        return {"ranks": ranks, "threads": threads, "precision": precision,
                "batch_per_rank": opts.batch,
                "seconds_per_step": statistics.mean(r["seconds_per_step"] for r in per_rank),
                "showers_per_s": sum(r["showers_per_s"] for r in per_rank),
                "gflop_per_s": sum(r["gflop_per_s"] for r in per_rank),
                "cpu_s_per_shower": sum(r["cpu_seconds_per_step"] for r in per_rank) / (2 * opts.batch),
                "peak_gflop_s": sum(r["peak_gflop_s"] for r in per_rank), "per_rank": per_rank}
    slowest = max(r["seconds_per_step"] for r in per_rank)  # ranks wait for each other anyway
    gflop = per_rank[0]["gflop_per_s"] * per_rank[0]["seconds_per_step"]  # per rank and step
    cpu = sum(r["cpu_seconds_per_step"] for r in per_rank)  # all ranks' cores, one step
    return {"ranks": ranks, "threads": threads, "precision": precision, "batch_per_rank": opts.batch,
            "seconds_per_step": slowest, "showers_per_s": ranks * opts.batch / slowest,
            "gflop_per_s": gflop * ranks / slowest, "cpu_s_per_shower": cpu / (ranks * opts.batch),
            "peak_gflop_s": sum(r["peak_gflop_s"] for r in per_rank), "per_rank": per_rank}


def median_runs(repeats: list[dict]) -> dict:
    """One configuration's interleaved repeats: medians of the per-repeat numbers."""
    med = lambda k: statistics.median(r[k] for r in repeats)  # noqa: E731
    keys = ("seconds_per_step", "showers_per_s", "gflop_per_s", "peak_gflop_s", "cpu_s_per_shower")
    return {**{k: repeats[0][k] for k in ("ranks", "threads", "precision", "batch_per_rank")},
            **{k: med(k) for k in keys}, "repeats": repeats}


def run_all(opts) -> list[dict]:
    """Every precision and configuration, ``opts.repeats`` times, interleaved; medians."""
    done = {(p, c): [] for p in opts.precisions for c in CONFIGS}
    for rep in range(opts.repeats):  # interleaved, so that a busy moment hits every variant
        for prec, (ranks, threads) in done:
            what = ("2 independent 1-rank workers" if ranks == "pair"
                    else f"{ranks} rank(s) x {threads} thread(s)")
            print(f"[bench_training] repeat {rep + 1}/{opts.repeats} {prec}: {what} ...", flush=True)
            done[(prec, (ranks, threads))].append(run_config(ranks, threads, prec, opts))
    return [median_runs(reps) for reps in done.values()]


def _ratio(num: dict, den: dict, factor: float = 1.0) -> float:
    """Median over the interleaved repeats of showers/s of ``num`` / (factor x ``den``)."""
    return statistics.median(a["showers_per_s"] / (factor * b["showers_per_s"])
                             for a, b in zip(num["repeats"], den["repeats"]))


def summarise(runs: list[dict]) -> dict:
    """Scaling efficiency, its factors and the share of the matmul ceiling, per precision."""
    out = {}
    for prec in sorted({r["precision"] for r in runs}):
        by = {(r["ranks"], r["threads"]): r for r in runs if r["precision"] == prec}
        one, whole, two, pair = by[(1, 1)], by[(1, 2)], by[(2, 1)], by[("pair", 1)]
        out[prec] = {
            "scaling_efficiency": _ratio(two, one, 2.0),
            "contention": _ratio(pair, one, 2.0),
            "parallel_efficiency": _ratio(two, pair),
            "scaling_efficiency_of_medians": two["showers_per_s"] / (2 * one["showers_per_s"]),
            "two_ranks_vs_one_process": _ratio(two, whole),
            # CPU seconds per shower are blind to other users of the machine but not to the
            # extra work of data parallelism (all-reduce, busy polling, a second process).
            "cpu_efficiency": one["cpu_s_per_shower"] / two["cpu_s_per_shower"],
            "peak_gflop_s_1_thread": one["peak_gflop_s"],
            "peak_gflop_s_machine": max(whole["peak_gflop_s"], two["peak_gflop_s"]),
            "fraction_of_peak": {_key(r): r["gflop_per_s"] / r["peak_gflop_s"] for r in by.values()},
        }
    return out


BATCH_CONFIGS = ((1, 1), (2, 1), ("pair", 1))


def run_batches(opts) -> dict:
    """Scaling efficiency against the per-rank batch (``opts.batches``), one precision each."""
    out = {}
    done = {(p, b, c): [] for p in opts.precisions for b in opts.batches for c in BATCH_CONFIGS}
    for rep in range(opts.repeats):
        for prec, batch, (ranks, threads) in done:
            print(f"[bench_training] repeat {rep + 1}/{opts.repeats} {prec} batch {batch}: "
                  f"{_key({'ranks': ranks, 'threads': threads})} ...", flush=True)
            one = argparse.Namespace(**{**vars(opts), "batch": batch})
            done[(prec, batch, (ranks, threads))].append(run_config(ranks, threads, prec, one))
    for prec in opts.precisions:
        rows = []
        for batch in opts.batches:
            one, two, pair = (median_runs(done[(prec, batch, c)]) for c in BATCH_CONFIGS)
            rows.append({"batch_per_rank": batch,
                         "showers_per_s": {"1x1": one["showers_per_s"],
                                           "2x1": two["showers_per_s"],
                                           "2x(1x1)": pair["showers_per_s"]},
                         "scaling_efficiency": _ratio(two, one, 2.0),
                         "scaling_efficiency_per_repeat": [
                             a["showers_per_s"] / (2 * b["showers_per_s"])
                             for a, b in zip(two["repeats"], one["repeats"])],
                         "contention": _ratio(pair, one, 2.0),
                         "parallel_efficiency": _ratio(two, pair),
                         "fraction_of_peak_2x1": two["gflop_per_s"] / two["peak_gflop_s"],
                         "runs": [one, two, pair]})
        out[prec] = rows
    return out


AGAINST_CONFIGS = ((1, 2), (2, 1))


def run_against(opts) -> list[dict]:
    """This checkout against the package in ``opts.against``, every precision and configuration
    of :data:`AGAINST_CONFIGS`, the two codes interleaved within each repeat."""
    from gan3d.convergence.verify import package_root
    from gan3d.parallel.runtime import pythonpath

    codes = {"this": None, "reference": str(package_root(opts.against))}
    done = {(p, c, k): [] for p in opts.precisions for c in AGAINST_CONFIGS for k in codes}
    for rep in range(opts.repeats):
        for prec, (ranks, threads), code in done:
            print(f"[bench_training] repeat {rep + 1}/{opts.repeats} {prec} "
                  f"{ranks}x{threads} {code} code ...", flush=True)
            mine = opts if code == "this" else argparse.Namespace(**{**vars(opts), "overrides": {}})
            with pythonpath(codes[code]):
                done[(prec, (ranks, threads), code)].append(run_config(ranks, threads, prec, mine))
    rows = []
    for prec in opts.precisions:
        for c in AGAINST_CONFIGS:
            this, ref = (median_runs(done[(prec, c, k)]) for k in codes)
            rows.append({"precision": prec, "config": _key(this), "batch_per_rank": opts.batch,
                         "showers_per_s": {"this": this["showers_per_s"],
                                           "reference": ref["showers_per_s"]},
                         "speedup": _ratio(this, ref),
                         "speedup_per_repeat": [a["showers_per_s"] / b["showers_per_s"] for a, b
                                                in zip(this["repeats"], ref["repeats"])],
                         "runs": [this, ref]})
    return rows


def against_table(rows: list[dict]) -> str:
    lines = [f"{'precision':9s} {'ranks x threads':>15s} {'before sh/s':>11s} {'after sh/s':>10s} "
             f"{'speed-up':>8s} {'(per repeat)':>20s}"]
    for r in rows:
        s = r["showers_per_s"]
        each = " ".join(f"{x:.2f}" for x in r["speedup_per_repeat"])
        lines.append(f"{r['precision']:9s} {r['config']:>15s} {s['reference']:11.2f} "
                     f"{s['this']:10.2f} {r['speedup']:8.2f}x {each:>20s}")
    return "\n".join(lines)


def batches_table(result: dict) -> str:
    lines = [f"{'precision':9s} {'batch':>5s} {'1x1 sh/s':>9s} {'2x1 sh/s':>9s} "
             f"{'pair sh/s':>9s} {'efficiency':>10s} {'(per repeat)':>22s} {'contention':>10s} "
             f"{'parallel':>8s} {'of peak':>7s}"]
    for prec, rows in result.items():
        for r in rows:
            s = r["showers_per_s"]
            each = " ".join(f"{e:.0%}" for e in r["scaling_efficiency_per_repeat"])
            lines.append(f"{prec:9s} {r['batch_per_rank']:5d} {s['1x1']:9.2f} {s['2x1']:9.2f} "
                         f"{s['2x(1x1)']:9.2f} {r['scaling_efficiency']:10.1%} {each:>22s} "
                         f"{r['contention']:10.1%} {r['parallel_efficiency']:8.1%} "
                         f"{r['fraction_of_peak_2x1']:7.1%}")
    return "\n".join(lines)


def _key(run: dict) -> str:
    return "2x(1x1)" if run["ranks"] == "pair" else f"{run['ranks']}x{run['threads']}"


def table(runs: list[dict], summary: dict) -> str:
    lines = [f"{'precision':9s} {'ranks x threads':>15s} {'s/step':>8s} {'showers/s':>10s} "
             f"{'GFLOP/s':>8s} {'of peak':>8s} {'CPU s/shower':>13s}"]
    for r in runs:
        key = _key(r)
        frac = summary[r["precision"]]["fraction_of_peak"][key]
        lines.append(f"{r['precision']:9s} {key:>15s} {r['seconds_per_step']:8.3f} "
                     f"{r['showers_per_s']:10.2f} {r['gflop_per_s']:8.1f} {frac:8.1%} "
                     f"{r['cpu_s_per_shower']:13.3f}")
    for prec, s in summary.items():
        lines.append(f"{prec}: scaling efficiency 2 ranks {s['scaling_efficiency']:.1%} by wall "
                     f"time = node contention {s['contention']:.1%} (two independent workers) x "
                     f"data-parallel efficiency {s['parallel_efficiency']:.1%}; "
                     f"{s['cpu_efficiency']:.1%} by CPU time "
                     f"(2 ranks / one 2-thread process {s['two_ranks_vs_one_process']:.2f}); "
                     f"matmul ceiling {s['peak_gflop_s_1_thread']:.0f} GFLOP/s on 1 thread, "
                     f"{s['peak_gflop_s_machine']:.0f} on the machine")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8, help="per-rank batch (default 8, as quick)")
    p.add_argument("--batches", type=int, nargs="+",
                   help="efficiency against these per-rank batches instead (see above)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="interleaved launches per variant")
    p.add_argument("--precisions", nargs="+", choices=["float32", "bfloat16"],
                   help="default: float32, plus bfloat16 where the CPU has bfloat16 arithmetic")
    p.add_argument("--against", metavar="DIR",
                   help="before/after: this checkout against the gan3d package in DIR")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                   help="a setting of every run (with --against: of this checkout's runs)")
    _output.add_options(p, "results/bench/training.json")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    opts = _output.parse(p, argv)
    if opts.worker:
        from gan3d.parallel.launch import guard

        guard(worker, json.loads(opts.worker[0]), opts.worker[1])
        return 0
    from gan3d import records
    from gan3d.config import parse_overrides, resolve
    from gan3d.exceptions import ConfigError
    from gan3d.gan.model import step_flops
    from gan3d.io import provenance, resolve_path
    from gan3d.parallel.runtime import cpu_has_bf16

    records.check_writable(resolve_path(opts.output), opts.allow_dirty)  # its folder: all 3
    try:  # a wrong key or value: a named error before any launch
        opts.overrides = parse_overrides(opts.sets)
        resolve("quick", opts.overrides)
    except ConfigError as exc:
        p.error(str(exc))
    bf16 = cpu_has_bf16()
    notes = {}
    if opts.precisions is None:
        opts.precisions = ["float32", "bfloat16"] if bf16 else ["float32"]
        if not bf16:
            notes["bfloat16"] = probe_bf16(opts)
            print(f"[bench_training] bfloat16 skipped: {notes['bfloat16']['why']}", flush=True)

    def save(name: str, benchmark: str, settings: dict, **body) -> int:
        path = resolve_path(opts.output.replace("training.json", name))
        out = records.write(path, records.record(
            "training", {"benchmark": benchmark, **body,
                         "settings": {**settings, "steps": opts.steps, "warmup": opts.warmup,
                                      "repeats": opts.repeats, "overrides": opts.overrides},
                         "cpu_has_bf16": bf16, "notes": notes}, provenance=provenance()),
            allow_dirty=opts.allow_dirty)
        print(f"[bench_training] wrote {out}")
        return 0

    if opts.against:
        rows = run_against(opts)
        print(against_table(rows))
        return save("training_against.json", "training_against", {"batch_per_rank": opts.batch},
                    against=Path(opts.against).name, rows=rows)
    if opts.batches:
        result = run_batches(opts)
        print(batches_table(result))
        return save("training_batches.json", "training_batches", {"batches": opts.batches},
                    step_gflop_per_shower=step_flops() / 1e9, precisions=result)
    runs = run_all(opts)
    summary = summarise(runs)
    print(table(runs, summary))
    return save("training.json", "training", {"batch_per_rank": opts.batch},
                step_gflop_per_shower=step_flops() / 1e9, runs=runs, summary=summary)


if __name__ == "__main__":
    sys.exit(main())
