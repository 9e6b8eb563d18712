"""Notebook 01 runs headlessly with small parameters and writes its figures and numbers."""

from __future__ import annotations

import json

import pytest


@pytest.mark.notebook
@pytest.mark.slow
def test_data_exploration_notebook(run_notebook, tmp_path):
    figures, results = tmp_path / "figures", tmp_path / "results"
    run_notebook("01_data_exploration.ipynb", n_showers=150, energies=[20, 100, 400],
                 figures_dir=str(figures), results_dir=str(results))
    names = sorted(p.name for p in figures.iterdir())
    assert names == ["data_examples.png", "data_fluctuations.png", "data_hits_spectrum.png",
                     "data_profiles.png", "data_sampling_fraction.png", "data_shower_3d.png"]
    assert all((figures / n).stat().st_size > 10_000 for n in names)
    summary = json.loads((results / "data_summary.json").read_text())["summary"]
    assert [b["energy"] for b in summary["bins"]] == [20.0, 100.0, 400.0]
    assert all(b["n"] == 50 for b in summary["bins"])
    # 50 showers: the mean sampling fraction is known to ~0.8 %; the model is within 3 % of the fit.
    assert summary["max_abs_deviation_from_fit"] < 0.06
    layers = [b["max_layer"] for b in summary["bins"]]
    assert layers == sorted(layers) and layers[0] < layers[-1]
