"""The record of a training run: ``history.jsonl``, TensorBoard scalars, progress lines.

``history.jsonl`` has one JSON object per epoch with the fields :data:`HISTORY_FIELDS` (their
meaning is documented in :mod:`gan3d.training`); other tools (the scaling study, the notebooks)
parse it, so the names are stable. It is rewritten whole and atomically after every epoch, so a
reader never sees half a line and a resumed run never shows epochs that its checkpoint lacks.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from .io import atomic_path, ensure_dir

__all__ = ["LOSSES", "HISTORY_FIELDS", "read_history", "write_history", "TensorBoard", "Progress"]

LOSSES = ("d_loss", "d_bce", "d_aux", "d_ecal", "g_loss", "g_bce", "g_aux", "g_ecal")
HISTORY_FIELDS = ("epoch", "lr", *LOSSES, *("test_" + n for n in LOSSES), "eval_mode",
                  "time_train_s", "time_eval_s", "time_epoch_s", "timed", "showers_per_s",
                  "workers", "steps", "batch_size", "precision")


def read_history(path: str | Path) -> list[dict]:
    """The rows of a ``history.jsonl`` (or of the folder holding it)."""
    path = Path(path)
    path = path / "history.jsonl" if path.is_dir() else path
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


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
    """Rank 0's progress lines: a few per epoch with the losses, the rate (showers/s of all ranks)
    and the ETA of the whole run (remaining steps at the current rate plus evaluations)."""

    def __init__(self, epochs: int, steps: int, showers_per_step: int):
        self.epochs, self.steps, self.per_step = epochs, steps, showers_per_step
        self.every = max(1, steps // 4)
        self.epoch_start = 0.0
        self.eval_s = 0.0  # per evaluation, for the ETA

    def step_done(self, epoch: int, i: int, losses: np.ndarray) -> None:
        now = time.perf_counter()
        if i == 0:
            self.epoch_start = now  # the first step includes tracing and the data start-up
            return
        if (i + 1) % self.every and i + 1 != self.steps:
            return
        rate = i * self.per_step / (now - self.epoch_start)
        left = self.steps - i - 1 + (self.epochs - epoch - 1) * self.steps
        eta = left * self.per_step / rate + self.eval_s * (self.epochs - epoch)
        print(f"[gan3d train] epoch {epoch + 1}/{self.epochs} step {i + 1}/{self.steps}"
              f"  d_loss {losses[0]:.4g}  g_loss {losses[4]:.4g}  {rate:.2f} showers/s"
              f"  ETA {hms(eta)}", flush=True)

    def epoch_done(self, row: dict) -> None:
        # The first evaluation includes tracing (38 s against 10 s later in a quick run): the
        # fastest one seen predicts the rest better than the last.
        t = row["time_eval_s"]
        self.eval_s = t if not self.eval_s else min(self.eval_s, t)
        test = "" if row["test_d_loss"] is None else (
            f"  test d {row['test_d_loss']:.4g} g {row['test_g_loss']:.4g}")
        print(f"[gan3d train] epoch {row['epoch']}/{self.epochs} done: d_loss {row['d_loss']:.4g}"
              f" g_loss {row['g_loss']:.4g}{test}  train {row['time_train_s']:.1f} s  eval "
              f"{row['time_eval_s']:.1f} s  {row['showers_per_s']:.2f} showers/s"
              f"{'' if row['timed'] else '  (timing warm-up)'}", flush=True)


def hms(seconds: float) -> str:
    """``1h02m`` or ``3m07s``."""
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}h{rest // 60:02d}m" if h else f"{rest // 60}m{rest % 60:02d}s"
