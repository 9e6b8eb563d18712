"""bfloat16 against float32: do the two precisions train alike? Seeds x precisions of the same
1-worker training, their losses and physics monitors compared.

Every run is the convergence study's 1-worker configuration (``gan3d.convergence.plan.run_config``:
synthetic data, per-worker batch ``--batch``, the physics monitors at every one of ``--points``
evaluations) trained for ``--steps`` steps, once with ``train.precision: float32`` and once with
``bfloat16`` (mixed: losses, BatchNorm statistics, the ECAL-sum head and the optimiser state stay
float32) per seed; seeds and precisions interleaved, 1 worker x all cores. The comparison, fixed
before the runs:

* per evaluation and quantity (the losses and the study's monitors): is every bfloat16 run inside
  the float32 seeds' spread [min, max]? (``inside``: how many of the bfloat16 values are);
* on the final values (mean of the last two evaluations), the study's two one-sided tests with its
  margins (:data:`gan3d.convergence.analysis.MARGINS`): equivalent / different / inconclusive;
* the step rate of each precision (median over the runs of showers / training seconds).

bfloat16 is only worth comparing where the CPU computes it (AVX512_BF16 or AMX): elsewhere it is
emulated, ~28x slower, and the script says so and stops unless ``--force``::

    python bench/bench_precision.py                        # 3 seeds x 2 precisions x 200 steps
    python bench/bench_precision.py --seeds 2 --steps 16 --points 2 --output results/bench/p.json

Writes ``studies/precision.json`` (atomically, after every run: a stopped run resumes).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from gan3d import console, records  # noqa: E402
from gan3d.parallel import runtime  # noqa: E402
from gan3d.config import resolve, to_dict  # noqa: E402
from gan3d.convergence import analysis  # noqa: E402
from gan3d.convergence.analysis import FINAL_POINTS, final_values  # noqa: E402
from gan3d.convergence.plan import Run, run_config, summarise_history  # noqa: E402
from gan3d.io import ensure_dir, provenance, write_json  # noqa: E402
from gan3d.parallel import jobs  # noqa: E402
from gan3d.parallel.launch import launch  # noqa: E402

log = console.get_logger("gan3d.bench_precision")
PRECISIONS = ("float32", "bfloat16")
QUANTITIES = ("d_loss", "g_loss", "mon_targets_met", "sampling_fraction", "ecal_sum_spread",
              "max_layer", "transverse_width", "profile_distance")


def configs(opts) -> dict[str, dict]:
    """Every run's training configuration, by run id, in the order they are run."""
    base = resolve("quick", {"study.showers": opts.steps * opts.batch, "study.points": opts.points,
                             "study.batch_size": opts.batch, "study.seeds": opts.seeds,
                             "study.monitor_showers": opts.monitor_showers,
                             "study.data_showers": opts.data_showers,
                             "study.workdir": str(opts.workdir)})
    out = {}
    for seed in range(opts.seeds):
        for prec in PRECISIONS:
            cfg = run_config(base, Run("eq", 1, "none", 1, seed))
            rid = f"{prec}-s{seed}"
            out[rid] = to_dict(cfg.replace(**{"train.precision": prec,
                                               "train.output": str(opts.workdir / rid)}))
    return out


def harvest(folder: Path, points: int) -> list[dict] | None:
    from gan3d.gan.history import read_history

    hist = folder / "history.jsonl"
    if not hist.is_file() or not (folder / "generator.keras").is_file():
        return None
    rows = read_history(hist)
    return rows if len(rows) >= points else None


def compare(runs: dict[str, dict]) -> dict:
    """The comparison described above, from the runs' summarised rows."""
    by = {p: [r for r in runs.values() if r["precision"] == p] for p in PRECISIONS}
    ref, cand = by["float32"], by["bfloat16"]
    out = {"inside": {}, "tost": {}, "rate": {}}
    for name in QUANTITIES:
        inside, total = 0, 0
        points = min((len(r["rows"]) for r in ref + cand), default=0)
        for i in range(points):
            lo_hi = [r["rows"][i].get(name) for r in ref]
            lo_hi = [v for v in lo_hi if v is not None and np.isfinite(v)]
            if len(lo_hi) < 2:
                continue
            for r in cand:
                v = r["rows"][i].get(name)
                if v is None or not np.isfinite(v):
                    continue
                total += 1
                inside += int(min(lo_hi) <= v <= max(lo_hi))
        # a new draw from the same distribution falls inside the min-max of n others with
        # probability (n - 1) / (n + 1): 50 % for 3 float32 seeds, the rate "alike" means here
        n = len(ref)
        out["inside"][name] = {"inside": inside, "of": total,
                               "expected_if_alike": (n - 1) / (n + 1) if n else None}
    # the convergence study's comparison, with the precision as the configuration
    tagged = {"runs": {rid: {**r, "config_id": r["precision"]} for rid, r in runs.items()}}
    for name, res in analysis.compare(tagged, "bfloat16", "float32").items():
        out["tost"][name] = dict(res, bf16=[final_values(r, name) for r in cand],
                                 fp32=[final_values(r, name) for r in ref])
    for p, rs in by.items():
        rates = [r["showers"] / r["train_s"] for r in rs if r["train_s"]]
        out["rate"][p] = statistics.median(rates) if rates else None
    return out


