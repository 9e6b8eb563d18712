"""Notebook 03 regenerates Figures 1-3, the overall-time table and the headline numbers, measuring
everything itself with tiny parameters (the full 3DGAN, few steps, small batches)."""

from __future__ import annotations

import json
import textwrap

import nbformat
import numpy as np
import pytest

from conftest import ROOT
from figure_data import described, one, panels, series, values
from gan3d.report import claims
from gan3d.scaling import energy, topology

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
        overall_overrides={"data.path": str(tmp_path / "data"), "data.n_showers": 24,
                           "data.n_files": 4, "data.test_fraction": 0.25, "train.epochs": 2,
                           "train.timing_warmup_epochs": 1,
                           "train.steps_per_epoch": 0, "train.batch_size": 2},
        bench_file=str(res / "allreduce.json"), bench_max_kib=4096, bench_repeats=3, roofline_repeats=1,
        figures_dir=str(figs), results_dir=str(res))
    assert {p.name for p in figs.glob("*.png")} == set(FIGURES)
    assert {p.name for p in (figs / "data").iterdir()} == {n[:-4] + ".json" for n in FIGURES}
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
    # the estimate for the largest run measured: its busy cores' power over its throughput
    point = max(scale["points"], key=lambda q: q["workers"])
    cores = point["workers"] * point["threads_per_worker"]
    here = en["here"]  # measured where this user can read the counters, else the CPU's TDP share
    assert here["kind"] == point["energy"]["kind"]  # what the scaling run's timed steps recorded
    if here["kind"] == "measured":
        assert here["joule_per_shower"] == pytest.approx(here["total_joules"] / here["showers"])
    else:
        assert here["watts"] == cores * energy.cpu_watts(energy.cpu_model())["watts_per_core"]
        assert here["joule_per_shower"] * point["showers_per_s"] == pytest.approx(here["watts"])
    prof = json.loads((res / "roofline.json").read_text())
    assert prof["batch"] == 2 and prof["precision"] in ("float32", "bfloat16")
    assert 0 < prof["step"]["limit_s"] < prof["step"]["measured_s"]
    nb = nbformat.read(out, as_version=4)
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if o.get("output_type") == "error"]
    # What each figure draws, against the results it was drawn from.
    _fabric(figs, "fig1_node_fabric.png", topology.PAPER_NODE)
    _fabric(figs, "fig1_this_machine.png", topology.read_machine())
    _allreduce(panels(figs, "fig2_allreduce_bandwidth.png"),
               json.loads((res / "allreduce.json").read_text()))
    _speedup(panels(figs, "fig3_speedup_efficiency.png"), scale)
    _breakdown(panels(figs, "fig2_step_breakdown.png"), tl)
    _overall(panels(figs, "scaling_overall_time.png"), overall["analysis"])
    _projection(panels(figs, "scaling_model_projection.png"))
    _roofline(panels(figs, "scaling_roofline.png"), prof)
    _networks(figs, json.loads((res / "network_projection.json").read_text()))
    # The notebook ends with its claims, decided from ITS results: the model's error row shows
    # the error of this run's scaling_summary.json.
    last = "".join(o.get("data", {}).get("text/markdown", "") for o in nb.cells[-1].outputs)
    rel = s["model_here"]["rel_error_2"]
    row = next(line for line in last.splitlines() if "**scaling-model-error**" in line)
    assert f"{100 * rel:+.1f} %" in row
    assert all(f"**{c.id}**" in last for c in claims.CLAIMS if c.notebook == "scaling")


GRADIENT_BYTES = [4 * 73_402, 4 * 872_808]  # D's and G's float32 gradients, one message each


def _fabric(figs, name, fabric):
    """Fig. 1: one box per component, one line per link, the link kinds in the legend."""
    (ax,) = panels(figs, name)
    assert ax["axis"] == "off" and ax["title"] == fabric["name"]
    assert ax["patches"] == {"FancyBboxPatch": len(fabric["components"])}
    assert len(series(ax, "line")) == len(fabric["links"])
    assert ax["legend"] == sorted({link["kind"] for link in fabric["links"]})
    for c in fabric["components"]:
        assert any(t.startswith(textwrap.fill(c["label"], 26)) for t in ax["texts"]), c["label"]
    assert described(figs, name)["texts"] == [f"source: {fabric.get('source', '')}"]


def _allreduce(axes, bench):
    """Fig. 2 (b): time and bus bandwidth per message size; on 2 ranks the bus bandwidth
    2(p-1)/p n/t is n/t, so the two panels must agree point by point."""
    times, bandwidth = axes
    assert bench["workers"] == 2
    assert (times["ylabel"], bandwidth["ylabel"]) == ("time per all-reduce (ms)",
                                                     "bus bandwidth 2(p-1)/p n/t (GB/s)")
    assert times["xscale"] == times["yscale"] == bandwidth["xscale"] == "log"
    sizes = bench["sizes_bytes"]
    assert max(sizes) <= 4096 * 1024  # bench_max_kib
    for k, marker in (("horovod", "o"), ("mpi", "s")):
        t = one(times, "line", f"measured here: {k}")
        assert t["marker"] == marker and values(t, "x").tolist() == sizes
        assert values(t, "y") == pytest.approx(1e3 * np.array(bench["time_s"][k]), rel=1e-6)
        bw = one(bandwidth, "line", f"measured here: {k}")
        assert values(bw, "y") == pytest.approx(np.array(sizes) / (values(t, "y") * 1e-3) / 1e9,
                                                rel=1e-5)
        fit = one(times, "line", f"performance model fit ({k})")
        assert fit["n"] == 100 and values(fit, "x")[[0, -1]].tolist() == [min(sizes), max(sizes)]
    for a in axes:
        assert sorted(s["x"] for s in series(a, "vline")) == GRADIENT_BYTES


