"""Where the time of one 3DGAN training step goes, layer by layer, against this machine's roofline.

The step (:mod:`gan3d.gan.step`) runs every layer of the two networks in a few ways, all at the
per-worker batch ``b``:

* every discriminator layer twice forward and backward for the two D updates (gradients with
  respect to its weights, and to its input unless the input is the shower itself), and twice
  forward and backward through the frozen D in the two G updates (input gradients only);
* every generator layer once forward in inference mode (the fakes of the second D update) and
  twice forward and backward in the G updates (weights, and input unless it is the latent vector).

:func:`profile_step` times each of these passes of each layer on its own (a compiled function
per pass, repeats interleaved, median), with the real input shapes and dtypes, and sets it
against the roofline of this machine, :func:`ceilings`: the measured matmul rate (GFLOP/s) and
the measured memory bandwidth (GB/s, preallocated buffers, all threads). The physical limit of a
pass is ``max(FLOPs / peak, bytes / bandwidth)``; the step's limit is their sum.

Counting conventions (lower bounds: the limit is a time nothing can beat, not a prediction):

* FLOPs: :func:`gan3d.gan.model.layer_flops` forward; the input gradient and the weight gradient
  of a convolution or dense layer cost one forward matmul each; of any other layer, its forward.
* bytes: every tensor crosses memory once per pass. Forward reads input and weights and writes
  the output; the input gradient reads the output gradient and the weights (and the input, for a
  nonlinear layer) and writes the input gradient; the weight gradient reads the output gradient
  and the input and writes the weight gradient. Activations at the compute precision's width,
  weights at 4 bytes.

The sum of the passes' times differs from the measured step by what the layers alone do not
contain: losses, all-reduce calls, the optimiser updates, the framework's dispatch.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Sequence

import numpy as np

from .. import console

__all__ = ["PASSES", "ceilings", "step_passes", "step_precision", "profile_step", "profile_table",
           "reading"]

# pass name -> (input gradient, weight gradient)
PASSES = {"fwd": (False, False), "in": (True, False), "w": (False, True), "both": (True, True)}
# Layers whose input gradient reads their input again (subclasses too: gan/cpu_layers.py).
_NONLINEAR = ("LeakyReLU", "ReLU", "Activation", "BatchNormalization", "Dropout")


def matmul_rate(dtype: str = "float32", n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of an n x n matmul in TensorFlow, with this process's thread settings: the best of
    ``repeats`` (a ceiling; on a shared machine other work only ever slows a repeat down)."""
    import tensorflow as tf

    a = tf.constant(np.random.default_rng(0).standard_normal((n, n)), dtype=dtype)
    matmul = tf.function(lambda x: tf.linalg.matmul(x, x))
    matmul(a).numpy()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        matmul(a).numpy()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / min(times) / 1e9


