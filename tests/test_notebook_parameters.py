"""Every notebook's parameters are typed for papermill and checked in its first code cell by
one function (:func:`gan3d.lab.parameters`): a bad value fails that cell with one named line,
before any work; lists and dicts given as strings (``papermill -p``) are read as YAML."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gan3d import lab
from gan3d.exceptions import NotebookFailed, ParameterError

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("0*.ipynb"))


def _ns(**values):
    types = {"n": "int", "x": "float", "o": dict, "e": "list[float]", "k": "Optional[int]",
             "p": str, "b": bool}
    base = {"n": 5, "x": 0.5, "o": {}, "e": [50.0], "k": None, "p": "quick", "b": True}
    return {"__annotations__": types, **base, **values}


def test_parameters_are_typed_coerced_and_bounded_with_one_named_line():
    ns = _ns(o='{"data.seed": 1}', e="[50, 200]", x=1, k=3)
    got = lab.parameters(ns, n=(1, None), e=(1, 1000), p={"quick", "paper"})
    assert got == {"n": 5, "x": 1.0, "o": {"data.seed": 1}, "e": [50.0, 200.0], "k": 3,
                   "p": "quick", "b": True}
    assert ns["o"] == {"data.seed": 1} and isinstance(ns["x"], float)  # written back
    bad = [({"n": -5}, "n = -5: must be >= 1"), ({"n": True}, "n = True: must be int"),
           ({"n": 2.5}, "n = 2.5: must be int"), ({"e": [50, "x"]}, "e[1] = 'x': must be float"),
           ({"e": [5000]}, "e = 5000.0: must be between 1 and 1000"),
           ({"o": "[1"}, "o: parameter o is not valid YAML"), ({"o": "[1, 2]"}, "must be dict"),
           ({"p": "fast"}, "p = 'fast': choose one of 'paper', 'quick'"),
           ({"k": "x"}, "k = 'x': must be int"), ({"b": "yes"}, "b = 'yes': must be bool")]
    for values, said in bad:
        with pytest.raises(ParameterError) as err:
            lab.parameters(_ns(**values), n=(1, None), e=(1, 1000), p={"quick", "paper"})
        assert said in str(err.value) and "\n" not in str(err.value), (values, str(err.value))
        assert err.value._render_traceback_() == [f"ParameterError: {err.value}"]
    with pytest.raises(ParameterError, match="does not annotate"):
        lab.parameters(_ns(), missing=(1, 2))
    with pytest.raises(ParameterError, match="needs about 1000.0 GB of memory"):
        lab.fits_in_memory(1e12, "n_showers = 1000000000")


@pytest.mark.parametrize("name", NAMES)
def test_papermill_reads_a_type_and_a_default_for_every_parameter(name):
    out = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook",
                          str(NOTEBOOKS / name)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    listed = [line for line in out.stdout.splitlines() if "(default " in line]
    nb = json.loads((NOTEBOOKS / name).read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", []))
    names = re.findall(r"^(\w+)\s*[:=]", "".join(cell["source"]), re.MULTILINE)
    assert len(listed) == len(names) >= 7 and "Unknown type" not in out.stdout, out.stdout
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert "parameters(globals()" in "".join(code[1]["source"])  # checked first, in one call


BAD = {"01_data_exploration.ipynb": ({"n_showers": -5}, "n_showers = -5: must be >= 1"),
       "02_distributed_training.ipynb": ({"workers": 0}, "workers = 0: must be between 1 and 64"),
       "03_scaling_analysis.ipynb": ({"workers": "[1, -2]"}, "workers = -2: must be between"),
       "04_physics_validation.ipynb": ({"labels": ["one"]}, "labels: 1 for 2 checkpoints"),
       "05_distributed_concepts.ipynb": ({"amdahl_serial": 1.5},
                                         "amdahl_serial = 1.5: must be between 0 and 1")}


@pytest.mark.notebook
@pytest.mark.parametrize("name", NAMES)
def test_a_bad_parameter_fails_the_first_code_cell_with_its_named_line(name, run_notebook,
                                                                       tmp_path):
    values, said = BAD[name]
    with pytest.raises(NotebookFailed, match="ParameterError") as err:
        run_notebook(name, figures_dir=str(tmp_path / "f"), results_dir=str(tmp_path / "r"),
                     **values)
    assert said in str(err.value)
    executed = json.loads((tmp_path / "executed" / name).read_text())
    failed = [c for c in executed["cells"] if c["cell_type"] == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1 and failed[0]["source"] and "parameters(globals()" in \
        "".join(failed[0]["source"])  # the first cell after the parameters: no work done
    error = next(o for o in failed[0]["outputs"] if o["output_type"] == "error")
    assert len(error["traceback"]) == 1 and said in error["traceback"][0]
    assert not (tmp_path / "f").exists() or not any((tmp_path / "f").iterdir())