def _speedup(axes, scale):
    """Fig. 3: one measured point per worker count; efficiency = speed-up / workers, 1 and
    100 % at one worker; the paper's 98.9 % at 12."""
    sp, eff = axes
    assert (sp["ylabel"], eff["ylabel"]) == ("speed-up", "scaling efficiency (%)")
    assert sp["title"] == "training only, per-worker batch 2" and eff["ylim"][1] == 105
    measured = {}
    for a in axes:
        pts = [p for s in series(a, "line", "measured here")
               for p in zip(values(s, "x"), values(s, "y"))]
        measured[id(a)] = dict(sorted(pts))
    by_workers_sp, by_workers_eff = measured[id(sp)], measured[id(eff)]
    assert list(by_workers_sp) == list(by_workers_eff) == [p["workers"] for p in scale["points"]]
    assert by_workers_sp[1] == 1 and by_workers_eff[1] == 100
    for p in scale["points"]:
        n = p["workers"]
        assert by_workers_sp[n] == pytest.approx(p["speedup"], rel=1e-6)
        assert by_workers_eff[n] == pytest.approx(100 * by_workers_sp[n] / n, rel=1e-5)
    ideal = one(sp, "line", "ideal")
    assert values(ideal, "y").tolist() == values(ideal, "x").tolist() == list(range(1, 13))
    for a, y in ((sp, 12 * 0.989), (eff, 98.9)):
        paper = one(a, "line", "paper (Hesam et al. 2019)")
        assert values(paper, "x").tolist() == [12] and values(paper, "y") == pytest.approx([y])
        model = one(a, "line", "performance model, calibrated here")
        assert values(model, "x").tolist() == [1, 2]


def _breakdown(axes, tl):
    """Fig. 2: each rank's spans follow one another in time; the stacked bars are the mean
    seconds of computation, waiting and all-reduce per step."""
    strip, stacks = axes
    assert strip["yticks"]["labels"] == ["rank 0", "rank 1"] and strip["xlabel"] == "time (s)"
    spans = series(strip, "bars")
    assert len(spans) == len(tl["strip"])
    for rank in (0, 1):
        mine = sorted((s["base"][0], s["values"][0]) for s in spans if s["at"] == [rank])
        assert mine and all(v >= 0 for _, v in mine)
        assert all(b0 + v0 <= b1 + 1e-6 for (b0, v0), (b1, _) in zip(mine, mine[1:]))  # no overlap
    assert stacks["xticks"]["labels"] == ["rank 0", "rank 1", "performance model"]
    assert stacks["ylabel"] == "seconds per step"
    bars = series(stacks, "bars")
    assert len(bars) == 9  # computation, waiting, all-reduce for 2 ranks and the model
    per = tl["per_step"]
    for rank in (0, 1):
        compute, wait, comm = (b for b in bars if b["at"] == [rank])
        assert compute["values"][0] == pytest.approx(np.mean([s["compute_s"][rank] for s in per]), rel=1e-6)
        assert wait["values"][0] == pytest.approx(np.mean([s["wait_s"][rank] for s in per]), rel=1e-6)
        assert comm["values"][0] == pytest.approx(np.mean([s["comm_s"] for s in per]), rel=1e-6)
        assert compute["base"] == [0] and wait["base"][0] == pytest.approx(compute["values"][0], rel=1e-6)
        assert comm["base"][0] == pytest.approx(compute["values"][0] + wait["values"][0], rel=1e-6)


def _overall(axes, analysis):
    """The overall time: training and evaluation stacked per run; speed-ups, 1 at one worker,
    against Amdahl's law with the serial fraction measured here; the paper's 9.07x at 12."""
    times, speedup = axes
    rows = analysis["rows"]
    train, evals = one(times, "bars", "training"), one(times, "bars", "test-loss evaluation")
    assert train["values"] == pytest.approx([r["train_s"] for r in rows], rel=1e-6)
    assert evals["values"] == pytest.approx([r["eval_s"] for r in rows], rel=1e-6)
    assert evals["base"] == train["values"] and times["ylabel"] == "seconds per epoch"
    s = analysis["serial_fraction_measured"]
    law = one(speedup, "line", f"performance model: Amdahl, s = {100 * s:.1f} % (measured here)")
    p = values(law, "x")
    assert p.tolist() == list(range(1, 17))
    assert values(law, "y") == pytest.approx(1 / (s + (1 - s) / p), rel=1e-6)
    for mode in ("serial", "distributed"):
        pts = one(speedup, "line", f"measured here: {mode} evaluation")
        assert values(pts, "x").tolist() == [1, 2] and values(pts, "y")[0] == 1
    paper = one(speedup, "line", "paper (Hesam et al. 2019)")
    assert values(paper, "x").tolist() == [12] and values(paper, "y") == pytest.approx([9.07], abs=0.005)


