"""Files from an independent writer (h5py directly, not the package's writer) that are readable
but wrong: each gives a named error from read_showers, from `gan3d data check` (exit 1, one line
for the bad file, no traceback) and from `gan3d train` (before any step)."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

from gan3d.data import files
from gan3d.exceptions import DataError, DataSchemaError, DataValueError

from conftest import fixed_file, random_showers, write_h5

E = np.linspace(20.0, 400.0, 12).astype(np.float32)


def _good():
    return random_showers(12, 3, energy=E)


def _group(path):
    with h5py.File(path, "w") as f:
        f.create_group("ECAL")["cells"] = np.zeros((12, 25, 25, 25), np.float32)
        f["target"] = np.c_[np.full(12, 11.0), E]


def _variable_angles(path):
    ecal, energy = _good()
    big = np.zeros((12, 51, 51, 25), np.float32)
    big[:, 13:38, 13:38] = ecal
    write_h5(path, ECAL=big, energy=energy, theta=np.repeat([1.4, 1.6, 1.8], 4))


def _writer(case):
    ecal, energy = _good()
    return {
        "ECAL is a group": _group,
        "cells in MeV": lambda p: fixed_file(p, ecal * 1000, energy),
        "already preprocessed": lambda p: fixed_file(p, ecal * 100, energy / 100),
        "target columns swapped": lambda p: write_h5(p, ECAL=ecal, target=np.c_[energy, np.full(12, 11.0)]),
        "no showers": lambda p: fixed_file(p, ecal[:0], energy[:0]),
        "every shower empty": lambda p: fixed_file(p, np.zeros_like(ecal), energy),
        "several angles": _variable_angles,
    }[case]


CASES = {  # case -> (error class, words the message must contain)
    "ECAL is a group": (DataSchemaError, "'ECAL' is an HDF5 group, not a dataset"),
    "cells in MeV": (DataValueError, "MeV"),
    "already preprocessed": (DataValueError, "already preprocessed"),
    "target columns swapped": (DataValueError, "columns of 'target' swapped"),
    "no showers": (DataValueError, "holds no showers"),
    "every shower empty": (DataValueError, "every shower is empty"),
    "several angles": (DataSchemaError, "data.theta_window"),
}


@pytest.mark.parametrize("case", CASES)
def test_read_showers_names_the_problem_and_its_cause(tmp_path, case):
    path = tmp_path / "bad.h5"
    _writer(case)(path)
    error, words = CASES[case]
    with pytest.raises(error, match=words) as info:
        files.read_showers(path)
    assert str(path) in str(info.value)
    assert info.value.__traceback__ is not None and info.value.__cause__ is None


@pytest.mark.parametrize("case", CASES)
def test_data_check_names_only_the_bad_file(tmp_path, case):
    fixed_file(tmp_path / "a_good.h5", *_good())
    _writer(case)(tmp_path / "b_bad.h5")
    fixed_file(tmp_path / "c_good.h5", *_good())
    out = subprocess.run([sys.executable, "-m", "gan3d", "data", "check", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    problems = [line for line in out.stdout.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1 and "b_bad.h5" in problems[0] and CASES[case][1] in problems[0]
    assert "Traceback" not in out.stdout + out.stderr


def test_a_window_keeps_one_angle_and_says_how_many(tmp_path):
    _variable_angles(tmp_path / "var.h5")
    assert files.count_showers(tmp_path / "var.h5", (1.5, 1.7)) == 4
    ecal, energy = files.read_showers(tmp_path / "var.h5", theta_window=(1.5, 1.7))
    np.testing.assert_array_equal(energy, E[4:8])  # the showers at theta 1.6, in order
    np.testing.assert_array_equal(ecal, _good()[0][4:8])
    assert "4 of 12 showers inside data.theta_window [1.5, 1.7]" in files.screen(
        tmp_path / "var.h5", (1.5, 1.7))[0]
    with pytest.raises(DataValueError, match="no showers with theta inside"):
        files.read_showers(tmp_path / "var.h5", theta_window=(2.0, 3.0))


def test_legitimate_but_notable_files_read_with_a_note(tmp_path):
    ecal, _ = random_showers(12, 4, energy=np.full(12, 100.0))
    fixed_file(tmp_path / "fixed.h5", ecal, np.full(12, 100.0, np.float32))
    gan, energy = _good()
    files.write_showers(tmp_path / "gan.h5", gan * 50, energy,  # implausible, and a GAN's
                        attrs={files.ORIGIN_ATTR: files.GAN_ORIGIN})
    fixed_file(tmp_path / "f64.h5", *(x.astype(np.float64) for x in _good()))
    report = files.check_folder(tmp_path)
    assert report.problems == [] and report.files == 3 and report.showers == 36
    assert any("fixed.h5" in n and "100 GeV" in n for n in report.notes)
    assert any("gan.h5" in n and "written by a GAN" in n and "implausible" in n
               for n in report.notes)
    assert files.read_showers(tmp_path / "gan.h5")[0].max() > 0  # validation can read it


@pytest.mark.slow
@pytest.mark.parametrize("case", ["cells in MeV", "ECAL is a group", "several angles"])
def test_train_refuses_bad_data_before_any_step(tmp_path, case):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("a", "b", "c"):
        fixed_file(data / f"{name}.h5", *_good())
    _writer(case)(data / "d.h5")  # the test file of the 90/10 split
    out = subprocess.run([sys.executable, "-m", "gan3d", "train", "--set", "data.source=clic",
                          "--set", f"data.path={data}", "--set", f"train.output={tmp_path / 'out'}",
                          "--set", "train.batch_size=2"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2 and "d.h5" in out.stderr and CASES[case][1] in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "out" / "history.jsonl").exists()


def test_every_named_error_is_a_data_error():
    assert all(issubclass(error, DataError) for error, _ in CASES.values())
