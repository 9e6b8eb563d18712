"""Shower files in the CLIC schema: layouts, bad input, checks, the split by file, samples."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from gan3d.data import files, sample
from gan3d.exceptions import (CorruptDataFile, DataError, DataFileMissing, DataSchemaError,
                              DataValueError)

from conftest import fixed_file, random_showers, write_h5


# ---------------------------------------------------------------------------------------------
# Layouts

def test_round_trip_is_identical(tmp_path):
    ecal, energy = random_showers(37)
    files.write_showers(tmp_path / "a.h5", ecal, energy)
    got_ecal, got_energy = files.read_showers(tmp_path / "a.h5")
    np.testing.assert_array_equal(got_ecal, ecal)
    np.testing.assert_array_equal(got_energy, energy)
    part, e = files.read_showers(tmp_path / "a.h5", start=5, stop=9)
    np.testing.assert_array_equal(part, ecal[5:9])
    np.testing.assert_array_equal(e, energy[5:9])
    assert files.count_showers(tmp_path / "a.h5") == 37


def test_real_fixed_angle_layout_is_read(tmp_path):
    """The CLIC EleEscan layout: float64 ECAL, an HCAL we ignore, energy in target column 1."""
    ecal, energy = random_showers(6)
    write_h5(tmp_path / "EleEscan_1_1.h5", ECAL=ecal.astype(np.float64),
        HCAL=np.zeros((6, 5, 5, 60)), target=np.c_[np.full(6, 11.0), energy])
    got, e = files.read_showers(tmp_path / "EleEscan_1_1.h5")
    assert got.dtype == np.float32 and e.dtype == np.float32
    np.testing.assert_array_equal(got, ecal)
    np.testing.assert_array_equal(e, energy)


@pytest.mark.parametrize("energy_shape", [(4,), (4, 1)])
def test_variable_angle_layout_is_cropped_to_the_centre(tmp_path, energy_shape):
    big = np.zeros((4, 51, 51, 25), np.float32)
    big[:, 13:38, 13:38, :] = random_showers(4, energy=[15.0, 60.0, 250.0, 480.0])[0]
    big[:, 0, 0, :] = 0.01  # outside the window: must not appear
    energy = np.array([15.0, 60.0, 250.0, 480.0]).reshape(energy_shape)
    write_h5(tmp_path / "var.h5", ECAL=big, energy=energy, theta=np.full(4, 1.2))
    ecal, e = files.read_showers(tmp_path / "var.h5")
    assert ecal.shape == (4, 25, 25, 25)
    np.testing.assert_array_equal(ecal, big[:, 13:38, 13:38, :])
    np.testing.assert_array_equal(e, [15.0, 60.0, 250.0, 480.0])


# ---------------------------------------------------------------------------------------------
# Bad input: each a named error that names the file and the problem, without a deep traceback

def _raises(exc_type, path, match, **kw):
    with pytest.raises(exc_type, match=match) as info:
        files.read_showers(path, **kw)
    assert path.name in str(info.value)
    assert info.value.__cause__ is None  # no chained h5py traceback
    return info.value


def test_missing_file(tmp_path):
    _raises(DataFileMissing, tmp_path / "nowhere.h5", "no such data file")


def test_not_hdf5_and_truncated_files(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"this is not HDF5" * 100)
    _raises(CorruptDataFile, junk, "not a readable HDF5 file")
    files.write_showers(tmp_path / "cut.h5", *random_showers(64))
    data = (tmp_path / "cut.h5").read_bytes()
    (tmp_path / "cut.h5").write_bytes(data[: len(data) // 2])  # an interrupted copy
    _raises(CorruptDataFile, tmp_path / "cut.h5", "truncated")


@pytest.mark.parametrize("arrays, match", [
    ({"target": np.zeros((3, 2))}, "no 'ECAL'"),
    ({"ECAL": np.zeros((3, 25, 25, 25), np.float32)}, "without 'target'"),
    ({"ECAL": np.zeros((3, 25, 25, 20), np.float32), "target": np.zeros((3, 2))}, "shape"),
    ({"ECAL": np.zeros((3, 25, 25, 25), np.int32), "target": np.zeros((3, 2))}, "dtype int32"),
    ({"ECAL": np.zeros((3, 25, 25, 25), np.float32), "target": np.zeros((3,))},
     "'target' has shape"),
    ({"ECAL": np.zeros((3, 25, 25, 25), np.float32), "target": np.zeros((2, 2))}, "N = 3"),
    ({"ECAL": np.zeros((3, 51, 51, 25), np.float32)}, "without 'energy'"),
])
def test_schema_errors(tmp_path, arrays, match):
    _raises(DataSchemaError, write_h5(tmp_path / "bad.h5", **arrays), match)


@pytest.mark.parametrize("value, match", [(np.nan, "NaN or infinite"), (np.inf, "NaN or infinite"),
                                          (-1e-3, "negative cell energies")])
def test_impossible_cell_values(tmp_path, value, match):
    ecal, energy = random_showers(10)
    ecal[7, 3, 4, 5] = value
    err = _raises(DataValueError, fixed_file(tmp_path / "v.h5", ecal, energy), match)
    assert "shower 7" in str(err)


@pytest.mark.parametrize("energy", [0.0, -50.0, 5e4, np.nan])  # 5e4: MeV mistaken for GeV
def test_energies_out_of_range(tmp_path, energy):
    ecal, energies = random_showers(5)
    energies[3] = energy
    err = _raises(DataValueError, fixed_file(tmp_path / "e.h5", ecal, energies), "outside")
    assert "shower 3" in str(err)


def test_check_files_names_the_one_bad_file(tmp_path):
    for i in range(4):
        files.write_showers(tmp_path / f"f{i}.h5", *random_showers(20, seed=i))
    ecal, energy = random_showers(20)
    ecal[12, 0, 0, 0] = np.nan
    fixed_file(tmp_path / "f2.h5", ecal, energy)
    problems = files.check_files(tmp_path)
    assert len(problems) == 1 and "f2.h5" in problems[0] and "shower 12" in problems[0]
    with pytest.raises(DataFileMissing, match="does not exist"):
        files.check_files(tmp_path / "nothing")


def test_check_files_verifies_manifest_checksums(tmp_path):
    from gan3d.io import write_json

    path = files.write_showers(tmp_path / "a.h5", *random_showers(8))
    write_json(tmp_path / files.MANIFEST, {"files": [
        {"name": "a.h5", "sha256": files.sha256(path)},
        {"name": "gone.h5", "sha256": "0"}]})
    missing = f"{tmp_path / 'gone.h5'}: listed in manifest.json but missing"
    assert files.check_files(tmp_path) == [missing]
    files.write_showers(path, *random_showers(8, seed=9))  # same schema, other content
    assert any("checksum differs" in p for p in files.check_files(tmp_path))


# ---------------------------------------------------------------------------------------------
# Splitting and preprocessing

@pytest.mark.parametrize("n, n_train", [(2, 1), (8, 7), (10, 9), (80, 72)])
def test_split_by_file_after_sorting(n, n_train):
    names = [f"EleEscan_1_{j:03d}.h5" for j in range(1, n + 1)]
    train, test = files.split_files(reversed(names), 0.1)
    assert [p.name for p in train] == names[:n_train] and [p.name for p in test] == names[n_train:]


def test_split_needs_a_test_file():
    with pytest.raises(DataError, match="at least one training and one test file"):
        files.split_files(["a.h5"], 0.1)


def test_load_sample_from_files_and_synthetic(tmp_path):
    energy = np.r_[np.full(20, 48.0), np.full(20, 203.0)].astype(np.float32)
    ecal, _ = random_showers(40, energy=energy)
    files.write_showers(tmp_path / "a.h5", ecal[:25], energy[:25])
    files.write_showers(tmp_path / "b.h5", ecal[25:], energy[25:])
    got = sample.load_sample(tmp_path, 30, [50, 200, 400])
    assert len(got["energy"]) == 30 and sorted(got["by_energy"]) == [50.0, 200.0]  # 400: none
    assert len(got["by_energy"][50.0]) == 20 and len(got["by_energy"][200.0]) == 10
    np.testing.assert_array_equal(got["primary"][200.0], np.full(10, 203.0, np.float32))
    synth = sample.load_sample("synthetic", 20, [100], seed=1)
    assert synth["ecal"].shape == synth["by_energy"][100.0].shape == (20, 25, 25, 25)
    assert 10 <= synth["energy"].min() and synth["energy"].max() <= 500


def test_reference_showers_come_from_the_held_out_files(tmp_path):
    from gan3d import config

    for i, first in enumerate((10.0, 100.0, 300.0)):  # the third file is the test file
        files.write_showers(tmp_path / f"f{i}.h5", *random_showers(20, i, first))
    cfg = config.resolve("quick", {"data.source": "clic", "data.path": str(tmp_path),
                                   "data.test_fraction": 0.2}).data
    ecal, energy = sample.reference_showers(cfg, [50.0, 305.5, 400.0])
    np.testing.assert_array_equal(energy, [300.0, 305.0, 319.0])  # nearest in the test file only
    expect, _ = files.read_showers(tmp_path / "f2.h5")
    np.testing.assert_array_equal(ecal, expect[[0, 5, 19]])
    synth, e = sample.reference_showers(config.resolve("quick").data, [50.0, 100.0], seed=1)
    assert synth.shape == (2, 25, 25, 25) and list(e) == [50.0, 100.0]


def test_a_samples_readings_and_headline_table_are_its_summarys_numbers():
    from gan3d.data import sample
    from markdown_table import rows

    bins = [{"energy": e, "n": 50, "sampling_fraction": 0.02, "ratio_to_fit": 1.0 + d,
             "max_layer": layer, "hits": hits, "mean_depth_layers": depth,
             "x_second_moment_cells2": 0.9, "resolution_reconstructed": 0.03}
            for e, d, layer, hits, depth in ((20.0, -0.02, 8, 100.0, 9.0),
                                             (400.0, 0.01, 13, 800.0, 12.0))]
    fit = {"a": 0.157, "b": 0.013}
    summary = {"bins": bins, "max_abs_deviation_from_fit": 0.02,
               "resolution_fit_reconstructed": fit, "resolution_fit_visible": {"a": 0.2, "b": 0.02}}
    slope = 3.0 / np.log(20.0)  # 9 -> 12 layers over a factor 20 in energy
    assert f"**{slope:.2f} layers per factor e**" in sample.depth_reading(summary)
    assert "at most **2.0 %** (inside the grey" in sample.sampling_reading(summary)
    power = np.log(8.0) / np.log(20.0)
    hits = sample.hits_reading(summary)
    assert f"100 at 20 GeV, 800 at 400 GeV, roughly like **E^{power:.2f}**" in hits
    assert "**15.7 %/√E ⊕ 1.3 %**" in sample.resolution_reading(summary)
    assert sample.resolution_reading({"bins": bins}) is None
    text = sample.headline_table(summary)
    assert rows(text)[1:] == [["20", "50", "0.0200", "0.980", "8", "100", "0.90", "0.0300"],
                              ["400", "50", "0.0200", "1.010", "13", "800", "0.90", "0.0300"]]
    assert text.endswith("max deviation from the published fit: 2.0 %; resolution "
                         "(reconstructed): 15.7 %/sqrt(E) + 1.3 %")
    energy = np.array([12.0, 480.0], np.float32)
    described = sample.describe({"energy": energy, "source": "synthetic",
                                 "by_energy": {20.0: np.zeros((3, 1)), 400.0: np.zeros((2, 1))}})
    assert described == ("2 showers from synthetic, 12-480 GeV; at fixed energies: 20 GeV x 3, "
                         "400 GeV x 2")
