"""The record of a training run: ``history.jsonl``, TensorBoard scalars, the progress bar.

``history.jsonl`` has one JSON object per epoch with the fields :data:`HISTORY_FIELDS` (their
meaning is documented in :mod:`gan3d.gan.training`); other tools (the scaling study, the notebooks)
parse it, so the names are stable. It is rewritten whole and atomically after every epoch, so a
reader never sees half a line and a resumed run never shows epochs that its checkpoint lacks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import numpy as np

from .. import console
from ..exceptions import CheckpointError
from ..io import atomic_path, ensure_dir

log = console.get_logger(__name__)

__all__ = ["LOSSES", "HISTORY_FIELDS", "HISTORY_SCHEMA", "HistoryRow", "read_history",
           "write_history", "TensorBoard", "Progress"]

LOSSES = ("d_loss", "d_bce", "d_aux", "d_ecal", "g_loss", "g_bce", "g_aux", "g_ecal")
HISTORY_FIELDS = ("epoch", "lr", *LOSSES, *("test_" + n for n in LOSSES), "eval_mode",
                  "time_train_s", "time_eval_s", "time_epoch_s", "timed", "showers_per_s",
                  "workers", "steps", "batch_size", "precision", "threads", "showers_seen",
                  "time_monitor_s", "schema")
# After these, a row holds local SGD's counters and may hold the physics monitors ``mon_*``
# (gan3d.validation.monitors).
HISTORY_SCHEMA = 1  # the row's format; rows without the field are of format 0 (gan3d <= 0.2)


class HistoryRow(TypedDict, total=False):
    """One epoch of ``history.jsonl`` (the meaning of each field: :mod:`gan3d.gan.training`)."""

    epoch: int
    lr: float
    d_loss: float
    d_bce: float
    d_aux: float
    d_ecal: float
    g_loss: float
    g_bce: float
    g_aux: float
    g_ecal: float
    test_d_loss: float | None
    test_d_bce: float | None
    test_d_aux: float | None
    test_d_ecal: float | None
    test_g_loss: float | None
    test_g_bce: float | None
    test_g_aux: float | None
    test_g_ecal: float | None
    eval_mode: str
    time_train_s: float
    time_eval_s: float
    time_epoch_s: float
    timed: bool
    showers_per_s: float
    workers: int
    steps: int
    batch_size: int
    precision: str
    threads: int
    showers_seen: int
    time_monitor_s: float
    schema: int
    sync_every: int
    syncs: int
    time_sync_s: float


def read_history(path: str | Path) -> list[HistoryRow]:
    """The rows of a ``history.jsonl`` (or of the folder holding it). Rows of a newer format
    than :data:`HISTORY_SCHEMA` are refused (a newer gan3d wrote them)."""
    path = Path(path)
    path = path / "history.jsonl" if path.is_dir() else path
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    newer = sorted({r.get("schema", 0) for r in rows if r.get("schema", 0) > HISTORY_SCHEMA})
    if newer:
        raise CheckpointError(f"{path} holds rows of history format {newer[0]}, newer than this "
                              f"gan3d's {HISTORY_SCHEMA}: read it with the gan3d that wrote it")
    return rows


def write_history(path: str | Path, rows: list[dict]) -> Path:
    """Write all ``rows`` as JSON lines, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Path(path)


class TensorBoard:
    """Per-epoch scalars of a history row for TensorBoard (event files are append-only streams)."""

    def __init__(self, folder: str | Path):
        import tensorflow as tf

        self._tf = tf
        self.writer = tf.summary.create_file_writer(str(ensure_dir(folder)))

    def write(self, row: dict) -> None:
        with self.writer.as_default(step=row["epoch"]):
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "epoch":
                    self._tf.summary.scalar(key, value)
        self.writer.flush()


class Progress:
    """Rank 0's view of a run: a tqdm bar over the run's training showers (its rate is showers/s of
    all ranks together, its ETA that of the whole run, evaluations included as they happen) and
    one log line per finished epoch."""

    def __init__(self, epochs: int, steps: int, showers_per_step: int, start_epoch: int = 0):
        self.epochs, self.per_step = epochs, showers_per_step
        self.bar = console.progress(total=epochs * steps * showers_per_step, unit="shower",
                                    initial=start_epoch * steps * showers_per_step,
                                    desc=f"epoch {start_epoch + 1}/{epochs}", smoothing=0.1)

    def step_done(self, epoch: int, i: int, losses: np.ndarray) -> None:
        self.bar.set_description(f"epoch {epoch + 1}/{self.epochs}", refresh=False)
        self.bar.set_postfix(d_loss=f"{losses[0]:.4g}", g_loss=f"{losses[4]:.4g}", refresh=False)
        self.bar.update(self.per_step)

    def epoch_done(self, row: dict) -> None:
        test = "" if row["test_d_loss"] is None else (
            f", test d {row['test_d_loss']:.4g} g {row['test_g_loss']:.4g}")
        self.bar.clear()
        log.info("epoch %d/%d: d_loss %.4g, g_loss %.4g%s; train %.1f s, eval %.1f s, "
                 "%.2f showers/s%s", row["epoch"], self.epochs, row["d_loss"], row["g_loss"], test,
                 row["time_train_s"], row["time_eval_s"], row["showers_per_s"],
                 "" if row["timed"] else " (timing warm-up)")
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()
