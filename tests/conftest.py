"""Shared fixtures. Tests run inside the project's environment (``make test``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from gan3d.parallel import runtime

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# The tools that render and check the repository's own pages (tools/pages) are not part of the
# package; their tests import them as `pages`.
sys.path.insert(0, str(ROOT / "tools"))

# Multi-process tests launch mpirun and Jupyter kernels: make the environment's bin/ and the
# Open MPI settings visible to them exactly as the package does for users.
runtime.apply_process_defaults()
os.environ.setdefault("IPP_NONINTERACTIVE", "1")

@pytest.fixture
def run_notebook(tmp_path):
    """Execute ``notebooks/<name>`` with papermill and the given parameters; return the output path.

    Figures and results go to ``tmp_path`` unless the parameters say otherwise.
    """
    from gan3d.report.execute import run_notebook as _run

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


# ---------------------------------------------------------------------------------------------
# Shower files written without the package's writer (so the readers are tested independently)


def random_showers(n, seed=0, first_energy=10.0, energy=None):
    """Sparse random showers (n, 25, 25, 25) GeV with distinct energies (they identify showers)
    or the given ``energy`` (n,), scaled so that each deposits about 2 % of its energy, as real
    CLIC showers do."""
    rng = np.random.default_rng(seed)
    ecal = (rng.random((n, 25, 25, 25)) < 0.05) * rng.exponential(1e-3, (n, 25, 25, 25))
    energy = np.asarray(first_energy + np.arange(n) if energy is None else energy, np.float32)
    ecal *= (0.02 * energy / ecal.sum(axis=(1, 2, 3)))[:, None, None, None]
    return ecal.astype(np.float32), energy


def write_h5(path, **arrays):
    """An HDF5 file with one dataset per keyword, written by h5py directly."""
    with h5py.File(path, "w") as f:
        for k, v in arrays.items():
            f[k] = v
    return path


def fixed_file(path, ecal, energy):
    """A fixed-angle file as the real CLIC data lay it out: ECAL and target (PDG id, energy)."""
    return write_h5(path, ECAL=ecal, target=np.c_[np.full(len(energy), 11.0), energy])


@pytest.fixture(scope="session")
def gan_step():
    """The full 3DGAN step of one process (world size 1), built once per test session."""
    from gan3d import config
    from gan3d.gan import training
    from gan3d.parallel import distributed

    distributed.init()
    return training.build_step(config.resolve("quick", {"train.seed": 3,
                                                        "train.precision": "float32"}))
