"""Notebook 02 trains 1 and 2 workers on MPI engines with tiny parameters and draws its figures."""

from __future__ import annotations

import json
import os

import nbformat
import pytest

from gan3d.gan.history import HISTORY_FIELDS, read_history

from conftest import NOTEBOOKS

FIGURES = ("training_loss_curves.png", "training_epoch_times.png", "training_showers.png",
           "training_learning_curve.png", "training_showers_reference.png",
           "training_convergence_curves.png", "training_convergence_verdicts.png",
           "training_sync_frequency.png", "training_lr_rules.png")


def test_notebook_02_is_committed_without_outputs_and_parameterised():
    nb = nbformat.read(NOTEBOOKS / "02_distributed_training.ipynb", as_version=4)
    assert nb.cells[0].cell_type == "markdown" and "Claim" in nb.cells[0].source
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1
    for name in ("profile", "overrides", "workers", "epochs", "figures_dir", "results_dir"):
        assert f"{name} =" in params[0].source
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
    # A tiny study left in results/ by other training code (an upgraded checkout) is redone.
    res.mkdir()
    (res / "convergence.json").write_text(json.dumps(
        {"runs": {"1w-s0": {"config_id": "1w", "code_hash": "0123456789abcdef", "rows": []}}}))
    run_notebook("02_distributed_training.ipynb", profile="quick", overrides=tiny, workers=2,
                 jax_workers=2 if _has_jax() else 0, epochs=2, energies=[100.0], figures_dir=str(figs), results_dir=str(res))
    for name in FIGURES:
        assert (figs / name).stat().st_size > 10_000, name
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
        assert all(r["workers"] == 2 for r in rows) and jax["showers_per_s"] > 0
        saved = json.loads((res / "train_2w_jax" / "config.json").read_text())
        assert saved["config"]["train"]["backend"] == "jax"
        assert (res / "train_2w_jax" / "generator.keras").is_file()
    assert summary["reference_showers"] == {"source": "synthetic", "energies_gev": [100.0]}
    # Section 5: the quick profile's tiny convergence study ran (4 real trainings), and the
    # committed results of the full study are shown, with their freshness.
    conv = summary["convergence"]
    assert conv["this_profile"]["runs"] == ["1w-s0", "2w-linear-k2-s0", "2w-linear-s0", "2w-none-s0"]
    tiny = json.loads((res / "convergence.json").read_text())
    assert all(r["showers"] == 32 for r in tiny["runs"].values())
    study = conv["study"]
    assert study["file"] == "studies/convergence.json" and study["planned"] == 36
    assert study["done"] >= 9 and isinstance(study["stale"], list)  # stale runs are shown as such
    verdicts = {(v["candidate"], v["monitor"]): v for v in study["verdicts"]}
    eq = verdicts[("2w-linear", "profile_distance")]
    assert eq["n"] == [3, 3] and eq["verdict"] in ("equivalent", "different", "inconclusive")
    assert [r["k"] for r in study["communication"]] == [1, 4, 16, 64]
    # the shipped reference generator, labelled with its training budget
    ref = summary["reference_generator"]
    assert ref["label"] == f"reference generator ({ref['showers_seen']:,} showers of training)"
    assert ref["showers_seen"] >= 1600 and 0 <= ref["targets_met"] <= 20
    assert summary["quick_monitors"]["showers_seen"] == rows[-1]["showers_seen"]
