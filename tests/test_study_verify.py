"""A study stays current only through code shown to make the same numbers: staleness with the
behavioural ``checks`` (kind by kind), the bit-for-bit comparison of two runs, and (slow)
``verify_code`` end to end against a reference copy of the package, with real trainings - one
that makes the same numbers, and one whose local SGD differs, which a check of one worker alone
would have passed."""

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
from gan3d.convergence import plan, study, verify
from gan3d.io import git_state
from gan3d.convergence.verify import (StudyCodeDiffers, compare_runs, package_root, reference_config,
                                     reference_hash)


def _run(rid: str, code_hash: str) -> dict:
    workers, sync = (1, 1) if rid.startswith("1w") else (2, 4 if "-k4" in rid else 1)
    return {"config_id": rid.rsplit("-s", 1)[0], "block": "eq", "seed": 0, "workers": workers,
            "rule": "linear", "sync_every": sync, "rows": [], "code_hash": code_hash}


def _results(code_hash: str, checks: dict | None = None, ids=("1w-s0",)) -> dict:
    out = {"runs": {i: _run(i, code_hash) for i in ids}, "code_hash": code_hash}
    if checks is not None:
        out["checks"] = checks
    return out


def test_a_run_is_current_only_where_a_check_of_this_version_covered_its_kind():
    now = plan.code_hash()
    old = "0123456789abcdef"
    ids = ("1w-s0", "2w-linear-s0", "2w-linear-k4-s0")
    assert study.stale(_results(old, ids=ids)) == sorted(ids)
    assert study.stale(_results(now, ids=ids)) == []  # made by this version itself
    both = {now: {"same_as": old, "kinds": {"1w": {}, "allreduce": {}}}}
    # local SGD was not checked: its run stays stale, the others are current
    assert study.stale(_results(old, both, ids)) == ["2w-linear-k4-s0"]
    every = {now: {"same_as": old, "kinds": {"1w": {}, "allreduce": {}, "local-sgd": {}}}}
    assert study.stale(_results(old, every, ids)) == []
    # A check recorded for another checkout's version says nothing about this one...
    assert study.stale(_results(old, {"fedcba9876543210": every[now]}, ids)) == sorted(ids)
    # ...nor does it make runs of a third version current.
    assert study.stale(_results("1111111111111111", every, ids)) == sorted(ids)
    # The old one-run record (equivalent_code, one worker only) no longer keeps a study current.
    legacy = _results(old, ids=ids)
    legacy["equivalent_code"] = {now: {"same_as": old, "run": "1w-s0"}}
    assert study.stale(legacy) == sorted(ids)


def test_the_code_version_ignores_docstrings_comments_and_imports_but_not_code():
    source = 'import os\n\n\ndef f(x):\n    """Twice."""\n    return 2 * x\n'
    same = ('"""A module."""\nfrom pathlib import Path  # moved\n\n\ndef f(x):\n'
            '    """Two times x, reworded."""\n    # a comment\n    return 2 * x\n')
    assert plan.code_of(source) == plan.code_of(same)
    assert plan.code_of(source) != plan.code_of(source.replace("2 * x", "x * 2"))
    assert plan.code_of(source) != plan.code_of(source.replace("return", "y = 0\n    return"))


