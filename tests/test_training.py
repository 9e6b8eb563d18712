"""The training step and loop in one process (world size 1, no launcher)."""

from __future__ import annotations

import hashlib
import json
import time

import numpy as np
import pytest

from gan3d import config
from gan3d.parallel import runtime
from gan3d.gan import checkpoints, training
from gan3d.gan.horovod import LOSS_NAMES, HorovodStep
from gan3d.exceptions import (CheckpointError, ConfigError, DataFileMissing, NonFiniteLoss,
                              OutputBusy, OutputExists, OutputNotWritable)
from gan3d.gan.history import HISTORY_FIELDS, read_history
from gan3d.gan.model import load_generator

# what train.precision: auto trains in here (the quick profile's runs use the Horovod backend)
AUTO = runtime.training_auto(None, "horovod", config.TRAINING_AUTO_CPU_BF16)


def _tiny(tmp, **extra):
    base = {"data.path": str(tmp / "data"), "data.n_showers": 48, "data.n_files": 4,
            "data.test_fraction": 0.25, "train.batch_size": 2, "train.steps_per_epoch": 2,
            "train.eval_fraction": 0.5, "train.epochs": 2, "train.output": str(tmp / "out")}
    return config.resolve("quick", {**base, **extra})


def test_learning_rate_scaling_and_warmup():
    cfg = config.resolve("quick", {"train.learning_rate": 1e-3})
    assert training.learning_rate(cfg, 4, 0.0) == pytest.approx(4e-3)  # lr x workers
    assert training.learning_rate(cfg.replace(**{"train.scale_lr": False}), 4, 0.0) == 1e-3
    warm = cfg.replace(**{"train.lr_warmup_epochs": 2})
    assert training.learning_rate(warm, 4, 0.0) == pytest.approx(1e-3)
    assert training.learning_rate(warm, 4, 1.0) == pytest.approx(2.5e-3)
    assert training.learning_rate(warm, 4, 5.0) == pytest.approx(4e-3)
    sqrt = cfg.replace(**{"train.lr_rule": "sqrt"})
    assert training.learning_rate(sqrt, 4, 0.0) == pytest.approx(2e-3)  # lr x sqrt(workers)
    assert training.learning_rate(sqrt.replace(**{"train.lr_warmup_epochs": 2}), 4, 1.0) == \
        pytest.approx(1.5e-3)
    # lr_rule none is scale_lr false: the lr stays, with or without a warm-up
    none = cfg.replace(**{"train.lr_rule": "none", "train.lr_warmup_epochs": 2})
    assert training.learning_rate(none, 4, 1.0) == training.learning_rate(none, 4, 9.0) == 1e-3


def test_paper_loss_weights_are_one_override_away():
    cfg = config.resolve("quick", {"train.loss_weights": [8, 0.2, 0.1]})
    assert cfg.train.loss_weights == (8.0, 0.2, 0.1)
    with pytest.raises(ConfigError, match="loss_weights"):
        config.resolve("quick", {"train.loss_weights": [8, 0.2]})


# --- the loop ----------------------------------------------------------------------------------

