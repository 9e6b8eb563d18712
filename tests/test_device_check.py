"""The device check (bench/device_check.py via tools/device_check.sh), run on this CPU with small
settings and with TensorFlow made unimportable, as on an accelerator machine that has JAX alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "device_check.sh"


def test_the_script_says_how_to_use_it_and_what_is_missing(tmp_path):
    usage = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert usage.returncode != 0 and "usage: tools/device_check.sh wheels | run" in usage.stderr
    env = {**os.environ, "PYTHON": str(tmp_path / "no-python")}
    missing = subprocess.run(["bash", str(SCRIPT), "run"], capture_output=True, text=True,
                             env=env, timeout=30)
    assert missing.returncode != 0 and "cannot import jax" in missing.stderr


@pytest.mark.slow
def test_device_check_runs_without_tensorflow_and_its_generator_loads_in_tensorflow(tmp_path):
    pytest.importorskip("jax")
    block = tmp_path / "block"
    block.mkdir()  # an accelerator machine without TensorFlow: importing it fails
    (block / "sitecustomize.py").write_text("import sys\nsys.modules['tensorflow'] = None\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "PYTHONPATH": str(block),
           "GAN3D_PROGRESS": "0"}
    budget = 400
    run = subprocess.run(["bash", str(SCRIPT), "run", "--batch", "2", "--steps", "2",
                          "--warmup", "1", "--train-seconds", "8", "--monitor-every", "3",
                          "--monitor-showers", "8", "--pool", "16", "--budget", str(budget)],
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "showers/s" in run.stdout and "of matmul ceiling" in run.stdout
    r = json.loads((out / "device_check.json").read_text())
    assert r["device"]["platform"] == "cpu" and r["device"]["count"] >= 1
    # auto trains in float32 with JAX on every device (gan3d.parallel.runtime.training_auto)
    assert r["precision"] == "float32"
    assert r["global_batch"] == 2 * r["device"]["count"]
    timed = r["timed"]
    assert len(timed["step_times_s"]) == 2
    assert timed["showers_per_s"] == pytest.approx(r["global_batch"] / timed["seconds_per_step"])
    assert timed["gflop_per_step"] > 19 * r["global_batch"]  # ~19.3 GFLOP per shower
    # the model's FLOPs per second cannot be far above what the cores' matmul reaches
    assert 0 < timed["share_of_matmul_ceiling"] < 1.5 and timed["share_of_peak"] is None
    assert np.isfinite(timed["losses"]).all()
    tr = r["training"]
    assert tr["status"] == "ok" and tr["steps"] > 3
    # --train-seconds 8, with 400 s of budget left: the loop stops at the first step after 8 s,
    # not at the budget (as max for min would do); halfway is far from either on any machine
    assert 8 <= tr["seconds"] < (8 + 400) / 2
    assert tr["showers_seen"] == tr["steps"] * r["global_batch"]
    assert tr["curve"] and all(0 <= p["mon_targets_met"] <= 20 for p in tr["curve"])
    assert "mon_profile_distance_400" in tr["final_monitors"]
    assert r["wall_seconds"] < budget
    # the generator trained on JAX loads in this TensorFlow process and makes showers
    # (its showers may be all zero after a few steps at batch 2: a dead final ReLU is a possible
    # outcome of such a training, so the check is on what the layers compute before it)
    from gan3d.gan.backend_check import fingerprint
    from gan3d.gan.model import ECAL_SCALE, generate_showers, load_generator

    g = load_generator(out / "generator.keras")
    showers = generate_showers(g, [100.0, 400.0], seed=1)
    assert showers.shape == (2, 25, 25, 25) and np.isfinite(showers).all() and showers.min() >= 0
    jax_fp, tf_fp = r["generator_fingerprint"], fingerprint(g, [100.0, 400.0], seed=1)
    assert min(jax_fp["pre_relu_abs_sum"]) > 0  # the layers compute something
    for key in ("pre_relu_sum", "pre_relu_abs_sum", "shower_sum_gev"):
        # float32 convolutions in two libraries: equal to summation order, relative to |x|
        scale = np.asarray(jax_fp["pre_relu_abs_sum"])
        if key == "shower_sum_gev":
            scale = scale / ECAL_SCALE
        assert np.all(np.abs(np.subtract(tf_fp[key], jax_fp[key])) <= 1e-4 * scale + 1e-9), key
    assert np.allclose(showers.sum(axis=(1, 2, 3)), tf_fp["shower_sum_gev"], rtol=1e-4, atol=1e-6)