def test_warm_start_runs_are_current_only_where_a_check_covered_their_kind():
    from gan3d.convergence import warmstart

    now, old = warmstart.code_hash(), "0123456789abcdef"
    runs = {"1w-s0": {"workers": 1, "precision": "float32", "code_hash": old},
            "2w-none-s0": {"workers": 2, "sync_every": 1, "precision": "float32",
                           "code_hash": old},
            "2w-linear-k16-s0": {"workers": 2, "sync_every": 16, "precision": "float32",
                                 "code_hash": old},
            "1w-bf16-s0": {"workers": 1, "precision": "bfloat16", "code_hash": old},
            "2w-sqrt-s0": {"workers": 2, "sync_every": 1, "code_hash": now}}
    assert [warmstart.run_kind(r) for r in runs.values()] == [
        "1w", "allreduce", "local-sgd", "bfloat16", "allreduce"]
    results = {"runs": runs}
    assert verify.stale_runs(results, warmstart.SUBJECT) == sorted(set(runs) - {"2w-sqrt-s0"})
    results["checks"] = {now: {"same_as": old, "kinds": {"1w": {}, "allreduce": {}}}}
    assert verify.stale_runs(results, warmstart.SUBJECT) == ["1w-bf16-s0", "2w-linear-k16-s0"]
    results["checks"] = {old: {"same_as": now, "kinds": dict.fromkeys(warmstart.SUBJECT.kinds)}}
    assert len(verify.stale_runs(results, warmstart.SUBJECT)) == 4  # a check of another version
    # checks chain: a later version checked against the one before it keeps the oldest runs too,
    # kind by kind, where every link covers the kind
    mid = "1111111111111111"
    results["runs"]["2w-sqrt-s0"]["code_hash"] = mid
    results["checks"] = {now: {"same_as": mid, "kinds": {"1w": {}, "allreduce": {}}},
                         mid: {"same_as": old, "kinds": dict.fromkeys(warmstart.SUBJECT.kinds)}}
    assert verify.stale_runs(results, warmstart.SUBJECT) == ["1w-bf16-s0", "2w-linear-k16-s0"]
    results["checks"][mid] = {"same_as": now, "kinds": {"1w": {}}}  # a loop ends, stale
    assert len(verify.stale_runs(results, warmstart.SUBJECT)) == 4
    cfg = config.resolve("quick", {})
    for kind in warmstart.SUBJECT.kinds:  # each check shortens a run of its own kind
        short, run_id = warmstart.SUBJECT.short(cfg, kind, 256)
        entry = {"workers": short.train.workers, "sync_every": short.train.sync_every,
                 "precision": short.train.precision, "warmup": short.train.lr_warmup_epochs}
        assert warmstart.run_kind(entry) == kind and short.train.fork_from
        assert short.train.data_order == "global" and short.train.epochs - 26 == 2


def test_each_kind_of_run_maps_to_the_check_that_covers_it():
    cases = {("eq", 1, "linear", 1): "1w", ("eq", 2, "linear", 1): "allreduce",
             ("eq", 2, "none", 1): "allreduce", ("lr", 4, "sqrt", 1): "allreduce",
             ("sync", 2, "linear", 16): "local-sgd", ("lr", 2, "warmup", 1): "warmup",
             ("lr", 4, "warmup", 1): "warmup"}
    for (block, workers, rule, k), kind in cases.items():
        assert plan.run_kind(plan.Run(block, workers, rule, k, 0)) == kind
    cfg = config.resolve("study")
    held = verify.needed_kinds({"runs": {r.id: {"workers": r.workers, "rule": r.rule,
                                                "sync_every": r.sync_every}
                                         for r in plan.plan(cfg)}})
    assert held == ["1w", "allreduce", "local-sgd", "warmup"]
    run, extra = verify.kind_run(cfg, "local-sgd")
    assert run.sync_every == 4 and run.workers == 2  # the smallest k > 1 the study holds


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


