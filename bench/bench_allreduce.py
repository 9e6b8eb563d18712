"""All-reduce benchmark: time and bandwidth of Horovod's and MPI's all-reduce over message sizes.

Runs ``workers`` MPI ranks through gan3d's launcher (the package's MPI settings), times an
all-reduce (sum) of float32 messages from 1 KiB to 64 MiB, reports medians, the bus bandwidth by
the ring formula 2(p-1)/p n / t, the fitted latency and bandwidth, and where the 3DGAN's gradient
messages (G about 3.5 MB, D about 0.29 MB per all-reduce) fall::

    python bench/bench_allreduce.py                    # 2 ranks, results/bench/allreduce.json
    python bench/bench_allreduce.py --workers 4 --repeats 50 --output other.json

It also times the step's computation (no all-reduce) on one rank alone and on all ranks at once:
cores of one machine share caches, memory bandwidth and power, which the performance model needs.

The physical limit on one machine is a copy through shared memory: each rank reads and writes
the message about twice, so the bus bandwidth stays below one core's copy bandwidth, which the
benchmark measures too (a 64 MiB NumPy copy) and prints as the ceiling.
"""

from __future__ import annotations

import argparse

import _output  # bench/_output.py: the result file's options and checks

from gan3d import records
from gan3d.io import resolve_path
from gan3d.scaling.experiments import BENCH_SIZES, allreduce_benchmark


def table(res: dict) -> str:
    """The benchmark as a text table: size, median times, bus bandwidth."""
    rows = [f"{'size':>10} {'horovod ms':>11} {'mpi ms':>9} {'hvd GB/s':>9} {'mpi GB/s':>9}"]
    for i, n in enumerate(res["sizes_bytes"]):
        rows.append(f"{n / 1024:>8.0f} K {1e3 * res['time_s']['horovod'][i]:>11.3f} "
                    f"{1e3 * res['time_s']['mpi'][i]:>9.3f} "
                    f"{res['bus_bandwidth_Bps']['horovod'][i] / 1e9:>9.3f} "
                    f"{res['bus_bandwidth_Bps']['mpi'][i] / 1e9:>9.3f}")
    for k, f in res["fit"].items():
        rows.append(f"fit {k:>8}: latency {1e6 * f['latency_s']:8.1f} us/hop, bandwidth "
                    f"{f['bandwidth_Bps'] / 1e9:6.2f} GB/s (max residual {100 * f['max_rel_residual']:.0f} %)")
    rows.append(f"Horovod overhead per call: {1e3 * res['horovod_overhead_s']:.2f} ms; gradients: "
                + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in res["gradient_bytes"].items()))
    c = res["compute"]
    rows.append(f"3DGAN step computation per worker: {c['alone_flops'] / 1e9:.1f} GFLOP/s alone, "
                f"{c['together_flops'] / 1e9:.1f} GFLOP/s with all {res['workers']} ranks busy "
                f"(shared factor {c['shared_factor']:.2f})")
    best = max(res["bus_bandwidth_Bps"]["mpi"])
    rows.append(f"ceiling: one core copies {res['memcpy_Bps'] / 1e9:.2f} GB/s; the best MPI bus "
                f"bandwidth is {100 * best / res['memcpy_Bps']:.0f} % of it")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per size (median)")
    parser.add_argument("--max-kib", type=int, default=64 * 1024, help="largest message, KiB")
    _output.add_options(parser, "results/bench/allreduce.json")
    args = _output.parse(parser)
    records.check_writable(resolve_path(args.output), args.allow_dirty)  # written by the study
    sizes = [n for n in BENCH_SIZES if n <= args.max_kib * 1024]
    res = allreduce_benchmark(workers=args.workers, sizes=sizes, repeats=args.repeats,
                              output=args.output)
    print(table(res))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
