"""``gan3d doctor``: what the environment has, and plainly what is wrong and how to fix it."""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import psutil

from . import __version__, runtime
from .parallel import devices, distributed

__all__ = ["collect", "report"]

FIX_ENV = "rebuild the environment: `make env` (or `bash tools/bootstrap.sh`)"


def _version(module: str) -> str | None:
    try:
        return getattr(importlib.import_module(module), "__version__", "?")
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return None


def _loaded_libmpi() -> list[str]:
    """Paths of every libmpi mapped into this process (two distinct ones = two MPIs mixed)."""
    paths = set()
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            part = line.split()[-1]
            if "libmpi.so" in Path(part).name:
                paths.add(str(Path(part).resolve()))
    except OSError:
        pass
    return sorted(paths)


def _mpirun() -> dict:
    path = shutil.which("mpirun", path=str(runtime.env_bin())) or shutil.which("mpirun")
    if not path:
        return {"error": "mpirun not found"}
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                             env=runtime.mpi_environment()).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        return {"path": path, "error": str(exc)}
    return {"path": path, "version": out[0] if out else "?"}


def _kernel() -> dict:
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec("gan3d")
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"python": spec.argv[0], "matches": Path(spec.argv[0]).resolve() ==
            Path(sys.executable).resolve()}


def _tensorflow_build() -> dict:
    """CUDA and cuDNN TensorFlow was built with (none: the CPU build)."""
    try:
        import tensorflow as tf

        info = tf.sysconfig.get_build_info()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"cuda": info.get("cuda_version") if info.get("is_cuda_build") else None,
            "cudnn": info.get("cudnn_version") if info.get("is_cuda_build") else None}


def _gpus() -> list[str]:
    """The GPUs TensorFlow finds, with their compute capability and the precision auto picks."""
    try:
        found = devices.describe()
    except Exception as exc:  # noqa: BLE001
        return [f"error: {type(exc).__name__}: {exc}"]
    out = []
    for g in found:
        cc = g["compute_capability"]
        prec = runtime.gpu_precision(cc) if cc else "?"
        out.append(f"GPU {g['index']}: {g['name']} (compute capability "
                   f"{'.'.join(map(str, cc)) if cc else '?'}, train.precision auto -> {prec})")
    return out


def _requirements() -> dict:
    """Each dependency gan3d declares (pyproject.toml): installed version, or what is wrong."""
    from importlib import metadata

    try:
        declared = metadata.requires("gan3d") or []
    except metadata.PackageNotFoundError:
        return {"error": "gan3d is not installed (pip install -e . in the checkout)"}
    out = {}
    for req in declared:
        if ";" in req:  # an extra (cpu, gpu, test): optional
            continue
        name, _, minimum = req.partition(">=")
        name = name.strip()
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = f"MISSING (needs >= {minimum})"
            continue
        out[name] = have if _at_least(have, minimum) else f"{have} (TOO OLD: needs >= {minimum})"
    return out


def _at_least(have: str, minimum: str) -> bool:
    def key(v: str) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in v.split("+")[0].split(".")[:3])
    return not minimum or key(have) >= key(minimum)


def _in_project_env() -> bool:
    """Whether this Python is the checkout's own environment (.venv), built by bootstrap.sh."""
    return Path(sys.prefix).resolve() == (Path(__file__).resolve().parents[2] / ".venv").resolve()


def _jax() -> str | None:
    """jax and jaxlib versions (not imported: that would start a backend), None without them."""
    from importlib import metadata

    try:
        return f"{metadata.version('jax')} (jaxlib {metadata.version('jaxlib')})"
    except metadata.PackageNotFoundError:
        return None


def _memory_gib() -> float | None:
    return psutil.virtual_memory().total / 2**30


def collect() -> tuple[dict, list[str]]:
    """Everything doctor reports, and the list of problems (each with its fix)."""
    runtime.apply_process_defaults()
    built = distributed.versions()  # Horovod's and mpi4py's builds, asked of gan3d.parallel
    info = {
        "gan3d": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "tensorflow": _version("tensorflow"),
        "tensorflow build": _tensorflow_build(),
        "gpus": _gpus(),
        "keras": _version("keras"),
        "horovod": built["horovod"],
        "jax (train.backend jax)": _jax(),
        "mpi4py": built["mpi4py"],
        "mpirun": _mpirun(),
        "ipyparallel": _version("ipyparallel"),
        "papermill": _version("papermill"),
        "jupyterlab": _version("jupyterlab"),
        "h5py": _version("h5py"),
        "dependencies": _requirements(),
        "environment": "the checkout's .venv" if _in_project_env() else f"other ({sys.prefix})",
        "jupyter kernel 'gan3d'": _kernel(),
        "cores": runtime.cpu_count(),
        "cpu bfloat16": runtime.cpu_has_bf16(),
        "memory_gib": round(_memory_gib() or 0, 1),
        "libmpi loaded": _loaded_libmpi(),
        "process settings": {k: os.environ.get(k) for k in runtime.PROCESS_DEFAULTS},
    }
    return info, _problems(info)