def _reference(tmp_path, name: str, edits: dict[str, tuple[str, str]]) -> Path:
    """A copy of this checkout's package with ``edits`` (module -> (old, new) text)."""
    ref = tmp_path / name
    shutil.copytree(Path(gan3d.__file__).parent, ref / "gan3d",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for module, (old, new) in edits.items():
        path = ref / "gan3d" / module
        text = path.read_text()
        assert old in text, (module, old)
        path.write_text(text.replace(old, new, 1))
    return ref


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_verify_code_keeps_a_study_current_only_for_code_that_trains_every_kind_alike(tmp_path):
    """A reference that differs by a statement that changes no number in a hashed module:
    another version, the same trainings of local SGD on 2 MPI ranks; the study of that kind
    becomes current. A reference
    whose local SGD synchronises at other steps (which no 1-worker run executes, so the old
    one-run check passed it) is caught by the local-SGD check."""
    comment = {"gan/history.py": ("from __future__ import annotations\n",
                                  "from __future__ import annotations\n_UNUSED = 0\n")}
    ref = _reference(tmp_path, "same", comment)
    env_hash = reference_hash(ref)
    assert env_hash != plan.code_hash()
    out = tmp_path / "c.json"
    ids = ("2w-linear-k4-s0",)
    out.write_text(json.dumps(_results(env_hash, ids=ids)))
    cfg = config.resolve("quick", {"study.output": str(out), "study.workdir": str(tmp_path / "w"),
                                   "study.data_showers": 100, "study.monitor_showers": 4,
                                   "study.sync_every": [1, 4]})
    assert study.stale(study.load(out)) == sorted(ids)
    entry = study.verify(cfg, ref, showers=32, allow_dirty=True)
    assert entry["same_as"] == env_hash and sorted(entry["kinds"]) == ["local-sgd"]
    # bit for bit, or (where each code trains alike but the two apart in the last bits) within
    # the machine's noise
    assert all(c["equality"] == "bit for bit" or c["equality"].startswith("within 1e-05 relative")
               for c in entry["kinds"].values())
    assert entry["kinds"]["local-sgd"]["workers"] == 2
    assert entry["checkout"]["clean"] == (git_state().clean is True)
    saved = study.load(out)
    assert saved["checks"][plan.code_hash()]["same_as"] == env_hash
    assert study.stale(saved) == []
    # The same check says nothing about a run of another kind.
    saved["runs"]["1w-s0"] = _run("1w-s0", env_hash)
    assert study.stale(saved) == ["1w-s0"]

    late = {**comment, "gan/local_sgd.py": ("if done % self.every == 0:",
                                            "if done % self.every == 1:")}
    drift = _reference(tmp_path, "drift", late)
    out.write_text(json.dumps(_results(reference_hash(drift), ids=ids)))
    differs = r"\(this checkout\) against|generator weight"
    with pytest.raises(StudyCodeDiffers, match=differs) as err:
        study.verify(cfg, drift, showers=32, kinds=["local-sgd"], allow_dirty=True)
    # each code's run was trained twice, alike both times, and the two apart by far more than
    # the machine's noise: a change of code
    assert "both codes train alike run after run, and differ by up to" in str(err.value)
    assert "more than the machine's noise of 1e-05: its code trains otherwise" in str(err.value)
    assert "checks" not in study.load(out)  # nothing recorded for a check that failed
    out.write_text(json.dumps(_results("0123456789abcdef")))
    with pytest.raises(StudyCodeDiffers, match="the study's runs were made by 0123456789abcdef"):
        study.verify(cfg, ref, showers=32, allow_dirty=True)


def test_the_largest_difference_of_two_runs_is_relative_and_covers_every_number(tmp_path):
    """Histories and generator weights (Keras files) as runs write them: equal runs are 0 apart; one
    loss moved by 1e-8 relative, or one weight by 1e-3 of its tensor's largest, is seen."""

    from gan3d.convergence import verify
    from gan3d.gan.model import build_generator

    gen = build_generator()
    rows = [{"epoch": 1, "d_loss": 3.0, "g_loss": 2.0, "mon_targets_met": 4, "time_train_s": 1.0},
            {"epoch": 2, "d_loss": 2.5, "g_loss": 1.5, "mon_targets_met": 5, "time_train_s": 9.0}]

    def run(name, rows, scale=None):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        if scale is not None:
            w = gen.weights[0]
            w.assign(w.numpy() + scale * np.abs(w.numpy()).max())
        gen.save(folder / "generator.keras")
        if scale is not None:
            w.assign(w.numpy() - scale * np.abs(w.numpy()).max())
        return folder

    a = run("a", rows)
    assert verify.largest_difference(a, run("b", rows)) == (0.0, 8, gen.count_params())
    moved = [rows[0], {**rows[1], "d_loss": 2.5 * (1 + 1e-8), "time_train_s": 50.0}]
    largest, _, _ = verify.largest_difference(a, run("c", moved))
    assert largest == pytest.approx(1e-8, rel=1e-3)  # the timing is not compared
    largest, _, _ = verify.largest_difference(a, run("d", rows, scale=1e-3))
    assert 0.9e-3 < largest < 1.1e-3 and largest > verify.NOISE

    # Where this checkout's two runs differ from each other (no bits can agree), each must lie
    # within the machine's noise of the reference's; one run a change of code away fails it all.
    ref = run("ref", rows)  # the weights as they are now (w + d - d is not w in float32)
    again = [rows[0], {**rows[1], "g_loss": 1.5 * (1 - 3e-8)}]
    equality, numbers, weights = verify.within_noise(
        [(run("c2", moved), ref), (run("e", again), ref)], "kind: differs (two runs differ")
    assert equality == "within 1e-05 relative (largest difference 3e-08)"
    assert (numbers, weights) == (8, gen.count_params())
    with pytest.raises(verify.StudyCodeDiffers, match=r"two runs differ by up to 0\.00099\d relative, "
                       r"more than the machine's noise of 1e-05"):
        verify.within_noise([(run("c3", moved), ref), (run("f", rows, scale=1e-3), ref)],
                            "kind: differs (two runs differ")