def _projection(axes):
    """The model to 4096 workers: efficiency 100 % at one worker, falling with workers, higher
    for larger batches; all-reduce time growing with workers."""
    eff, times = axes
    curves = [one(eff, "line", f"batch {b} per worker") for b in (1, 8, 64, 512)]
    for c in curves:
        y = values(c, "y")
        assert values(c, "x")[0] == 1 and y[0] == pytest.approx(100) and np.all(np.diff(y) <= 1e-9)
    ys = np.array([values(c, "y") for c in curves])
    assert np.all(np.diff(ys, axis=0) >= -1e-9)  # a larger batch hides the all-reduce better
    assert eff["xscale"] == "log" and eff["ylabel"] == "scaling efficiency (%)"
    for case in ("paper hardware", "this machine"):
        comm = one(times, "line", f"{case}: all-reduce")
        assert np.all(np.diff(values(comm, "y")) >= 0)
    assert (times["xscale"], times["yscale"]) == ("log", "log")


def _roofline(axes, prof):
    """Each layer where it was measured; the bars add up to the step: the layers' time plus what
    lies outside them, and the layers' limits to the step's limit."""
    roof, bars = axes
    ceilings = one(roof, "line", "measured here: ceilings")
    assert max(values(ceilings, "y")) == pytest.approx(prof["ceilings"]["peak_gflop_s"], rel=1e-6)
    assert np.all(np.diff(values(ceilings, "y")) >= 0)
    for net, name in (("D", "discriminator"), ("G", "generator")):
        layers = [r for r in prof["layers"] if r["flops"] > 0 and r["net"] == net]
        dots = one(roof, "scatter", f"measured here: {name} layers")
        assert values(dots, "x") == pytest.approx([r["intensity"] for r in layers], rel=1e-6)
        assert values(dots, "y") == pytest.approx([r["gflop_s"] for r in layers], rel=1e-6)
    measured, limit = one(bars, "bars", "measured here"), one(bars, "bars", "performance model")
    step = prof["step"]
    assert sum(measured["values"]) == pytest.approx(step["layers_s"] + max(0.0, step["outside_layers_s"]), rel=1e-5)
    assert sum(limit["values"]) == pytest.approx(step["limit_s"], rel=1e-5)
    assert measured["n"] == limit["n"] == min(12, len(prof["layers"])) + 2
    assert bars["yticks"]["labels"][-2:] == ["the other layers", "outside the layers"]


def _networks(figs, projection):
    """The emulated networks (committed studies) and the model's projection over them."""
    net = json.loads((ROOT / "studies" / "network.json").read_text())
    times, error = panels(figs, "scaling_network_allreduce.png")
    rows = [r for r in net["rows"] if r["ranks"] == 2]
    measured = series(times, "line", "measured here")
    assert len(measured) == len(rows) == len(series(error, "line"))
    for s, r in zip(measured, rows):
        assert values(s, "x").tolist() == [int(k) for k in r["time_s"]]
        assert values(s, "y") == pytest.approx(list(r["time_s"].values()), rel=1e-6)
    assert sorted(s["x"] for s in series(times, "vline")) == GRADIENT_BYTES
    assert (one(error, "hspan")["low"], one(error, "hspan")["high"]) == (-15, 15)
    algorithms = json.loads((ROOT / "studies" / "algorithms.json").read_text())
    times, winners = panels(figs, "scaling_allreduce_algorithms.png")
    rows = [r for r in algorithms["rows"] if r["profile"] == "1gbe" and r["ranks"] == 4
            and r["per_host"] == 1]
    assert len(series(times, "line", "measured here")) == len(rows)
    mesh = one(winners, "mesh")
    assert mesh["shape"] == [9, 25] and winners["xscale"] == "log"
    assert {v for row in mesh["values"] for v in row} <= set(range(5))  # one of 5 algorithms
    assert winners["yticks"]["labels"] == ["2", "4", "8", "12", "16", "32", "64", "128", "256"]
    steps, eff = panels(figs, "scaling_network_projection.png")
    rest, comm = one(steps, "bars", "measured here"), one(steps, "bars", "performance model")
    step_s = [r["step_s"] for r in net["steps"]["rows"]]
    assert np.add(rest["values"], comm["values"]) == pytest.approx(step_s, rel=1e-6)
    assert comm["base"] == rest["values"]
    assert eff["ylim"] == [0, 1.05] and one(eff, "hline")["y"] == 0.9
    lines = series(eff, "line")
    assert len(lines) == len(projection["rows"]) * len(projection["batches"])
    for s in lines:  # an efficiency: 1 at one worker, never above
        y = values(s, "y")
        assert values(s, "x").tolist() == projection["workers"] and y[0] == 1
        assert np.all((y > 0) & (y <= 1))
