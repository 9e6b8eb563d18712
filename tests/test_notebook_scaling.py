"""Notebook 03 regenerates Figures 1-3, the overall-time table and the headline numbers, measuring
everything itself with tiny parameters (the full 3DGAN, few steps, small batches)."""

from __future__ import annotations

import json

import nbformat
import pytest

FIGURES = ("fig1_node_fabric.png", "fig1_this_machine.png", "fig2_step_breakdown.png",
           "fig2_allreduce_bandwidth.png", "fig3_speedup_efficiency.png",
           "scaling_overall_time.png", "scaling_model_projection.png", "scaling_roofline.png",
           "scaling_network_allreduce.png", "scaling_allreduce_algorithms.png",
           "scaling_network_projection.png")


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
        bench_file=str(res / "allreduce.json"), bench_max_kib=4096, bench_repeats=3, roofline_repeats=1,
        figures_dir=str(figs), results_dir=str(res))
    for name in FIGURES:
        assert (figs / name).stat().st_size > 10_000, name
    for name in ("scaling_weak.json", "timeline_breakdown.json", "overall_time.json",
                 "overall_time.md", "scaling_summary.json", "roofline.json", "energy.json"):
        assert (res / name).is_file(), name
    s = json.loads((res / "scaling_summary.json").read_text())
    assert s["config"]["scale"]["steps"] == 4 and s["provenance"]["gan3d"]
    # Timings (the model within 10 % of the 2-worker step, distributed evaluation within 3 points)
    # are reported by the notebook and the benchmarks, judged on a quiet machine, not asserted
    # here where other jobs share the cores. What holds whatever the load:
    scale = json.loads((res / "scaling_weak.json").read_text())
    assert [p["workers"] for p in scale["points"]] == [1, 2]
    assert all(len(p["step_times_s"]) == 4 for p in scale["points"])  # 4 timed steps x 1 repeat
    overall = json.loads((res / "overall_time.json").read_text())
    p1 = overall["runs"]["serial_p1"]  # the summary's serial fraction is the 1-worker run's
    assert s["overall_measured"]["serial_fraction_measured"] == pytest.approx(
        p1["eval_s"] / p1["epoch_s"])
    assert s["paper_model"]["model_efficiency_12"] > s["paper_model"]["published_efficiency_12"]
    # Horovod's timeline of the real 3DGAN step, however Horovod fused the tensors this time:
    # D's 13 gradient tensors twice, G's 18 twice, and the step's 8 losses in one tensor.
    tl = json.loads((res / "timeline_breakdown.json").read_text())
    assert tl["steps"] == 4 and tl["tensors_per_step"] == 2 * 13 + 2 * 18 + 1
    assert sum(m["tensors"] for m in tl["messages"]) == 2 * 13 + 2 * 18 + 1
    assert sum(m["bytes"] for m in tl["messages"]) == 2 * 4 * 73_402 + 2 * 4 * 872_808 + 4 * 8
    m = tl["mean"]
    assert m["compute_fraction"] + m["wait_fraction"] + m["comm_fraction"] == pytest.approx(1.0)
    for step in tl["per_step"]:  # a misread timeline gives negative spans
        assert min(step["wait_s"]) >= 0 and min(step["compute_s"]) >= 0 and step["comm_s"] >= 0
    en = json.loads((res / "energy.json").read_text())
    assert en["here"]["kind"] == "estimate" and en["here"]["joule_per_shower"] > 0
    prof = json.loads((res / "roofline.json").read_text())
    assert prof["batch"] == 2 and prof["precision"] in ("float32", "bfloat16")
    assert 0 < prof["step"]["limit_s"] < prof["step"]["measured_s"]
    nb = nbformat.read(out, as_version=4)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if o.get("output_type") == "error"]
