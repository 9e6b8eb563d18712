"""``gan3d doctor``: what the environment has, and plainly what is wrong and how to fix it."""

from __future__ import annotations

import dataclasses
import importlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Literal

import psutil

from . import __version__
from .parallel import devices, distributed, runtime

__all__ = ["Finding", "Status", "collect", "report"]

FIX_ENV = "rebuild the environment: `make env` (or `bash tools/bootstrap.sh`)"


Status = Literal["ok", "missing", "too_old", "incomplete", "mismatch", "broken"]
_WORDS = {"ok": "ok", "missing": "missing", "too_old": "too old", "incomplete": "incomplete",
          "mismatch": "mismatch", "broken": "broken"}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One check of the environment, made where the thing is looked at.

    ``component``: what was checked (a distribution of ``pyproject.toml``, or ``python``,
    ``tensorflow``, ``horovod``, ``mpi4py``, ``mpirun``, ``libmpi``, ``jupyter kernel``);
    ``status``: ``ok``, ``missing`` (not installed, not importable, not found), ``too_old``,
    ``incomplete`` (built without a part gan3d needs), ``mismatch`` (two parts that do not fit)
    or ``broken`` (there, but failing); ``detail``: what was found (a version, the error, the
    paths); ``fix``: how to mend it (empty when nothing is wrong).
    """

    component: str
    status: Status
    detail: str = ""
    fix: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def __str__(self) -> str:
        """The report's line: the component, what is wrong with it, and the fix."""
        text = f"{self.component}: {_WORDS[self.status]}"
        text += f" ({self.detail})" if self.detail else ""
        return f"{text}; {self.fix}" if self.fix else text


def _version(module: str, own: bool) -> Finding:
    """Whether ``module`` imports, and its version."""
    try:
        version = getattr(importlib.import_module(module), "__version__", "?")
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"
        what = "tensorflow-cpu==2.18.1 (or tensorflow[and-cuda]==2.18.1 on GPUs)" \
            if module == "tensorflow" else module
        return Finding(module, "missing", f"not importable: {type(exc).__name__}: {exc}",
                       FIX_ENV if own else f"pip install {what}")
    return Finding(module, "ok", str(version))


def _loaded_libmpi(maps: str | os.PathLike = "/proc/self/maps") -> Finding:
    """Every libmpi mapped into this process: two distinct ones are two MPIs mixed."""
    paths = set()
    try:
        for line in Path(maps).read_text().splitlines():
            part = line.split()[-1]
            if "libmpi.so" in Path(part).name:
                paths.add(str(Path(part).resolve()))
    except OSError:
        pass
    found = "; ".join(sorted(paths))
    if len(paths) > 1:
        return Finding("libmpi", "mismatch", f"two different MPI libraries are loaded: {found}",
                       "remove the system MPI from LD_LIBRARY_PATH, or rebuild Horovod against one "
                       "MPI; " + FIX_ENV)
    return Finding("libmpi", "ok", found)


def _mpirun() -> Finding:
    path = shutil.which("mpirun", path=str(runtime.env_bin())) or shutil.which("mpirun")
    if not path:
        return Finding("mpirun", "missing", "not found", FIX_ENV)
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                             env=runtime.mpi_environment()).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        return Finding("mpirun", "broken", f"{path}: {exc}", FIX_ENV)
    return Finding("mpirun", "ok", f"{path} ({out[0] if out else '?'})")


def _kernel(own: bool) -> Finding:
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        spec = KernelSpecManager().get_kernel_spec("gan3d")
    except Exception as exc:  # noqa: BLE001
        return Finding("jupyter kernel", "missing", f"'gan3d' is not registered: "
                       f"{type(exc).__name__}: {exc}", "run `python -m ipykernel install "
                       "--sys-prefix --name gan3d` in the environment"
                       + (", or " + FIX_ENV if own else ""))
    if Path(spec.argv[0]).resolve() != Path(sys.executable).resolve():
        return Finding("jupyter kernel", "mismatch", f"'gan3d' runs {spec.argv[0]}, not this "
                       "environment's Python", FIX_ENV)
    return Finding("jupyter kernel", "ok", f"'gan3d' runs {spec.argv[0]}")


def _tensorflow_build() -> dict:
    """CUDA and cuDNN TensorFlow was built with (none: the CPU build)."""
    try:
        import tensorflow as tf

        info = tf.sysconfig.get_build_info()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"cuda": info.get("cuda_version") if info.get("is_cuda_build") else None,
            "cudnn": info.get("cudnn_version") if info.get("is_cuda_build") else None}


