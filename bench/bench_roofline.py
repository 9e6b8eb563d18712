"""Roofline benchmark: every layer's passes of one worker's 3DGAN step against this machine's
measured ceilings, and the step's physical limit.

One rank with every core (or ``--threads``), launched through the package
(:func:`gan3d.scaling.experiments.layer_profile`): each pass of each layer is timed on its own
(compiled, repeats interleaved, median), the whole step too; the ceilings are a matmul in
TensorFlow (GFLOP/s) and a preallocated buffer scaled by all threads (GB/s). The limit of a pass
is max(FLOPs / peak, bytes / bandwidth) (:mod:`gan3d.scaling.roofline` has the counting
conventions), the step's their sum. float32 always; bfloat16 where the CPU has bfloat16
arithmetic (elsewhere a note says why not)::

    python bench/bench_roofline.py                   # batch 32 -> results/bench/roofline.json
    python bench/bench_roofline.py --batch 8 --repeats 5 --top 15
    python bench/bench_roofline.py --precisions float32 --set train.cpu_layers=fast
"""

from __future__ import annotations

import argparse
import sys

import _output  # bench/_output.py: the result file's options and checks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32, help="per-worker batch (default 32)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved timings of every pass")
    p.add_argument("--threads", type=int, help="intra-op threads (default: every core)")
    p.add_argument("--precisions", nargs="+", choices=["float32", "bfloat16"],
                   help="default: float32, plus bfloat16 where the CPU has bfloat16 arithmetic")
    p.add_argument("--top", type=int, default=12, help="layers in the printed table")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                   help="a setting of the profiled configuration (e.g. train.cpu_layers=fast)")
    _output.add_options(p, "results/bench/roofline.json")
    opts = _output.parse(p, argv)

    from gan3d import config, records
    from gan3d.parallel import runtime
    from gan3d.exceptions import ConfigError
    from gan3d.io import provenance, resolve_path
    from gan3d.scaling import experiments, roofline

    try:  # a wrong key or value: a named error before anything runs
        overrides = config.parse_overrides(opts.sets)
        config.resolve("quick", overrides)
    except ConfigError as exc:
        p.error(str(exc))

    bf16 = runtime.cpu_has_bf16()
    notes = {}
    if opts.precisions is None:
        opts.precisions = ["float32", "bfloat16"] if bf16 else ["float32"]
        if not bf16:
            notes["bfloat16"] = ("skipped: this CPU has no AVX512_BF16 or AMX, so TensorFlow "
                                 "runs bfloat16 on slow fallback kernels (~28x float32); "
                                 "its roofline would measure the fallback, not the machine")
            print(f"[bench_roofline] bfloat16 {notes['bfloat16']}", flush=True)
    out = resolve_path(opts.output)
    records.check_writable(out, opts.allow_dirty)  # before the work
    profiles = {}
    for prec in opts.precisions:
        cfg = config.resolve("quick", {"train.batch_size": opts.batch, "train.precision": prec,
                                       **overrides})
        print(f"[bench_roofline] {prec}, batch {opts.batch} ...", flush=True)
        profiles[prec] = experiments.layer_profile(cfg, threads=opts.threads,
                                                   repeats=opts.repeats)
        print(roofline.profile_table(profiles[prec], top=opts.top), flush=True)
    path = records.write(out, records.record("roofline", {
        "benchmark": "roofline", "cpu_has_bf16": bf16, "notes": notes, "settings": vars(opts),
        "profiles": profiles}, provenance=provenance()), allow_dirty=opts.allow_dirty)
    print(f"[bench_roofline] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
