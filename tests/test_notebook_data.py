"""Notebook 01 runs headlessly with small parameters and writes its figures and numbers; each
figure draws the showers it says it draws (read from the figure's data, ``data/<figure>.json``)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from figure_data import image_sum, integral, one, panels, series, values
from gan3d.data.calorimeter import (CELL_THRESHOLD_GEV, FRONT_LAYERS, HIT_THRESHOLD_GEV,
                                    sampling_fraction_fit)

ENERGIES = [20.0, 100.0, 400.0]
FIGURES = ["data_examples.png", "data_fluctuations.png", "data_hits_spectrum.png",
           "data_profiles.png", "data_sampling_fraction.png", "data_shower_3d.png"]


@pytest.mark.notebook
@pytest.mark.slow
def test_data_exploration_notebook(run_notebook, tmp_path):
    figures, results = tmp_path / "figures", tmp_path / "results"
    run_notebook("01_data_exploration.ipynb", n_showers=150, energies=[20, 100, 400],
                 figures_dir=str(figures), results_dir=str(results))
    assert sorted(p.name for p in figures.glob("*.png")) == FIGURES
    assert sorted(p.name for p in (figures / "data").iterdir()) == [n[:-4] + ".json" for n in FIGURES]
    summary = json.loads((results / "data_summary.json").read_text())["summary"]
    assert [b["energy"] for b in summary["bins"]] == ENERGIES
    assert all(b["n"] == 50 for b in summary["bins"])
    # 50 showers: the mean sampling fraction is known to ~0.8 %; the model is within 3 % of the fit.
    assert summary["max_abs_deviation_from_fit"] < 0.06
    layers = [b["max_layer"] for b in summary["bins"]]
    assert layers == sorted(layers) and layers[0] < layers[-1]
    bins = {b["energy"]: b for b in summary["bins"]}
    _examples(panels(figures, "data_examples.png"))
    _shower_3d(panels(figures, "data_shower_3d.png"))
    _profiles(panels(figures, "data_profiles.png"), bins)
    _sampling_fraction(panels(figures, "data_sampling_fraction.png"))
    _hits_and_spectrum(panels(figures, "data_hits_spectrum.png"), bins)
    _fluctuations(panels(figures, "data_fluctuations.png"), summary)


def _examples(axes):
    """3 showers x 3 projections: the three projections of one shower hold the same energy,
    the visible energy its row's title states."""
    assert len(axes) == 9
    assert [a["xlabel"] for a in axes[:3]] == ["x (cell)", "layer (depth)", "layer (depth)"]
    assert [a["ylabel"] for a in axes[:3]] == ["y (cell)", "x (cell)", "y (cell)"]
    for row in range(3):
        images = [one(a, "image") for a in axes[3 * row:3 * row + 3]]
        assert all(im["shape"] == [25, 25] and im["norm"] == "log" for im in images)
        assert images[2]["colorbar"]["label"] == "energy (GeV)"
        title = axes[3 * row]["title"]
        e_p, visible = map(float, re.fullmatch(
            r"\$E_p\$ = (\d+) GeV, visible (\d+\.\d\d) GeV", title).groups())
        assert 10 <= e_p <= 500  # the profile's uniform energies
        sums = [image_sum(im) for im in images]
        assert sums == pytest.approx([visible] * 3, abs=0.006)
        assert 0.005 < visible / e_p < 0.05  # a sampling calorimeter sees ~2 % of the energy


def _shower_3d(axes):
    (ax,) = axes
    cells = one(ax, "scatter")
    title = re.fullmatch(r"\$E_p\$ = (\d+) GeV: (\d+) cells above ([\d.e-]+) GeV", ax["title"])
    assert title and abs(int(title[1]) - 200) <= 10  # the shower nearest 200 GeV
    assert cells["n"] == int(title[2]) and float(title[3]) == HIT_THRESHOLD_GEV
    assert (ax["xlabel"], ax["ylabel"], ax["zlabel"]) == ("layer (depth)", "x (cell)", "y (cell)")
    assert ax["xlim"] == ax["ylim"] == ax["zlim"] == [0, 24]
    for k in "xyz":  # cell indices
        v = values(cells, k)
        assert np.all((v >= 0) & (v <= 24) & (v == np.round(v)))
    assert values(cells, "c").min() > np.log10(HIT_THRESHOLD_GEV)  # log10(cell energy)
    assert cells["colorbar"]["label"] == "log10(cell energy / GeV)"