def _gpus() -> tuple[list[str], int]:
    """The GPUs TensorFlow finds, one line each with their compute capability and the fastest
    precision its tensor cores have (or the error), and how many there are."""
    try:
        found = devices.describe()
    except Exception as exc:  # noqa: BLE001
        return [f"error: {type(exc).__name__}: {exc}"], 0
    out = []
    for g in found:
        cc = g["compute_capability"]
        prec = runtime.gpu_precision(cc) if cc else "?"
        out.append(f"GPU {g['index']}: {g['name']} (compute capability "
                   f"{'.'.join(map(str, cc)) if cc else '?'}, fastest train.precision {prec})")
    return out, len(found)


def _gpu_checks(n_gpus: int, tf_build: dict, horovod: dict) -> list[Finding]:
    """On a node with GPUs: a CUDA build of TensorFlow, and Horovod with NCCL."""
    if not n_gpus:
        return []
    out = [Finding("tensorflow", "mismatch", f"the CPU build, with {n_gpus} GPU(s)",
                   "install tensorflow[and-cuda]==2.18.1 in place of tensorflow-cpu to train on "
                   "them") if not tf_build.get("cuda") else
           Finding("tensorflow", "ok", f"CUDA {tf_build['cuda']}, cuDNN {tf_build.get('cudnn')}")]
    if "error" not in horovod:
        out.append(Finding("horovod", "incomplete", "built without NCCL: all-reduces of GPU "
                           "tensors go through host memory", "rebuild it with "
                           "HOROVOD_GPU_OPERATIONS=NCCL against the NCCL and CUDA of the GPU "
                           "TensorFlow") if not horovod.get("nccl") else
                   Finding("horovod", "ok", "NCCL"))
    return out


def _requirements(own: bool) -> dict[str, Finding]:
    """Each dependency gan3d declares (pyproject.toml): installed version, or what is wrong."""
    from importlib import metadata

    try:
        declared = metadata.requires("gan3d") or []
    except metadata.PackageNotFoundError:
        return {"gan3d": Finding("gan3d", "missing", "not installed",
                                 "pip install -e . in the checkout")}
    out = {}
    for req in declared:
        if ";" in req:  # an extra (cpu, gpu, test): optional
            continue
        name, _, minimum = req.partition(">=")
        name, minimum = name.strip(), minimum.strip()
        fix = FIX_ENV if own else f"pip install '{name}>={minimum}'"
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = Finding(name, "missing", f"needs >= {minimum}", fix)
            continue
        out[name] = Finding(name, "ok", have) if _at_least(have, minimum) else \
            Finding(name, "too_old", f"{have}, needs >= {minimum}", fix)
    return out


def _at_least(have: str, minimum: str) -> bool:
    def key(v: str) -> tuple:
        return tuple(int(p) if p.isdigit() else 0 for p in v.split("+")[0].split(".")[:3])
    return not minimum or key(have) >= key(minimum)


def _in_project_env() -> bool:
    """Whether this Python is the checkout's own environment (.venv), built by bootstrap.sh."""
    return Path(sys.prefix).resolve() == (Path(__file__).resolve().parents[2] / ".venv").resolve()


def _python() -> Finding:
    found = f"{platform.python_version()} ({sys.executable})"
    if sys.version_info[:2] != (3, 11):
        return Finding("python", "mismatch", f"{found}: gan3d is pinned to 3.11", FIX_ENV)
    return Finding("python", "ok", found)


def _jax(own: bool) -> Finding:
    """jax and jaxlib versions (not imported: that would start a backend)."""
    from importlib import metadata

    try:
        found = f"{metadata.version('jax')} (jaxlib {metadata.version('jaxlib')})"
    except metadata.PackageNotFoundError:
        return Finding("jax", "missing", "jax/jaxlib are not installed: train.backend jax cannot "
                       "run (horovod can)", FIX_ENV if own else "pip install 'gan3d[jax]' or pip "
                       "install jax==0.4.38 jaxlib==0.4.38")
    return Finding("jax", "ok", found)