def _problems(info: dict) -> list[str]:
    """One line per problem in ``info``, each saying how to fix it."""
    problems = []
    if sys.version_info[:2] != (3, 11):
        problems.append(f"Python {platform.python_version()}: gan3d is pinned to 3.11; {FIX_ENV}")
    own = info.get("environment", "").startswith("the checkout")
    fix = FIX_ENV if own else "install it into this environment"
    deps = info.get("dependencies", {})
    if "error" in deps:
        problems.append(deps["error"])
    for name, state in deps.items():
        if name != "error" and ("MISSING" in state or "TOO OLD" in state):
            need = state.split("needs ")[-1].rstrip(")")
            problems.append(f"{name} is {state.split(' (')[0].lower()}; "
                            + (FIX_ENV if own else f"pip install '{name}{need.replace(' ', '')}'"))
    reported = {n for n, st in deps.items() if "MISSING" in str(st)}
    for name in ("tensorflow", "keras", "ipyparallel", "papermill", "h5py"):
        if info[name] is None and name not in reported:
            what = "tensorflow-cpu==2.18.1 (or tensorflow[and-cuda]==2.18.1 on GPUs)" \
                if name == "tensorflow" else name
            problems.append(f"{name} is not importable; "
                            + (FIX_ENV if own else f"pip install {what}"))
    if info.get("jax (train.backend jax)", "absent") is None:
        problems.append("jax/jaxlib are not installed: train.backend jax cannot run (horovod "
                        "can); " + (FIX_ENV if own else "pip install 'gan3d[jax]' or "
                                    "pip install jax==0.4.38 jaxlib==0.4.38"))
    hvd = info["horovod"]
    if "error" in hvd:
        gpu_tf = bool(info["tensorflow build"].get("cuda"))
        problems.append(f"Horovod is not importable ({hvd['error']}); " + (FIX_ENV if own else
                        "load the site's Horovod module, or build it against this TensorFlow and "
                        "MPI: " + ("with NCCL for GPU all-reduces, as tools/bootstrap_gpu.sh does "
                                   "(HOROVOD_GPU_OPERATIONS=NCCL, a CUDA 12 nvcc)" if gpu_tf else
                                   "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 pip install "
                                   "--no-build-isolation horovod==0.28.1 (as tools/bootstrap.sh "
                                   "does)")))
    elif missing := [k for k in ("mpi", "gloo") if not hvd[k]]:
        problems.append(f"Horovod was built without {', '.join(missing).upper()}; {FIX_ENV}")
    gpus = [g for g in info["gpus"] if g.startswith("GPU ")]
    if gpus and not info["tensorflow build"].get("cuda"):
        problems.append(f"{len(gpus)} GPU(s) but the CPU build of TensorFlow: install "
                        "tensorflow[and-cuda]==2.18.1 in place of tensorflow-cpu to train on them")
    if gpus and "error" not in hvd and not hvd.get("nccl"):
        problems.append("Horovod was built without NCCL: all-reduces of GPU tensors go through "
                        "host memory; rebuild it with HOROVOD_GPU_OPERATIONS=NCCL against "
                        "the NCCL and CUDA of the GPU TensorFlow")
    for key, what in (("mpi4py", "mpi4py cannot load MPI"), ("mpirun", "mpirun")):
        if "error" in info[key]:
            problems.append(f"{what} ({info[key]['error']}); {FIX_ENV}")
    if len(info["libmpi loaded"]) > 1:
        problems.append("two different MPI libraries are loaded ("
                        + ", ".join(info["libmpi loaded"]) + "): remove the system MPI from "
                        "LD_LIBRARY_PATH, or rebuild Horovod against one MPI; " + FIX_ENV)
    kern = info["jupyter kernel 'gan3d'"]
    if "error" in kern:
        problems.append("the Jupyter kernel 'gan3d' is not registered; run `python -m ipykernel "
                        "install --sys-prefix --name gan3d` in the environment"
                        + (", or " + FIX_ENV if own else ""))
    elif not kern["matches"]:
        problems.append(f"the kernel 'gan3d' runs {kern['python']}, not this environment's "
                        f"Python; {FIX_ENV}")
    return problems


def _fmt(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(value) if value else "(none)"
    return "NOT AVAILABLE" if value is None else str(value)


def report() -> int:
    """Print the report; exit status 0 when nothing is wrong, 1 otherwise."""
    info, problems = collect()
    width = max(len(k) for k in info)
    for key, value in info.items():
        print(f"{key:<{width}}  {_fmt(value)}")
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("\nall good: Horovod has TensorFlow, MPI and Gloo; one MPI; kernel registered")
    return 0
