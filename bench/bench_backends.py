"""The two training backends side by side: showers/s of TensorFlow + Horovod and Keras on JAX.

For each backend and process count, a fresh job (:mod:`gan3d.gan.backend_check` ``--time``)
builds the 3DGAN, compiles its step in ``--warmup`` steps, then times ``--steps`` full training
steps (float32, per-process batch ``--batch``); the jobs run interleaved (backend A, backend B,
A, B, ...) ``--repeats`` times and the table gives medians and the JAX / Horovod ratio. One
process takes every core; N processes are bound to cores / N each::

    python bench/bench_backends.py                         # -> results/bench/backends.json
    python bench/bench_backends.py --workers 1 2 --batch 8 --steps 6 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _output  # bench/_output.py: the result file's options and checks


def _job(backend: str, workers: int, opts, folder: Path) -> dict:
    from gan3d.parallel import runtime
    from gan3d.parallel import jaxdist
    from gan3d.parallel.launch import launch

    out = folder / f"{backend}-{workers}.json"
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "gan3d.gan.backend_check", "--backend", backend, "--output",
            str(out), "--time", str(opts.steps), "--warmup", str(opts.warmup),
            "--batch", str(opts.batch)]
    env = runtime.mpi_environment()
    if backend == "jax":
        env["KERAS_BACKEND"] = "jax"
    if workers == 1:
        subprocess.run(argv, check=True, env=env, capture_output=True, timeout=1800)
    else:
        extra = (["-x", f"{jaxdist.COORDINATOR_ENV}={jaxdist.free_coordinator()}",
                  "-x", "KERAS_BACKEND=jax"] if backend == "jax" else [])
        launch(workers, argv, timeout=1800, stream=False, extra=extra)
    return json.loads(out.read_text())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch", type=int, default=8, help="showers per process and step")
    p.add_argument("--steps", type=int, default=6, help="timed steps per job")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per job (compiling)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved jobs per configuration")
    _output.add_options(p, "results/bench/backends.json")
    opts = _output.parse(p, argv)

    from gan3d import records
    from gan3d.parallel import runtime
    from gan3d.io import provenance, resolve_path

    records.check_writable(resolve_path(opts.output), opts.allow_dirty)  # before the work

    backends = ("horovod", "jax")
    rates: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(opts.repeats):
            for workers in opts.workers:
                order = backends if r % 2 == 0 else backends[::-1]
                for backend in order:
                    res = _job(backend, workers, opts, Path(tmp))
                    rates.setdefault(f"{backend}:{workers}", []).append(res["showers_per_s"])
                    print(f"[bench_backends] repeat {r + 1}: {backend} x {workers}: "
                          f"{res['showers_per_s']:.2f} showers/s", flush=True)
    rows = []
    print(f"\n{'workers':>7} {'horovod showers/s':>18} {'jax showers/s':>14} {'jax/horovod':>12}")
    for workers in opts.workers:
        h = statistics.median(rates[f"horovod:{workers}"])
        j = statistics.median(rates[f"jax:{workers}"])
        rows.append({"workers": workers, "horovod": h, "jax": j, "ratio": j / h})
        print(f"{workers:>7} {h:>18.2f} {j:>14.2f} {j / h:>12.2f}")
    machine = {"cores": runtime.cpu_count(), "cpu_has_bf16": runtime.cpu_has_bf16()}
    path = records.write(resolve_path(opts.output), records.record("backends", {
        "benchmark": "backends", "settings": vars(opts), "machine": machine, "rates": rates,
        "table": rows}, provenance=provenance()), allow_dirty=opts.allow_dirty)
    print(f"[bench_backends] wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
