"""What notebook 02 says beside its figures (gan3d.convergence.readings): the numbers of its
sentences and tables are the runs' and the committed warm-start study's, computed here again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gan3d import config
from gan3d.convergence import readings, warmstart
from markdown_table import rows as markdown_rows

ROOT = Path(__file__).resolve().parents[1]


def _history(workers: int, rates: list[float], timed: list[bool]) -> list[dict]:
    return [{"epoch": i + 1, "timed": t, "showers_per_s": r, "threads": 2 // workers, "steps": 2,
             "batch_size": 4, "d_loss": 0.5 + i, "g_loss": 2.0 + i, "test_d_loss": 0.25,
             "test_g_loss": 1.5, "showers_seen": 8 * workers * (i + 1), "mon_targets_met": 3,
             "mon_targets": 20} for i, (r, t) in enumerate(zip(rates, timed))]


HISTORIES = {"1 worker": _history(1, [1.0, 3.0, 5.0], [False, True, True]),
             "2 workers": _history(2, [2.0, 6.0, 7.0], [False, True, True])}


def test_throughput_is_the_mean_over_the_timed_epochs():
    assert readings.throughput(HISTORIES) == {"1 worker": 4.0, "2 workers": 6.5}
    untimed = {"1 worker": _history(1, [1.0, 2.0], [False, False])}
    assert readings.throughput(untimed) == {"1 worker": 1.5}  # none timed: all epochs
    text = readings.throughput_reading(HISTORIES, 2)
    assert "**4.00** showers/s on 1 worker with 2 thread(s), **6.50** on 2 workers" in text
    assert "(ratio 1.62)" in text and "trains 16 showers against 8 for one worker" in text


def test_the_backends_table_holds_each_backends_last_epoch(tmp_path):
    path = tmp_path / "history.jsonl"
    jax_rows = _history(2, [3.0, 4.0], [False, True])
    path.write_text("\n".join(json.dumps(r) for r in jax_rows) + "\n")
    jax = readings.jax_summary({"history": str(path), "output": "out", "workers": 2})
    assert jax == {"output": "out", "workers": 2, "showers_per_s": 4.0,
                   "final": {n: jax_rows[-1][n] for n in readings.FINAL_LOSSES}}
    text = readings.backends_table(HISTORIES, 2, jax)
    assert text.startswith("Last epoch of each backend:\n\n")
    head, horovod, on_jax = markdown_rows(text)
    assert head == ["backend", "workers", "d_loss", "g_loss", "test d_loss", "test g_loss",
                    "showers/s (timed epochs)"]
    assert horovod == ["Horovod", "2", "2.5", "4", "0.25", "1.5", "6.50"]
    assert on_jax == ["JAX", "2", "1.5", "3", "0.25", "1.5", "4.00"]


def test_the_warm_start_study_is_described_and_tabled_from_its_runs():
    warm = warmstart.load(ROOT / "studies" / "warm_start.json")
    if not warm["runs"]:
        assert "holds no runs yet" in readings.warm_description(warm, "w.json", None)
        return
    rows = readings.warm_rows(warm)
    assert rows == warm.get("verdicts", []) + warmstart.also_verdicts(warm)
    configs = readings.warm_configs(warm)
    assert configs[0] == "1w" and set(configs) == {r["config_id"] for r in warm["runs"].values()}
    text = readings.warm_description(warm, "studies/warm_start.json", config.resolve("quick"))
    assert text.startswith(f"`studies/warm_start.json`: **{len(warm['runs'])} runs** (1 worker: ")
    ones = [r["showers_per_s"] for r in warm["runs"].values() if r["config_id"] == "1w"]
    assert f"1 worker: {len(ones)} seed(s), {np.median(ones):.1f} showers/s" in text
    table, tally = readings.warm_table(warm, rows).split("\n\n")
    head, *body = markdown_rows(table)
    assert head[:3] == ["candidate", "quantity", "seeds"] and len(body) == len(rows)
    for cells, r in zip(body, rows):
        assert (cells[1], int(cells[2]), cells[9]) == (r["monitor"], r["n"], f"**{r['verdict']}**")
        assert float(cells[7]) == pytest.approx(r["margin"], rel=5e-3)
    lines = tally.splitlines()
    assert len(lines) == len(configs) - 1 + any(r["reference"] == "2w-linear" for r in rows)
    for line, c in zip(lines, configs[1:]):
        assert f"against 1 worker: {warmstart.decided(warm, c)} of {len(warmstart.QUANTITIES)}" in line


def test_warm_start_runs_made_on_another_cpu_are_counted_and_timed_apart():
    warm = warmstart.load(ROOT / "studies" / "warm_start.json")
    if not warm["runs"]:
        pytest.skip("no warm-start runs committed")
    ones = sorted((r for r in warm["runs"].values() if r["config_id"] == "1w"),
                  key=lambda r: r["seed"])
    assert all(r["machine"] for r in warm["runs"].values())  # every run records its CPU
    moved = {**warm, "runs": {**warm["runs"], f"1w-s{ones[0]['seed']}": {
        **ones[0], "machine": "Other CPU", "showers_per_s": 1e3}}}
    text = readings.warm_description(moved, "w.json", config.resolve("quick"))
    assert "1000.0 showers/s on Other CPU" in text and "Other CPU (1)" in text
    rest = [r["showers_per_s"] for r in ones[1:] if r["machine"] == ones[1]["machine"]]
    assert f"{np.median(rest):.1f} showers/s on {ones[1]['machine']}" in text


def test_a_quick_run_without_physics_monitors_is_said_so_not_a_key_error():
    """``train.monitor_showers: 0`` (documented as off): the reading says the run had none."""
    off = {"epoch": 2, "showers_seen": 8}
    assert "without physics monitors" in readings.monitors_reading(off, 2)
    on = {**off, "mon_targets_met": 3, "mon_targets": 20}
    assert "**3 of 20**" in readings.monitors_reading(on, 2)
