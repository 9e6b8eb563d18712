"""All-reduce algorithms benchmark: Open MPI's ring, recursive doubling, Rabenseifner, binomial
reduce + broadcast, linear, its own choice (tuned) and its hierarchical collectives (han), over
emulated multi-node networks, against their textbook costs; then Horovod over MPI against Horovod
over Gloo on the 3DGAN's gradients.

Needs root (network namespaces; see ``gan3d.parallel.netns``); elsewhere it says why and exits
0. Every rank (or, for the hierarchical case, every pair of ranks) sits in its own namespace
with its own MPI daemon, so that Open MPI talks TCP over the shaped links::

    python bench/bench_algorithms.py                     # -> results/bench/algorithms.json
    python bench/bench_algorithms.py --profiles 1gbe --ranks 4 --algorithms ring rabenseifner

On a 2-core machine 4 ranks share the cores, and the kernel's packet processing (veth, bridge,
tbf) shares them too: at 4 ranks the measured times include that contention (the JSON records
the core count). Stop other work on the machine while it measures.
"""

from __future__ import annotations

import argparse
import os
import sys

import _output  # bench/_output.py: the result file's options and checks


def main(argv=None) -> int:
    from gan3d.parallel import netns
    from gan3d.scaling import algorithms

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profiles", nargs="+", default=["native", "10gbe", "1gbe"],
                   choices=list(netns.PROFILES))
    p.add_argument("--ranks", nargs="+", type=int, default=[2, 4])
    p.add_argument("--algorithms", nargs="+", default=list(algorithms.ALGORITHMS),
                   choices=list(algorithms.ALGORITHMS))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--hierarchical", nargs="*", default=["10gbe", "1gbe"],
                   help="profiles on which to run 2 nodes x 2 ranks (han against flat)")
    p.add_argument("--horovod", nargs="*", default=["native", "10gbe", "1gbe"],
                   help="profiles on which to time Horovod over MPI against Gloo (none: skip)")
    p.add_argument("--max-mib-1gbe", type=int, default=16,
                   help="largest message on 1 GbE (MiB): 64 MiB takes seconds per call there")
    _output.add_options(p, "results/bench/algorithms.json")
    opts = _output.parse(p, argv)
    reason = netns.unavailable()
    if reason:
        print(f"[bench_algorithms] skipped: {reason}")
        return 0

    from gan3d import records
    from gan3d.io import provenance, resolve_path

    records.check_writable(resolve_path(opts.output), opts.allow_dirty)  # before the work
    result = algorithms.study(opts.profiles, opts.ranks, opts.algorithms, repeats=opts.repeats,
                              hierarchical=opts.hierarchical,
                              max_bytes={"1gbe": opts.max_mib_1gbe * 2**20})
    if opts.horovod:
        result["horovod"] = algorithms.horovod_transports(opts.horovod)
    result.update(settings=vars(opts), cores=len(os.sched_getaffinity(0)),
                  profiles={k: vars(v) for k, v in netns.PROFILES.items()},
                  provenance=provenance())
    print(algorithms.algorithm_table(result, [2**12, 2**16, 2**20, 2**22, 2**24]))
    for r in result.get("horovod", {}).get("rows", []):
        print(f"[bench_algorithms] Horovod {r['profile']} {r['net']} ({r['bytes'] / 1e6:.2f} MB, "
              f"{r['tensors']} tensors): Gloo {r['gloo_s'] * 1e3:.2f} ms, MPI {r['mpi_s'] * 1e3:.2f} "
              f"ms (MPI / Gloo {r['mpi_s'] / r['gloo_s']:.2f})")
    print(f"[bench_algorithms] leftovers: {netns.leftovers() or 'none'}")
    path = records.write(resolve_path(opts.output), records.record("algorithms", result),
                         allow_dirty=opts.allow_dirty)
    print(f"[bench_algorithms] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
