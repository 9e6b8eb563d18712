"""Every value a notebook documents as "off" works end to end: notebook 02 with no physics
monitors (`train.monitor_showers: 0`), no JAX run (`jax_workers = 0`) and no study of its own
(`run_study = False`); notebook 04 without the shipped generators (`with_reference = False`,
`long_runs = []`) and without the classifier (`low_level = False`). Each run must finish, say in
its output what was left out, and write no result of the part that was off."""

from __future__ import annotations

import json

import nbformat
import pytest

from gan3d.gan.history import read_history

pytestmark = [pytest.mark.notebook, pytest.mark.slow]


def _text(path) -> str:
    """Everything the executed notebook showed: streams and markdown."""
    out = []
    for cell in nbformat.read(path, as_version=4).cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") + o.get("data", {}).get("text/markdown", ""))
    return "\n".join(out)


@pytest.mark.mpi
def test_notebook_02_with_its_off_values(run_notebook, tmp_path):
    figs, res = tmp_path / "figures", tmp_path / "results"
    tiny = {"data.path": str(tmp_path / "data"), "data.n_showers": 32, "data.n_files": 4,
            "data.test_fraction": 0.25, "train.batch_size": 2, "train.steps_per_epoch": 2,
            "train.eval_fraction": 0.5, "train.timing_warmup_epochs": 0,
            "train.monitor_showers": 0}
    # one worker (trained once: workers = 1 is the 1-worker run) keeps the test short; the
    # 2-worker run's monitors are notebook 02's own test
    out = run_notebook("02_distributed_training.ipynb", overrides=tiny, workers=1, jax_workers=0,
                       run_study=False, epochs=1, energies=[100.0], reference_energies=[100.0],
                       figures_dir=str(figs), results_dir=str(res))
    shown = _text(out)
    assert "without physics monitors" in shown and "The JAX run is off here" in shown
    rows = read_history(res / "train_1w")
    assert len(rows) == 1 and not any(k.startswith("mon_") for k in rows[0])
    assert not (res / "train_2w").exists()
    summary = json.loads((res / "training_summary.json").read_text())
    assert summary["jax"] is None
    assert summary["convergence"]["this_profile"]["runs"] == []  # no study of its own
    assert not (res / "convergence").exists() and not (res / "train_1w_jax").exists()


def test_notebook_04_with_its_off_values(run_notebook, tmp_path):
    from gan3d.gan import model

    ckpt = tmp_path / "train_1w"
    model.save_generator(model.build_generator(), ckpt / "generator.keras")
    figures, results = tmp_path / "figures", tmp_path / "results"
    out = run_notebook("04_physics_validation.ipynb", checkpoints=[str(ckpt)], labels=["1 worker"],
                       with_reference=False, long_runs=[], low_level=False, n_showers=16,
                       energy_bins=[100.0], check_showers=320, sensitivity_sizes=[40],
                       sensitivity_trials=1, goal_showers=64, goal_draws=1,
                       figures_dir=str(figures), results_dir=str(results),
                       speed_file=str(tmp_path / "no-inference.json"))
    metrics = json.loads((results / "metrics.json").read_text())
    assert list(metrics["generators"]) == ["1 worker"]  # neither the reference nor the long pair
    assert metrics["parameters"]["low_level"] is False
    for row in metrics["generators"]["1 worker"]["bins"].values():
        assert "classifier_high" in row and "classifier_low" not in row  # the voxel classifier is off
    assert "validation_long_runs.png" not in {p.name for p in figures.glob("*.png")}
    assert not (results / "long_runs.json").exists()
    assert "No long run's checkpoint was given" in _text(out)