def _horovod(build: dict, own: bool, gpu_tf: bool) -> Finding:
    """Horovod importable, with TensorFlow, MPI and Gloo (``build``: from
    :func:`gan3d.parallel.distributed.versions`)."""
    if "error" in build:
        build_it = ("with NCCL for GPU all-reduces, as tools/bootstrap_gpu.sh does "
                    "(HOROVOD_GPU_OPERATIONS=NCCL, a CUDA 12 nvcc)" if gpu_tf else
                    "HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 pip install --no-build-isolation "
                    "horovod==0.28.1 (as tools/bootstrap.sh does)")
        return Finding("horovod", "missing", f"not importable: {build['error']}",
                       FIX_ENV if own else "load the site's Horovod module, or build it against "
                       "this TensorFlow and MPI: " + build_it)
    missing = [k.upper() if k == "mpi" else k.capitalize() for k in ("mpi", "gloo") if not build[k]]
    if missing:
        return Finding("horovod", "incomplete", f"built without {' and '.join(missing)}", FIX_ENV)
    return Finding("horovod", "ok", f"{build['version']} with TensorFlow, MPI and Gloo")


def _mpi4py(build: dict) -> Finding:
    if "error" in build:
        return Finding("mpi4py", "broken", f"cannot load MPI: {build['error']}", FIX_ENV)
    return Finding("mpi4py", "ok", f"{build['version']} on {build['library']}")


def _memory_gib() -> float | None:
    return psutil.virtual_memory().total / 2**30


IMPORTED = ("tensorflow", "keras", "ipyparallel", "papermill", "h5py")  # must import, not only be


def collect() -> tuple[dict, list[Finding]]:
    """Everything doctor reports, and the findings that are problems (each with its fix)."""
    runtime.apply_process_defaults()
    built = distributed.versions()  # Horovod's and mpi4py's builds, asked of gan3d.parallel
    own = _in_project_env()
    modules = {name: _version(name, own) for name in IMPORTED}
    tf_build = _tensorflow_build()
    gpus, n_gpus = _gpus()
    deps = _requirements(own)
    python, jax, mpirun = _python(), _jax(own), _mpirun()
    horovod = _horovod(built["horovod"], own, bool(tf_build.get("cuda")))
    mpi4py, libmpi, kernel = _mpi4py(built["mpi4py"]), _loaded_libmpi(), _kernel(own)
    info = {
        "gan3d": __version__,
        "python": python,
        "tensorflow": modules["tensorflow"],
        "tensorflow build": tf_build,
        "gpus": gpus,
        "keras": modules["keras"],
        "horovod": built["horovod"],
        "jax (train.backend jax)": jax,
        "mpi4py": built["mpi4py"],
        "mpirun": mpirun,
        **{name: modules[name] for name in ("ipyparallel", "papermill")},
        "jupyterlab": _version("jupyterlab", own),
        "h5py": modules["h5py"],
        "dependencies": deps,
        "environment": "the checkout's .venv" if own else f"other ({sys.prefix})",
        "jupyter kernel 'gan3d'": kernel,
        "cores": runtime.cpu_count(),
        "cpu bfloat16": runtime.cpu_has_bf16(),
        "train.precision auto": auto_precision(n_gpus),
        "memory_gib": round(_memory_gib() or 0, 1),
        "libmpi loaded": libmpi,
        "process settings": {k: os.environ.get(k) for k in runtime.PROCESS_DEFAULTS},
    }
    findings = [python, *deps.values(), *modules.values(), jax, horovod,
                *_gpu_checks(n_gpus, tf_build, built["horovod"]), mpi4py, mpirun, libmpi, kernel]
    return info, _problems(findings)


def auto_precision(n_gpus: int = 0) -> str:
    """What ``train.precision: auto`` trains in here (the Horovod backend), and why."""
    from .config import TRAINING_AUTO_CPU_BF16

    if n_gpus:
        return ("float32 (a GPU: bfloat16 and float16 were not measured on GPUs; set "
                "train.precision to choose)")
    if runtime.training_auto(None, "horovod", TRAINING_AUTO_CPU_BF16) == "bfloat16":
        amx = ("; oneDNN computes it on AMX here, so the generator's first convolution, whose "
               "AMX kernel sums wrongly, computes in float32" if runtime.onednn_uses_amx() else "")
        return ("bfloat16 (this CPU has bfloat16 arithmetic, AVX512_BF16 or AMX, where the "
                f"warm-start study found bfloat16 trains like float32, and faster{amx})")
    return "float32 (this CPU has no bfloat16 arithmetic: bfloat16 would be emulated, slower)"


def _problems(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that are problems, one per component: the first check of it that failed (a
    dependency pip lacks is not reported again as a module that does not import)."""
    out, seen = [], set()
    for f in findings:
        if f.status != "ok" and f.component not in seen:
            out.append(f)
            seen.add(f.component)
    return out


def _fmt(value) -> str:
    if isinstance(value, Finding):
        return value.detail if value.ok else f"{_WORDS[value.status].upper()} ({value.detail})"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v) if isinstance(v, Finding) else v}"
                         for k, v in value.items())
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
