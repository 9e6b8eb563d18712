"""Notebook 02 trains 1 and 2 workers on MPI engines with tiny parameters and draws its figures."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import nbformat
import pytest

from gan3d.gan.history import HISTORY_FIELDS, read_history

from conftest import NOTEBOOKS, ROOT
from figure_data import described, image_sum, one, panels, series, values

FIGURES = ("training_loss_curves.png", "training_epoch_times.png", "training_showers.png",
           "training_learning_curve.png", "training_showers_reference.png",
           "training_convergence_curves.png", "training_convergence_verdicts.png",
           "training_sync_frequency.png", "training_lr_rules.png")
# Section 6's, drawn once the warm-start study has committed runs
WARM = ("training_warm_start_curves.png", "training_warm_start_verdicts.png")


def _warm_runs() -> dict:
    path = ROOT / "studies" / "warm_start.json"
    return json.loads(path.read_text())["runs"] if path.is_file() else {}


def test_notebook_02_is_committed_without_outputs_and_parameterised():
    nb = nbformat.read(NOTEBOOKS / "02_distributed_training.ipynb", as_version=4)
    assert nb.cells[0].cell_type == "markdown" and "Claim" in nb.cells[0].source
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    for name in ("profile", "overrides", "workers", "epochs", "figures_dir", "results_dir"):
        assert re.search(rf"^{name}(: [^=]+)? = ", params[0].source, re.MULTILINE)
    assert all(not c.get("outputs") and c.get("execution_count") is None
               for c in nb.cells if c.cell_type == "code")
    assert nb.metadata["kernelspec"]["name"] == "gan3d"


def _has_jax() -> bool:
    import importlib.util

    return importlib.util.find_spec("jax") is not None


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.notebook
def test_notebook_02_trains_one_and_two_workers(run_notebook, tmp_path):
    figs, res = tmp_path / "figures", tmp_path / "results"
    tiny = {"data.path": str(tmp_path / "data"), "data.n_showers": 48, "data.n_files": 4,
            "data.test_fraction": 0.25, "train.batch_size": 2, "train.steps_per_epoch": 2,
            "train.eval_fraction": 0.5, "train.timing_warmup_epochs": 1}
    # run_study = False: the quick profile's tiny study is test_convergence's (the same study by
    # the command line, where a study left by other training code is redone); its trainings
    # here would double the test's time. Section 5 still shows the committed study.
    out = run_notebook("02_distributed_training.ipynb", profile="quick", overrides=tiny, workers=2,
                       jax_workers=2 if _has_jax() else 0, run_study=False, epochs=2,
                       energies=[100.0], figures_dir=str(figs), results_dir=str(res))
    expected = set(FIGURES) | (set(WARM) if _warm_runs() else set())
    assert {p.name for p in figs.glob("*.png")} == expected
    assert {p.name for p in (figs / "data").iterdir()} == {n[:-4] + ".json" for n in expected}
    summary = json.loads((res / "training_summary.json").read_text())
    assert summary["workers"] == 2 and summary["epochs"] == 2
    assert summary["config"]["train"]["batch_size"] == 2 and summary["provenance"]["gan3d"]
    cores = len(os.sched_getaffinity(0))
    for workers in (1, 2):
        rows = read_history(res / f"train_{workers}w")
        assert [r["epoch"] for r in rows] == [1, 2]
        assert all(tuple(r)[:len(HISTORY_FIELDS)] == HISTORY_FIELDS and r["workers"] == workers
                   for r in rows)
        assert "mon_sampling_fraction_400" in rows[-1]  # the physics monitors are on
        assert (res / f"train_{workers}w" / "generator.keras").is_file()  # for notebook 04
        # The engines are not bound to cores: they share them, never more threads than cores.
        assert rows[-1]["threads"] == max(1, cores // workers)
        # The notebook's numbers are the runs' own: throughput of the timed epoch.
        run = summary["runs"][str(workers)]
        assert run["showers_per_s"] == rows[-1]["showers_per_s"]
        assert run["threads"] == rows[-1]["threads"]
    if _has_jax():  # section 2b: the same training on the JAX backend, on 2 MPI engines
        jax = summary["jax"]
        rows = read_history(res / "train_2w_jax")
        assert jax["workers"] == 2 and [r["epoch"] for r in rows] == [1, 2]
        assert all(r["workers"] == 2 for r in rows)
        # its throughput: the timed epoch's 2 steps x batch 2 x 2 workers over its training time
        assert jax["showers_per_s"] == pytest.approx(2 * 2 * 2 / rows[-1]["time_train_s"])
        saved = json.loads((res / "train_2w_jax" / "config.json").read_text())
        assert saved["config"]["train"]["backend"] == "jax"
        assert (res / "train_2w_jax" / "generator.keras").is_file()
    assert summary["reference_showers"] == {"source": "synthetic", "energies_gev": [100.0]}
    # Section 5: the committed results of the full study are shown, with their freshness.
    conv = summary["convergence"]
    assert conv["this_profile"]["runs"] == []
    study = conv["study"]
    committed = json.loads((ROOT / "studies" / "convergence.json").read_text())
    assert study["file"] == "studies/convergence.json" and study["planned"] == 36
    assert study["done"] == len(committed["runs"]) >= 9
    # runs made by other training code are of the study, and the notebook says how many
    assert set(study["stale"]) <= set(committed["runs"])
    shown = json.dumps([o for c in nbformat.read(out, as_version=4).cells
                        for o in c.get("outputs", []) if o.get("output_type") == "display_data"])
    assert (f"**stale**: {len(study['stale'])} run(s)" in shown) == bool(study["stale"])
    # It ends with its claims, decided from the committed studies (the ledger's rule).
    from gan3d.report import claims

    for cid in ("n-workers-like-one", "bfloat16-like-float32", "local-sgd"):
        verdict = claims.ledger(ids=(cid,))["claims"][0]["verdict"]
        assert f"**{cid}**" in shown and re.search(rf"\*\*{re.escape(verdict)}\*\* *\|", shown)
    verdicts = {(v["candidate"], v["monitor"]): v for v in study["verdicts"]}
    eq = verdicts[("2w-linear", "profile_distance")]
    assert eq["n"] == [3, 3] and eq["verdict"] == _tost(eq)
    assert [r["k"] for r in study["communication"]] == [1, 4, 16, 64]
    # the shipped reference generator, labelled with its training budget
    ref = summary["reference_generator"]
    assert ref["label"] == f"reference generator ({ref['showers_seen']:,} showers of training)"
    assert ref["showers_seen"] >= 1600 and 0 <= ref["targets_met"] <= 20
    assert summary["quick_monitors"]["showers_seen"] == rows[-1]["showers_seen"]
    # What each figure draws, against the runs' histories and the studies it was drawn from.
    histories = {"1 worker": read_history(res / "train_1w"), "2 workers": read_history(res / "train_2w")}
    _loss_curves(panels(figs, "training_loss_curves.png"), histories)
    _epoch_times(panels(figs, "training_epoch_times.png"), histories)
    seen = histories["2 workers"][-1]["showers_seen"]
    _showers(panels(figs, "training_showers.png"), [100.0],
             f"GAN, 2 workers ({seen:,} showers of training)")
    _showers(panels(figs, "training_showers_reference.png"), [50.0, 100.0, 200.0, 400.0],
             ref["label"])
    _learning_curve(described(figs, "training_learning_curve.png"), ref["label"])
    _convergence(figs, committed, [v for v in study["verdicts"] if v["block"] == "eq"])
    _warm_start(figs, summary["convergence"]["warm_start"], shown)


def _warm_start(figs, shown_summary, shown):
    """Section 6 draws the committed warm-start study: each comparison's interval is the t
    interval of the per-seed differences of the runs' final values, computed here again."""
    from scipy import stats

    from gan3d.convergence.analysis import FINAL_POINTS, MARGINS
    from gan3d.plots.convergence import GRID_VERDICTS, label

    runs = _warm_runs()
    made = {p.name for p in figs.glob("training_warm_start_*.png")}
    if not runs:
        assert made == set() and "holds no runs yet" in shown
        return
    assert made == set(WARM)
    assert shown_summary["runs"] == sorted(runs)
    rows = shown_summary["verdicts"]
    (grid,) = panels(figs, "training_warm_start_verdicts.png")
    pairs = list(dict.fromkeys((r["candidate"], r["reference"]) for r in rows))
    heads = list(dict.fromkeys(r["monitor"] for r in rows))
    # a line per comparison (the grid orders them by rule: tests/test_plots.py), found by its label
    lines = [t.rsplit(" (", 1)[0] for t in grid["yticks"]["labels"]]
    named = {(c, ref): label(c) + (f"\nvs {label(ref)}" if ref != "1w" else "") for c, ref in pairs}
    assert sorted(lines) == sorted(named.values())
    codes = next(s for s in grid["series"] if s["kind"] == "image")["values"]
    # every configuration against 1 worker; local SGD also against 2 workers at k = 1
    k16 = sorted({r["seed"] for r in runs.values() if r["config_id"] == "2w-linear-k16"})
    assert [r["reference"] for r in rows] == ["1w"] * (len(rows) - 8 * bool(k16)) + ["2w-linear"] * 8 * bool(k16)
    assert all(r["seeds"] == k16 for r in rows if r["candidate"] == "2w-linear-k16")
    final = lambda rid, m: np.mean([x[m] for x in runs[rid]["rows"] if x.get(m) is not None][-FINAL_POINTS:])  # noqa: E731
    for r in rows:
        ref = r["reference"]
        d = np.array([final(f"{r['candidate']}-s{s}", r["monitor"]) - final(f"{ref}-s{s}", r["monitor"])
                      for s in r["seeds"]])
        assert r["diffs"] == pytest.approx(d.tolist(), rel=1e-9, abs=1e-12)
        margin, kind = MARGINS[r["monitor"]]
        if kind == "rel":
            margin *= abs(np.mean([final(f"{ref}-s{s}", r["monitor"]) for s in r["seeds"]]))
        assert r["margin"] == pytest.approx(margin)
        if len(d) < 2:
            assert r["verdict"] == "too few seeds"
            continue
        lo, hi = stats.t.interval(0.90, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        assert (r["low"], r["high"]) == pytest.approx((lo, hi), rel=1e-6)
        assert r["verdict"] == _tost(r)
        # its cell: coloured by the verdict, the interval in margins computed here again
        row, col = lines.index(named[r["candidate"], r["reference"]]), heads.index(r["monitor"])
        assert codes[row][col] == GRID_VERDICTS.index(r["verdict"])
        m = r["margin"]
        assert f"{d.mean() / m:+.1f}\n[{lo / m:+.1f}, {hi / m:+.1f}]" in grid["texts"]


def _tost(v: dict) -> str:
    """The verdict of two one-sided tests from a comparison's 90 % interval and its margin."""
    lo, hi, m = v["low"], v["high"], v["margin"]
    return ("equivalent" if -m < lo and hi < m else "different" if lo > m or hi < -m
            else "inconclusive")


def _loss_curves(axes, histories):
    """2 x 4 panels (D, G x loss parts): per run its training and test losses per epoch."""
    parts = ("loss", "bce", "aux", "ecal")
    assert len(axes) == 8
    assert [a["yscale"] for a in axes[:4]] == ["log", "linear", "log", "log"]
    assert axes[0]["title"] == "discriminator: weighted total"
    assert axes[7]["title"] == "generator: ECAL-sum MAPE (%)" and axes[7]["xlabel"] == "epoch"
    for i, (net, part) in enumerate((n, p) for n in "dg" for p in parts):
        lines = series(axes[i], "line")
        assert [s["label"] for s in lines] == ["1 worker, train", "1 worker, test",
                                               "2 workers, train", "2 workers, test"]
        for s in lines:
            rows = histories[s["label"].split(",")[0]]
            key = f"{net}_{part}" if s["label"].endswith("train") else f"test_{net}_{part}"
            assert values(s, "x").tolist() == [1, 2]
            assert values(s, "y") == pytest.approx([r[key] for r in rows], rel=1e-6)


def _epoch_times(axes, histories):
    """Throughput per epoch (warm-up hollow) and training + evaluation time per epoch stacked;
    an epoch of 2 steps x batch 2 trains 4 showers per worker."""
    rates, times = axes
    assert rates["ylim"][0] == 0 and rates["ylabel"] == "training throughput (showers/s, all workers)"
    assert times["ylabel"] == "wall time per epoch (s)"
    for label, workers in (("1 worker", 1), ("2 workers", 2)):
        rows = histories[label]
        name = f"{label} ({workers} x {rows[-1]['threads']} thread{'s' if rows[-1]['threads'] != 1 else ''})"
        line = one(rates, "line", name)
        assert values(line, "y") == pytest.approx([r["showers_per_s"] for r in rows], rel=1e-6)
        train = one(times, "bars", f"{name}: training, {4 * workers} showers")
        evals = one(times, "bars", f"{label}: test evaluation")
        assert train["values"] == pytest.approx([r["time_train_s"] for r in rows], rel=1e-6)
        assert evals["values"] == pytest.approx([r["time_eval_s"] for r in rows], rel=1e-6)
        assert evals["base"] == train["values"]
    points = [s for s in series(rates, "line") if s["label"] is None]
    assert sorted(values(s, "x").tolist() for s in points) == [[1], [1], [2], [2]]  # warm-up, timed


def _showers(axes, energies, gan_label):
    """Per energy: the reference's and the GAN's shower (depth-x image) and both longitudinal
    profiles; an image, its profile and its title hold the same visible energy."""
    assert len(axes) == 3 * len(energies)
    for i, e in enumerate(energies):
        row = axes[3 * i:3 * i + 3]
        profiles = row[2]
        assert profiles["ylabel"] == "energy per layer (GeV)"
        assert [s["label"] for s in series(profiles, "line")] == ["reference showers", gan_label]
        for a, who, profile in zip(row[:2], ("reference showers", gan_label), series(profiles, "line")):
            m = re.fullmatch(rf"{re.escape(who)}, (\d+) GeV: (\d+\.\d\d) GeV visible", a["title"])
            assert m and float(m[1]) == e, a["title"]
            image = one(a, "image")
            assert image["shape"] == [25, 25] and (a["xlabel"], a["ylabel"]) == ("layer (depth)", "x (cell)")
            assert image_sum(image) == pytest.approx(float(m[2]), abs=0.006)
            assert values(profile, "y").sum() == pytest.approx(float(m[2]), abs=0.006)


def _learning_curve(figure, ref_label):
    """The shipped generator's monitors against the showers it saw, one line per energy."""
    from gan3d.gan import reference
    from gan3d.validation.monitors import TARGETS

    curve = reference.info()["learning_curve"]
    assert figure["suptitle"] == f"{ref_label}: physics monitors while it trained"
    axes = figure["axes"]
    names = ("sampling_fraction", "ecal_sum_spread", "max_layer", "transverse_width",
             "longitudinal_width", "profile_distance")
    assert len(axes) == 6
    for a, name in zip(axes, names):
        lines = series(a, "line")
        assert [s["label"] for s in lines] == ["50 GeV", "100 GeV", "200 GeV", "400 GeV"]
        for s, e in zip(lines, (50, 100, 200, 400)):
            assert values(s, "x").tolist() == [r["showers_seen"] for r in curve]
            assert values(s, "y") == pytest.approx([r[f"mon_{name}_{e}"] for r in curve],
                                                   rel=1e-6, nan_ok=True)
        band = series(a, "hspan", "target")  # the monitor's target, where it has one
        tol = TARGETS[name][1] if name in TARGETS else None
        assert [(b["low"], b["high"]) for b in band] == ([(-tol, tol)] if tol else [])


def _convergence(figs, committed, eq_rows):
    """The committed study: 3 configurations of 3 seeds each, a point per evaluation (4, at
    256 ... 1,024 showers), the band +- one seed-to-seed sd; each verdict drawn where its
    interval lies; local SGD's communication falls as 1/k."""
    from gan3d.convergence import analysis
    from gan3d.plots.convergence import NAMES, label, row_label

    runs = committed["runs"]
    curves = panels(figs, "training_convergence_curves.png")
    monitors = ("profile_distance", "sampling_fraction", "max_layer", "g_loss")
    assert [a["title"] for a in curves] == [NAMES[m] for m in monitors]
    for a, monitor in zip(curves, monitors):
        lines, bands = series(a, "line"), series(a, "band")
        assert len(lines) == len(bands) == 3
        for line, band, cid in zip(lines, bands, ("1w", "2w-linear", "2w-none")):
            seeds = [r for r in runs.values() if r["config_id"] == cid]
            assert line["label"] == f"{label(cid)} (3 seeds)" and len(seeds) == 3
            assert values(line, "x").tolist() == values(band, "x").tolist() == [256, 512, 768, 1024]
            raw = np.array([[row[monitor] for row in r["rows"]] for r in seeds], float)
            assert values(line, "y") == pytest.approx(raw.mean(axis=0), rel=1e-6)
            sd = raw.std(axis=0, ddof=1)
            assert values(band, "low") == pytest.approx(raw.mean(axis=0) - sd, rel=1e-5, abs=1e-12)
            assert values(band, "high") == pytest.approx(raw.mean(axis=0) + sd, rel=1e-5, abs=1e-12)
        assert a["yscale"] == ("log" if monitor == "g_loss" else "linear")
    (forest,) = panels(figs, "training_convergence_verdicts.png")
    key = ("profile_distance", "sampling_fraction", "max_layer", "mon_targets_met", "g_loss")
    shown = [v for v in eq_rows if v["monitor"] in key]
    assert forest["yticks"]["labels"] == [f"{row_label(v)}: {NAMES[v['monitor']]}"
                                          for v in shown]
    colour = {"equivalent": "#2ca02c", "different": "#d62728", "inconclusive": "#8c8c8c"}
    for i, v in enumerate(shown):
        assert v["verdict"] == _tost(v)
        at_row = [s for s in series(forest, "line") if s["n"] and values(s, "y").tolist() in ([i], [i, i])]
        interval = next(s for s in at_row if s["n"] == 2)
        point = next(s for s in at_row if s["n"] == 1)
        lo, hi = values(interval, "x")
        assert (lo, hi) == pytest.approx((v["low"] / v["margin"], v["high"] / v["margin"]), rel=1e-6)
        assert lo <= values(point, "x")[0] <= hi  # the difference of means inside its interval
        assert interval["color"] == point["color"] == colour[v["verdict"]]
    assert sorted(s["x"] for s in series(forest, "vline")) == [-1, 0, 1]  # the margins, and 0
    sync = panels(figs, "training_sync_frequency.png")
    comm = sync[0]
    assert (comm["xscale"], comm["yscale"]) == ("log", "log")
    assert comm["ylabel"] == "communication per step (s)"
    for s in series(comm, "line", "performance model, 12 workers"):
        k, t = values(s, "x"), values(s, "y")
        assert k.tolist() == [1, 4, 16, 64]
        assert t[1:] * k[1:] == pytest.approx([t[1] * 4] * 3, rel=1e-5)  # one model sync per k steps
    assert len(series(comm, "line", "performance model")) == len(analysis.NETWORKS)
    for a in sync[1:]:
        (points,) = series(a, "errorbar")
        assert values(points, "x").tolist() == [1, 4, 16, 64] and points["n"] == 4
        band = one(a, "hspan")  # the k = 1 spread
        assert (band["low"], band["high"]) == pytest.approx(
            (points["y_low"][0], points["y_high"][0]), rel=1e-5)
    lr = panels(figs, "training_lr_rules.png")
    assert len(lr) == 3
    for a in lr:
        assert a["xticks"]["labels"][0].startswith("2 workers\n(global batch x2)")
        assert a["xticks"]["labels"][1].startswith("4 workers\n(global batch x4)")
        rules = series(a, "errorbar")
        assert [s["label"] for s in rules] == ["lr x N", "lr x sqrt N", "lr x N, warm-up", "plain lr"]
        assert all(s["n"] == 2 for s in rules)  # 2 and 4 workers, every rule
        assert one(a, "hspan", "1 worker")["low"] <= one(a, "hline")["y"] <= one(a, "hspan", "1 worker")["high"]
