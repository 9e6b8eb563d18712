"""Inference benchmark: how many showers per second the 3DGAN generator makes, against its limit.

Measures, in one run so that the ratios share the machine's state:

* GAN inference (``predict_on_batch``, compiled) at several batch sizes in float32 and in
  bfloat16 (Keras ``mixed_bfloat16``, where the CPU has it), through the generator's own layers
  and through the folded network that ``gan3d simulate`` runs (:mod:`gan3d.gan.inference`),
  medians of interleaved repeats after a warm-up call;
* the synthetic generator (``gan3d.data.showers.generate``, NumPy) on the same machine;
* the ceiling: a 2048 x 2048 matrix product in float32 and bfloat16 with the same threads, so
  that each GAN speed is also given as achieved GFLOP/s and as a fraction of that ceiling
  (the generator's forward FLOPs are counted exactly by ``gan3d.gan.model.forward_flops``);
* Geant4 only as an estimate from a published ratio
  (see ``gan3d.validation.speed.PUBLISHED_SPEED``).

Writes ``results/bench/inference.json``, which notebook 04 reads::

    python bench/bench_inference.py                      # all cores, batches 1 8 32
    python bench/bench_inference.py --threads 1 --batch-sizes 1 32 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import _output  # bench/_output.py: the result file's options and checks

from gan3d import records
from gan3d.parallel import runtime
from gan3d.io import resolve_path


def matmul_ceiling(dtype: str, n: int = 2048, repeats: int = 5) -> float:
    """Median GFLOP/s of an n x n matrix product in ``dtype`` (the CPU's practical peak)."""
    import tensorflow as tf

    a = tf.random.normal((n, n), dtype=tf.float32)
    a = tf.cast(a, dtype)
    step = tf.function(lambda x: tf.reduce_sum(tf.linalg.matmul(x, x)))
    step(a).numpy()  # trace and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step(a).numpy()
        times.append(time.perf_counter() - t0)
    return 2 * n ** 3 / statistics.median(times) / 1e9


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--precisions", nargs="+",
                   help="default: float32, and bfloat16 where the CPU has bfloat16 arithmetic")
    p.add_argument("--min-showers", type=int, default=64, help="showers per timed repeat ...")
    p.add_argument("--max-seconds", type=float, default=2.0, help="... or seconds, if sooner")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="TF intra-op threads (default: cores)")
    _output.add_options(p, "results/bench/inference.json", "--out")
    args = _output.parse(p, argv)
    records.check_writable(resolve_path(args.output), args.allow_dirty)  # before the work

    runtime.apply_process_defaults()
    threads = runtime.configure_tensorflow_threads(args.threads)  # before any TF op runs
    from gan3d.gan import model
    from gan3d.validation.speed import inference_speed

    from gan3d.gan.inference import folded_flops

    generator = model.build_generator()
    flops = {"GAN": model.forward_flops(generator), "GAN, folded": folded_flops(generator)}
    speed = inference_speed(generator, args.batch_sizes, args.precisions, args.min_showers,
                            args.max_seconds, args.repeats, progress=True)
    precisions = sorted({r["precision"] for r in speed["rows"] if r["source"] in flops})
    ceilings = {p: matmul_ceiling(p) for p in precisions}
    for row in speed["rows"]:
        if row["source"] in flops:  # FLOPs each network executes
            row["gflops"] = row["showers_per_s"] * flops[row["source"]] / 1e9
            row["fraction_of_ceiling"] = row["gflops"] / ceilings[row["precision"]]
    own = {(r["precision"], r["batch_size"]): r["showers_per_s"] for r in speed["rows"]
           if r["source"] == "GAN"}
    ratios = {}
    for r in speed["rows"]:
        key = (r["precision"], r["batch_size"])
        if r["source"] == "GAN, folded":
            ratios[f"folded/own {r['precision']} b={r['batch_size']}"] = r["showers_per_s"] / own[key]
        elif r["source"] == "GAN" and r["precision"] != "float32" and ("float32", key[1]) in own:
            ratios[f"{r['precision']}/float32 b={r['batch_size']}"] = \
                r["showers_per_s"] / own[("float32", key[1])]
    speed.update({"generator_forward_flops": flops["GAN"],
                  "folded_forward_flops": flops["GAN, folded"], "matmul_gflops": ceilings,
                  "ratios": ratios, "threads": {"intra_op": threads[0], "inter_op": threads[1]},
                  "settings": vars(args)})
    _print(speed)
    records.write(resolve_path(args.output), records.record("inference", speed),
                  allow_dirty=args.allow_dirty)
    print(f"wrote {resolve_path(args.output)}")
    return speed


def _print(speed: dict) -> None:
    print(f"generator forward pass: {speed['generator_forward_flops'] / 1e9:.3f} GFLOP per shower "
          f"({speed['folded_forward_flops'] / 1e9:.3f} folded); "
          f"threads {speed['threads']}; matmul ceiling (GFLOP/s): "
          + ", ".join(f"{k} {v:.0f}" for k, v in speed["matmul_gflops"].items()))
    print(f"{'source':<22} {'precision':<9} {'batch':>5} {'showers/s':>10} {'GFLOP/s':>8} {'of ceiling':>10}")
    for r in speed["rows"]:
        g = f"{r['gflops']:8.1f}" if "gflops" in r else f"{'-':>8}"
        f = f"{100 * r['fraction_of_ceiling']:9.0f}%" if "fraction_of_ceiling" in r else f"{'-':>10}"
        print(f"{r['source']:<22} {r['precision']:<9} {r['batch_size']:>5} {r['showers_per_s']:>10.2f} {g} {f}")
    for p in speed["published"]:
        if p.get("showers_per_s"):
            print(f"{p['label']:<42} {p['showers_per_s']:>10.2g}  (float32 GAN / "
                  f"{p['gan_float32_over_geant4']:.3g}; {p['source'][:60]}...)")
    for k, v in speed["ratios"].items():
        print(f"ratio {k}: {v:.2f}")


if __name__ == "__main__":
    main()
