"""The figure pipeline's mechanics on small stand-in notebooks: order, skipping, redo, failure.

The real notebooks are executed by their own tests (tests/test_notebook_*.py); here five tiny
notebooks with the real names let each property be checked in seconds per notebook.
"""

from __future__ import annotations

import json
import platform
import re

import nbformat
import pytest

from gan3d.report.pipeline import STEPS, reproduce

pytestmark = pytest.mark.notebook

BODY = """
import json, pathlib
pathlib.Path(figures_dir).mkdir(parents=True, exist_ok=True)
pathlib.Path(results_dir).mkdir(parents=True, exist_ok=True)
from gan3d.plots import new_figure, save_figure
fig, ax = new_figure()
ax.plot([0, 1], [0, VALUE])
save_figure(fig, pathlib.Path(figures_dir) / "NAME.png")
(pathlib.Path(results_dir) / "out.json").write_text(json.dumps({"value": VALUE, "profile": profile}))
"""


def _write_notebook(path, name, value=1, fail=False):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('profile = "quick"\noverrides = {}\nfigures_dir = "f"\nresults_dir = "r"')
    params.metadata["tags"] = ["parameters"]
    body = BODY.replace("NAME", name).replace("VALUE", str(value))
    cells = [nbformat.v4.new_markdown_cell(f"# {name}"), params, nbformat.v4.new_code_cell(body)]
    if fail:
        cells.append(nbformat.v4.new_code_cell("raise RuntimeError('deliberate failure')"))
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "gan3d", "language": "python", "display_name": "gan3d"}
    nbformat.write(nb, path)


