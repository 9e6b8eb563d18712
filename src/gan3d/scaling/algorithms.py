"""All-reduce algorithms over emulated networks: which one the 3DGAN's gradients want, and when.

The paper's future work (Sect. 7) asks whether other all-reduce methods would shorten the
overall time. Open MPI implements the textbook algorithms in its ``tuned`` collectives and lets
one be forced (``coll_tuned_allreduce_algorithm``); its ``han`` collectives (the default of
Open MPI 5) are hierarchical: a reduction inside each node, then between nodes. This module

1. times ``MPI_Allreduce`` (mpi4py, float32 sum) per algorithm and message size over an
   emulated network (:meth:`gan3d.parallel.netns.Network.mpirun`: one MPI daemon per namespace,
   TCP between them), one rank per namespace, and with two ranks per namespace for the
   hierarchical case;
2. predicts each time with the algorithm's textbook cost (Thakur, Rabenseifner and Gropp, "Optimization
   of collective communication operations in MPICH", IJHPCA 2005) from the link's *measured*
   latency ``alpha`` and bandwidth ``1/beta`` and the ranks' measured reduction rate ``1/gamma``
   (no fit to the all-reduce times), and reports the error;
3. projects, with the same costs, which algorithm is fastest for the 3DGAN's gradients at a given
   latency, bandwidth and worker count (:func:`winners`).

The textbook costs (``n`` bytes, ``p`` ranks, ``L = ceil(log2 p)``):

============================  =================================================================
basic linear                  ``2 (p-1) (alpha + n beta) + (p-1) n gamma`` (reduce to rank 0, then
                              send to each, one after another)
reduce + broadcast (binomial) ``2 L (alpha + n beta) + L n gamma``
recursive doubling            ``K (alpha + n beta + n gamma) + F``
ring                          ``2 (p-1) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma``
Rabenseifner                  ``2 K alpha + 2 (q-1)/q n beta + (q-1)/q n gamma + F`` (reduce-scatter
                              by recursive halving, then all-gather by recursive doubling)
============================  =================================================================

``q = 2^K`` is the largest power of two not above ``p``; when ``p`` is not one, the ``p - q``
extra ranks first fold their data into partners and get the result back at the end:
``F = 2 alpha + 2 n beta + n gamma`` (0 when ``p`` is a power of two; whole messages, as MPICH
folds for recursive doubling: an upper bound for implementations that fold halves).

Horovod over MPI against Horovod over Gloo, on the 3DGAN's gradients, is :func:`horovod_transports`.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from typing import Mapping, Sequence

import numpy as np

from .. import console
from ..parallel import netns

__all__ = ["ALGORITHMS", "MODELLED", "cost", "SIZES", "allreduce_times", "study", "winners",
           "algorithm_table", "fastest", "horovod_transports", "horovod_table", "PAPER_LINKS",
           "sections"]

log = console.get_logger(__name__)

# name -> (Open MPI coll/tuned allreduce algorithm number, what it is). "tuned" is the tuned
# component's own choice by message size; "han" is Open MPI 5's default (hierarchical).
ALGORITHMS = {
    "linear": (1, "basic linear"),
    "reduce_bcast": (2, "reduce + broadcast (binomial trees)"),
    "recursive_doubling": (3, "recursive doubling"),
    "ring": (4, "ring"),
    "rabenseifner": (6, "Rabenseifner (reduce-scatter + all-gather)"),
    "tuned": (0, "Open MPI tuned: its own choice per size"),
    "han": (None, "Open MPI han: hierarchical (default of Open MPI 5)"),
}
MODELLED = ("linear", "reduce_bcast", "recursive_doubling", "ring", "rabenseifner")
SIZES = tuple(4 * 4**k for k in range(5, 13))  # 4 KiB .. 64 MiB


def cost(algorithm: str, n: float, p: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Textbook seconds of an all-reduce of ``n`` bytes over ``p`` ranks (module docstring):
    ``alpha`` s per message, ``beta`` s per byte on a link, ``gamma`` s per byte reduced."""
    if p < 2:
        return 0.0
    steps = math.ceil(math.log2(p))
    share = (p - 1) / p
    if algorithm == "linear":
        return 2 * (p - 1) * (alpha + n * beta) + (p - 1) * n * gamma
    if algorithm == "reduce_bcast":
        return 2 * steps * (alpha + n * beta) + steps * n * gamma
    low = 2 ** int(math.log2(p))  # the power of two the doubling algorithms run on
    fold = 0.0 if low == p else (2 * alpha + 2 * n * beta + n * gamma)  # p - low ranks fold in, get out
    if algorithm == "recursive_doubling":
        return int(math.log2(low)) * (alpha + n * beta + n * gamma) + fold
    if algorithm == "ring":
        return 2 * (p - 1) * alpha + 2 * share * n * beta + share * n * gamma
    if algorithm == "rabenseifner":
        k, part = int(math.log2(low)), (low - 1) / low
        return 2 * k * alpha + 2 * part * n * beta + part * n * gamma + fold
    raise ValueError(f"no textbook cost for {algorithm!r}; choose one of {', '.join(MODELLED)}")