def memory_bandwidth(threads: int, mib: int = 256, repeats: int = 7) -> float:
    """GB/s of ``threads`` threads scaling a float32 buffer of ``mib`` MiB into another (each byte
    read once and written once; buffers preallocated, beyond the caches). The best of repeats,
    as for :func:`matmul_rate`."""
    n = mib * 2**20 // 4
    src, dst = np.ones(n, np.float32), np.zeros(n, np.float32)
    bounds = np.linspace(0, n, threads + 1).astype(int)

    def part(i):
        np.multiply(src[bounds[i]:bounds[i + 1]], 1.0001, out=dst[bounds[i]:bounds[i + 1]])

    times = []
    for _ in range(repeats):
        workers = [threading.Thread(target=part, args=(i,)) for i in range(threads)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        times.append(time.perf_counter() - t0)
    return 8 * n / min(times) / 1e9


def ceilings(dtype: str = "float32") -> dict:
    """This process's roofline: ``peak_gflop_s`` (matmul, ``dtype``), ``bandwidth_gb_s``."""
    import tensorflow as tf

    threads = tf.config.threading.get_intra_op_parallelism_threads() or 1
    return {"dtype": dtype, "threads": threads, "peak_gflop_s": matmul_rate(dtype),
            "bandwidth_gb_s": memory_bandwidth(threads)}


# ---------------------------------------------------------------------------------------------
# Which passes the step runs


def step_passes(generator, discriminator) -> list[dict]:
    """Every layer of the step with the passes it runs: ``{"net", "layer", "passes": [(count,
    pass, training)]}``, in the order of the networks (see the module docstring)."""
    rows = []
    for net, model in (("D", discriminator), ("G", generator)):
        inputs = {id(t) for t in model.inputs}
        for layer in _layers(model):
            on_input = id(layer._inbound_nodes[0].input_tensors[0]) in inputs
            weights = bool(layer.trainable_weights)
            trained = _pass(not on_input, weights)  # an update of this network
            if net == "D":
                passes = [(2, trained, True), (2, "in", True)]  # D updates; G updates through D
                if trained == "in":  # a layer without weights: the same pass all four times
                    passes = [(4, "in", True)]
            else:
                passes = [(1, "fwd", False), (2, trained, True)]  # the fakes; the G updates
            rows.append({"net": net, "layer": layer.name, "kind": type(layer).__name__,
                         "passes": passes})
    return rows


def _layers(model):
    import keras

    return [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]


def _pass(input_grad: bool, weight_grad: bool) -> str:
    return {v: k for k, v in PASSES.items()}[(input_grad, weight_grad)]


# ---------------------------------------------------------------------------------------------
# Cost of one pass


def _shapes(layer):
    node = layer._inbound_nodes[0]
    x, y = node.input_tensors[0], node.output_tensors[0]
    return tuple(x.shape[1:]), str(x.dtype), tuple(y.shape[1:]), str(y.dtype)


def pass_cost(layer, name: str, batch: int) -> tuple[int, int]:
    """(FLOPs, bytes) of one pass ``name`` of ``layer`` at ``batch`` (module conventions)."""
    import keras

    from ..gan.model import layer_flops

    in_shape, in_dtype, out_shape, out_dtype = _shapes(layer)
    fwd = layer_flops(layer, (None, *in_shape), (None, *out_shape)) * batch
    n_in, n_out = int(np.prod(in_shape)) * batch, int(np.prod(out_shape)) * batch
    a_in, a_out = np.dtype(_np_dtype(in_dtype)).itemsize, np.dtype(_np_dtype(out_dtype)).itemsize
    w = sum(int(np.prod(v.shape)) for v in layer.trainable_weights) * 4
    if isinstance(layer, (keras.layers.Conv3D, keras.layers.Dense)):
        grad = 2 * int(np.prod(layer.kernel.shape[:-1])) * n_out  # one matmul's worth
    else:
        grad = fwd
    input_grad, weight_grad = PASSES[name]
    flops = fwd + (grad if input_grad else 0) + (grad if weight_grad and w else 0)
    nbytes = n_in * a_in + n_out * a_out + w  # forward: input, weights, output
    if input_grad or weight_grad:
        nbytes += n_out * a_out  # the output gradient
    if input_grad:
        nbytes += n_in * a_in + w  # the input gradient written, the weights read
    nonlinear = isinstance(layer, tuple(getattr(keras.layers, k) for k in _NONLINEAR))
    needs_input = (input_grad and nonlinear) or (weight_grad and w)
    if needs_input:
        nbytes += n_in * a_in  # the input read again
    if weight_grad and w:
        nbytes += w  # the weight gradient written
    return int(flops), int(nbytes)


def _np_dtype(name: str) -> str:
    return "float16" if name == "bfloat16" else name  # same width, for itemsize only


# ---------------------------------------------------------------------------------------------
# Timing


def _pass_function(layer, name: str, training: bool):
    import tensorflow as tf

    input_grad, weight_grad = PASSES[name]
    weights = list(layer.trainable_variables) if weight_grad else []

    def run(x, dy):
        if not (input_grad or weights):
            return layer(x, training=training)
        with tf.GradientTape() as tape:
            if input_grad:
                tape.watch(x)
            y = layer(x, training=training)
        # the output is returned too: the step needs it (its loss), and a function returning only
        # the gradients of a linear layer would let the compiler drop the forward pass
        return [y] + tape.gradient(y, ([x] if input_grad else []) + weights, output_gradients=dy)

    return tf.function(run)


def _inputs(layer, batch: int, rng):
    import tensorflow as tf

    in_shape, in_dtype, out_shape, out_dtype = _shapes(layer)
    x = tf.cast(rng.gamma(0.5, 1.0, (batch, *in_shape)).astype(np.float32), in_dtype)
    dy = tf.cast(rng.standard_normal((batch, *out_shape)).astype(np.float32) * 1e-3, out_dtype)
    return x, dy


def step_precision(step) -> str:
    """``bfloat16`` when the step's layers compute in it (a ``mixed_bfloat16`` policy), else
    ``float32``. The models themselves keep the global float32 policy: ask their layers."""
    layers = [layer for model in (step.g, step.d) for layer in model.layers]
    return "bfloat16" if any(layer.compute_dtype == "bfloat16" for layer in layers) else "float32"


def profile_step(step, batch: int, *, repeats: int = 3, step_repeats: int = 3,
                 progress: bool = True) -> dict:
    """Time every pass of every layer of ``step`` (a :class:`gan3d.gan.horovod.HorovodStep`) at
    ``batch``, and the whole step, in this process; set them against :func:`ceilings`.

    Returns ``{"batch", "precision", "ceilings", "layers": [...], "step": {...}}``; each layer has
    ``flops``, ``bytes``, ``time_s`` (per step, passes x counts), ``limit_s``, ``bound``
    (compute or memory), ``intensity`` (FLOP/byte), ``gflop_s`` and ``of_limit`` (limit/time).
    """
    from .. import console

    precision = step_precision(step)
    roof = ceilings(precision)
    rng = np.random.default_rng(0)
    layers = {(net, layer.name): layer for net, model in (("D", step.d), ("G", step.g))
              for layer in _layers(model)}
    rows = step_passes(step.g, step.d)
    jobs = {}
    for row in rows:
        layer = layers[(row["net"], row["layer"])]
        data = _inputs(layer, batch, rng)
        for _, name, training in row["passes"]:
            key = (row["net"], row["layer"], name, training)
            if key not in jobs:
                fn = _pass_function(layer, name, training)
                fn(*data)  # trace and warm up
                jobs[key] = (fn, data, [])
    bar = console.progress(total=repeats * len(jobs), desc="layer passes",
                           disable=None if progress else True)
    for _ in range(repeats):  # interleaved: every pass once per repeat
        for fn, data, times in jobs.values():
            t0 = time.perf_counter()
            fn(*data)
            times.append(time.perf_counter() - t0)
            bar.update()
    bar.close()
    out = [_layer_row(row, layers[(row["net"], row["layer"])], jobs, batch, roof) for row in rows]
    whole = _time_step(step, batch, step_repeats)
    return {"batch": batch, "precision": precision, "ceilings": roof, "layers": out,
            "step": _totals(out, whole)}


def _layer_row(row: dict, layer, jobs: dict, batch: int, roof: dict) -> dict:
    flops = nbytes = t = limit = 0.0
    for count, name, training in row["passes"]:
        f, b = pass_cost(layer, name, batch)
        times = jobs[(row["net"], row["layer"], name, training)][2]
        flops, nbytes = flops + count * f, nbytes + count * b
        t += count * statistics.median(times)
        limit += count * max(f / roof["peak_gflop_s"] / 1e9, b / roof["bandwidth_gb_s"] / 1e9)
    compute, memory = flops / roof["peak_gflop_s"] / 1e9, nbytes / roof["bandwidth_gb_s"] / 1e9
    passes = " + ".join(f"{c}x{n}" for c, n, _ in row["passes"])
    return {"net": row["net"], "layer": row["layer"], "kind": row["kind"], "passes": passes,
            "flops": flops, "bytes": nbytes, "time_s": t, "limit_s": limit,
            "bound": "compute" if compute >= memory else "memory",
            "intensity": flops / nbytes if nbytes else float("nan"),
            "gflop_s": flops / t / 1e9 if t else float("nan"), "of_limit": limit / t if t else 0.0}


def _time_step(step, batch: int, repeats: int) -> list[float]:
    rng = np.random.default_rng(1)
    image = rng.gamma(0.05, 2.0, (batch, 25, 25, 25, 1)).astype(np.float32)
    data = {"image": image, "energy": rng.uniform(0.1, 5.0, batch).astype(np.float32),
            "ecal_sum": image.sum(axis=(1, 2, 3, 4)).astype(np.float32)}
    np.asarray(step.train_step(data))  # trace and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.asarray(step.train_step(data))
        times.append(time.perf_counter() - t0)
    return times


def _totals(rows: Sequence[dict], whole: list[float]) -> dict:
    measured = statistics.median(whole)
    layers = sum(r["time_s"] for r in rows)
    limit = sum(r["limit_s"] for r in rows)
    return {"measured_s": measured, "step_times_s": whole, "layers_s": layers, "limit_s": limit,
            "flops": sum(r["flops"] for r in rows), "bytes": sum(r["bytes"] for r in rows),
            "outside_layers_s": measured - layers, "of_limit": limit / measured}


def profile_table(profile: dict, top: int | None = None) -> str:
    """Markdown table of the profile's layers (slowest first) and its totals."""
    rows = sorted(profile["layers"], key=lambda r: -r["time_s"])[:top]
    roof, s = profile["ceilings"], profile["step"]
    lines = [f"batch {profile['batch']}, {profile['precision']}, {roof['threads']} thread(s): "
             f"matmul {roof['peak_gflop_s']:.0f} GFLOP/s, memory {roof['bandwidth_gb_s']:.1f} GB/s",
             "", console.table(
                 [[f"{r['net']} {r['layer']}", r["passes"], f"{r['flops'] / 1e9:.2f}",
                   f"{r['bytes'] / 1e6:.0f}", f"{r['intensity']:.1f}", f"{r['time_s'] * 1e3:.0f}",
                   f"{r['limit_s'] * 1e3:.0f}", r["bound"], f"{r['gflop_s']:.1f}",
                   f"{r['of_limit']:.0%}"] for r in rows],
                 ["layer", "passes", "GFLOP", "MB", "FLOP/B", "ms", "limit ms", "bound",
                  "GFLOP/s", "of limit"])]
    lines += ["", f"step: measured {s['measured_s']:.3f} s, its layers {s['layers_s']:.3f} s, "
                  f"outside the layers {s['outside_layers_s']:.3f} s; limit {s['limit_s']:.3f} s "
                  f"= {s['of_limit']:.0%} of the measured step"]
    return "\n".join(lines)


def reading(profile: dict) -> str:
    """Markdown: how close the step comes to its limit on this machine, the memory-bound layers
    and their share of the layers' time, and what lies outside the layers."""
    s = profile["step"]
    mem = [r for r in profile["layers"] if r["bound"] == "memory"]
    mem_share = sum(r["time_s"] for r in mem) / s["layers_s"]
    return (f"Reading: the step reaches **{100 * s['of_limit']:.0f} %** of its limit on this "
            f"machine ({s['limit_s']:.2f} s of {s['measured_s']:.2f} s). {len(mem)} of "
            f"{len(profile['layers'])} layers are memory-bound by their arithmetic intensity and "
            f"take {100 * mem_share:.0f} % of the layers' time; "
            f"{max(0.0, s['outside_layers_s']):.2f} s per step lie outside the layers (losses, "
            "all-reduce calls, optimiser updates, dispatch).")