def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_train_outputs_then_nan_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    cfg = _tiny(tmp_path)
    # Every step the loop takes, seen from outside: its clock, its losses, its showers.
    seen = []
    real_step = HorovodStep.train_step

    def recorded(self, batch, draws=None, **kwargs):
        t0 = time.perf_counter()
        losses = np.asarray(real_step(self, batch, draws, **kwargs), np.float64)
        seen.append((t0, time.perf_counter(), losses, len(batch["energy"])))
        return losses

    monkeypatch.setattr(HorovodStep, "train_step", recorded)
    t_run = time.perf_counter()
    result = training.train(cfg)
    wall = time.perf_counter() - t_run
    monkeypatch.setattr(HorovodStep, "train_step", real_step)
    out = tmp_path / "out"
    rows = read_history(out / "history.jsonl")
    assert [r["epoch"] for r in rows] == [1, 2]
    n_fields = len(HISTORY_FIELDS)
    assert all(tuple(r)[:n_fields] == HISTORY_FIELDS for r in rows)
    # the physics monitors: 4 energies x (7 numbers + profile distance + 2 separation powers)
    assert all(sum(k.startswith("mon_") for k in r) == 2 + 4 * 10 and
               0 <= r["mon_targets_met"] <= 20 for r in rows)
    # and local SGD's columns: at k = 1 the gradients are all-reduced, no model syncs
    assert all((r["sync_every"], r["syncs"], r["time_sync_s"]) == (1, 0, 0.0) for r in rows)
    assert all(np.isfinite(r["mon_max_layer_100"]) for r in rows)
    assert [r["showers_seen"] for r in rows] == [4, 8]
    assert [r["timed"] for r in rows] == [False, True]  # the quick profile's 1 warm-up epoch
    for r in rows:
        assert r["workers"] == 1 and r["steps"] == 2 and r["eval_mode"] == "distributed"
        assert r["precision"] == AUTO  # auto, recorded as resolved
        assert np.isfinite([r["d_loss"], r["g_loss"], r["test_d_loss"], r["test_g_loss"]]).all()
    # The history against the steps seen: 2 steps an epoch, whose mean losses each row holds;
    # the train time spans its steps; the speed counts the showers the steps were given.
    assert len(seen) == 4
    for r, steps in zip(rows, (seen[:2], seen[2:])):
        np.testing.assert_allclose([r[k] for k in LOSS_NAMES],
                                   np.mean([s[2] for s in steps], axis=0), rtol=1e-6)
        assert r["time_train_s"] >= steps[-1][1] - steps[0][0]
        assert r["showers_per_s"] == pytest.approx(sum(s[3] for s in steps) / r["time_train_s"])
    # epoch 1's evaluation and monitors ran between its last step and epoch 2's first
    assert rows[0]["time_eval_s"] + rows[0]["time_monitor_s"] <= seen[2][0] - seen[1][1]
    assert sum(r["time_epoch_s"] + r["time_monitor_s"] for r in rows) <= wall
    assert result.final == rows[-1] and len(result.epoch_times) == 2
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch-0001.npz",
                                                                        "epoch-0002.npz"]
    assert list((out / "tb").glob("events.out.tfevents.*"))
    written = json.loads((out / "config.json").read_text())["config"]["train"]
    assert written["epochs"] == 2 and written["precision"] in ("float32", "bfloat16")
    assert load_generator(result.generator).count_params() == 872_948
    assert not list(out.rglob("*.part")) and not list(out.rglob(".*.keras"))  # no temp files

    # A NaN in epoch 3 of a resumed run: named error, epochs 1-2 stay exactly as they were.
    before = {p.name: _digest(p) for p in [*(out / "checkpoints").iterdir(), out / "history.jsonl"]}
    calls = {"n": 0}

    def poisoned(self, batch, draws=None, **kwargs):
        calls["n"] += 1
        losses = real_step(self, batch, draws, **kwargs)
        return losses * np.nan if calls["n"] == 2 else losses

    monkeypatch.setattr(HorovodStep, "train_step", poisoned)
    with pytest.raises(NonFiniteLoss, match=r"epoch 3, step 2: non-finite loss \(d_loss=nan"):
        training.train(cfg.replace(**{"train.epochs": 3}), resume=True)
    after = {p.name: _digest(p) for p in [*(out / "checkpoints").iterdir(), out / "history.jsonl"]}
    assert after == before
    meta, _ = checkpoints.load_checkpoint(out / "checkpoints" / "epoch-0002.npz")
    assert meta["epoch"] == 2 and len(meta["history"]) == 2


