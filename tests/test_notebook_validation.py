"""Notebook 04 runs headlessly with small parameters and writes its figures and numbers.

The generators are untrained (built and saved here), so the notebook does not depend on a
training run; the speed table reads a small JSON written here instead of timing inference.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from gan3d.gan import reference

from conftest import NOTEBOOKS

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

FIGURES = {"validation_check.png", "validation_metrics.png", "validation_sampling_fraction.png",
           "validation_ecal_sum.png", "validation_profiles.png", "validation_moments.png",
           "validation_hits_spectrum.png", "validation_energy_regression.png",
           "validation_speed.png", "validation_profiles_per_bin.png", "validation_resolution.png"}


def test_committed_without_outputs_and_with_parameters():
    nb = nbformat.read(NOTEBOOKS / "04_physics_validation.ipynb", as_version=4)
    assert nb.cells[0].cell_type == "markdown"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for name in ("profile", "overrides", "checkpoints", "labels", "n_showers", "energy_bins",
                 "figures_dir", "results_dir"):
        assert f"{name} =" in tagged[0].source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert nb.metadata["kernelspec"]["name"] == "gan3d"


def test_notebook_runs_and_writes_figures(run_notebook, tmp_path):
    from gan3d.gan import model

    ckpt = tmp_path / "train_1w"
    model.save_generator(model.build_generator(), ckpt / "generator.keras")
    model.save_discriminator(model.build_discriminator(), ckpt / "discriminator.keras")
    speed = tmp_path / "inference.json"
    speed.write_text(json.dumps({"rows": [
        {"source": "GAN", "precision": "float32", "batch_size": 8, "showers_per_s": 50.0},
        {"source": "synthetic generator", "precision": "float32", "batch_size": 64,
         "showers_per_s": 900.0}], "published": []}))
    figures, results = tmp_path / "figures", tmp_path / "results"
    run_notebook("04_physics_validation.ipynb", checkpoints=[str(ckpt), str(ckpt)],
                 labels=["1 worker", "2 workers"], n_showers=24, energy_bins=[100.0],
                 low_level=False, check_showers=320, sensitivity_sizes=[40, 80],
                 sensitivity_trials=3, figures_dir=str(figures),
                 results_dir=str(results), speed_file=str(speed))
    assert {p.name for p in figures.glob("*.png")} == FIGURES
    assert all(p.stat().st_size > 10_000 for p in figures.glob("*.png"))
    sens = json.loads((results / "sensitivity.json").read_text())
    assert sens["sizes"] == [40, 80] and sens["trials"] == 3 and sens["provenance"]["gan3d"]
    metrics = json.loads((results / "metrics.json").read_text())
    assert metrics["bins"] == ["inclusive", "100"]
    ref_label = reference.label()  # the shipped generator is validated too, by default
    assert set(metrics["generators"]) == {"1 worker", "2 workers", ref_label}
    assert metrics["generators"][ref_label]["checkpoint"] == "reference"
    head = json.loads((results / "headline.json").read_text())
    assert head["inclusive"]["1 worker"]["auc_high"] > 0.9  # untrained: told apart at once
    assert head["validator_check"]["20% wider"]["S(x variance)"] > 0.5
