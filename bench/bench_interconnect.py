"""Interconnect benchmark: Horovod all-reduce over emulated multi-node networks vs the ring model.

The measurements are :mod:`gan3d.scaling.interconnect`'s.

Needs root (network namespaces, veth, tc; see ``gan3d.parallel.netns``); elsewhere it says why
and exits 0. Every rank sits in its own network namespace and host name, the links are shaped
with tbf to each profile (netem, where the kernel has it, would add delay; without it the native
latency is measured and kept), and the ranks run Horovod over Gloo/TCP. For each profile and
rank count: the link's measured bandwidth and latency, the all-reduce time per message size
(median of repeats), and the ring model calibrated on the measured link, with its error; then
the 3DGAN's gradients of one update with Horovod's tensor fusion on and off; then the full 3DGAN
step on 2 computing ranks over each profile (``gan3d scale --network``) against the model::

    python bench/bench_interconnect.py                     # -> results/bench/network.json
    python bench/bench_interconnect.py --profiles native 1gbe --ranks 2 --repeats 5
    python bench/bench_interconnect.py --only-steps --output studies/network.json   # add the steps

More ranks than cores share the CPUs (their all-reduce also waits for the CPU): the JSON records
the core count. Stop other work on the machine while it measures.
"""

from __future__ import annotations

import argparse
import os
import sys

import _output  # bench/_output.py: the result file's options and checks


def main(argv=None) -> int:
    from gan3d.parallel import netns

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profiles", nargs="+", default=["native", "edr", "10gbe", "1gbe"],
                   choices=list(netns.PROFILES))
    p.add_argument("--ranks", nargs="+", type=int, default=[2, 4])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--slow", default="1gbe", help="profile of the one slow link of the "
                   "asymmetric ring (its other links: the first shaped profile); 'none' to skip")
    p.add_argument("--fusion", nargs="*", default=["native", "10gbe", "1gbe"],
                   help="profiles on which to time the 3DGAN's gradients with Horovod's tensor "
                   "fusion on and off (none: skip)")
    p.add_argument("--steps", nargs="*", default=["native", "10gbe", "1gbe"],
                   help="profiles over which to time the full 3DGAN step on 2 computing ranks "
                        "(the first is the model's base; none: skip)")
    p.add_argument("--batch", type=int, default=8, help="per-rank batch of the step timing")
    p.add_argument("--only-steps", action="store_true",
                   help="keep the all-reduce results of the existing --output file, add the steps")
    _output.add_options(p, "results/bench/network.json")
    opts = _output.parse(p, argv)
    reason = netns.unavailable()
    if reason:
        print(f"[bench_interconnect] skipped: {reason}")
        return 0

    from gan3d import config, records
    from gan3d.io import provenance, resolve_path
    from gan3d.scaling import interconnect, multinode

    out_path = resolve_path(opts.output)
    records.check_writable(out_path, opts.allow_dirty)  # before the work
    if opts.only_steps:
        result = records.read(out_path, "interconnect")  # an old file (schema 0) too
    else:
        result = interconnect.study(opts.profiles, opts.ranks, repeats=opts.repeats,
                               slow=None if opts.slow == "none" else opts.slow)
        result.update(settings=vars(opts), cores=len(os.sched_getaffinity(0)),
                      profiles={k: vars(v) for k, v in netns.PROFILES.items()},
                      provenance=provenance())
        if opts.fusion:
            result["fusion"] = interconnect.fusion_study(opts.fusion, ranks=2, repeats=opts.repeats,
                                                    calibration=result["calibration"])
    if opts.steps:
        cfg = config.resolve("quick", {"train.batch_size": opts.batch, "scale.steps": 3,
                                       "scale.warmup_steps": 1, "scale.repeats": 1})
        result["steps"] = multinode.step_study(cfg, opts.steps, calibration=result["calibration"])
        result["steps"]["provenance"] = provenance()
        print(multinode.step_table(result["steps"]))
    print(interconnect.model_table(result))
    if "fusion" in result:
        print(interconnect.fusion_table(result["fusion"]))
    for r in result["rows"]:
        link, shaped = r["links"][-1], r["shaped_Bps"][-1]
        if shaped:
            print(f"[bench_interconnect] {r['profile']} x {r['ranks']}: link {link['bandwidth_Bps'] / 1e9:.3g} "
                  f"GB/s against {shaped / 1e9:.3g} shaped ({link['bandwidth_Bps'] / shaped - 1:+.1%})")
    print(f"[bench_interconnect] netem (added delay) available: {result['netem']}; leftovers: "
          f"{netns.leftovers() or 'none'}")
    path = records.write(out_path, records.record("interconnect", result),
                         allow_dirty=opts.allow_dirty)
    print(f"[bench_interconnect] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
