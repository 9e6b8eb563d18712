"""Checkpoints: exact round trip, newest kept, damaged and incompatible ones refused."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d import config
from gan3d.exceptions import CheckpointError
from gan3d.gan import checkpoints


def _cfg(tmp, **extra):
    return config.resolve("quick", {"data.path": str(tmp / "data"), "train.batch_size": 2,
                                    "train.output": str(tmp / "out"), **extra})


def test_round_trip_restores_every_variable_bit_for_bit(tmp_path, gan_step):
    cfg = _cfg(tmp_path)
    variables = gan_step.state_variables()
    saved = [v.numpy().copy() for v in variables]
    path = checkpoints.save_checkpoint(tmp_path / "ck", 4, variables, cfg, [{"epoch": 4}], 2)
    for v in variables:  # scramble everything, then restore
        v.assign(np.zeros(v.shape, v.dtype.name if hasattr(v.dtype, "name") else v.dtype))
    meta, arrays = checkpoints.load_checkpoint(path)
    checkpoints.restore_variables(variables, meta, arrays, path)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(saved, variables))
    assert (meta["epoch"], meta["workers"], meta["history"]) == (4, 2, [{"epoch": 4}])
    assert meta["config"]["train"]["batch_size"] == 2 and meta["provenance"]["gan3d"]


def test_resume_refuses_other_settings_and_damaged_checkpoints(tmp_path, gan_step):
    cfg = _cfg(tmp_path)
    folder = tmp_path / "ck"
    path = checkpoints.save_checkpoint(folder, 1, gan_step.state_variables(), cfg, [], 1)
    meta, arrays = checkpoints.load_checkpoint(path)
    checkpoints.check_compatible(meta, cfg.replace(**{"train.epochs": 9}), path)  # more epochs: fine
    with pytest.raises(CheckpointError, match=r"train.batch_size: 2 -> 4"):
        checkpoints.check_compatible(meta, cfg.replace(**{"train.batch_size": 4}), path)
    # "auto" resolved on a CPU with bfloat16, resumed on one without: refused, not switched
    bf16 = cfg.replace(**{"train.precision": "bfloat16"})
    with pytest.raises(CheckpointError, match=r"train.precision: 'bfloat16' -> 'float32'"):
        checkpoints.check_compatible({**meta, "config": config.to_dict(bf16)},
                                     cfg.replace(**{"train.precision": "float32"}), path)
    with pytest.raises(CheckpointError, match="different model"):
        checkpoints.restore_variables(gan_step.state_variables()[:-1], meta, arrays, path)
    for epoch in (2, 3):
        checkpoints.save_checkpoint(folder, epoch, gan_step.state_variables(), cfg, [], 1)
    assert [p.name for p in sorted(folder.iterdir())] == ["epoch-0002.npz", "epoch-0003.npz"]
    assert checkpoints.latest_checkpoint(folder).name == "epoch-0003.npz"
    damaged = folder / "epoch-0004.npz"
    damaged.write_bytes((folder / "epoch-0003.npz").read_bytes()[:1000])  # a truncated copy
    with pytest.raises(CheckpointError, match="damaged"):
        checkpoints.load_checkpoint(damaged)


def test_a_damaged_newest_checkpoint_is_reported_and_the_one_before_used(tmp_path, gan_step):
    cfg = _cfg(tmp_path)
    folder = tmp_path / "ck"
    for epoch in (1, 2):
        checkpoints.save_checkpoint(folder, epoch, gan_step.state_variables(), cfg, [], 1)
    newest = folder / "epoch-0002.npz"
    newest.write_bytes(newest.read_bytes()[:5000])  # cut short, as by a failing disk
    warnings = []
    path, meta, _ = checkpoints.load_latest(folder, warn=warnings.append)
    assert path.name == "epoch-0001.npz" and meta["epoch"] == 1
    assert len(warnings) == 1 and "epoch-0002.npz is damaged" in warnings[0]
    assert "trying the checkpoint before it" in warnings[0]
    newest.write_bytes(b"")
    (folder / "epoch-0001.npz").write_bytes(b"junk")
    warnings.clear()
    assert checkpoints.load_latest(folder, warn=warnings.append) is None  # start from scratch
    # the oldest is not said to have one before it
    assert "no checkpoint of this run loads" in warnings[-1] and "before" in warnings[0]


def test_a_full_disk_during_a_checkpoint_is_one_named_error_and_nothing_else(tmp_path):
    """RLIMIT_FSIZE with SIGXFSZ ignored fails the write with EFBIG, as a full disk does: one
    named error, the older checkpoint kept, no temporary left and nothing more on stderr (no
    zip file complaining when it is collected)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import resource, signal, sys
        import keras
        from gan3d import config
        from gan3d.exceptions import OutputNotWritable
        from gan3d.gan import checkpoints
        cfg = config.resolve("quick", {{}})
        small = [keras.Variable([1.0, 2.0], name="a")]
        big = [keras.Variable(keras.ops.zeros((500_000,)), name="b")]
        checkpoints.save_checkpoint(r"{tmp_path}", 1, small, cfg, [], 1)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
        try:
            checkpoints.save_checkpoint(r"{tmp_path}", 2, big, cfg, [], 1)
        except OutputNotWritable as exc:
            print("named:", exc)
            sys.exit(3)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 3 and "file-size limit" in out.stdout, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001.npz"]


