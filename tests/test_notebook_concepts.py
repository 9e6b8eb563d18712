"""Notebook 05, the hands-on lesson, runs top to bottom on live MPI engines and its checks hold:
the hand-written ring equals the library's all-reduce, 2 ranks x b = 1 rank x 2b, the fitted
serial fraction recovers the injected one."""

from __future__ import annotations

import json

import nbformat
import numpy as np
import pytest

from conftest import NOTEBOOKS
from figure_data import one, panels, series, values

NAME = "05_distributed_concepts.ipynb"
FIGURES = {"concepts_ring.png", "concepts_ring_timing.png", "concepts_lr_scaling.png",
           "concepts_amdahl.png"}


def test_committed_as_a_lesson():
    nb = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
    px = [c for c in code if c.source.startswith("%%px")]
    assert len(px) >= 6  # the lesson runs on the engines, cell by cell
    exercises = [c for c in nb.cells if c.cell_type == "markdown" and "**Exercise" in c.source]
    solutions = [c for c in code if "solution" in c.metadata.get("tags", [])]
    assert len(exercises) == len(solutions) == 5
    assert all(c.metadata["jupyter"]["source_hidden"] for c in solutions)  # collapsed in the lab
    assert nb.metadata["kernelspec"]["name"] == "gan3d"


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.notebook
def test_the_lesson_runs_and_its_checks_hold(run_notebook, tmp_path):
    figs, res = tmp_path / "figures", tmp_path / "results"
    out = run_notebook(NAME, n_engines=2, ring_sizes_kib=[4, 256, 2048], ring_repeats=3,
                       lr_epochs=2, amdahl_work_s=0.3, amdahl_serial=0.3, amdahl_repeats=2,
                       figures_dir=str(figs), results_dir=str(res))
    assert {p.name for p in figs.glob("*.png")} == FIGURES
    assert {p.name for p in (figs / "data").iterdir()} == {n[:-4] + ".json" for n in FIGURES}
    c = json.loads((res / "concepts_summary.json").read_text())["checks"]
    _ring_figures(figs, c)
    _lr_figure(panels(figs, "concepts_lr_scaling.png"), lr_epochs=2)
    _amdahl_figure(panels(figs, "concepts_amdahl.png"), c["amdahl"])
    assert len(set(c["broadcast"]["before"])) == 2 and len(set(c["broadcast"]["after"])) == 1
    assert c["ring_equals_library"]["max_abs_difference"] < 1e-4
    assert c["data_parallel"]["rel_inference"] < 1e-4
    assert c["data_parallel"]["rel_batchnorm"] > 100 * c["data_parallel"]["rel_inference"]
    assert abs(c["amdahl"]["serial_fitted"] - 0.3) <= 0.2 * 0.3
    ratio = c["lr_scaling"]["loss_after_one_epoch_over_one_worker"]
    assert ratio["2 workers, lr × 2"] < ratio["2 workers, lr"]
    nb = nbformat.read(out, as_version=4)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = json.dumps([o for o in outputs if o.get("output_type") == "stream"])
    assert "I am rank 0 of 2" in text and "I am rank 1 of 2" in text  # %%px ran on both engines
    assert "reduce-scatter step 1: rank 1 sends chunk 1 to rank 0" in text


def _ring_figures(figs, checks):
    """2 ranks: one reduce-scatter and one all-gather step, each rank sending one chunk to the
    other; the timing figure plots the three message sizes measured, in ms."""
    steps = panels(figs, "concepts_ring.png")
    assert [a["title"] for a in steps] == ["reduce-scatter\nstep 1 of 1", "all-gather\nstep 1 of 1"]
    for a in steps:
        assert a["axis"] == "off" and a["patches"] == {"Circle": 2, "FancyArrowPatch": 2}
        assert sorted(t for t in a["texts"] if t.startswith("rank")) == ["rank 0", "rank 1"]
        assert sorted(t for t in a["texts"] if t.startswith("chunk")) == ["chunk 0", "chunk 1"]
    (ax,) = panels(figs, "concepts_ring_timing.png")
    assert (ax["xscale"], ax["yscale"]) == ("log", "log")
    assert (ax["xlabel"], ax["ylabel"]) == ("message size n (bytes)", "time per all-reduce (ms)")
    timing = checks["ring_timing"]
    sizes = [4 * 1024, 256 * 1024, 2048 * 1024]
    assert timing["sizes_bytes"] == sizes
    for label, key in (("hand-written ring", "ring_s"), ("MPI_Allreduce", "mpi_s")):
        measured = one(ax, "line", f"measured here: {label}")
        assert values(measured, "x").tolist() == sizes and measured["marker"] == "o"
        assert values(measured, "y") == pytest.approx(1e3 * np.array(timing[key]), rel=1e-5)
    model = one(ax, "line", "performance model")
    x, y = values(model, "x"), values(model, "y")
    assert model["n"] == 100 and x[[0, -1]].tolist() == [sizes[0], sizes[-1]]
    # the ring's cost: 2(N-1) latencies plus 2(N-1)/N of the message over the bandwidth (N = 2)
    m = timing["model"]
    assert y == pytest.approx(1e3 * (2 * m["latency_s"] + x / m["bandwidth_Bps"]), rel=1e-4)


def _lr_figure(axes, lr_epochs):
    """Loss every 256 samples seen: 4096 samples per epoch, so 16 points per epoch and rule."""
    (ax,) = axes
    assert ax["yscale"] == "log" and ax["xlabel"] == "training samples seen (all workers)"
    assert ax["ylabel"] == "training loss (mean squared error)"
    lines = series(ax, "line")
    assert [s["label"] for s in lines] == ["1 worker, lr", "2 workers, lr", "2 workers, lr × 2",
                                           "2 workers, lr × 2, warm-up"]
    for s in lines:
        assert values(s, "x").tolist() == [256 * i for i in range(1, 16 * lr_epochs + 1)]
        assert np.all(values(s, "y") > 0)
        assert values(s, "y")[-1] < values(s, "y")[0]  # every rule makes progress


def _amdahl_figure(axes, amdahl):
    (ax,) = axes
    assert (ax["xlabel"], ax["ylabel"]) == ("workers N", "speed-up of a step")
    ideal = one(ax, "line", "ideal")
    assert values(ideal, "y").tolist() == values(ideal, "x").tolist()
    s = amdahl["serial_fitted"]
    law = one(ax, "line", f"performance model: Amdahl, fitted s = {100 * s:.1f} %")
    n = values(law, "x")
    assert values(law, "y") == pytest.approx(1 / (s + (1 - s) / n), rel=1e-5)
    for mode in ("serial", "distributed"):
        measured = one(ax, "line", f"measured here: {mode} evaluation")
        assert values(measured, "x").tolist() == [1, 2]  # one point per worker count
        t = amdahl["step_s"][mode]
        assert values(measured, "y") == pytest.approx([1.0, t[0] / t[1]], rel=1e-5)
    serial = values(one(ax, "line", "measured here: serial"), "y")[1]
    distributed = values(one(ax, "line", "measured here: distributed"), "y")[1]
    assert serial < distributed  # the serial evaluation costs speed-up