def table(result: dict) -> str:
    c = result["comparison"]
    lines = ["| quantity | float32 final (seeds) | bfloat16 final (seeds) | bfloat16 values inside "
             "the float32 spread (alike: ~(n-1)/(n+1) of them) | TOST 90 % CI of bf16 - fp32 (margin) | verdict |",
             "|---|---|---|---|---|---|"]
    for name in QUANTITIES:
        t, ins = c["tost"].get(name), c["inside"][name]
        if t is None:
            continue
        f = lambda xs: ", ".join(f"{x:.3g}" for x in xs)  # noqa: E731
        lines.append(f"| {name} | {f(t['fp32'])} | {f(t['bf16'])} | {ins['inside']} of {ins['of']} "
                     f"| [{t['low']:.3g}, {t['high']:.3g}] (+-{t['margin']:.3g}) | {t['verdict']} |")
    r = c["rate"]
    if r.get("float32") and r.get("bfloat16"):
        lines.append(f"\nstep rate (median of the runs, showers/s): float32 {r['float32']:.2f}, "
                     f"bfloat16 {r['bfloat16']:.2f} ({r['bfloat16'] / r['float32']:.2f}x)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=200, help="training steps per run")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--points", type=int, default=5, help="evaluations (monitors) per run")
    p.add_argument("--monitor-showers", type=int, default=64)
    p.add_argument("--data-showers", type=int, default=2000)
    p.add_argument("--workdir", type=Path, default=ROOT / "results" / "precision")
    p.add_argument("--output", type=Path, default=ROOT / "studies" / "precision.json")
    p.add_argument("--force", action="store_true", help="run even where bfloat16 is emulated")
    p.add_argument("--allow-dirty", action="store_true",
                   help="write into studies/ from a tree with uncommitted changes "
                        "(the file is then marked clean: false)")
    opts = p.parse_args(argv)
    if opts.steps % opts.points:
        p.error(f"--steps {opts.steps} must be a multiple of --points {opts.points}")
    if not runtime.cpu_has_bf16() and not opts.force:
        print("this CPU has neither AVX512_BF16 nor AMX: bfloat16 would be emulated (~28x slower) "
              "and compare nothing useful; run it on a CPU that has them, or pass --force",
              file=sys.stderr)
        return 2
    records.check_writable(opts.output, opts.allow_dirty)  # before hours of runs
    ensure_dir(opts.workdir)
    result = records.read(opts.output, "precision") if opts.output.is_file() else {}
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(opts).items()
                if k not in ("workdir", "output", "force", "seeds", "allow_dirty")}
    stored = {k: v for k, v in result.get("settings", {}).items() if k != "seeds"}
    if stored != settings:  # other runs: start again (more seeds extend them)
        result = {"runs": {}}
    result["settings"] = settings
    result["seeds"] = opts.seeds
    cores = runtime.cpu_count()
    for rid, cfg in configs(opts).items():
        if rid in result["runs"]:
            continue
        folder = Path(cfg["train"]["output"])
        job = {"task": "trains", "threads": cores, "out": str(opts.workdir / f"{rid}.out.json"),
               "configs": [cfg]}
        write_json(opts.workdir / f"{rid}.job.json", job)
        log.info("run %s: 1 worker x %d threads, %d steps of %d", rid, cores, opts.steps, opts.batch)
        t0 = time.perf_counter()
        launch(1, jobs.command(opts.workdir / f"{rid}.job.json"), timeout=3600, stream=False)
        rows = harvest(folder, opts.points)
        if rows is None:
            raise SystemExit(f"run {rid} ended without its history and generator in {folder}")
        result["runs"][rid] = {
            "precision": cfg["train"]["precision"], "seed": int(rid.rsplit("s", 1)[1]),
            "steps": opts.steps, "showers": rows[-1]["showers_seen"],
            "train_s": float(sum(r.get("time_train_s") or 0 for r in rows)),
            "launch_s": time.perf_counter() - t0, "rows": summarise_history(rows)}
        result["comparison"] = compare(result["runs"])
        result["provenance"] = provenance({"cpu_bf16": runtime.cpu_has_bf16(),
                                           "final_points": FINAL_POINTS})
        records.write(opts.output, records.record("precision", result),
                      allow_dirty=opts.allow_dirty)
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
