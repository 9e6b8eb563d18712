"""The record of a run: history.jsonl round trip, TensorBoard scalars, the progress bar."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from gan3d.gan import history


def _row(epoch: int, **extra) -> dict:
    row = {k: 0.0 for k in history.HISTORY_FIELDS}
    row.update(epoch=epoch, timed=epoch > 1, eval_mode="distributed", test_d_loss=None,
               test_g_loss=None, workers=2, steps=3, batch_size=4, precision="float32",
               threads=1, **extra)
    return row


def test_fields_name_every_loss_and_its_test_twin():
    fields = history.HISTORY_FIELDS
    assert len(set(fields)) == len(fields)
    for loss in history.LOSSES:
        assert loss in fields and f"test_{loss}" in fields
    assert {"showers_per_s", "time_train_s", "workers", "threads"} <= set(fields)


def test_history_round_trip_and_rewrite(tmp_path):
    path = tmp_path / "history.jsonl"
    history.write_history(path, [_row(1), _row(2)])
    assert [r["epoch"] for r in history.read_history(tmp_path)] == [1, 2]  # the folder works too
    history.write_history(path, [_row(1)])  # a resumed run rewrites what its checkpoint holds
    rows = history.read_history(path)
    assert rows == [_row(1)] and list(rows[0]) == list(history.HISTORY_FIELDS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.jsonl"]  # no temporary left


def test_a_row_names_its_format_and_a_newer_format_is_refused(tmp_path):
    import typing

    from gan3d.exceptions import CheckpointError

    # The typed record has every field the history promises, and no other besides local SGD's.
    hints = set(typing.get_type_hints(history.HistoryRow))
    assert set(history.HISTORY_FIELDS) <= hints
    assert hints - set(history.HISTORY_FIELDS) == {"sync_every", "syncs", "time_sync_s"}
    path = tmp_path / "history.jsonl"
    old = {k: v for k, v in _row(1).items() if k != "schema"}  # gan3d 0.2: format 0
    history.write_history(path, [old, _row(2, schema=history.HISTORY_SCHEMA)])
    assert len(history.read_history(path)) == 2
    history.write_history(path, [_row(1, schema=history.HISTORY_SCHEMA + 1)])
    with pytest.raises(CheckpointError, match=f"history format {history.HISTORY_SCHEMA + 1}"):
        history.read_history(path)


def test_tensorboard_writes_every_number(tmp_path):
    tf = pytest.importorskip("tensorflow")
    history.TensorBoard(tmp_path).write(_row(3, d_loss=1.5))
    (event,) = tmp_path.glob("events.out.tfevents.*")
    tags = {v.tag: (e.step, tf.make_ndarray(v.tensor))
            for e in tf.compat.v1.train.summary_iterator(str(event)) for v in e.summary.value}
    assert tags["d_loss"][0] == 3 and float(tags["d_loss"][1]) == 1.5
    assert "precision" not in tags and "timed" not in tags and "epoch" not in tags


def test_progress_counts_showers_of_the_whole_run_and_logs_each_epoch(caplog):
    p = history.Progress(epochs=3, steps=4, showers_per_step=8, start_epoch=1)
    assert (p.bar.total, p.bar.n) == (3 * 4 * 8, 4 * 8)  # a resumed run starts part-way
    for i in range(4):
        p.step_done(1, i, np.arange(8.0))
    assert p.bar.n == 2 * 4 * 8
    with caplog.at_level(logging.INFO, logger="gan3d"):
        p.epoch_done(_row(2, d_loss=0.5, g_loss=2.0, time_train_s=10.0, showers_per_s=3.2))
    p.close()
    (record,) = [r for r in caplog.records if r.name == "gan3d.gan.history"]
    assert "epoch 2/3" in record.getMessage() and "3.20 showers/s" in record.getMessage()
