"""The reference generator: exported from a real training run, loaded back, used by name."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d import config
from gan3d.exceptions import CheckpointError, OutputExists, OutputNotWritable
from gan3d.gan import reference
from gan3d.validation import monitors


@pytest.mark.slow
def test_export_then_load_gives_the_same_networks(tmp_path):
    from gan3d.gan import training
    from gan3d.gan.model import generate_showers, load_discriminator, load_generator

    cfg = config.resolve("quick", {
        "data.path": str(tmp_path / "data"), "data.n_showers": 48, "data.n_files": 4,
        "data.test_fraction": 0.25, "train.batch_size": 2, "train.steps_per_epoch": 2,
        "train.eval_fraction": 0.5, "train.epochs": 2, "train.output": str(tmp_path / "run"),
        "train.precision": "float32", "train.monitor_showers": 8})
    run = training.train(cfg)
    folder = tmp_path / "shipped"
    with pytest.raises(CheckpointError, match="no reference generator"):
        reference.load(folder)
    meta = reference.export(tmp_path / "run", folder, note="test", monitor_showers=16)
    assert reference.available(folder)
    info = reference.info(folder)
    assert info["showers_seen"] == 2 * 2 * 2 == meta["showers_seen"] and info["epochs"] == 2
    assert reference.label(folder) == "reference generator (8 showers of training)"
    assert [r["showers_seen"] for r in info["learning_curve"]] == [4, 8]
    assert "mon_max_layer_400" in info["learning_curve"][-1]
    assert info["final_monitors"]["targets"] == 4 * len(monitors.TARGETS)
    assert set(info["showers_needed"]) == set(monitors.TARGETS)
    # no folder of the machine it was trained on
    assert info["config"]["data"]["path"] == "data/data" and info["config"]["train"]["output"] == "results/run"
    gen, disc = reference.load(folder, discriminator=True)
    trained = load_generator(run.generator)
    e = np.array([50.0, 400.0])
    assert np.array_equal(generate_showers(gen, e, seed=1), generate_showers(trained, e, seed=1))
    # the shipped discriminator is the trained one, not a freshly built network of the same shape
    trained_d = load_discriminator(tmp_path / "run" / "discriminator.keras")
    assert len(disc.weights) == len(trained_d.weights) == 24
    for a, b in zip(disc.weights, trained_d.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert (folder / "generator.weights.h5").stat().st_size < 5e6  # weights only, float32
    # a run still training has no generator.keras yet: its newest checkpoint is exported
    (tmp_path / "run" / "generator.keras").unlink()
    again = tmp_path / "from_checkpoint"
    assert reference.export(tmp_path / "run", again, monitor_showers=16)["showers_seen"] == 8
    assert np.array_equal(generate_showers(reference.load(again), e, seed=1),
                          generate_showers(trained, e, seed=1))
    # or a chosen epoch: its networks and showers seen, the whole run's learning curve
    first = reference.export(tmp_path / "run", tmp_path / "epoch1", monitor_showers=16,
                             checkpoint=tmp_path / "run" / "checkpoints" / "epoch-0001.npz")
    assert first["showers_seen"] == 4 and first["epoch"] == 1 and first["epochs"] == 2
    assert len(first["learning_curve"]) == 2
    with pytest.raises(CheckpointError, match="no generator.keras and no checkpoint"):
        reference.export(tmp_path / "data", tmp_path / "none")
    assert not (tmp_path / "none").exists()  # nothing half-written
    # a folder that holds another export is refused before any work, unless forced
    shipped = (folder / "reference.json").read_bytes()
    with pytest.raises(OutputExists, match="another result.*--force"):
        reference.export(tmp_path / "run", folder, monitor_showers=16)
    assert (folder / "reference.json").read_bytes() == shipped
    assert reference.export(tmp_path / "run", folder, monitor_showers=16, force=True)["epoch"] == 2
    with pytest.raises(OutputNotWritable, match="is a file"):
        reference.export(tmp_path / "run", folder / "reference.json", monitor_showers=16)
    # a checkpoint file itself: its run is its folder's; the checkpoint is named (with its sha256)
    # without the folders of this machine, and the folder it wrote serves by path wherever a
    # training folder is taken: the same networks as the checkpoint's
    import hashlib
    import json

    from gan3d.validation import study

    ckpt = tmp_path / "run" / "checkpoints" / "epoch-0002.npz"
    meta = reference.export(ckpt, tmp_path / "exported", monitor_showers=16)
    assert meta["source"] == {"checkpoint": "epoch-0002.npz",
                              "sha256": hashlib.sha256(ckpt.read_bytes()).hexdigest()}
    assert meta["forks"] == [] and meta["fork"] is None and meta["workers"] == 1
    assert str(tmp_path) not in (tmp_path / "exported" / "reference.json").read_text()
    assert reference.folder_of(tmp_path / "exported") == tmp_path / "exported"
    assert reference.folder_of(tmp_path / "run") is None  # a training folder is not an export
    rec = study.generator_record(tmp_path / "exported")
    assert rec["exported_from"] == meta["source"] and rec["showers_seen"] == 8
    assert [r["epoch"] for r in rec["history"]] == [1, 2]
    assert rec["history"][-1]["lr"] == study.checkpoint_record(ckpt)["history"][-1]["lr"]
    gen, _ = study.load_networks(tmp_path / "exported")
    ck_gen, _ = reference.networks_from_checkpoint(ckpt)
    assert np.array_equal(generate_showers(gen, e, seed=3), generate_showers(ck_gen, e, seed=3))
    assert json.loads((tmp_path / "exported" / "reference.json").read_text())["epoch"] == 2


def test_a_shipped_name_or_an_exported_folder_is_found_and_anything_else_is_not(tmp_path):
    assert reference.folder_of("reference") == reference.FOLDER
    assert reference.folder_of("long-1w") == reference.SHIPPED["long-1w"]
    assert reference.folder_of("long-3w") is None and reference.folder_of(tmp_path) is None
    for name in ("generator.weights.h5", "discriminator.weights.h5"):  # one file short: not one
        (tmp_path / name).write_bytes(b"")
    assert reference.folder_of(tmp_path) is None
    (tmp_path / "reference.json").write_text("{}")
    assert reference.folder_of(tmp_path) == tmp_path


def test_an_exported_config_names_no_folder_of_the_machine_that_trained_it():
    """``gan3d train --fork-from`` recorded the checkpoint's absolute path (it now records one
    inside the checkout from the checkout's root; the third long run's committed epoch 84 has
    one); the export keeps its path from ``studies/`` on, as the fork records name it, and
    leaves a relative one alone."""
    cfg = {"data": {"path": "/home/u/gan3d/data/learning-curve"},
           "train": {"output": "/home/u/gan3d/results/long", "fork_from":
                     "/home/u/gan3d/studies/long-2w-none-bf16/epoch-0076.npz"}}
    out = reference.portable(cfg)
    assert out == {"data": {"path": "data/learning-curve"},
                   "train": {"output": "results/long",
                             "fork_from": "studies/long-2w-none-bf16/epoch-0076.npz"}}
    assert cfg["train"]["fork_from"].startswith("/home")  # the caller's dict is left alone
    kept = {"train": {"fork_from": "studies/warm-start/epoch-0026.npz", "output": ""}}
    assert reference.portable(kept) == kept
