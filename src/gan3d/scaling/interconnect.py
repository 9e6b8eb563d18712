"""The interconnect: Horovod's all-reduce over emulated networks, measured and set against the
ring model.

For each link profile (:data:`gan3d.parallel.netns.PROFILES`) :func:`study` builds an emulated
network of ``ranks`` namespaces (:class:`gan3d.parallel.netns.Network`), then

1. measures the link itself between two namespaces (:func:`link_check`): TCP throughput of a bulk
   transfer (bytes/s) and the one-way latency of small messages (half the median round trip);
2. times real Horovod all-reduces (Gloo over TCP, one rank per namespace) over message sizes,
   including the 3DGAN's gradient sizes (median of ``repeats`` after a warm-up);
3. predicts each time with the ring model of :mod:`gan3d.scaling.perfmodel`,
   ``o + 2 (p - 1) alpha + max(2 (p - 1) / p * n / beta, n / e)``, with ``alpha`` and ``beta``
   the link's *measured* latency and bandwidth (calibrated on the emulated link, not fitted to
   the all-reduce), ``o`` Horovod's per-call overhead and ``e`` the rate at which the ranks'
   CPUs reduce and copy (both fitted once per rank count on the unshaped network, whose rows
   are therefore calibration, not prediction), and reports the error per size.

Run it with ``python bench/bench_interconnect.py`` (root). The worker side is
``python -m gan3d.scaling.interconnect worker JOB`` (one per rank), and the link probe
``python -m gan3d.scaling.interconnect serve|probe``. ("Network" in this module is the emulated
network between the ranks; the generator and the discriminator are the *models*.)
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import time
from typing import Sequence

import numpy as np

from .. import console
from ..parallel import netns
from . import perfmodel

__all__ = ["SIZES", "link_check", "allreduce_times", "study", "model_table", "gradient_env",
           "gradient_times", "fusion_study", "fusion_table", "calibrated", "reading",
           "fusion_section"]

log = console.get_logger(__name__)
SIZES = tuple(4 * 4**k for k in range(3, 13))  # 256 B .. 64 MiB
_PORT = 47011
_CHUNK = 1 << 20


# ---------------------------------------------------------------------------------------------
# The link


def _serve(port: int) -> None:
    """Echo small messages back; swallow a bulk transfer and answer with the bytes received."""
    srv = socket.create_server(("0.0.0.0", port))
    srv.settimeout(60)
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        head = conn.recv(1)
        if not head or head == b"q":
            break
        if head == b"p":  # ping
            conn.sendall(b"p")
        elif head == b"b":  # bulk: 8-byte length, then that many bytes
            want, got = int.from_bytes(_exact(conn, 8), "big"), 0
            while got < want:
                got += len(conn.recv(min(_CHUNK, want - got)))
            conn.sendall(got.to_bytes(8, "big"))
    conn.close()


def _exact(conn, n: int) -> bytes:
    data = b""
    while len(data) < n:
        data += conn.recv(n - len(data))
    return data


def _probe(address: str, port: int, pings: int = 200, seconds: float = 1.0) -> dict:
    for _ in range(100):  # the server may not listen yet
        try:
            conn = socket.create_connection((address, port), timeout=30)
            break
        except OSError:
            time.sleep(0.05)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtt = []
    for _ in range(pings):
        t0 = time.perf_counter()
        conn.sendall(b"p")
        _exact(conn, 1)
        rtt.append(time.perf_counter() - t0)
    block, sent, t0 = bytes(_CHUNK), 0, time.perf_counter()
    size = _CHUNK * 16
    while time.perf_counter() - t0 < seconds:
        conn.sendall(b"b" + size.to_bytes(8, "big"))
        for _ in range(16):
            conn.sendall(block)
        _exact(conn, 8)
        sent += size
    elapsed = time.perf_counter() - t0
    conn.sendall(b"q")
    conn.close()
    return {"latency_s": statistics.median(rtt) / 2, "bandwidth_Bps": sent / elapsed,
            "rtt_s": rtt}


def link_check(net: "netns.Network", a: int = 0, b: int = 1) -> dict:
    """Throughput (bytes/s) and one-way latency (s) of TCP from rank ``a`` to rank ``b``."""
    import subprocess

    server = subprocess.Popen(net.command(b, [sys.executable, "-m", __name__, "serve", str(_PORT)]))
    try:
        out = subprocess.run(net.command(a, [sys.executable, "-m", __name__, "probe",
                                             net.addresses[b], str(_PORT)]),
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"link probe failed: {out.stderr[-2000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.kill()
        server.wait()
    result.pop("rtt_s", None)
    return result


# ---------------------------------------------------------------------------------------------
# All-reduce times


def _worker(job: dict) -> None:
    """One rank: time ``hvd.allreduce`` over the job's sizes; rank 0 prints the result line."""
    import tensorflow as tf

    from ..parallel import distributed

    world = distributed.init(threads=1)  # DISTRIBUTED: joins the Gloo ranks
    times = {}
    for n in job["sizes"]:
        x = tf.ones(max(1, n // 4), tf.float32)
        for _ in range(2):  # warm-up: Horovod's first call of a name negotiates it
            np.asarray(distributed.allreduce(x, "sum", name=f"ar{n}"))  # DISTRIBUTED
        t = []
        for _ in range(job["repeats"]):
            t0 = time.perf_counter()
            np.asarray(distributed.allreduce(x, "sum", name=f"ar{n}"))  # DISTRIBUTED
            t.append(time.perf_counter() - t0)
        times[n] = statistics.median(t)
    if world.is_root:
        print("RESULT " + json.dumps({str(k): v for k, v in times.items()}), flush=True)


def _gradient_worker(job: dict) -> None:
    """One rank: all-reduce the 3DGAN's gradient tensors of D, then of G, as one training step
    issues them (every tensor its own all-reduce, in one compiled function, so that Horovod
    may fuse them); rank 0 prints the median seconds per model."""
    import tensorflow as tf

    from ..gan.model import build_discriminator, build_generator
    from ..parallel import distributed

    world = distributed.init(threads=1)  # DISTRIBUTED: joins the ranks (Gloo or MPI)
    times = {}
    for name, model in (("D", build_discriminator()), ("G", build_generator())):
        tensors = [tf.ones(w.shape, tf.float32) for w in model.trainable_weights]
        fn = tf.function(lambda ts, name=name: [
            distributed.allreduce(t, "sum", name=f"{name}{i}")  # DISTRIBUTED
            for i, t in enumerate(ts)])
        for _ in range(2):
            [np.asarray(x) for x in fn(tensors)]
        t = []
        for _ in range(job["repeats"]):
            t0 = time.perf_counter()
            [np.asarray(x) for x in fn(tensors)]
            t.append(time.perf_counter() - t0)
        times[name] = {"s": statistics.median(t), "tensors": len(tensors),
                       "bytes": int(sum(4 * np.prod(w.shape) for w in model.trainable_weights)),
                       "tensor_bytes": [int(4 * np.prod(w.shape)) for w in model.trainable_weights]}
    if world.is_root:
        print("RESULT " + json.dumps(times), flush=True)


def gradient_env(fusion: bool) -> dict[str, str]:
    """The environment of the ranks that time the gradients (``python -m
    gan3d.scaling.interconnect gradients JOB``, under Gloo or MPI): Horovod's 1 ms cycle, its
    fusion buffer 64 MiB (``fusion``) or off (threshold 0: one message per tensor), quiet logs."""
    return {"HOROVOD_CYCLE_TIME": "1", "HOROVOD_FUSION_THRESHOLD": str(64 * 2**20 if fusion else 0),
            "GAN3D_PROGRESS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}


def gradient_times(net: "netns.Network", fusion: bool, repeats: int = 10) -> dict:
    """Seconds to all-reduce the D and the G gradients of one update over ``net``, with Horovod's
    tensor fusion on (its default 64 MiB buffer) or off (threshold 0: one message per tensor)."""
    outs = net.run_horovod([sys.executable, "-m", __name__, "gradients",
                            json.dumps({"repeats": repeats})], env=gradient_env(fusion),
                           timeout=900)
    line = [ln for ln in outs[0].splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"rank 0 printed no result:\n{outs[0][-3000:]}")
    return json.loads(line[-1][7:])


def fusion_study(profiles: Sequence[str] = ("native", "10gbe", "1gbe"), ranks: int = 2,
                 repeats: int = 10, calibration: dict | None = None) -> dict:
    """Tensor fusion on and off for the 3DGAN's gradients over each profile, measured; the fused
    time also modelled (one all-reduce of all the bytes, :func:`study`'s ``calibration``), and
    the cost of each message that fusion saves derived: (unfused - fused) / (tensors - 1)."""
    rows = []
    for prof in console.progress(profiles, desc="fusion on/off", unit="network"):
        with netns.Network(ranks, prof) as net:
            link = link_check(net)
            on, off = gradient_times(net, True, repeats), gradient_times(net, False, repeats)
        o, endpoint = calibrated(calibration, ranks)
        model = perfmodel.Link(link["bandwidth_Bps"], link["latency_s"])
        for name in ("D", "G"):
            k = on[name]["tensors"]
            rows.append({"profile": prof, "ranks": ranks, "net": name, "link": link, "tensors": k,
                         "bytes": on[name]["bytes"], "fused_s": on[name]["s"],
                         "unfused_s": off[name]["s"],
                         "per_message_s": (off[name]["s"] - on[name]["s"]) / max(k - 1, 1),
                         "model_fused_s": perfmodel.allreduce_time(on[name]["bytes"], ranks,
                                                                   model, o, endpoint=endpoint)})
    return {"ranks": ranks, "repeats": repeats, "rows": rows}


def calibrated(calibration: dict | None, ranks: int) -> tuple[float, float | None]:
    """Horovod's per-call overhead (s) and the endpoint rate (bytes/s) of :func:`study`'s
    calibration for ``ranks``; (0, None) where it has none."""
    cal = (calibration or {}).get(str(ranks))
    return (cal["overhead_s"], cal["endpoint_Bps"]) if cal else (0.0, None)


def fusion_table(result: dict) -> str:
    """Markdown: per network and gradient set, fusion on against off."""
    rows = [[r["profile"], r["net"], r["tensors"], f"{r['bytes'] / 1e6:.2f}",
             f"{r['fused_s'] * 1e3:.1f} ({r['model_fused_s'] * 1e3:.1f})",
             f"{r['unfused_s'] * 1e3:.1f}", f"{r['per_message_s'] * 1e3:.2f}",
             f"{1 - r['fused_s'] / r['unfused_s']:.0%}"] for r in result["rows"]]
    return console.table(rows, ["network", "gradients", "tensors", "MB", "fused ms (model)",
                                "one message per tensor ms", "each extra message ms",
                                "fusion saves"])


def allreduce_times(net: "netns.Network", sizes: Sequence[int] = SIZES, repeats: int = 10,
                    cycle_ms: float = 1.0) -> dict[int, float]:
    """Median seconds of a Horovod all-reduce of each size (bytes) over ``net``'s ranks."""
    job = json.dumps({"sizes": [int(s) for s in sizes], "repeats": repeats})
    outs = net.run_horovod([sys.executable, "-m", __name__, "worker", job],
                           env={"HOROVOD_CYCLE_TIME": str(cycle_ms), "GAN3D_PROGRESS": "0",
                                "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=900)
    line = [ln for ln in outs[0].splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"rank 0 printed no result:\n{outs[0][-3000:]}")
    return {int(k): v for k, v in json.loads(line[-1][7:]).items()}


# ---------------------------------------------------------------------------------------------
# The study


def study(profiles: Sequence[str] = ("native", "10gbe", "1gbe"), ranks: Sequence[int] = (2,),
          sizes: Sequence[int] = SIZES, repeats: int = 10, slow: str | None = "1gbe") -> dict:
    """Link check, all-reduce sweep and ring-model prediction per profile and rank count (plus,
    with ``slow``, a ring whose last link has that profile, the others the first shaped one)."""
    cases = [(p, r, None) for p in profiles for r in ranks]
    shaped = [p for p in profiles if netns.PROFILES[p].rate_Bps]
    if slow and shaped:
        cases += [(shaped[0], r, slow) for r in ranks]
    rows = []
    for prof, p, slow_prof in console.progress(cases, desc="emulated networks", unit="network"):
        with netns.Network(p, prof, slow=(p - 1, slow_prof) if slow_prof else None) as net:
            links = [link_check(net, 0, 1)]
            if slow_prof:
                links.append(link_check(net, 0, p - 1))
            times = allreduce_times(net, sizes, repeats)
        rows.append({"profile": prof, "ranks": p, "slow_link": slow_prof, "links": links,
                     "shaped_Bps": [x.rate_Bps for x in net.profiles],
                     "time_s": {str(n): t for n, t in times.items()}})
        log.info("%s x %d%s: link %.3g GB/s, %.0f us; 16 MiB all-reduce %.3g s", prof, p,
                 f" (one {slow_prof} link)" if slow_prof else "", links[-1]["bandwidth_Bps"] / 1e9,
                 links[-1]["latency_s"] * 1e6, times.get(16 * 2**20, float("nan")))
    return _with_model({"sizes": [int(s) for s in sizes], "repeats": repeats, "rows": rows,
                        "netem": netns.netem_available()})


def _with_model(result: dict) -> dict:
    """Add the model's prediction and its error to every row (module docstring). Per rank count:
    Horovod's per-call overhead ``o`` is the median, over every network's messages up to 64 KiB,
    of the time the link does not explain (it is Horovod's coordination, not the link's); the
    endpoint rate (bytes/s at which the ranks reduce and copy, a pipelined ring's other limit)
    is the median of n / (t - o) over the unshaped network's messages from 4 MiB. The link's
    bandwidth and latency are those measured on it."""
    calib = {}
    for p in sorted({r["ranks"] for r in result["rows"]}):
        rest = []
        for r in (r for r in result["rows"] if r["ranks"] == p):
            link = min(r["links"], key=lambda x: x["bandwidth_Bps"])
            bare = perfmodel.Link(link["bandwidth_Bps"], link["latency_s"])
            rest += [t - perfmodel.allreduce_time(int(k), p, bare)
                     for k, t in r["time_s"].items() if int(k) <= 64 * 1024]
        o = max(0.0, float(np.median(rest))) if rest else 0.0
        rates = [int(k) / (t - o) for r in result["rows"] if r["ranks"] == p
                 and r["profile"] == "native" and not r["slow_link"]
                 for k, t in r["time_s"].items() if int(k) >= 4 * 2**20 and t > o]
        calib[p] = (o, float(np.median(rates)) if rates else None)
    result["calibration"] = {str(p): {"overhead_s": o, "endpoint_Bps": e}
                             for p, (o, e) in calib.items()}
    for r in result["rows"]:
        link = min(r["links"], key=lambda x: x["bandwidth_Bps"])  # the ring's slowest hop
        o, endpoint = calib.get(r["ranks"], (0.0, None))
        model = perfmodel.Link(link["bandwidth_Bps"], link["latency_s"])
        r["overhead_s"], r["endpoint_Bps"] = o, endpoint
        r["calibration_row"] = r["profile"] == "native" and not r["slow_link"]
        r["predicted_s"] = {k: perfmodel.allreduce_time(int(k), r["ranks"], model, o,
                                                        endpoint=endpoint) for k in r["time_s"]}
        r["rel_error"] = {k: r["predicted_s"][k] / t - 1 for k, t in r["time_s"].items()}
        big = [abs(e) for k, e in r["rel_error"].items() if int(k) >= 2**20]
        r["max_abs_error_ge_1MiB"] = max(big) if big else None
    return result


def model_table(result: dict) -> str:
    """Markdown: per network, the measured link and the model's error per message size."""
    sizes = [s for s in result["sizes"] if s >= 2**16]
    rows = []
    for r in result["rows"]:
        link = min(r["links"], key=lambda x: x["bandwidth_Bps"])
        name = r["profile"] + (f" + one {r['slow_link']} link" if r["slow_link"] else "")
        name += " (calibration)" if r.get("calibration_row") else ""
        cells = [f"{r['time_s'][str(s)] * 1e3:.2f} / {r['predicted_s'][str(s)] * 1e3:.2f} ms "
                 f"({r['rel_error'][str(s)]:+.0%})" for s in sizes]
        rows.append([name, r["ranks"], f"{link['bandwidth_Bps'] / 1e9:.3g}",
                     f"{link['latency_s'] * 1e6:.0f}", *cells])
    return console.table(rows, ["network", "ranks", "link GB/s", "latency us",
                                *(f"{_size(s)} meas. / model (err)" for s in sizes)])


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 1024} KiB"


def reading(result: dict) -> str:
    """Markdown: when and where a committed :func:`study` was measured, and how far the model
    is from the 1 GbE measurements from 4 MiB on."""
    prov = result["provenance"]
    shaped = [r for r in result["rows"] if r["shaped_Bps"][-1]]
    worst = max(abs(e) for r in shaped if r["profile"] == "1gbe"
                for k, e in r["rel_error"].items() if int(k) >= 4 * 2**20)
    return (f"Measured on {prov['time_utc'][:10]} (gan3d {prov['gan3d']}, {result['cores']} cores; "
            "netem for added delay "
            f"{'available' if result['netem'] else 'not in this kernel: native latency kept'}). "
            f"Reading: on 1 GbE the link sets the pace and the model is within {100 * worst:.0f} % "
            "from 4 MiB on (below, Horovod's coordination, which the model adds whole, overlaps "
            "the transfer); on faster links the ranks' CPUs (Gloo reduces on the host) cap the "
            "ring, which the endpoint term captures; more ranks than cores (4 on 2) add CPU "
            "contention.")


def fusion_section(result: dict) -> str:
    """Markdown: the tensor-fusion measurement (:func:`fusion_study`) introduced, then its table."""
    return ("**Tensor fusion**, one of the all-reduce choices the paper's Sect. 7 asks about: the "
            "3DGAN's gradients of one update, each tensor its own message against Horovod's "
            "fusion buffer (measured; model in brackets):\n\n" + fusion_table(result))


def main(argv: Sequence[str]) -> int:  # pragma: no cover - run in the namespaces
    if argv[0] == "serve":
        _serve(int(argv[1]))
    elif argv[0] == "probe":
        print(json.dumps(_probe(argv[1], int(argv[2]))), flush=True)
    elif argv[0] == "worker":
        _worker(json.loads(argv[1]))
    elif argv[0] == "gradients":
        _gradient_worker(json.loads(argv[1]))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
