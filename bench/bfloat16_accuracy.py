"""bfloat16 accuracy on this CPU: the 3DGAN's convolutions and its generator's showers against float32.

TensorFlow's oneDNN picks its kernels by the CPU (on one with AMX, bfloat16 on AMX tiles), and a
kernel can be fast and wrong. This measures, in one run, with oneDNN as it runs here and again
capped below AMX (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``; each in its own process, since oneDNN
reads the cap once):

* each of the 8 convolutions of the 3DGAN (its input shape at batch 8, random input and kernel):
  the relative error - the norm of the difference over float32's norm - of the forward pass and
  of both gradients (input and kernel) in bfloat16 against float32;
* the generator's showers (the shipped reference generator, 8 energies from 10 to 500 GeV, one
  latent draw) in bfloat16 against float32, through the training network and through the
  folded network ``gan3d simulate`` runs: the relative error and the ratio of their energies,
  with the first convolution in float32 where oneDNN uses AMX (``gan3d.gan.model.exact_conv1``:
  the package's choice) and with every convolution in bfloat16 (what it did before).

bfloat16 keeps 8 bits of mantissa: a correct kernel is within a few tenths of a per cent here.
Prints a table and writes the JSON::

    python bench/bfloat16_accuracy.py --output studies/bfloat16_accuracy.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _output  # bench/_output.py: the result file's options and checks

from gan3d import records
from gan3d.io import resolve_path
from gan3d.parallel import runtime

# name, input shape (batch, depth, height, width, channels), filters, kernel, padding
CONVOLUTIONS = (
    ("generator conv1", (8, 7, 7, 8, 8), 64, (6, 6, 8), "SAME"),
    ("generator conv2", (8, 18, 18, 16, 64), 6, (6, 5, 8), "VALID"),
    ("generator conv3", (8, 28, 28, 33, 6), 6, (3, 3, 8), "VALID"),
    ("generator conv4", (8, 26, 26, 26, 6), 1, (2, 2, 2), "VALID"),
    ("discriminator conv1", (8, 25, 25, 25, 1), 32, (5, 5, 5), "SAME"),
    ("discriminator conv2", (8, 29, 29, 29, 32), 8, (5, 5, 5), "VALID"),
    ("discriminator conv3", (8, 29, 29, 29, 8), 8, (5, 5, 5), "VALID"),
    ("discriminator conv4", (8, 27, 27, 27, 8), 8, (5, 5, 5), "VALID"),
)
CAP = "AVX512_CORE_BF16"


def _error(got, want) -> float:
    import numpy as np

    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


def convolutions() -> dict:
    """Each convolution's relative error in bfloat16: forward, input and kernel gradients."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    out = {}
    for name, shape, filters, kernel, padding in CONVOLUTIONS:
        x = rng.standard_normal(shape).astype(np.float32)
        w = (rng.standard_normal((*kernel, shape[-1], filters))
             / np.sqrt(np.prod(kernel) * shape[-1])).astype(np.float32)
        upstream = None

        def run(dtype):
            xv, wv = tf.Variable(tf.constant(x, dtype)), tf.Variable(tf.constant(w, dtype))

            @tf.function
            def step():
                with tf.GradientTape() as tape:
                    y = tf.nn.conv3d(xv, wv, [1] * 5, padding)
                    loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
                return (y, *tape.gradient(loss, [xv, wv]))
            return [np.asarray(tf.cast(a, tf.float32)) for a in step()]

        y_shape = tf.nn.conv3d(x, w, [1] * 5, padding).shape
        upstream = tf.constant(rng.standard_normal(y_shape).astype(np.float32))
        want, got = run(tf.float32), run(tf.bfloat16)
        out[name] = {k: _error(g, r) for k, g, r in zip(("forward", "input_gradient",
                                                         "kernel_gradient"), got, want)}
    return out


def showers() -> dict:
    """The reference generator's showers in bfloat16 against float32: relative error and
    energy ratio, training and folded networks, conv1 as the package chooses and in bfloat16."""
    import numpy as np

    from gan3d.gan import inference, model, reference

    gen = reference.load()
    energies = np.linspace(10.0, 500.0, 8)
    want = model.generate_showers(gen, energies, seed=3).astype(np.float64)
    out = {}
    chosen = model.exact_conv1
    for conv1, choice in (("package", chosen), ("bfloat16", lambda dtype: False)):
        model.exact_conv1 = inference.exact_conv1 = choice
        try:
            nets = {"training": model.build_generator(dtype="mixed_bfloat16", elementwise="float32"),
                    "folded": inference.inference_network(gen, "bfloat16", fold=True)}
            nets["training"].set_weights(gen.get_weights())
            for net_name, net in nets.items():
                got = model.generate_showers(net, energies, seed=3)
                out[f"{net_name}, conv1 {conv1}"] = {"error": _error(got, want),
                                                     "energy_ratio": float(got.sum() / want.sum())}
        finally:
            model.exact_conv1 = inference.exact_conv1 = chosen
    out["conv1_in_float32"] = bool(chosen("mixed_bfloat16"))
    return out


def worker() -> None:
    runtime.apply_process_defaults()
    runtime.configure_tensorflow_threads(None)
    print(json.dumps({"onednn_uses_amx": runtime.onednn_uses_amx(),
                      "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
                      "convolutions": convolutions(), "showers": showers()}))


def _measure(cap: str | None) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if cap:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    done = subprocess.run([sys.executable, __file__, "--worker"], env=env, capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"the measurement ({'capped at ' + cap if cap else 'as oneDNN runs here'}) "
                         f"failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print(result: dict) -> None:
    for label, run in result["runs"].items():
        print(f"\n{label} (oneDNN uses AMX: {run['onednn_uses_amx']})")
        print(f"{'convolution':22s} {'forward':>9s} {'d input':>9s} {'d kernel':>9s}")
        for name, e in run["convolutions"].items():
            print(f"{name:22s} {e['forward']:9.2%} {e['input_gradient']:9.2%} "
                  f"{e['kernel_gradient']:9.2%}")
        for name, s in run["showers"].items():
            if isinstance(s, dict):
                print(f"showers, {name:28s} error {s['error']:8.2%}  energy x {s['energy_ratio']:.3f}")


def main(argv=None) -> dict:
    if argv is None and sys.argv[1:] == ["--worker"]:
        worker()
        return {}
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _output.add_options(p, "results/bench/bfloat16_accuracy.json")
    args = _output.parse(p, argv)
    records.check_writable(resolve_path(args.output), args.allow_dirty)  # before the work
    if not runtime.cpu_has_bf16():
        p.error("this CPU has no bfloat16 arithmetic (AVX512_BF16 or AMX): there is nothing to "
                "measure here (`gan3d doctor` says what it has)")
    runs = {"as oneDNN runs here": _measure(None)}
    if runtime.onednn_uses_amx(env={}):
        runs[f"oneDNN capped at {CAP}"] = _measure(CAP)
    from gan3d.scaling.energy import cpu_model

    result = {"cpu": cpu_model(), "runs": runs}
    _print(result)
    records.write(resolve_path(args.output), records.record("bfloat16_accuracy", result),
                  allow_dirty=args.allow_dirty)
    print(f"wrote {resolve_path(args.output)}")
    return result


if __name__ == "__main__":
    main()