@pytest.mark.slow
def test_a_fork_continues_the_history_and_a_resumed_fork_keeps_its_parent(tmp_path):
    parent = _tiny(tmp_path, **{"train.epochs": 1, "train.monitor_showers": 0,
                                "train.precision": "float32"})
    training.train(parent)
    fork = parent.replace(**{"train.epochs": 2, "train.seed": 9,
                             "train.output": str(tmp_path / "fork"),
                             "train.fork_from": str(tmp_path / "out")})
    result = training.train(fork)
    origin = str(tmp_path / "out" / "checkpoints" / "epoch-0001.npz")
    assert result.forked_from == origin and result.resumed_from is None
    rows = read_history(tmp_path / "fork" / "history.jsonl")
    assert [(r["epoch"], r["showers_seen"]) for r in rows] == [(1, 4), (2, 8)]
    assert rows[0] == read_history(tmp_path / "out" / "history.jsonl")[0]
    record = json.loads((tmp_path / "fork" / "config.json").read_text())["fork"]
    assert (record["from"], record["epoch"], record["changed"]) == (origin, 1,
                                                                   {"train.seed": [7, 9]})
    # Resumed, the fork goes on from its own checkpoint and still names its parent.
    again = training.train(fork.replace(**{"train.epochs": 3}), resume=True)
    assert again.resumed_from == 2 and again.forked_from == origin
    meta, _ = checkpoints.load_checkpoint(tmp_path / "fork" / "checkpoints" / "epoch-0003.npz")
    assert meta["fork"]["sha256"] == record["sha256"] and len(meta["history"]) == 3
    with pytest.raises(CheckpointError, match="train.epochs above 1"):
        training.train(fork.replace(**{"train.epochs": 1,
                                       "train.output": str(tmp_path / "fork2")}))


@pytest.mark.slow
def test_a_huge_learning_rate_fails_at_the_first_step_with_nothing_written(tmp_path):
    cfg = _tiny(tmp_path, **{"train.learning_rate": 1e30})
    with pytest.raises(NonFiniteLoss, match="epoch 1, step 1: non-finite loss"):
        training.train(cfg)
    assert not list((tmp_path / "out" / "checkpoints").iterdir())
    assert not (tmp_path / "out" / "generator.keras").exists()


def test_missing_data_is_a_named_error_before_any_step(tmp_path):
    cfg = _tiny(tmp_path, **{"data.source": "clic", "data.path": str(tmp_path / "nowhere")})
    with pytest.raises(DataFileMissing, match="nowhere"):
        training.train(cfg)
    assert not (tmp_path / "out" / "history.jsonl").exists()


def test_unwritable_output_is_a_named_error(tmp_path):
    (tmp_path / "a_file").write_text("x")
    cfg = _tiny(tmp_path, **{"train.output": str(tmp_path / "a_file" / "out")})
    with pytest.raises(OutputNotWritable, match="a_file"):
        training.train(cfg)


def test_a_folder_holding_another_run_is_refused_and_a_busy_one_names_its_holder(tmp_path):
    """Nothing of the other run is touched; --force passes the first check, not the second: a
    process that holds the folder's lock (here a child that took it) is named, and once that
    process is SIGKILLed the folder is free again."""
    import os
    import signal
    import subprocess
    import sys

    from gan3d.io import lock_run, unlock_run

    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    held = {out / "history.jsonl": b'{"epoch": 1}\n',
            out / "checkpoints" / "epoch-0001.npz": b"another run's weights"}
    for path, data in held.items():
        path.write_bytes(data)
    cfg = _tiny(tmp_path)
    with pytest.raises(OutputExists, match=r"holds another run \(1 checkpoint\(s\), the newest "
                       r"epoch-0001.npz\): --resume continues it; --force or another --output"):
        training.train(cfg)
    assert {p: p.read_bytes() for p in held} == held
    assert not (out / "config.json").exists()

    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from gan3d.io import lock_run; "
         f"lock_run({str(out)!r}); print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(OutputBusy, match=f"being written by process {child.pid} on "):
            training.train(cfg, force=True)
        with pytest.raises(OutputBusy, match=f"process {child.pid}"):
            training.train(cfg, resume=True)
        assert {p: p.read_bytes() for p in held} == held
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
    lock_run(out)  # the killed holder's lock went with it
    unlock_run(out)


def test_invalid_configs_are_named_errors():
    with pytest.raises(ConfigError, match="eval_mode"):
        config.resolve("quick", {"train.eval_mode": "sometimes"})
    with pytest.raises(ConfigError, match="precision"):
        config.resolve("quick", {"train.precision": "float8"})
    with pytest.raises(ConfigError, match="batch_size"):
        config.resolve("quick", {"train.batch_size": 0})
