"""Shared fixtures. Tests run inside the project's environment (``make test``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gan3d import runtime

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"

# Multi-process tests launch mpirun and Jupyter kernels: make the environment's bin/ and the
# Open MPI settings visible to them exactly as the package does for users.
runtime.apply_process_defaults()
os.environ.setdefault("IPP_NONINTERACTIVE", "1")


@pytest.fixture
def run_notebook(tmp_path):
    """Execute ``notebooks/<name>`` with papermill and the given parameters; return the output path.

    Figures and results go to ``tmp_path`` unless the parameters say otherwise.
    """
    from gan3d.pipeline import run_notebook as _run

    def run(name: str, **parameters):
        from nbclient.exceptions import DeadKernelError

        out = tmp_path / "executed" / name
        try:
            _run(NOTEBOOKS / name, out, parameters, cwd=ROOT)
        except DeadKernelError as exc:
            # A kernel that died (killed from outside, out of memory) says nothing about the
            # notebook; it was seen once in many runs on a loaded machine. Run it once more and
            # say so; a cell that raises is never retried.
            print(f"kernel of {name} died ({exc}); running it once more")
            _run(NOTEBOOKS / name, out, parameters, cwd=ROOT)
        return out

    return run