@pytest.fixture
def project(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    for step in STEPS:
        _write_notebook(nbs / step.notebook, f"{step.name}_fig")
    return tmp_path


def _plotted(figures, name):
    """The y values the stand-in notebook's figure draws, read from its published description."""
    return json.loads((figures / "data" / f"{name}_fig.json").read_text())["axes"][0]["series"][0]["y"]


def _run(project, **kwargs):
    kwargs.setdefault("studies_dir", project / "studies")
    return reproduce("quick", kwargs.pop("overrides", {}), notebooks_dir=project / "notebooks",
                     results_dir=project / "results", figures_dir=project / "figures",
                     verbose=False, **kwargs)


@pytest.mark.slow
def test_runs_in_order_publishes_figures_and_index(project):
    summary = _run(project)
    assert summary.ok and [r.status for r in summary.records] == ["ran"] * len(STEPS)
    figures = project / "figures"
    assert sorted(p.name for p in figures.glob("*.png")) == sorted(f"{s.name}_fig.png" for s in STEPS)
    # what each figure draws goes with it, into data/ where it is not taken for a figure
    assert sorted(p.name for p in (figures / "data").iterdir()) == sorted(f"{s.name}_fig.json" for s in STEPS)
    assert all(_plotted(figures, s.name) == [0, 1] for s in STEPS)
    assert [r.figures for r in summary.records] == [[f"{s.name}_fig.png"] for s in STEPS]
    index = (figures / "README.md").read_text()
    for s in STEPS:
        assert f"{s.name}_fig.png" in index and s.notebook in index
    from gan3d.report.pipeline import _code_hash

    assert f"`{_code_hash()[:12]}`" in index  # the code that made them, not a commit
    assert not re.search(rf"\b{re.escape(platform.node())}\b", index)  # no host name
    assert (project / "results" / "notebooks" / STEPS[0].notebook).is_file()
    assert list((project / "results" / "pipeline").glob("run-*.json"))
    # The run ends with the claims ledger; stand-in notebooks measure nothing, so every claim
    # that needs this run's results says which file is missing instead of a verdict it lacks.
    ledger = (figures / "CLAIMS.md").read_text()
    assert ledger.count("\n### ") >= 16
    assert "results/scaling/scaling_summary.json is missing" in ledger
    assert json.loads((project / "results" / "claims.json").read_text())["counts"]


@pytest.mark.slow
def test_second_run_skips_and_a_change_redoes_that_step_and_later_ones(project):
    _run(project)
    again = _run(project)
    assert [r.status for r in again.records] == ["skipped"] * 5
    # a checkpoint committed in studies/ redoes the notebooks that read the studies (2-4), not the
    # data's (1st) or the lesson (5th)
    (project / "studies" / "long-run").mkdir(parents=True)
    (project / "studies" / "long-run" / "epoch-0002.npz").write_bytes(b"new weights")
    studied = _run(project)
    assert [r.status for r in studied.records] == ["skipped", "ran", "ran", "ran", "skipped"]
    assert [s.name for s in STEPS if s.studies] == ["training", "scaling", "validation"]
    # changing the third notebook redoes it and the fourth, which reads it; not the lesson (5th)
    _write_notebook(project / "notebooks" / STEPS[2].notebook, f"{STEPS[2].name}_fig", value=2)
    third = _run(project)
    assert [r.status for r in third.records] == ["skipped", "skipped", "ran", "ran", "skipped"]
    # a parameter that reaches the training notebook (and so validation) redoes 2..4
    fourth = _run(project, overrides={"train.workers": 3})
    assert [r.status for r in fourth.records] == ["skipped", "ran", "ran", "ran", "skipped"]
    forced = _run(project, overrides={"train.workers": 3}, force=True)
    assert [r.status for r in forced.records] == ["ran"] * 5


@pytest.mark.slow
def test_failure_names_notebook_and_cell_and_keeps_earlier_figures(project):
    _run(project)
    fig = project / "figures" / f"{STEPS[2].name}_fig.png"
    before = fig.read_bytes()
    _write_notebook(project / "notebooks" / STEPS[2].notebook, f"{STEPS[2].name}_fig", value=5, fail=True)
    summary = _run(project)
    assert not summary.ok
    statuses = [r.status for r in summary.records]
    assert statuses == ["skipped", "skipped", "failed", "not run", "not run"]
    failed = summary.records[2]
    assert STEPS[2].notebook in failed.error and "cell" in failed.error
    assert "deliberate failure" in failed.error
    assert fig.read_bytes() == before           # the new (unpublished) figure did not replace it
    assert _plotted(project / "figures", STEPS[2].name) == [0, 1]  # nor its data
    assert (project / "results" / "notebooks" / STEPS[2].notebook).is_file()  # kept to inspect
    # the failed step is not remembered as done: fixing it makes it run again
    _write_notebook(project / "notebooks" / STEPS[2].notebook, f"{STEPS[2].name}_fig", value=5)
    assert [r.status for r in _run(project).records] == ["skipped", "skipped", "ran", "ran",
                                                         "skipped"]
    assert _plotted(project / "figures", STEPS[2].name) == [0, 5]


@pytest.mark.slow
def test_cli_exit_status_is_nonzero_on_failure(project, monkeypatch):
    from gan3d import cli
    from gan3d.report import pipeline

    _write_notebook(project / "notebooks" / STEPS[0].notebook, "x", fail=True)
    real = pipeline.reproduce
    monkeypatch.setattr(pipeline, "reproduce", lambda *a, **k: real(
        *a, notebooks_dir=project / "notebooks", results_dir=project / "results",
        figures_dir=project / "figures", verbose=False, **k))
    assert cli.main(["reproduce", "--profile", "quick"]) == 1


def test_index_shows_project_paths_relative_to_the_project():
    from gan3d.io import repo_root
    from gan3d.report.figure_index import shown as _shown

    inside = str(repo_root() / "results" / "training" / "train_1w")
    assert _shown([inside, "/elsewhere/x"]) == ["results/training/train_1w", "/elsewhere/x"]
    assert _shown(3) == 3 and _shown("quick") == "quick"


def test_committed_figures_match_their_index():
    """figures/ is committed so that a reader sees every figure without running anything; its
    index lists exactly the figures there, each with the code hash that made it."""
    from conftest import ROOT

    folder = ROOT / "figures"
    pngs = {p.name for p in folder.glob("*.png")}
    index = (folder / "README.md").read_text()
    listed = set(re.findall(r"^\| \[([\w.]+\.png)\]", index, flags=re.M))
    assert pngs and listed == pngs
    assert {s.name for s in STEPS} <= {n.split("_")[0] if not n.startswith("fig") else "scaling"
                                       for n in pngs} | {"scaling"}
    assert all(re.search(rf"\[{re.escape(n)}\].*\| `[0-9a-f]{{12}}` \|$", index, flags=re.M)
               for n in pngs)
    assert sum(p.stat().st_size for p in folder.glob("*.png")) < 5 * 2**20
    # what the figures draw (data/X.json for X.png): of figures that are there, and small too
    described = list((folder / "data").glob("*.json"))
    assert {p.stem for p in described} == {n[:-4] for n in pngs}  # every figure has its data
    assert sum(p.stat().st_size for p in described) < 5 * 2**20


@pytest.mark.slow
def test_running_one_notebook_keeps_the_other_rows_of_the_index(project):
    """A fresh clone (committed figures, no results) that runs one notebook with --only keeps the
    index rows of the figures it did not remake."""
    import shutil

    _run(project)
    shutil.rmtree(project / "results")  # as in a fresh clone: the figures and index only
    summary = _run(project, only=["concepts"])
    assert [r.status for r in summary.records] == ["ran"]
    index = (project / "figures" / "README.md").read_text()
    assert all(f"[{s.name}_fig.png]" in index for s in STEPS)


def test_index_names_the_training_budget_of_the_generators_a_figure_shows(tmp_path):
    """Showers of a generator trained on 576 showers and of one trained on 40,000 read very
    differently: the index says which budget each figure of notebooks 02 and 04 shows."""
    import json

    from gan3d.gan import reference
    from gan3d.report.figure_index import row_cells as _row_cells
    from gan3d.report.figure_index import seven_cells as _seven_cells
    from gan3d.report.figure_index import shows_generators as _shows_generators
    from gan3d.report.figure_index import training_budgets

    for workers, seen in ((1, 192), (2, 384)):
        run = tmp_path / "training" / f"train_{workers}w"
        run.mkdir(parents=True)
        lines = [json.dumps({"epoch": e, "showers_seen": seen * e}) for e in (1, 2, 3)]
        (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    budget = training_budgets("validation", tmp_path)
    ref = reference.info()["showers_seen"]
    assert budget == f"1 worker: 576 showers; 2 workers: 1,152 showers; reference generator: {ref:,} showers"
    assert training_budgets("scaling", tmp_path) == ""
    assert _shows_generators("training_showers.png") and _shows_generators("validation_profiles.png")
    assert not _shows_generators("training_epoch_times.png") and not _shows_generators("fig3_x.png")
    old = "| [a.png](a.png) | x  | 04.ipynb | p | 2026-11-30T00:00:00+00:00 | `abc` |"
    assert _row_cells(old) == ["[a.png](a.png)", "x", "04.ipynb", "p", "2026-11-30T00:00:00+00:00",
                               "`abc`"]  # a row before the budget column, padded or not
    assert _seven_cells(_row_cells(old)) == ["[a.png](a.png)", "x", "04.ipynb", "p", "",
                                             "2026-11-30T00:00:00+00:00", "`abc`"]
