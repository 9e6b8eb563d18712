"""Preprocessing and each rank's shard: disjoint, covering, reshuffled; evaluation batches."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d.data import files, sharding
from gan3d.exceptions import DataError

from conftest import random_showers


def test_preprocess_is_the_reference_recipe():
    ecal = np.zeros((2, 25, 25, 25), np.float32)
    ecal[0, 12, 12, 5] = 0.5
    ecal[0, 0, 0, 0] = 9e-7  # below threshold: zeroed before scaling
    ecal[1, 3, 4, 5] = 2e-6
    out = sharding.preprocess(ecal, np.array([100.0, 450.0]))
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
    paths, first = [], 10.0
    for i, n in enumerate((50, 37, 41)):
        paths.append(files.write_showers(tmp_path / f"t{i}.h5", *random_showers(n, i, first)))
        first += n
    return paths


def _ids(batch):
    return np.rint(batch["energy"] * 100).astype(int)  # preprocess divided E by 100


@pytest.mark.parametrize("memory_limit, slab", [(2 << 30, 256), (0, 256), (0, 5)])
def test_shards_are_disjoint_cover_and_reshuffle(train_files, memory_limit, slab, monkeypatch):
    """In memory, streamed in one window, streamed in many small slabs across file boundaries."""
    monkeypatch.setattr(sharding, "SLAB", slab)
    size, b = 3, 8
    every = np.arange(10, 10 + 128)
    shards = [sharding.ShardedShowers(train_files, r, size, b, seed=4, memory_limit=memory_limit)
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


def test_batches_carry_the_preprocessedrandom_showers(train_files):
    s = sharding.ShardedShowers(train_files, 0, 1, 16, seed=0, max_batches=3)
    batches = list(s.iter_numpy(0))
    assert len(batches) == len(s) == 3
    ecal, energy = files.read_showers(train_files[0])
    for batch in batches:
        for i, sid in enumerate(_ids(batch)):
            if sid - 10 < 50:  # in the first file
                np.testing.assert_array_equal(batch["image"][i], sharding.preprocess(
                    ecal[sid - 10:sid - 9], energy[sid - 10:sid - 9])["image"][0])


def test_too_little_data_for_one_batch_per_rank(train_files):
    with pytest.raises(DataError, match="fewer than one batch"):
        sharding.ShardedShowers(train_files, 0, 4, 64)


@pytest.mark.parametrize("mode", ["serial", "distributed"])
def test_evaluation_batches_cover_the_test_set_once(train_files, mode):
    size = 3
    ids = [np.concatenate([_ids(x) for x in sharding.test_batches(
        train_files, r, size, 10, mode=mode, tensorflow=False)] or [np.zeros(0, int)])
        for r in range(size)]
    together = np.concatenate(ids)
    np.testing.assert_array_equal(np.sort(together), np.arange(10, 138))
    if mode == "serial":
        assert len(ids[0]) == 128 and len(ids[1]) == len(ids[2]) == 0
    half = sharding.test_batches(train_files, 0, 1, 10, fraction=0.5, tensorflow=False)
    assert sum(len(x["energy"]) for x in half) == 64


def test_tf_dataset_shapes_and_cardinality(train_files):
    tf = pytest.importorskip("tensorflow")
    s = sharding.ShardedShowers(train_files, 1, 2, 8, seed=3)
    ds = s.epoch(0)
    assert int(ds.cardinality()) == len(s) == 8
    batches = list(ds.as_numpy_iterator())
    assert len(batches) == 8 and batches[0]["image"].shape == (8, 25, 25, 25, 1)
    assert ds.element_spec["image"].shape.as_list() == [8, 25, 25, 25, 1]
    np.testing.assert_array_equal(batches[2]["energy"], list(s.iter_numpy(0))[2]["energy"])
    test = sharding.test_batches(train_files, 0, 1, 50)
    assert isinstance(test, tf.data.Dataset)
    assert [int(x["energy"].shape[0]) for x in test] == [50, 50, 28]


def test_no_autotuning_thread_to_wait_for_at_the_end_of_an_epoch(train_files):
    """tf.data's autotuning runs a model thread per iterator, sleeping up to 60 s at a time;
    destroying the iterator at every epoch's end waited for its wake-up (2 ranks: every epoch
    81.9 s, whatever its steps took). The package's datasets have none."""
    pytest.importorskip("tensorflow")
    training = sharding.ShardedShowers(train_files, 0, 1, 8, seed=0).epoch(0)
    evaluation = sharding.test_batches(train_files, 0, 1, 8)
    assert training.options().autotune.enabled is False
    assert evaluation.options().autotune.enabled is False


# ---------------------------------------------------------------------------------------------
# The global order (train.data_order = "global"): the warm-start study's pairing


def _ids(batch):
    return [int(round(e * 100)) for e in batch["energy"]]  # energy / 100 identifies a shower


def test_global_order_gives_w_workers_the_showers_one_worker_takes_in_w_steps(train_files):
    # 128 showers, batch 8, 3 steps of 2 workers = 6 steps of 1 worker, over 4 epochs (3 passes)
    one = sharding.GlobalOrder(train_files, 0, 1, 8, seed=5, max_batches=6)
    two = [sharding.GlobalOrder(train_files, r, 2, 8, seed=5, max_batches=3) for r in (0, 1)]
    for epoch in range(4):
        b1 = [_ids(b) for b in one.iter_numpy(epoch)]
        b2 = [[_ids(b) for b in two[r].iter_numpy(epoch)] for r in (0, 1)]
        for t in range(3):  # step t of rank r is step 2t + r of the one worker, shower for shower
            assert b2[0][t] == b1[2 * t] and b2[1][t] == b1[2 * t + 1]
        assert [two[r].batch_index(epoch, t) for t in range(3) for r in (0, 1)] == \
            [one.batch_index(epoch, i) for i in range(6)]


def test_global_order_passes_are_permutations_and_reseeded(train_files):
    g = sharding.GlobalOrder(train_files, 0, 1, 16, seed=1, max_batches=8)  # one pass: 128
    seen = [i for b in g.iter_numpy(0) for i in _ids(b)]
    assert sorted(seen) == list(range(10, 10 + 128))  # every shower once
    again = [i for b in g.iter_numpy(1) for i in _ids(b)]
    assert sorted(again) == sorted(seen) and again != seen  # the next pass: another order
    other = sharding.GlobalOrder(train_files, 0, 1, 16, seed=2, max_batches=8)
    assert [i for b in other.iter_numpy(0) for i in _ids(b)] != seen  # the seed sets the order
    # a batch that spans two passes takes the end of one and the start of the next
    odd = sharding.GlobalOrder(train_files, 0, 1, 48, seed=1, max_batches=2)
    pos = odd.positions(2)  # positions 96..143: 32 of pass 0, then 16 of pass 1
    np.testing.assert_array_equal(pos[:32], odd._pass(0)[96:])
    np.testing.assert_array_equal(pos[32:], odd._pass(1)[:16])


def test_global_order_counts_epochs_from_a_fork(train_files):
    forked = sharding.GlobalOrder(train_files, 0, 1, 8, seed=5, max_batches=4, origin=26)
    fresh = sharding.GlobalOrder(train_files, 0, 1, 8, seed=5, max_batches=4)
    assert [_ids(b) for b in forked.iter_numpy(26)] == [_ids(b) for b in fresh.iter_numpy(0)]


def test_global_order_refuses_a_set_too_large_for_every_rank(train_files):
    with pytest.raises(DataError, match="holds all 128 training showers on every rank"):
        sharding.GlobalOrder(train_files, 0, 2, 8, memory_limit=1 << 20)
