"""Reading, validating, preprocessing and sharding shower files."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from gan3d import datasets
from gan3d.exceptions import (CorruptDataFile, DataError, DataFileMissing, DataSchemaError,
                              DataValueError)


def _showers(n, seed=0, first_energy=10.0):
    """Sparse random showers (n, 25, 25, 25) GeV with distinct energies (they identify showers)."""
    rng = np.random.default_rng(seed)
    ecal = (rng.random((n, 25, 25, 25)) < 0.05) * rng.exponential(1e-3, (n, 25, 25, 25))
    return ecal.astype(np.float32), (first_energy + np.arange(n)).astype(np.float32)


def _h5(path, **arrays):
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f[k] = v
    return path


def _fixed(path, ecal, energy):
    return _h5(path, ECAL=ecal, target=np.c_[np.full(len(energy), 11.0), energy])


# ---------------------------------------------------------------------------------------------
# Layouts

def test_round_trip_is_identical(tmp_path):
    ecal, energy = _showers(37)
    datasets.write_showers(tmp_path / "a.h5", ecal, energy)
    got_ecal, got_energy = datasets.read_showers(tmp_path / "a.h5")
    np.testing.assert_array_equal(got_ecal, ecal)
    np.testing.assert_array_equal(got_energy, energy)
    part, e = datasets.read_showers(tmp_path / "a.h5", start=5, stop=9)
    np.testing.assert_array_equal(part, ecal[5:9])
    np.testing.assert_array_equal(e, energy[5:9])
    assert datasets.count_showers(tmp_path / "a.h5") == 37


def test_real_fixed_angle_layout_is_read(tmp_path):
    """The CLIC EleEscan layout: float64 ECAL, an HCAL we ignore, energy in target column 1."""
    ecal, energy = _showers(6)
    _h5(tmp_path / "EleEscan_1_1.h5", ECAL=ecal.astype(np.float64),
        HCAL=np.zeros((6, 5, 5, 60)), target=np.c_[np.full(6, 11.0), energy])
    got, e = datasets.read_showers(tmp_path / "EleEscan_1_1.h5")
    assert got.dtype == np.float32 and e.dtype == np.float32
    np.testing.assert_array_equal(got, ecal)
    np.testing.assert_array_equal(e, energy)


@pytest.mark.parametrize("energy_shape", [(4,), (4, 1)])
def test_variable_angle_layout_is_cropped_to_the_centre(tmp_path, energy_shape):
    big = np.zeros((4, 51, 51, 25), np.float32)
    big[:, 13:38, 13:38, :] = _showers(4)[0]
    big[:, 0, 0, :] = 5.0  # outside the window: must not appear
    energy = np.array([15.0, 60.0, 250.0, 480.0]).reshape(energy_shape)
    _h5(tmp_path / "var.h5", ECAL=big, energy=energy, theta=np.full(4, 1.2))
    ecal, e = datasets.read_showers(tmp_path / "var.h5")
    assert ecal.shape == (4, 25, 25, 25)
    np.testing.assert_array_equal(ecal, big[:, 13:38, 13:38, :])
    np.testing.assert_array_equal(e, [15.0, 60.0, 250.0, 480.0])


# ---------------------------------------------------------------------------------------------
# Bad input: each a named error that names the file and the problem, without a deep traceback

def _raises(exc_type, path, match, **kw):
    with pytest.raises(exc_type, match=match) as info:
        datasets.read_showers(path, **kw)
    assert path.name in str(info.value)
    assert info.value.__cause__ is None  # no chained h5py traceback
    return info.value


def test_missing_file(tmp_path):
    _raises(DataFileMissing, tmp_path / "nowhere.h5", "no such data file")


def test_not_hdf5_and_truncated_files(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"this is not HDF5" * 100)
    _raises(CorruptDataFile, junk, "not a readable HDF5 file")
    datasets.write_showers(tmp_path / "cut.h5", *_showers(64))
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
    _raises(DataSchemaError, _h5(tmp_path / "bad.h5", **arrays), match)


@pytest.mark.parametrize("value, match", [(np.nan, "NaN or infinite"), (np.inf, "NaN or infinite"),
                                          (-1e-3, "negative cell energies")])
def test_impossible_cell_values(tmp_path, value, match):
    ecal, energy = _showers(10)
    ecal[7, 3, 4, 5] = value
    err = _raises(DataValueError, _fixed(tmp_path / "v.h5", ecal, energy), match)
    assert "shower 7" in str(err)


@pytest.mark.parametrize("energy", [0.0, -50.0, 5e4, np.nan])  # 5e4: MeV mistaken for GeV
def test_energies_out_of_range(tmp_path, energy):
    ecal, energies = _showers(5)
    energies[3] = energy
    err = _raises(DataValueError, _fixed(tmp_path / "e.h5", ecal, energies), "outside")
    assert "shower 3" in str(err)


def test_check_files_names_the_one_bad_file(tmp_path):
    for i in range(4):
        datasets.write_showers(tmp_path / f"f{i}.h5", *_showers(20, seed=i))
    ecal, energy = _showers(20)
    ecal[12, 0, 0, 0] = np.nan
    _fixed(tmp_path / "f2.h5", ecal, energy)
    problems = datasets.check_files(tmp_path)
    assert len(problems) == 1 and "f2.h5" in problems[0] and "shower 12" in problems[0]
    with pytest.raises(DataFileMissing, match="does not exist"):
        datasets.check_files(tmp_path / "nothing")


def test_check_files_verifies_manifest_checksums(tmp_path):
    from gan3d.io import write_json

    path = datasets.write_showers(tmp_path / "a.h5", *_showers(8))
    write_json(tmp_path / datasets.MANIFEST, {"files": [
        {"name": "a.h5", "sha256": datasets.sha256(path)},
        {"name": "gone.h5", "sha256": "0"}]})
    missing = f"{tmp_path / 'gone.h5'}: listed in manifest.json but missing"
    assert datasets.check_files(tmp_path) == [missing]
    datasets.write_showers(path, *_showers(8, seed=9))  # same schema, other content
    assert any("checksum differs" in p for p in datasets.check_files(tmp_path))


# ---------------------------------------------------------------------------------------------
# Splitting and preprocessing

@pytest.mark.parametrize("n, n_train", [(2, 1), (8, 7), (10, 9), (80, 72)])
def test_split_by_file_after_sorting(n, n_train):
    names = [f"EleEscan_1_{j:03d}.h5" for j in range(1, n + 1)]
    train, test = datasets.split_files(reversed(names), 0.1)
    assert [p.name for p in train] == names[:n_train] and [p.name for p in test] == names[n_train:]


def test_split_needs_a_test_file():
    with pytest.raises(DataError, match="at least one training and one test file"):
        datasets.split_files(["a.h5"], 0.1)


def test_preprocess_is_the_reference_recipe():
    ecal = np.zeros((2, 25, 25, 25), np.float32)
    ecal[0, 12, 12, 5] = 0.5
    ecal[0, 0, 0, 0] = 9e-7  # below threshold: zeroed before scaling
    ecal[1, 3, 4, 5] = 2e-6
    out = datasets.preprocess(ecal, np.array([100.0, 450.0]))
    assert out["image"].shape == (2, 25, 25, 25, 1)
    assert all(v.dtype == np.float32 for v in out.values())
    assert out["image"][0, 12, 12, 5, 0] == pytest.approx(50.0)
    assert out["image"][0, 0, 0, 0, 0] == 0.0
    assert out["image"][1, 3, 4, 5, 0] == pytest.approx(2e-4)
    np.testing.assert_allclose(out["energy"], [1.0, 4.5])
    np.testing.assert_allclose(out["ecal_sum"], [50.0, 2e-4], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# The sharded pipeline

@pytest.fixture
def train_files(tmp_path):
    """Three files of uneven sizes (50, 37, 41); the energy of a shower identifies it."""
    files, first = [], 10.0
    for i, n in enumerate((50, 37, 41)):
        files.append(datasets.write_showers(tmp_path / f"t{i}.h5", *_showers(n, i, first)))
        first += n
    return files


def _ids(batch):
    return np.rint(batch["energy"] * 100).astype(int)  # preprocess divided E by 100


@pytest.mark.parametrize("memory_limit, slab", [(2 << 30, 256), (0, 256), (0, 5)])
def test_shards_are_disjoint_cover_and_reshuffle(train_files, memory_limit, slab, monkeypatch):
    """In memory, streamed in one window, streamed in many small slabs across file boundaries."""
    monkeypatch.setattr(datasets, "_SLAB", slab)
    size, b = 3, 8
    every = np.arange(10, 10 + 128)
    shards = [datasets.ShardedShowers(train_files, r, size, b, seed=4, memory_limit=memory_limit)
              for r in range(size)]
    assert all(s.in_memory == bool(memory_limit) for s in shards)
    assert {len(s) for s in shards} == {128 // 3 // b}  # the same number of batches on every rank
    owned = [set(range(10 + s.lo, 10 + s.hi)) for s in shards]
    assert set().union(*owned) == set(every) and sum(map(len, owned)) == len(every)
    seen = [set() for _ in shards]
    for epoch in range(6):
        for r, s in enumerate(shards):
            ids = np.concatenate([_ids(x) for x in s.iter_numpy(epoch)])
            assert len(ids) == len(s) * b and len(set(ids)) == len(ids)  # no repeats
            assert set(ids) <= owned[r]  # only its own shard
            seen[r] |= set(ids)
    assert seen == owned  # over epochs, every shower is used
    a, again, other = (list(shards[0].iter_numpy(e)) for e in (1, 1, 2))
    np.testing.assert_array_equal(_ids(a[0]), _ids(again[0]))  # seeded
    flat = [np.concatenate([_ids(x) for x in batches]) for batches in (a, other)]
    assert not np.array_equal(*flat)


def test_batches_carry_the_preprocessed_showers(train_files):
    s = datasets.ShardedShowers(train_files, 0, 1, 16, seed=0, max_batches=3)
    batches = list(s.iter_numpy(0))
    assert len(batches) == len(s) == 3
    ecal, energy = datasets.read_showers(train_files[0])
    for batch in batches:
        for i, sid in enumerate(_ids(batch)):
            if sid - 10 < 50:  # in the first file
                np.testing.assert_array_equal(batch["image"][i], datasets.preprocess(
                    ecal[sid - 10:sid - 9], energy[sid - 10:sid - 9])["image"][0])


def test_too_little_data_for_one_batch_per_rank(train_files):
    with pytest.raises(DataError, match="fewer than one batch"):
        datasets.ShardedShowers(train_files, 0, 4, 64)


@pytest.mark.parametrize("mode", ["serial", "distributed"])
def test_evaluation_batches_cover_the_test_set_once(train_files, mode):
    size = 3
    ids = [np.concatenate([_ids(x) for x in datasets.test_batches(
        train_files, r, size, 10, mode=mode, tensorflow=False)] or [np.zeros(0, int)])
        for r in range(size)]
    together = np.concatenate(ids)
    np.testing.assert_array_equal(np.sort(together), np.arange(10, 138))
    if mode == "serial":
        assert len(ids[0]) == 128 and len(ids[1]) == len(ids[2]) == 0
    half = datasets.test_batches(train_files, 0, 1, 10, fraction=0.5, tensorflow=False)
    assert sum(len(x["energy"]) for x in half) == 64


def test_tf_dataset_shapes_and_cardinality(train_files):
    tf = pytest.importorskip("tensorflow")
    s = datasets.ShardedShowers(train_files, 1, 2, 8, seed=3)
    ds = s.epoch(0)
    assert int(ds.cardinality()) == len(s) == 8
    batches = list(ds.as_numpy_iterator())
    assert len(batches) == 8 and batches[0]["image"].shape == (8, 25, 25, 25, 1)
    assert ds.element_spec["image"].shape.as_list() == [8, 25, 25, 25, 1]
    np.testing.assert_array_equal(batches[2]["energy"], list(s.iter_numpy(0))[2]["energy"])
    test = datasets.test_batches(train_files, 0, 1, 50)
    assert isinstance(test, tf.data.Dataset)
    assert [int(x["energy"].shape[0]) for x in test] == [50, 50, 28]


def test_load_sample_from_files_and_synthetic(tmp_path):
    ecal, _ = _showers(40)
    energy = np.r_[np.full(20, 48.0), np.full(20, 203.0)].astype(np.float32)
    datasets.write_showers(tmp_path / "a.h5", ecal[:25], energy[:25])
    datasets.write_showers(tmp_path / "b.h5", ecal[25:], energy[25:])
    got = datasets.load_sample(tmp_path, 30, [50, 200, 400])
    assert len(got["energy"]) == 30 and sorted(got["by_energy"]) == [50.0, 200.0]  # 400: none
    assert len(got["by_energy"][50.0]) == 20 and len(got["by_energy"][200.0]) == 10
    np.testing.assert_array_equal(got["primary"][200.0], np.full(10, 203.0, np.float32))
    synth = datasets.load_sample("synthetic", 20, [100], seed=1)
    assert synth["ecal"].shape == synth["by_energy"][100.0].shape == (20, 25, 25, 25)
    assert 10 <= synth["energy"].min() and synth["energy"].max() <= 500