def _profiles(axes, bins):
    """Mean profiles / Ep: each sums to that energy's mean sampling fraction, the longitudinal
    one peaks at the bin's shower-maximum layer."""
    long_, trans = axes
    assert [a["xlabel"] for a in axes] == ["layer (depth)", "x (cell)"]
    assert all(a["ylabel"] == "mean visible energy / $E_p$" and a["yscale"] == "log" for a in axes)
    assert long_["legend"] == ["20 GeV", "100 GeV", "400 GeV"]
    assert one(long_, "vline")["x"] == FRONT_LAYERS - 0.5  # the change of tungsten thickness
    lines_l, lines_t = series(long_, "line"), series(trans, "line")
    assert len(lines_l) == len(lines_t) == 3
    for e, lo, tr in zip(ENERGIES, lines_l, lines_t):
        assert values(lo, "x").tolist() == list(range(25)) == values(tr, "x").tolist()
        assert lo["drawstyle"] == "steps-mid"
        assert values(lo, "y").sum() == pytest.approx(bins[e]["sampling_fraction"], rel=1e-4)
        assert values(tr, "y").sum() == pytest.approx(bins[e]["sampling_fraction"], rel=1e-4)
        assert int(np.argmax(values(lo, "y"))) == bins[e]["max_layer"]


def _sampling_fraction(axes):
    top, bottom = axes
    assert top["xlim"] == bottom["xlim"]  # one energy axis for both
    assert top["ylabel"] == "sampling fraction $E_{ECAL}/E_p$"
    assert bottom["xlabel"] == "primary energy $E_p$ (GeV)" and bottom["ylabel"] == "mean / fit"
    showers = one(top, "line", "showers")
    e = values(showers, "x")
    assert showers["n"] == 150 and np.all((e >= 10) & (e <= 500))
    binned = one(top, "errorbar", "binned mean")
    assert 2 <= binned["n"] <= 14  # bins of at least 2 showers
    frac = values(showers, "y")
    assert np.all((values(binned, "y") > frac.min()) & (values(binned, "y") < frac.max()))
    fit = one(top, "line", "3DGAN fit")
    assert fit["n"] == 200
    assert values(fit, "y") == pytest.approx(sampling_fraction_fit(values(fit, "x")), rel=1e-5)
    assert (one(bottom, "hspan")["low"], one(bottom, "hspan")["high"]) == (0.97, 1.03)
    assert one(bottom, "hline")["y"] == 1
    ratio = values(one(bottom, "line"), "y")
    assert len(ratio) == binned["n"] and np.all(np.abs(ratio - 1) < 0.1)


def _hits_and_spectrum(axes, bins):
    hits, spectrum = axes
    assert hits["legend"] == ["20 GeV", "100 GeV", "400 GeV"]
    assert hits["xlabel"] == f"hits per shower (cells > {HIT_THRESHOLD_GEV:g} GeV)"
    means = []
    for e, h in zip(ENERGIES, series(hits, "histogram")):
        counts, edges = values(h, "values"), values(h, "edges")
        assert counts.sum() == 50 and len(counts) == 30  # every shower of the energy, 30 bins
        means.append(float(counts @ (edges[1:] + edges[:-1]) / 2 / 50))
        assert means[-1] == pytest.approx(bins[e]["hits"], abs=edges[1] - edges[0])
    assert means == sorted(means)  # more energy, more hit cells
    cells = series(spectrum, "histogram")
    assert len(cells) == 3 and spectrum["xscale"] == spectrum["yscale"] == "log"
    assert spectrum["xlabel"] == "cell energy (GeV)"
    for h in cells:
        edges = values(h, "edges")
        assert len(edges) == 57 and edges[0] == pytest.approx(CELL_THRESHOLD_GEV) and edges[-1] == 10
    assert one(spectrum, "vline")["x"] == HIT_THRESHOLD_GEV


def _fluctuations(axes, summary):
    spread, resolution = axes
    for h in series(spread, "histogram"):  # normalised: each integrates to 1 over (0.75, 1.25)
        assert values(h, "edges")[[0, -1]].tolist() == [0.75, 1.25]
        assert integral(h) == pytest.approx(1.0, rel=1e-4)
    assert len(series(spread, "histogram")) == 3
    assert resolution["xscale"] == "log" and resolution["ylabel"] == "relative resolution σ/E (%)"
    assert resolution["xticks"] == {"at": ENERGIES, "labels": ["20", "100", "400"]}
    for kind, label in (("visible", "visible sum"), ("reconstructed", "visible / layer")):
        points = next(s for s in series(resolution, "line", label) if s.get("marker") == "o")
        assert values(points, "x").tolist() == ENERGIES
        assert values(points, "y") == pytest.approx(
            [100 * b[f"resolution_{kind}"] for b in summary["bins"]], rel=1e-5)
        fit = summary[f"resolution_fit_{kind}"]
        curve = one(resolution, "line", f"{100 * fit['a']:.1f} %/√E ⊕ {100 * fit['b']:.1f} %")
        assert curve["n"] == 100 and values(curve, "y")[0] > values(curve, "y")[-1]  # falls with E
