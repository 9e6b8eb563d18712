"""The gan3d command: doctor, and user errors as one clear line (exit 2), never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def gan3d(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gan3d", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_doctor_reports_a_complete_environment():
    res = gan3d("doctor")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "tensorflow=True, mpi=True, gloo=True" in out
    assert "Open MPI v5" in out and "all good" in out
    assert "OMPI_MCA_mpi_yield_when_idle=1" in out


def test_bad_override_is_one_line_naming_the_key():
    res = gan3d("train", "--set", "train.epoch=3")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "unknown configuration key 'train.epoch'" in res.stderr and "epochs" in res.stderr


def test_wrong_type_names_the_expected_type():
    res = gan3d("data", "generate", "--set", "data.n_showers=many")
    assert res.returncode == 2 and "data.n_showers" in res.stderr and "int" in res.stderr


def test_unknown_notebook_for_reproduce_lists_the_choices():
    res = gan3d("reproduce", "--only", "99")
    assert res.returncode == 2 and "data, training, scaling, validation, concepts" in res.stderr


def test_validate_names_a_folder_without_generator(tmp_path):
    res = gan3d("validate", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and "nowhere" in res.stderr and "Traceback" not in res.stderr


def test_export_names_a_source_that_is_not_there_or_holds_no_generator(tmp_path):
    res = gan3d("export", str(tmp_path / "nowhere"), str(tmp_path / "out"))
    assert res.returncode == 2 and "nowhere: no such training folder or checkpoint" in res.stderr
    (tmp_path / "empty").mkdir()
    res = gan3d("export", str(tmp_path / "empty"), str(tmp_path / "out"))
    assert res.returncode == 2 and "no generator.keras and no checkpoint" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()  # nothing half-written
    res = gan3d("export", str(tmp_path / "empty"), str(tmp_path / "out"), "--monitor-showers", "0")
    assert res.returncode == 2 and "--monitor-showers 0: give at least 2" in res.stderr


def test_every_command_says_what_it_does_shows_its_defaults_and_examples():
    import argparse

    from gan3d import cli

    parser = cli.build_parser()
    seen = []

    def walk(p, name):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(sub, f"{name} {sub_name}".strip())
                return
        seen.append(name)
        text = p.format_help()
        assert p.description, name
        assert "examples:\n  " in text and f"gan3d {name}" in text.split("examples:")[1], name

    walk(parser, "")
    assert {"train", "simulate", "data generate", "warm-start", "export"} <= set(seen)
    assert "examples:" in parser.format_help()
    simulate = parser._subparsers._group_actions[0].choices["simulate"].format_help()
    assert "(default: 64)" in simulate and "(default: 10:500)" in simulate
    train = parser._subparsers._group_actions[0].choices["train"].format_help()
    assert "(default: quick)" in train and "(default: the profile's)" in train


@pytest.mark.parametrize("case", ["simulate-folder", "simulate-file", "export-file", "export-held"])
def test_an_output_path_is_refused_before_tensorflow_loads(tmp_path, case):
    """A wrong --output costs a user a fraction of a second, not TensorFlow's start-up."""
    held = tmp_path / "held"
    held.mkdir()
    (held / "showers.h5").write_text("another run's showers")
    (held / "reference.json").write_text("{}")
    argv = {"simulate-folder": ["simulate", "--n", "10", "--output", str(held)],
            "simulate-file": ["simulate", "--n", "10", "--output", str(held / "showers.h5")],
            "export-file": ["export", str(tmp_path), str(held / "showers.h5")],
            "export-held": ["export", str(tmp_path), str(held)]}[case]
    code = ("import sys; from gan3d import cli; rc = cli.main(sys.argv[1:]); "
            "print('TF', 'tensorflow' in sys.modules); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert ("is a folder" in out.stderr or "is a file" in out.stderr
            or "already holds another result" in out.stderr)
    assert "TF False" in out.stdout
    assert (held / "showers.h5").read_text() == "another run's showers"


def test_a_path_typed_on_the_command_line_is_taken_from_the_current_folder(tmp_path):
    """As with every command-line tool: `--output held/showers.h5` typed in another folder means
    that folder's file, not one in the checkout (settings' paths stay the checkout's)."""
    (tmp_path / "held").mkdir()
    (tmp_path / "held" / "showers.h5").write_text("another run's showers")
    out = subprocess.run([sys.executable, "-m", "gan3d", "simulate", "--n", "4", "--output",
                          "held/showers.h5"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and f"{tmp_path / 'held' / 'showers.h5'} already holds" in out.stderr


def test_a_run_records_a_path_typed_inside_the_checkout_from_the_checkout_root(tmp_path,
                                                                               monkeypatch):
    """`gan3d train` records its settings in every checkpoint: a path typed inside the checkout
    is kept from the checkout's root (the same file; a committed checkpoint names no folder of
    the machine that made it), one outside it as typed, absolute."""
    from gan3d import cli
    from gan3d.gan import training
    from gan3d.io import repo_root, resolve_path

    root, seen = repo_root(), {}
    monkeypatch.setattr(training, "train", lambda cfg, **kw: seen.setdefault("cfg", cfg))
    monkeypatch.chdir(root / "studies")  # typed from a subfolder: taken from there
    assert cli.main(["train", "--workers", "1", "--fork-from", "warm-start/epoch-0026.npz",
                     "--output", str(tmp_path / "run")]) == 0
    cfg = seen["cfg"]
    assert cfg.train.fork_from == "studies/warm-start/epoch-0026.npz"
    assert resolve_path(cfg.train.fork_from) == root / "studies" / "warm-start" / "epoch-0026.npz"
    assert cfg.train.output == str(tmp_path / "run")
