"""Device check: the 3DGAN step on an accelerator with the JAX backend, in one run of minutes.

On a machine with a GPU (or TPU) and JAX, without TensorFlow (``tools/device_check.sh`` installs
Keras and the few pure-Python packages it needs from carried wheels), this script

1. measures the device's matmul ceiling (a large matrix product in the training precision);
2. builds the paper-profile 3DGAN and its data-parallel step (:class:`gan3d.gan.jax.step.JaxStep`,
   one process, every local device on the ``workers`` axis), compiles it, and times ``--steps``
   full training steps at ``--batch`` showers per device: showers/s, TFLOP/s by the model's FLOP
   count (:func:`gan3d.gan.model.step_flops`), the share of the matmul ceiling (and of a vendor
   peak given with ``--peak-tflops``), the device memory in use;
3. keeps training for ``--train-seconds`` on synthetic showers (a pool generated on the host by
   :mod:`gan3d.data.showers`, reshuffled every pass), measures the physics monitors
   (:mod:`gan3d.validation.monitors`) every ``--monitor-every`` seconds, and saves the generator
   and discriminator (``.keras``, any Keras backend loads them);
4. writes everything to ``OUT/device_check.json`` (atomically) and prints a table.

The whole run stays within ``--budget`` seconds (the training phase is cut to fit). It runs on a
CPU too, with small settings, which is how ``make test`` checks it::

    KERAS_BACKEND=jax python bench/device_check.py --output results/device        # accelerator
    KERAS_BACKEND=jax python bench/device_check.py --batch 2 --steps 2 --warmup 1 \\
        --train-seconds 5 --pool 16 --output /tmp/dc                             # CPU smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")  # before Keras is imported
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import numpy as np  # noqa: E402


def _matmul_ceiling(dtype: str, n: int, repeats: int = 10) -> float:
    """FLOP/s of an n x n x n matrix product on device 0 (best of ``repeats``)."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), dtype=dtype)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), dtype=dtype)
    f = jax.jit(lambda x, y: (x @ y).sum(dtype=jnp.float32))
    f(a, b).block_until_ready()
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        f(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2.0 * n ** 3 / best


def _memory() -> list[dict | None]:
    """Per local device: bytes in use, peak and limit where the runtime reports them."""
    import jax

    out = []
    for d in jax.local_devices():
        stats = d.memory_stats() if hasattr(d, "memory_stats") else None
        out.append({k: stats[k] for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit")
                    if k in stats} if stats else None)
    return out


def _pool(n: int, energy_range: tuple[float, float], seed: int, workers: int) -> dict:
    """``n`` synthetic showers in network units, made on the host's cores."""
    from concurrent.futures import ProcessPoolExecutor

    from gan3d.data.sharding import preprocess

    rng = np.random.default_rng(seed)
    energies = rng.uniform(*energy_range, n)
    chunks = [(energies[i:i + 512], seed * 100_003 + i) for i in range(0, n, 512)]
    if workers > 1 and len(chunks) > 1:
        with ProcessPoolExecutor(min(workers, len(chunks))) as ex:
            parts = list(ex.map(_generate, chunks))
    else:
        parts = [_generate(c) for c in chunks]
    return preprocess(np.concatenate(parts), energies)


def _generate(chunk):
    from gan3d.data import showers

    energies, seed = chunk
    return showers.generate(energies, seed=seed)


def _batches(pool: dict, size: int, seed: int):
    """Endless batches of ``size`` showers; a new permutation every pass (yields pass number)."""
    n = len(pool["energy"])
    rng = np.random.default_rng(seed)
    epoch = 0
    while True:
        order = rng.permutation(n)
        for i in range(0, n - size + 1, size):
            idx = np.sort(order[i:i + size])
            yield epoch, {k: v[idx] for k, v in pool.items()}
        epoch += 1


def _monitors(step, n: int) -> dict:
    from gan3d.gan.model import generate_showers
    from gan3d.validation import monitors

    step.sync_variables()
    energies = monitors.MONITOR_ENERGIES
    e = np.repeat(np.asarray(energies, dtype=np.float64), n)
    fake = generate_showers(step.g, e, seed=1234, batch_size=4 * n)
    result = monitors.compare({en: fake[i * n:(i + 1) * n] for i, en in enumerate(energies)},
                              n_reference=max(n, 64))
    return monitors.history_row(result)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="paper")
    ap.add_argument("--batch", type=int, default=512, help="showers per device and step")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation)")
    ap.add_argument("--train-seconds", type=float, default=240.0)
    ap.add_argument("--monitor-every", type=float, default=60.0, help="seconds between monitors")
    ap.add_argument("--monitor-showers", type=int, default=64, help="per monitor energy")
    ap.add_argument("--pool", type=int, default=32768, help="synthetic showers held in memory")
    ap.add_argument("--precision", default="auto", choices=("auto", "float32", "bfloat16"))
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="the device's vendor peak in the training precision, TFLOP/s")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole run")
    ap.add_argument("--output", default="results/device")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--allow-dirty", action="store_true",
                    help="write into studies/ from a tree with uncommitted changes "
                         "(the file is then marked clean: false)")
    opts = ap.parse_args(argv)
    t_start = time.perf_counter()
    if min(opts.batch, opts.steps, opts.pool) < 1 or opts.warmup < 0 or opts.train_seconds < 0:
        ap.error("--batch, --steps and --pool must be >= 1, --warmup and --train-seconds >= 0")

    from gan3d import config, console, records
    from gan3d.io import ensure_dir, provenance
    from gan3d.parallel import jaxdist

    log = console.get_logger("device_check")
    jaxdist.cpu_flags()  # XLA's fast CPU convolutions on a CPU run; nothing on a GPU
    import jax
    import keras

    from gan3d.gan.jax.backend import BACKEND as jax_backend
    from gan3d.gan.backend_check import fingerprint
    from gan3d.gan.model import save_discriminator, save_generator, step_flops

    records.check_writable(Path(opts.output) / "device_check.json", opts.allow_dirty)
    out = ensure_dir(opts.output)
    t = time.perf_counter()  # the showers first: forked workers, before JAX starts its threads
    data_cfg = config.resolve(opts.profile).data
    pool = _pool(opts.pool, (data_cfg.energy_min, data_cfg.energy_max), opts.seed,
                 os.cpu_count() or 1)
    pool_seconds = time.perf_counter() - t
    devices = jax.local_devices()
    n_dev = len(devices)
    cfg = config.resolve(opts.profile, {"train.backend": "jax", "train.batch_size": opts.batch,
                                        "train.precision": opts.precision,
                                        "train.seed": opts.seed})
    cfg = jax_backend.resolve(cfg)
    precision = cfg.train.precision
    report = {"device": {"platform": devices[0].platform, "kind": devices[0].device_kind,
                         "count": n_dev},
              "versions": {"jax": jax.__version__, "keras": keras.__version__,
                           "python": sys.version.split()[0]},
              "profile": cfg.profile, "precision": precision, "batch_per_device": opts.batch,
              "global_batch": opts.batch * n_dev, "provenance": provenance(),
              "pool": {"showers": opts.pool, "seconds": pool_seconds}}
    log.info("%d x %s (%s), %s, batch %d per device", n_dev, devices[0].device_kind,
             devices[0].platform, precision, opts.batch)

    gpu = devices[0].platform != "cpu"
    dtype = "bfloat16" if precision == "bfloat16" else "float32"
    ceiling = _matmul_ceiling(dtype, 8192 if gpu else 1024)
    report["matmul_ceiling_tflops"] = ceiling / 1e12
    log.info("matmul ceiling %.1f TFLOP/s (%s)", ceiling / 1e12, dtype)

    global_batch = opts.batch * n_dev
    if opts.pool < global_batch:
        ap.error(f"--pool {opts.pool} is smaller than one global batch ({global_batch})")

    step = jax_backend.build_step(cfg)
    lr = cfg.train.learning_rate * (n_dev if cfg.train.scale_lr else 1)  # lr x devices
    step.set_learning_rate(lr)
    step.reseed(cfg.train.seed, 0, 0)
    batches = _batches(pool, global_batch, opts.seed)
    flops = step_flops(step.g, step.d) * global_batch

    t = time.perf_counter()
    for _ in range(opts.warmup):
        step.train_step(next(batches)[1])
    report["warmup_seconds"] = time.perf_counter() - t
    times = []
    for _ in range(opts.steps):
        batch = next(batches)[1]
        t = time.perf_counter()
        losses = step.train_step(batch)  # returns host numbers: the step has finished
        times.append(time.perf_counter() - t)
    median = statistics.median(times)
    achieved = flops / median
    report["timed"] = {
        "steps": opts.steps, "step_times_s": times, "seconds_per_step": median,
        "showers_per_s": global_batch / median, "showers_per_s_per_device": opts.batch / median,
        "gflop_per_step": flops / 1e9, "tflops": achieved / 1e12,
        "share_of_matmul_ceiling": achieved / ceiling,
        "share_of_peak": achieved / (opts.peak_tflops * 1e12 * n_dev) if opts.peak_tflops else None,
        "losses": [float(x) for x in losses], "memory": _memory()}
    log.info("%.1f showers/s (%.3f s per step), %.1f TFLOP/s = %.0f %% of the matmul ceiling",
             global_batch / median, median, achieved / 1e12, 100 * achieved / ceiling)

    # Keep training for what the budget leaves (saving and the last monitors need a margin).
    left = opts.budget - (time.perf_counter() - t_start) - 30.0
    seconds = max(0.0, min(opts.train_seconds, left))
    curve, steps, seen, status = [], opts.warmup + opts.steps, 0, "ok"
    seen = steps * global_batch
    t0 = last_mon = time.perf_counter()
    pass_no = 0
    with console.progress(total=round(seconds), desc="training", unit="s") as bar:
        while time.perf_counter() - t0 < seconds:
            epoch, batch = next(batches)
            if epoch != pass_no:  # a pass over the pool: one set of BatchNorm statistics
                step.average_batch_statistics()
                pass_no = epoch
            losses = step.train_step(batch)
            steps, seen = steps + 1, seen + global_batch
            if not np.isfinite(losses).all():
                status = f"non-finite loss at step {steps}: {losses.tolist()}"
                log.error("%s; the models are not saved", status)
                break
            now = time.perf_counter()
            bar.n = min(round(now - t0), bar.total)
            bar.set_postfix(d_loss=f"{losses[0]:.3g}", g_loss=f"{losses[4]:.3g}", refresh=True)
            if now - last_mon >= opts.monitor_every:
                curve.append({"seconds": now - t0, "steps": steps, "showers_seen": seen,
                              "d_loss": float(losses[0]), "g_loss": float(losses[4]),
                              **_monitors(step, opts.monitor_showers)})
                last_mon = time.perf_counter()
    trained = time.perf_counter() - t0
    report["training"] = {"seconds": trained, "steps": steps, "showers_seen": seen,
                          "passes_over_pool": seen / opts.pool,
                          "showers_per_s": (steps - opts.warmup - opts.steps) * global_batch
                          / trained if trained > 0 else None,
                          "learning_rate": lr, "curve": curve, "status": status,
                          "memory": _memory()}
    if status == "ok":
        step.average_batch_statistics()
        final = _monitors(step, opts.monitor_showers)
        report["training"]["final_monitors"] = final
        report["generator"] = str(save_generator(step.g, out / "generator.keras"))
        # what the saved generator computes here, for a check in another backend
        report["generator_fingerprint"] = fingerprint(step.g)
        report["discriminator"] = str(save_discriminator(step.d, out / "discriminator.keras"))
        log.info("%d steps, %d showers in %.0f s; targets met %d of %d; saved %s", steps, seen,
                 trained, final["mon_targets_met"], final["mon_targets"], report["generator"])
    report["wall_seconds"] = time.perf_counter() - t_start
    records.write(out / "device_check.json", report, allow_dirty=opts.allow_dirty)
    timed = report["timed"]
    rows = [("device", f"{n_dev} x {devices[0].device_kind}"), ("precision", precision),
            ("batch per device", opts.batch), ("matmul ceiling", f"{ceiling / 1e12:.1f} TFLOP/s"),
            ("step", f"{timed['seconds_per_step'] * 1e3:.1f} ms"),
            ("showers/s", f"{timed['showers_per_s']:.1f}"),
            ("TFLOP/s (model count)", f"{timed['tflops']:.2f}"),
            ("of matmul ceiling", f"{100 * timed['share_of_matmul_ceiling']:.1f} %"),
            ("of vendor peak", f"{100 * timed['share_of_peak']:.1f} %"
             if timed["share_of_peak"] else "(give --peak-tflops)"),
            ("peak memory", _fmt_memory(timed["memory"])),
            ("trained", f"{steps} steps, {seen:,} showers, {trained:.0f} s ({status})"),
            ("wall", f"{report['wall_seconds']:.0f} s")]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    print(f"-> {out / 'device_check.json'}")
    return 0 if status == "ok" else 1


def _fmt_memory(memory: list) -> str:
    peaks = [m.get("peak_bytes_in_use") for m in memory if m]
    return f"{max(peaks) / 2**30:.2f} GiB" if peaks else "not reported by this device"


if __name__ == "__main__":
    sys.exit(main())