def test_resuming_with_another_worker_count_is_refused_saying_what_would_change(tmp_path,
                                                                                gan_step):
    cfg = _cfg(tmp_path, **{"train.learning_rate": 1e-3})
    path = checkpoints.save_checkpoint(tmp_path / "ck", 1, gan_step.state_variables(), cfg, [], 2)
    meta, _ = checkpoints.load_checkpoint(path)
    checkpoints.check_compatible(meta, cfg, path, workers=2)  # the same count: fine
    with pytest.raises(CheckpointError, match=r"written by 2 worker\(s\), this run has 4.*"
                                              r"from 0\.002 to 0\.004.*shard"):
        checkpoints.check_compatible(meta, cfg, path, workers=4)


def test_a_fork_restores_the_state_and_records_what_it_changes(tmp_path, gan_step):
    parent = _cfg(tmp_path, **{"train.epochs": 4, "train.seed": 3})
    variables = gan_step.state_variables()
    saved = [v.numpy().copy() for v in variables]
    path = checkpoints.save_checkpoint(tmp_path / "run" / "checkpoints", 4, variables, parent,
                                       [{"epoch": 4, "showers_seen": 128}], 2)
    for v in variables:
        v.assign(np.zeros(v.shape, v.dtype.name if hasattr(v.dtype, "name") else v.dtype))
    child = parent.replace(**{"train.epochs": 6, "train.seed": 5, "train.sync_every": 16})
    # A run's folder names its newest checkpoint; 1 worker forks a 2-worker run.
    start = checkpoints.fork(tmp_path / "run", child, workers=1)
    done, history, record = start.epoch, start.history, start.fork
    assert start.source == str(path) and not start.resumed
    checkpoints.restore(variables, start.source)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(saved, variables))
    assert (done, history) == (4, [{"epoch": 4, "showers_seen": 128}])
    assert record["changed"] == {"train.seed": [3, 5], "train.sync_every": [1, 16],
                                 "workers": [2, 1]}
    assert record["from"] == str(path) and record["showers_seen"] == 128
    import hashlib

    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record["config"]["train"]["seed"] == 3 and record["provenance"]["gan3d"]
    with pytest.raises(CheckpointError, match=r"train.epochs above 4 \(e.g. --epochs 14"):
        checkpoints.fork(path, parent, workers=1)  # 4 epochs: nothing left to train
    with pytest.raises(CheckpointError, match="no such checkpoint file or run folder"):
        checkpoints.fork(tmp_path / "nowhere.npz", child, workers=1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        checkpoints.fork(tmp_path / "empty", child, workers=1)
    with pytest.raises(CheckpointError, match="different model"):
        checkpoints.restore(variables[:-1], path)


def test_a_fork_names_a_committed_parent_relative_to_its_checkout(tmp_path, gan_step):
    """A parent inside a git checkout (a committed study) is recorded by its path there, so a
    committed fork carries no folder of the machine that trained it."""
    import subprocess

    repo = tmp_path / "checkout"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    cfg = _cfg(tmp_path, **{"train.epochs": 2})
    variables = gan_step.state_variables()
    path = checkpoints.save_checkpoint(repo / "studies" / "warm", 1, variables, cfg, [], 1)
    record = checkpoints.fork(path, cfg, workers=1).fork
    assert record["from"] == "studies/warm/epoch-0001.npz"
    outside = checkpoints.save_checkpoint(tmp_path / "elsewhere", 1, variables, cfg, [], 1)
    assert checkpoints.fork(outside, cfg, workers=1).fork["from"] == str(outside)


def test_a_fork_of_a_fork_keeps_its_lineage_oldest_first(tmp_path, gan_step):
    """A long run forked from the learning curve and forked again to lower its learning rate:
    its checkpoints name both forks, the first where it left the curve, the last what it
    changed; a run from scratch has none."""
    variables = gan_step.state_variables()
    curve = _cfg(tmp_path, **{"train.epochs": 2})
    first = checkpoints.save_checkpoint(tmp_path / "curve", 2, variables, curve,
                                        [{"epoch": 2, "showers_seen": 64}], 1)
    run = curve.replace(**{"train.epochs": 5})
    first_fork = checkpoints.fork(first, run, workers=2)
    history, record = first_fork.history, first_fork.fork
    long = checkpoints.save_checkpoint(tmp_path / "long", 3, variables, run,
                                       history + [{"epoch": 3, "showers_seen": 128}], 2,
                                       fork=record)
    slower = run.replace(**{"train.learning_rate": 1e-4})
    again = checkpoints.fork(long, slower, workers=2).fork
    chain = checkpoints.lineage(again)
    assert [r["epoch"] for r in chain] == [2, 3]
    assert chain[0]["from"] == str(first) and chain[0]["changed"] == {"workers": [1, 2]}
    assert chain[1]["from"] == str(long)
    assert chain[1]["changed"] == {"train.learning_rate": [1e-3, 1e-4]}
    assert checkpoints.lineage(None) == [] and checkpoints.lineage(record) == [record]
