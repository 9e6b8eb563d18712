"""A study stays current only through code shown to make the same numbers: staleness with
``equivalent_code``, the bit-for-bit comparison of two runs, and (slow) ``verify_code`` end to end
against a reference copy of the package, with real trainings."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

import gan3d
from gan3d import config
from gan3d.convergence import plan, study
from gan3d.convergence.verify import (StudyCodeDiffers, compare_runs, package_root, reference_config,
                                     reference_hash)


def _results(code_hash: str, equivalent: dict | None = None) -> dict:
    run = {"config_id": "1w", "block": "eq", "seed": 0, "sync_every": 1, "rows": [],
           "code_hash": code_hash}
    out = {"runs": {"1w-s0": run}, "code_hash": code_hash}
    if equivalent is not None:
        out["equivalent_code"] = equivalent
    return out


def test_a_run_of_verified_equivalent_code_is_current_and_no_other():
    now = plan.code_hash()
    assert study.stale(_results("0123456789abcdef")) == ["1w-s0"]
    verified = {now: {"same_as": "0123456789abcdef"}}
    assert study.stale(_results("0123456789abcdef", verified)) == []
    # An equivalence recorded for another checkout's hash says nothing about this one.
    assert study.stale(_results("0123456789abcdef", {"fedcba9876543210": {
        "same_as": "0123456789abcdef"}})) == ["1w-s0"]
    # Nor does it make runs of a third version current.
    assert study.stale(_results("1111111111111111", verified)) == ["1w-s0"]


def _fake_run(folder: Path, rows: list[dict], weight: np.ndarray) -> Path:
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    h5 = folder / "w.h5"
    with h5py.File(h5, "w") as f:
        f["layers/dense/vars/0"] = weight
    with zipfile.ZipFile(folder / "generator.keras", "w") as z:
        z.write(h5, "model.weights.h5")
    return folder


def test_runs_compare_bit_for_bit_except_their_timings(tmp_path):
    rows = [{"epoch": 1, "d_loss": 1.25, "g_loss": 3.5, "mon_profile_distance_100": 0.3,
             "time_train_s": 10.0, "showers_per_s": 3.2}]
    w = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    a = _fake_run(tmp_path / "a", rows, w)
    slower = [{**rows[0], "time_train_s": 12.0, "showers_per_s": 2.7}]
    assert compare_runs(a, _fake_run(tmp_path / "b", slower, w)) == (4, 12)
    moved = [{**rows[0], "g_loss": 3.5000002}]
    with pytest.raises(StudyCodeDiffers, match="epoch 1: g_loss"):
        compare_runs(a, _fake_run(tmp_path / "c", moved, w))
    w2 = w.copy()
    w2[1, 2] = np.nextafter(w2[1, 2], np.float32(2))  # one bit of one weight
    with pytest.raises(StudyCodeDiffers, match="generator weight layers/dense/vars/0"):
        compare_runs(a, _fake_run(tmp_path / "d", rows, w2))


def test_a_reference_without_the_package_is_a_named_error(tmp_path):
    with pytest.raises(StudyCodeDiffers, match="holds no gan3d package"):
        package_root(tmp_path)


def test_the_reference_reads_a_config_without_the_settings_added_since(tmp_path):
    """A setting newer than the reference is dropped when at its default (which keeps the old
    behaviour) and refused otherwise: the reference would fail on an unknown key."""
    ref = tmp_path / "ref"
    shutil.copytree(Path(gan3d.__file__).parent, ref / "gan3d",
                    ignore=shutil.ignore_patterns("__pycache__"))
    source = ref / "gan3d" / "config.py"
    lines = source.read_text().splitlines(keepends=True)
    source.write_text("".join(x for x in lines if not x.lstrip().startswith("cpu_layers:")))
    cfg = config.to_dict(config.resolve("quick", {"train.epochs": 2}))
    got = reference_config(ref, cfg)
    assert "cpu_layers" not in got["train"] and got["train"]["epochs"] == 2
    assert "cpu_layers" in cfg["train"]  # the caller's dict is left alone
    assert {k: v for k, v in cfg["train"].items() if k != "cpu_layers"} == got["train"]
    fast = config.to_dict(config.resolve("quick", {"train.cpu_layers": "fast"}))
    with pytest.raises(StudyCodeDiffers, match="no setting train.cpu_layers = 'fast'"):
        reference_config(ref, fast)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_verify_code_passes_for_a_change_that_moves_no_number(tmp_path):
    """The reference differs from this checkout by a comment in a hashed module: its hash
    differs, its trainings do not; the study becomes current. A reference with another hash than
    the study's is refused before anything trains."""
    ref = tmp_path / "ref"
    shutil.copytree(Path(gan3d.__file__).parent, ref / "gan3d",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(ref / "gan3d" / "gan" / "history.py", "a") as f:
        f.write("# a comment changes the code hash and no number\n")
    env_hash = reference_hash(ref)
    assert env_hash != plan.code_hash()
    out = tmp_path / "c.json"
    out.write_text(json.dumps(_results(env_hash)))
    cfg = config.resolve("quick", {"study.output": str(out), "study.workdir": str(tmp_path / "w"),
                                   "study.data_showers": 100, "study.monitor_showers": 4})
    assert study.stale(study.load(out)) == ["1w-s0"]
    entry = study.verify(cfg, ref, showers=16)
    assert entry["same_as"] == env_hash and "bit for bit" in entry["compared"]
    saved = study.load(out)
    assert saved["equivalent_code"][plan.code_hash()]["same_as"] == env_hash
    assert study.stale(saved) == []
    out.write_text(json.dumps(_results("0123456789abcdef")))
    with pytest.raises(StudyCodeDiffers, match="the study was made by 0123456789abcdef"):
        study.verify(cfg, ref, showers=16)