def winners(n: float, ranks: Sequence[int], latencies: Sequence[float], bandwidth_Bps: float,
            gamma: float = 0.0, algorithms: Sequence[str] = MODELLED) -> dict:
    """The fastest algorithm by the textbook costs for an all-reduce of ``n`` bytes, per worker
    count and link latency (s) at ``bandwidth_Bps``; with each one's time."""
    grid = []
    for p in ranks:
        row = []
        for lat in latencies:
            t = {a: cost(a, n, p, lat, 1 / bandwidth_Bps, gamma) for a in algorithms}
            best = min(t, key=t.get)
            row.append({"ranks": p, "latency_s": lat, "best": best, "times_s": t})
        grid.append(row)
    return {"bytes": n, "bandwidth_Bps": bandwidth_Bps, "gamma_s_per_byte": gamma, "grid": grid}


# ---------------------------------------------------------------------------------------------
# Measuring (the worker runs in the namespaces, under mpirun)


def _worker(job: dict) -> None:
    """One rank: ``MPI_Allreduce`` (float32 sum) of each size, median of repeats (at least
    ``repeats`` and about ``seconds`` per size); rank 0 also times the reduction itself (numpy
    add of two arrays of 16 MiB) and prints the result line."""
    from ..parallel import distributed as mpi

    size = mpi.mpi_size()  # DISTRIBUTED: starts MPI
    times = {}
    for n in job["sizes"]:
        x = np.ones(max(1, n // 4), np.float32)
        y = np.empty_like(x)
        mpi.mpi_allreduce_sum(x, y)  # DISTRIBUTED: warm-up: connections, buffers
        mpi.mpi_barrier()  # DISTRIBUTED
        t0 = time.perf_counter()
        mpi.mpi_allreduce_sum(x, y)  # DISTRIBUTED
        first = mpi.mpi_max(time.perf_counter() - t0)  # DISTRIBUTED
        reps = int(min(job.get("max_repeats", 200),
                       max(job["repeats"], job.get("seconds", 0.3) / max(first, 1e-7))))
        t = []
        for _ in range(reps):
            mpi.mpi_barrier()  # DISTRIBUTED
            t0 = time.perf_counter()
            mpi.mpi_allreduce_sum(x, y)  # DISTRIBUTED
            t.append(time.perf_counter() - t0)
        times[n] = mpi.mpi_max(statistics.median(t))  # DISTRIBUTED: the slowest rank's
        if not np.all(y[:4] == size):
            raise RuntimeError(f"all-reduce of {n} bytes gave {y[:4]}, not {size}")
    a = np.ones(4 * 2**20, np.float32)
    b, c = np.ones_like(a), np.empty_like(a)
    t = []
    for _ in range(10):
        t0 = time.perf_counter()
        np.add(a, b, out=c)
        t.append(time.perf_counter() - t0)
    if mpi.mpi_rank() == 0:  # DISTRIBUTED
        print("RESULT " + json.dumps({"time_s": {str(k): v for k, v in times.items()},
                                      "gamma_s_per_byte": statistics.median(t) / a.nbytes,
                                      "ranks": size}), flush=True)


def _mca(algorithm: str) -> dict[str, str]:
    number = ALGORITHMS[algorithm][0]
    if number is None:  # han: Open MPI 5's default hierarchical collectives
        return {"coll_han_priority": "100"}
    params = {"coll": "^han"}  # tuned decides the all-reduce
    if number:
        params.update(coll_tuned_use_dynamic_rules="1", coll_tuned_allreduce_algorithm=str(number))
    return params


def allreduce_times(net: "netns.Network", algorithm: str, sizes: Sequence[int] = SIZES, *,
                    per_host: int = 1, repeats: int = 5, seconds: float = 0.3) -> dict:
    """Median seconds of ``MPI_Allreduce`` of each size with ``algorithm`` over ``net``, and
    the ranks' reduction cost per byte."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    job = json.dumps({"sizes": [int(s) for s in sizes], "repeats": repeats, "seconds": seconds})
    out = net.mpirun([sys.executable, "-m", __name__, "worker", job], per_host=per_host,
                     mca=_mca(algorithm), timeout=900)
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"rank 0 printed no result:\n{out[-3000:]}")
    return json.loads(line[-1][7:])


def study(profiles: Sequence[str] = ("native", "10gbe", "1gbe"), ranks: Sequence[int] = (2, 4),
          algorithms: Sequence[str] = tuple(ALGORITHMS), sizes: Sequence[int] = SIZES,
          repeats: int = 5, hierarchical: Sequence[str] = ("10gbe",),
          max_bytes: Mapping[str, int] | None = None) -> dict:
    """Every algorithm over every profile and rank count (one rank per namespace), each link
    measured; with ``hierarchical`` profiles, also 2 namespaces x 2 ranks (a two-node cluster of
    two ranks per node: shared memory inside, the link between) for ``tuned``, ``ring`` and
    ``han``. ``max_bytes`` caps the sizes per profile (slow links: the largest take seconds)."""
    from .interconnect import link_check

    cases = [(prof, p, 1) for prof in profiles for p in ranks]
    cases += [(prof, 2, 2) for prof in hierarchical]
    rows = []
    for prof, hosts, per_host in console.progress(cases, desc="all-reduce algorithms",
                                                  unit="network"):
        cap = (max_bytes or {}).get(prof)
        use = [s for s in sizes if cap is None or s <= cap]
        algs = algorithms if per_host == 1 else [a for a in ("tuned", "ring", "han") if a in algorithms]
        with netns.Network(hosts, prof) as net:
            link = link_check(net)
            for alg in algs:
                if alg == "han" and per_host == 1:
                    continue  # one rank per node: nothing to be hierarchical about
                res = allreduce_times(net, alg, use, per_host=per_host, repeats=repeats)
                row = {"profile": prof, "hosts": hosts, "per_host": per_host,
                       "ranks": hosts * per_host, "algorithm": alg, "link": link, **res}
                if alg in MODELLED:
                    row["model_s"] = {k: cost(alg, int(k), row["ranks"], link["latency_s"],
                                              1 / link["bandwidth_Bps"], res["gamma_s_per_byte"])
                                      for k in res["time_s"]}
                    row["rel_error"] = {k: row["model_s"][k] / t - 1
                                        for k, t in res["time_s"].items()}
                rows.append(row)
                log.info("%s, %d x %d ranks, %s: 1 MiB %.3g ms", prof, hosts, per_host, alg,
                         1e3 * res["time_s"].get(str(2**20), float("nan")))
    return {"sizes": [int(s) for s in sizes], "repeats": repeats, "rows": rows,
            "algorithms": {k: v[1] for k, v in ALGORITHMS.items()}}


def algorithm_table(result: dict, sizes: Sequence[int] | None = None) -> str:
    """Markdown: per network, rank layout and algorithm, measured ms (model ms, error) per size;
    the fastest measured algorithm per size in bold."""
    sizes = [int(s) for s in (sizes or result["sizes"])]
    lines = []
    groups: dict = {}
    for r in result["rows"]:
        groups.setdefault((r["profile"], r["hosts"], r["per_host"]), []).append(r)
    for (prof, hosts, per_host), rows in groups.items():
        best = {s: min((r["time_s"][str(s)], r["algorithm"]) for r in rows
                       if str(s) in r["time_s"])[1] for s in sizes
                if any(str(s) in r["time_s"] for r in rows)}
        for r in rows:
            cells = []
            for s in sizes:
                t = r["time_s"].get(str(s))
                if t is None:
                    cells.append("")
                    continue
                text = f"{t * 1e3:.3g}"
                if "model_s" in r:
                    text += f" ({r['model_s'][str(s)] * 1e3:.3g}, {r['rel_error'][str(s)]:+.0%})"
                cells.append(f"**{text}**" if best.get(s) == r["algorithm"] else text)
            layout = f"{hosts}" if per_host == 1 else f"{hosts} nodes x {per_host}"
            lines.append([prof, layout, r["algorithm"], *cells])
    return console.table(lines, ["network", "ranks", "algorithm", *(_size(s) for s in sizes)])


def fastest(result: dict, nbytes: int) -> list[dict]:
    """Per network and rank layout, the fastest measured algorithm at the measured size nearest
    to ``nbytes`` (on a log scale), its time and how much faster it is than the default choice
    (``han`` where measured, else ``tuned``)."""
    groups: dict = {}
    for r in result["rows"]:
        groups.setdefault((r["profile"], r["hosts"], r["per_host"]), []).append(r)
    out = []
    for (prof, hosts, per_host), rows in groups.items():
        sizes = sorted({int(k) for r in rows for k in r["time_s"]})
        size = min(sizes, key=lambda s: abs(math.log(s / nbytes)))
        times = {r["algorithm"]: r["time_s"][str(size)] for r in rows if str(size) in r["time_s"]}
        best = min(times, key=times.get)
        default = "han" if "han" in times else "tuned"
        out.append({"profile": prof, "hosts": hosts, "per_host": per_host, "bytes": size,
                    "best": best, "best_s": times[best], "default": default,
                    "default_s": times.get(default), "times_s": times})
    return out


def horovod_table(result: dict) -> str:
    """Markdown: Horovod over Gloo against Horovod over MPI, per network and gradient set."""
    rows = [[r["profile"], r["net"], r["tensors"], f"{r['bytes'] / 1e6:.2f}",
             f"{r['gloo_s'] * 1e3:.2f}", f"{r['mpi_s'] * 1e3:.2f}",
             f"{r['mpi_s'] / r['gloo_s']:.2f}"] for r in result["rows"]]
    return console.table(rows, ["network", "gradients", "tensors", "MB", "Gloo ms", "MPI ms",
                                "MPI / Gloo"])


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 1024} KiB"


# The networks of the model's projection, the emulated links' nominal numbers: bandwidth
# (bytes/s) and latency (s) per link.
PAPER_LINKS = {name: (netns.PROFILES[key].rate_Bps, netns.PROFILES[key].latency_s)
               for name, key in (("EDR (paper)", "edr"), ("10 GbE", "10gbe"), ("1 GbE", "1gbe"))}


def _fastest_lines(result: dict, gradients: Sequence[tuple[str, int]]) -> list[str]:
    lines = []
    for what, nbytes in gradients:
        for f in fastest(result, nbytes):
            layout = (f"{f['hosts']} ranks" if f["per_host"] == 1
                      else f"{f['hosts']} nodes x {f['per_host']} ranks")
            lines.append(f"- {what} gradients ({f['bytes'] // 1024} KiB measured), {f['profile']}, "
                         f"{layout}: fastest **{f['best']}** {f['best_s'] * 1e3:.2f} ms; Open "
                         f"MPI's default ({f['default']}) {f['default_s'] * 1e3:.2f} ms")
    return lines


def _model_at_12(result: dict, gradients: Sequence[tuple[str, int]]) -> list[str]:
    gamma = float(np.median([r["gamma_s_per_byte"] for r in result["rows"]]))
    out = []
    for name, (bw, lat) in PAPER_LINKS.items():
        for what, nbytes in gradients:
            cell = winners(nbytes, [12], [lat], bw, gamma)["grid"][0][0]
            t = cell["times_s"]
            out.append(f"{name}, {what}: {cell['best']} {t[cell['best']] * 1e3:.2f} ms (ring "
                       f"{t['ring'] * 1e3:.2f}, recursive doubling "
                       f"{t['recursive_doubling'] * 1e3:.2f})")
    return out


def sections(result: dict, sizes: Sequence[int] = (2**12, 2**16, 2**18, 2**20, 2**22, 2**24)
             ) -> list[str]:
    """What notebook 03 shows of a committed :func:`study`, one Markdown block each: the measured
    times per algorithm at ``sizes`` (:func:`algorithm_table`); the fastest measured algorithm per
    network for the 3DGAN's D and G gradients, and the textbook model's at the paper's 12 workers
    per network of :data:`PAPER_LINKS` (reduction rate measured here); Horovod over MPI against
    Gloo where measured (:func:`horovod_table`); when and where it was measured."""
    from .perfmodel import threedgan_workload

    wl = threedgan_workload()
    gradients = (("D", wl.allreduce_bytes[0]), ("G", wl.allreduce_bytes[2]))
    out = ["Measured ms per all-reduce (textbook model ms, its error); the fastest per size in "
           "bold:\n\n" + algorithm_table(result, list(sizes)),
           "**Fastest measured per network** for the 3DGAN's gradient sizes:\n\n"
           + "\n".join(_fastest_lines(result, gradients))
           + "\n\n**Model at the paper's 12 workers** (textbook costs, reduction rate measured "
           "here): " + "; ".join(_model_at_12(result, gradients)) + "."]
    if "horovod" in result:
        out.append("**Horovod over MPI against Horovod over Gloo** (the 3DGAN's gradients of one "
                   "update, tensor fusion on, 2 ranks; measured):\n\n"
                   + horovod_table(result["horovod"]))
    prov = result["provenance"]
    out.append(f"Measured on {prov['time_utc'][:10]} (gan3d {prov['gan3d']}, {result['cores']} "
               "cores: 4 ranks share them with the kernel's packet processing, which slows the "
               "4-rank rows beyond what the links alone explain).")
    return out


# ---------------------------------------------------------------------------------------------
# Horovod over MPI against Horovod over Gloo


def horovod_transports(profiles: Sequence[str] = ("native", "10gbe", "1gbe"), ranks: int = 2,
                       repeats: int = 10) -> dict:
    """The 3DGAN's gradients of one update (D, then G; tensor fusion on) all-reduced by Horovod
    over Gloo and over MPI on the same emulated network, per profile."""
    from .interconnect import gradient_env, gradient_times, link_check

    rows = []
    for prof in console.progress(profiles, desc="Horovod: MPI vs Gloo", unit="network"):
        with netns.Network(ranks, prof) as net:
            link = link_check(net)
            gloo = gradient_times(net, True, repeats)
            out = net.mpirun([sys.executable, "-m", "gan3d.scaling.interconnect", "gradients",
                              json.dumps({"repeats": repeats})], env=gradient_env(True),
                             timeout=900)
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
            if not line:
                raise RuntimeError(f"rank 0 printed no result:\n{out[-3000:]}")
            mpi = json.loads(line[-1][7:])
        for name in ("D", "G"):
            rows.append({"profile": prof, "ranks": ranks, "net": name, "link": link,
                         "bytes": gloo[name]["bytes"], "tensors": gloo[name]["tensors"],
                         "gloo_s": gloo[name]["s"], "mpi_s": mpi[name]["s"]})
    return {"ranks": ranks, "repeats": repeats, "rows": rows}


def main(argv: Sequence[str]) -> int:  # pragma: no cover - run in the namespaces
    if argv[0] == "worker":
        _worker(json.loads(argv[1]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
