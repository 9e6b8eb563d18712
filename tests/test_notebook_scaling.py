"""Notebook 03 regenerates Figures 1-3, the overall-time table and the headline numbers, measuring
everything itself with tiny parameters (the full 3DGAN, few steps, small batches)."""

from __future__ import annotations

import json

import nbformat
import pytest

FIGURES = ("fig1_node_fabric.png", "fig1_this_machine.png", "fig2_step_breakdown.png",
           "fig2_allreduce_bandwidth.png", "fig3_speedup_efficiency.png",
           "scaling_overall_time.png", "scaling_model_projection.png")


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.notebook
def test_notebook_03_measures_and_draws_everything(run_notebook, tmp_path):
    figs, res = tmp_path / "figures", tmp_path / "results"
    out = run_notebook(
        "03_scaling_analysis.ipynb", profile="quick", overrides={"train.batch_size": 2},
        workers=[1, 2], steps=4, warmup_steps=1, repeats=1,
        overall_overrides={"data.path": str(tmp_path / "data"), "data.n_showers": 48,
                           "data.n_files": 8, "train.epochs": 2, "train.timing_warmup_epochs": 1,
                           "train.steps_per_epoch": 0, "train.batch_size": 2},
        bench_file=str(res / "allreduce.json"), bench_max_kib=4096, bench_repeats=3,
        figures_dir=str(figs), results_dir=str(res))
    for name in FIGURES:
        assert (figs / name).stat().st_size > 10_000, name
    for name in ("scaling_weak.json", "timeline_breakdown.json", "overall_time.json",
                 "overall_time.md", "scaling_summary.json"):
        assert (res / name).is_file(), name
    s = json.loads((res / "scaling_summary.json").read_text())
    # The performance checks (model within 10 % of the 2-worker step; distributed
    # evaluation within 3 points of training-only efficiency) are timings: they are computed and
    # reported by the notebook and the benchmarks, and judged on a quiet machine, not asserted
    # here where other jobs share the cores. What must hold whatever the load:
    here = s["model_here"]
    assert here["predicted_step_2_s"] > 0 and here["measured_step_2_s"] > 0
    assert isinstance(here["within_10_percent"], bool)
    overall = s["overall_measured"]
    assert isinstance(overall["distributed_within_3_points"], bool)
    assert 0 < overall["serial_fraction_measured"] < 1
    assert s["compute_bound_here"]
    assert s["paper_model"]["model_efficiency_12"] > s["paper_model"]["published_efficiency_12"]
    # Horovod's timeline of the real 3DGAN step: D's gradients twice, G's twice and the 8 losses
    # (gan3d.step), the losses possibly fused with G's last gradients by Horovod.
    tl = json.loads((res / "timeline_breakdown.json").read_text())
    assert tl["collectives_per_step"] in (4, 5)
    assert sum(m["bytes"] for m in tl["messages"]) == 2 * 4 * 73_402 + 2 * 4 * 872_808 + 4 * 8
    assert sorted(m["tensors"] for m in tl["messages"]) in ([13, 14, 18, 18], [1, 13, 13, 18, 18])
    m = tl["mean"]
    assert m["compute_fraction"] + m["wait_fraction"] + m["comm_fraction"] == pytest.approx(1.0)
    assert m["step_s"] == pytest.approx(tl["measured_step_time_s"], rel=0.35)
    nb = nbformat.read(out, as_version=4)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if o.get("output_type") == "error"]
