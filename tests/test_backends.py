"""The second backend (train.backend jax): its rules, its equivalence with Horovod, its CLI.

The equivalence runs :mod:`gan3d.gan.backend_check` four times - TensorFlow + Horovod and Keras
on JAX, each on 1 process and on 2 MPI-launched processes - from the same initial weights on the
same batches and draws, and compares every pair.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gan3d.parallel import runtime
from gan3d.config import resolve
from gan3d.exceptions import ConfigError, RankFailed
from gan3d.gan import backend_check
from gan3d.parallel import jaxdist
from gan3d.parallel.launch import launch

LOSS_TOL, UPDATE_TOL = 1e-3, 1e-2  # measured: <= 1.5e-5 and <= 7e-4 after 3 steps


# -- rules (no JAX needed) -------------------------------------------------------------------
def test_the_losses_both_backends_use_are_the_textbook_ones():
    """gan.step (TensorFlow-free, the one definition both backends call) against BCE and MAPE
    written out in NumPy, clipping and floor included."""
    from gan3d.gan import step as losses

    rng = np.random.default_rng(3)
    b = 64
    f32 = np.float32
    outputs = [rng.uniform(0, 1, (b, 1)).astype(f32), rng.uniform(0.1, 5, (b, 1)).astype(f32),
               rng.uniform(1, 300, (b, 1)).astype(f32)]
    outputs[0][:3] = [[0.0], [1.0], [1e-9]]  # BCE's clipping at both ends
    labels, energy = rng.integers(0, 2, b).astype(f32), rng.uniform(0.1, 5, b).astype(f32)
    ecal = rng.uniform(0, 300, b).astype(f32)
    ecal[0] = 0.0  # MAPE's floor on |y|
    eps = f32(1e-7)  # clipped in float32, as the networks' outputs are
    p = np.clip(outputs[0][:, 0], eps, f32(1) - eps).astype(np.float64)
    want = [-(labels * np.log(p) + (1 - labels) * np.log(1 - p)),
            100 * np.abs(energy - outputs[1][:, 0]) / np.maximum(np.abs(energy), 1e-7),
            100 * np.abs(ecal - outputs[2][:, 0]) / np.maximum(np.abs(ecal), 1e-7)]
    got = [np.asarray(x) for x in losses.parts(outputs, labels, energy, ecal)]
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=2e-5)
    flips = rng.uniform(size=b) < 0.5
    np.testing.assert_array_equal(np.asarray(losses.flip(labels, flips)),
                                  np.where(flips, 1 - labels, labels))
    total, record = losses.weighted([2.0, 0.1, 0.1], [np.asarray(g) for g in got])
    means = [g.mean() for g in got]
    np.testing.assert_allclose(np.asarray(record), [2 * means[0] + 0.1 * (means[1] + means[2]),
                                                    *means], rtol=1e-5)


def test_both_backends_steps_share_one_loss_composition_and_state_order():
    """The JAX step and the Horovod step take their losses, draws and state order from the one
    base class: neither redefines them (a copy that drifted would not be seen otherwise)."""
    pytest.importorskip("jax")
    from gan3d.gan.horovod import HorovodStep
    from gan3d.gan.jax.step import JaxStep
    from gan3d.gan.step import Step

    shared = ("weighted_losses", "draws_from", "model_variables", "optimizer_variables",
              "state_variables", "seed_words")
    for cls in (HorovodStep, JaxStep):
        assert issubclass(cls, Step)
        assert [n for n in shared if n in vars(cls)] == []


def test_backend_is_a_checked_setting():
    assert resolve("quick", {}).train.backend == "horovod"
    assert resolve("quick", {"train.backend": "jax"}).train.backend == "jax"
    with pytest.raises(ConfigError, match="backend"):
        resolve("quick", {"train.backend": "pytorch"})


@pytest.mark.parametrize("override, words", [({"train.sync_every": 4}, "local SGD"),
                                             ({"train.precision": "float16"}, "loss scaling")])
def test_jax_backend_refuses_what_only_horovod_has(override, words):
    from gan3d.gan.jax.backend import BACKEND

    with pytest.raises(ConfigError, match=words):
        BACKEND.check(resolve("quick", {"train.backend": "jax", **override}))


def test_several_processes_need_the_coordinator(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.delenv(jaxdist.COORDINATOR_ENV, raising=False)
    with pytest.raises(ConfigError, match=jaxdist.COORDINATOR_ENV):
        jaxdist._job()
    monkeypatch.setenv(jaxdist.COORDINATOR_ENV, "node0:7777")
    assert jaxdist._job() == (1, 2, "node0:7777")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")
    assert jaxdist._job() is None


@pytest.mark.parametrize("version, before, after", [
    ("0.4.38", "", "--xla_cpu_use_thunk_runtime=false"),
    ("0.4.38", "--xla_cpu_use_thunk_runtime=true", "--xla_cpu_use_thunk_runtime=true"),
    ("0.8.3", "--xla_dump_to=x", "--xla_dump_to=x"),
])
def test_cpu_flags_pick_eigen_convolutions_only_where_the_switch_exists(monkeypatch, version,
                                                                          before, after):
    from importlib import metadata

    monkeypatch.setattr(metadata, "version", lambda name: version)
    monkeypatch.setenv("XLA_FLAGS", before)
    jaxdist.cpu_flags()
    assert os.environ["XLA_FLAGS"] == after


def test_each_process_of_a_node_takes_the_gpu_of_its_local_rank(monkeypatch):
    for key in ("CUDA_VISIBLE_DEVICES", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    assert jaxdist.pin_local_gpu() == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # the user's choice stays
    assert jaxdist.pin_local_gpu() == "0,1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1")  # one process per node: every GPU
    assert jaxdist.pin_local_gpu() is None


@pytest.mark.parametrize("gpu, cpu_bf16, expected", [
    ((9, 0), False, "float32"),    # H100/H200: tensor cores for bfloat16, asked for by name
    ((6, 0), False, "float32"),    # P100
    (None, False, "float32"),      # a CPU without bfloat16 arithmetic
    (None, True, "float32"),       # a CPU with AVX512_BF16: training's auto follows the evidence
])
def test_jax_precision_follows_the_device(monkeypatch, gpu, cpu_bf16, expected):
    from gan3d.parallel import runtime
    from gan3d.gan.jax import backend

    monkeypatch.setattr(backend, "_gpu", lambda: gpu)
    monkeypatch.setattr(runtime, "cpu_has_bf16", lambda *a, **k: cpu_bf16)
    cfg = resolve("quick", {"train.backend": "jax", "train.precision": "auto"})
    assert backend.BACKEND.resolve(cfg).train.precision == expected
    pinned = resolve("quick", {"train.backend": "jax", "train.precision": "bfloat16"})
    assert backend.BACKEND.resolve(pinned).train.precision == "bfloat16"


def test_compare_sees_a_different_update(tmp_path):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    np.savez(tmp_path / "init.npz", **{"d/k": w0})
    step = rng.standard_normal((4, 3)).astype(np.float32) * 1e-3
    losses = rng.uniform(1, 10, (3, 8))
    np.savez(tmp_path / "a.npz", losses=losses, workers=1, **{"w:d/k": w0 + step})
    np.savez(tmp_path / "b.npz", losses=losses * (1 + 1e-6), workers=2,
             **{"w:d/k": w0 + step * (1 + 1e-5)})
    np.savez(tmp_path / "c.npz", losses=losses * 1.01, workers=2, **{"w:d/k": w0 - step})
    same = backend_check.compare(tmp_path / "a.npz", tmp_path / "b.npz", tmp_path / "init.npz")
    assert same["loss_rel"] < 1e-5 and same["update_rel"] < 1e-4 and same["workers"] == (1, 2)
    other = backend_check.compare(tmp_path / "a.npz", tmp_path / "c.npz", tmp_path / "init.npz")
    assert other["loss_rel"] > 5e-3 and other["update_rel"] > 1.9


def test_every_rank_takes_its_share_of_the_global_batch():
    batches, draws = backend_check.inputs(1, 4)
    parts = [backend_check._share(draws[0], r, 2) for r in range(2)]
    assert parts[0]["z_gen"].shape == (2, 2, 200) and parts[1]["e_fake"].shape == (2,)
    np.testing.assert_array_equal(np.concatenate([p["z_gen"] for p in parts], axis=1),
                                  draws[0]["z_gen"])
    image = np.concatenate([backend_check._share(batches[0], r, 2)["image"] for r in range(2)])
    np.testing.assert_array_equal(image, batches[0]["image"])


# -- the JAX backend running ------------------------------------------------------------------
def _jax_env() -> dict:
    env = runtime.mpi_environment()
    env["KERAS_BACKEND"] = "jax"
    return env


def _check_run(backend: str, out: Path, init: Path, processes: int) -> Path:
    target = out / f"{backend}{processes}.npz"
    argv = [sys.executable, "-m", "gan3d.gan.backend_check", "--backend", backend,
            "--init", str(init), "--output", str(target), "--steps", "3", "--batch", "4"]
    if processes == 1:
        env = _jax_env() if backend == "jax" else runtime.mpi_environment()
        subprocess.run(argv, check=True, env=env, timeout=600, capture_output=True)
    else:
        extra = (["-x", f"{jaxdist.COORDINATOR_ENV}={jaxdist.free_coordinator()}", "-x",
                  "KERAS_BACKEND=jax"] if backend == "jax" else [])
        launch(processes, argv, timeout=600, stream=False, extra=extra)
    return target


@pytest.mark.slow
@pytest.mark.mpi
def test_both_backends_take_the_same_steps_on_1_and_2_processes(tmp_path):
    pytest.importorskip("jax")
    init = tmp_path / "init.npz"
    runs = {(b, n): _check_run(b, tmp_path, init, n)
            for b, n in [("horovod", 1), ("jax", 1), ("horovod", 2), ("jax", 2)]}
    assert init.is_file()
    report = {}
    for a, b in [(("horovod", 1), ("jax", 1)), (("horovod", 2), ("jax", 2)),
                 (("horovod", 1), ("horovod", 2)), (("jax", 1), ("jax", 2))]:
        res = backend_check.compare(runs[a], runs[b], init)
        report[f"{a} {b}"] = res
        assert res["loss_rel"] < LOSS_TOL, res
        assert res["update_rel"] < UPDATE_TOL, res
    # The losses moved: three steps of training, not three evaluations of the start.
    losses = np.load(runs[("jax", 2)])["losses"]
    assert np.abs(np.diff(losses[:, 0])).max() > 1e-3 * np.abs(losses[:, 0]).max(), report


def _train(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    sets = {"data.path": str(tmp / "data"), "data.n_showers": 48, "data.n_files": 4,
            "data.test_fraction": 0.25, "train.batch_size": 2, "train.steps_per_epoch": 2,
            "train.precision": "float32", "train.eval_fraction": 0.5,
            "train.monitor_showers": 4, "train.output": str(tmp / "run")}
    argv = [sys.executable, "-m", "gan3d", "train", "--profile", "quick", "--backend", "jax",
            "--workers", "2", *args]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    return subprocess.run(argv, env=runtime.mpi_environment(), timeout=900, capture_output=True,
                          text=True)


@pytest.mark.slow
@pytest.mark.mpi
def test_gan3d_train_backend_jax_on_2_workers_resumes_and_its_generator_moves_to_tensorflow(
        tmp_path):
    pytest.importorskip("jax")
    first = _train(tmp_path, "--epochs", "1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    again = _train(tmp_path, "--epochs", "2", "--resume")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2] and all(r["workers"] == 2 for r in rows)
    assert all(np.isfinite(r["d_loss"]) and np.isfinite(r["test_g_loss"]) for r in rows)
    assert rows[1]["showers_seen"] == 2 * 2 * 2 * 2  # 2 epochs x 2 steps x 2 workers x batch 2
    assert "mon_targets_met" in rows[0]
    assert json.loads((run / "config.json").read_text())["config"]["train"]["backend"] == "jax"
    # The JAX-trained generator, run by JAX and by TensorFlow (this process), makes one shower.
    code = ("import numpy as np; from gan3d.gan.model import load_generator, generate_showers; "
            f"np.save({str(tmp_path / 'jax.npy')!r}, generate_showers(load_generator("
            f"{str(run / 'generator.keras')!r}), np.array([50.0, 300.0]), seed=3))")
    subprocess.run([sys.executable, "-c", code], check=True, env=_jax_env(), timeout=300,
                   capture_output=True)
    from gan3d.gan.model import generate_showers, load_generator

    tf_showers = generate_showers(load_generator(run / "generator.keras"),
                                  np.array([50.0, 300.0]), seed=3)
    jax_showers = np.load(tmp_path / "jax.npy")
    assert np.isfinite(tf_showers).all() and tf_showers.sum() > 0
    # Cell by cell to 0.1 % of the hottest cell (the conv kernels sum in different orders), and
    # each shower's energy to 1e-4.
    np.testing.assert_allclose(jax_showers, tf_showers, rtol=1e-3, atol=1e-3 * tf_showers.max())
    np.testing.assert_allclose(jax_showers.sum(axis=(1, 2, 3)), tf_showers.sum(axis=(1, 2, 3)),
                               rtol=1e-4)


@pytest.mark.slow
@pytest.mark.mpi
def test_a_dying_jax_process_ends_the_job(tmp_path):
    """A rank that fails before the first collective must not leave the other one waiting."""
    pytest.importorskip("jax")
    argv = [sys.executable, "-m", "gan3d.gan.backend_check", "--backend", "jax",
            "--init", str(tmp_path / "missing" / "init.npz"), "--output", str(tmp_path / "x.npz")]
    with pytest.raises(RankFailed):
        launch(2, argv, timeout=300, stream=False,
               extra=["-x", f"{jaxdist.COORDINATOR_ENV}={jaxdist.free_coordinator()}"])
