"""Process set-up that multi-process runs on one machine need, applied by the package.

On a small machine, ranks that fill every core fight over it: Open MPI busy-polls while it waits,
Horovod's background thread wakes every millisecond, and every TensorFlow process starts as many
threads as there are cores. Measured on 2 cores (3DGAN step, 2 ranks): plain ``mpirun`` reaches
61 % scaling efficiency, with the settings below 96-98 %. They are:

* ``OMPI_MCA_mpi_yield_when_idle=1``: MPI yields the core while it waits instead of spinning;
* ``HOROVOD_CYCLE_TIME=5`` (ms): Horovod's coordination thread wakes less often;
* TensorFlow intra-op threads = the cores a rank may use (:func:`threads_per_rank`), inter-op
  threads = 1 (before any TF op);
* as root, Open MPI refuses to start unless ``OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM)`` are set;
* more ranks than cores need oversubscription allowed, and then no binding to cores.

:func:`apply_process_defaults` sets the in-process part (call it before importing TensorFlow);
:func:`mpi_environment` and :func:`mpirun_command` give the launcher's part.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import psutil

from ..exceptions import ConfigError, EnvironmentProblem

__all__ = [
    "env_bin",
    "cpu_count",
    "local_rank_info",
    "threads_per_rank",
    "cpu_has_bf16",
    "onednn_uses_amx",
    "mpi_environment",
    "mpirun_command",
    "pythonpath",
    "apply_process_defaults",
    "configure_tensorflow_threads",
    "intra_op_threads",
]

# Defaults that a user's own environment variables may override.
PROCESS_DEFAULTS = {
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "HOROVOD_CYCLE_TIME": "5",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # TensorFlow 2.18 turns oneDNN on by default only on some Intel CPUs; on this AMD EPYC it is
    # off, and Conv3D backward passes run 5-10x slower without it (measured: 3DGAN D train step).
    "TF_ENABLE_ONEDNN_OPTS": "1",
    "KERAS_BACKEND": "tensorflow",
}


def env_bin() -> Path:
    """The ``bin/`` of the Python environment running us (where the PyPI Open MPI puts mpirun)."""
    return Path(sys.executable).parent


def cpu_count() -> int:
    """Cores this process may use (respects affinity masks and container CPU sets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def cpu_has_bf16(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> bool:
    """Whether the CPU has bfloat16 arithmetic (AVX512_BF16 or AMX). Without it TensorFlow's
    oneDNN refuses bfloat16 and falls back to kernels ~28x slower than float32 (measured)."""
    try:
        flags = Path(cpuinfo).read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def onednn_uses_amx(cpuinfo: str | os.PathLike = "/proc/cpuinfo",
                    env: dict | None = None) -> bool:
    """Whether TensorFlow's oneDNN computes bfloat16 on AMX tiles here: a CPU with AMX, unless
    ``ONEDNN_MAX_CPU_ISA`` caps oneDNN below AMX (e.g. ``AVX512_CORE_BF16``) or
    ``TF_ENABLE_ONEDNN_OPTS=0`` turns oneDNN off (``env``: the environment; ``os.environ``)."""
    env = os.environ if env is None else env
    try:
        flags = Path(cpuinfo).read_text().split()
    except OSError:
        return False
    cap = env.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return ("amx_bf16" in flags and env.get("TF_ENABLE_ONEDNN_OPTS", "1").strip() != "0"
            and (not cap or cap in ("ALL", "DEFAULT") or "AMX" in cap))


def gpu_precision(compute_capability: tuple[int, int]) -> str:
    """The fast precision of a GPU of ``compute_capability``: bfloat16 from 8.0 (A100, H100: bfloat16
    tensor cores), float16 with loss scaling on 6.0-7.x (P100 computes float16 at twice its float32
    rate, V100 and T4 on tensor cores), float32 below."""
    if tuple(compute_capability) >= (8, 0):
        return "bfloat16"
    if tuple(compute_capability) >= (6, 0):
        return "float16"
    return "float32"


def resolve_precision(precision: str, cpuinfo: str | os.PathLike = "/proc/cpuinfo",
                      gpu: tuple[int, int] | None = None) -> str:
    """The fastest precision of this hardware, for inference (``gan3d simulate``; training's
    ``auto`` is :func:`training_auto`): ``auto`` -> on a GPU (``gpu``: its compute
    capability) :func:`gpu_precision`; on a CPU bfloat16 where it has bfloat16 arithmetic, else
    float32. float32, bfloat16 and float16 (with
    loss scaling; meant for GPUs, slow on CPUs) stay as they are; anything else raises
    :class:`ConfigError`."""
    if precision == "auto":
        if gpu is not None:
            return gpu_precision(gpu)
        return "bfloat16" if cpu_has_bf16(cpuinfo) else "float32"
    if precision not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"precision {precision!r}: choose auto, float32, bfloat16 or float16")
    return precision


def training_auto(gpu: tuple[int, int] | None = None, backend: str = "horovod",
                  cpu_bf16: bool = True) -> str:
    """What ``train.precision: auto`` trains in (:func:`gan3d.config.resolved_precision`),
    decided by the evidence: bfloat16 on a CPU with bfloat16 arithmetic (AVX512_BF16 or AMX) on
    the TensorFlow backend, where the warm-start study's bfloat16 block found it trains like
    float32 and it trains faster (``cpu_bf16``: that decision, ``config.TRAINING_AUTO_CPU_BF16``);
    float32 everywhere else - a CPU without bfloat16 arithmetic (emulated, slower), the JAX
    backend and GPUs (``gpu``: its compute capability; not measured there)."""
    if cpu_bf16 and gpu is None and backend == "horovod" and cpu_has_bf16():
        return "bfloat16"
    return "float32"


def local_rank_info() -> tuple[int, int]:
    """(local rank, local size) from the launcher's environment, known before MPI starts."""
    for rank_key, size_key in (
        ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ("HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
        ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ):
        if size_key in os.environ:
            return int(os.environ.get(rank_key, 0)), int(os.environ[size_key])
    return 0, 1


def apply_process_defaults() -> None:
    """Set the in-process defaults (without overriding what the user set). Idempotent."""
    for key, value in PROCESS_DEFAULTS.items():
        os.environ.setdefault(key, value)
    path = os.environ.get("PATH", "")
    bin_dir = str(env_bin())
    if not path.startswith(bin_dir + os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + path


def threads_per_rank(own: int, parent: int, local_size: int) -> int:
    """Intra-op threads of one rank that may run on ``own`` cores, started by a launcher whose
    process may run on ``parent`` cores, with ``local_size`` ranks on this machine.

    A rank that the launcher bound to its cores (``own < parent``: ``mpirun --bind-to core``,
    ``srun --cpu-bind``) has them to itself: one thread per core it holds. An unbound rank
    (``--bind-to none``, ipyparallel engines, a container's cpuset) shares its cores with the
    other local ranks. 16 cores, 2 ranks: 8 threads each either way.
    """
    if own < parent:
        return max(1, own)
    return max(1, own // max(1, local_size))


def _parent_cpu_count() -> int:
    """Cores the launching process may use (the launcher's daemon under mpirun or srun)."""
    try:
        return len(psutil.Process().parent().cpu_affinity())
    except (psutil.Error, AttributeError):  # no parent left, or no affinity on this platform
        return cpu_count()


def configure_tensorflow_threads(intra: int | None = None) -> tuple[int, int]:
    """Give this rank's cores to TensorFlow (:func:`threads_per_rank`); inter-op threads = 1.

    Must run before TensorFlow executes its first op; later calls are ignored by TensorFlow, so
    the threads actually in use are returned.
    """
    import tensorflow as tf  # imported here: the launchers' processes never load TensorFlow

    _, local_size = local_rank_info()
    want = intra or threads_per_rank(cpu_count(), _parent_cpu_count(), local_size)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(want)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # TensorFlow already initialised: keep its settings
    return intra_op_threads(), tf.config.threading.get_inter_op_parallelism_threads()


def intra_op_threads() -> int:
    """TensorFlow's intra-op threads in use: the configured count, or where TensorFlow started
    before anything set it (0, "its default"), the cores this process may run on, which is what
    TensorFlow then uses."""
    import tensorflow as tf

    return tf.config.threading.get_intra_op_parallelism_threads() or cpu_count()


def mpi_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for an ``mpirun`` child: our bin/ first on PATH plus the process defaults."""
    env = dict(os.environ if base is None else base)
    for key, value in PROCESS_DEFAULTS.items():
        env.setdefault(key, value)
    env["PATH"] = str(env_bin()) + os.pathsep + env.get("PATH", "")
    return env


@contextlib.contextmanager
def pythonpath(path: str | None):
    """Within: child processes (launches) import ``gan3d`` from ``path`` (None: unchanged)."""
    saved = os.environ.get("PYTHONPATH")
    if path is not None:
        os.environ["PYTHONPATH"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def mpirun_command(np: int, argv: list[str], *, extra: list[str] | None = None) -> list[str]:
    """``mpirun`` for ``np`` local ranks with the binding and oversubscription this needs.

    Up to one rank per core, each rank is bound to its cores (``--map-by slot:PE=k``), which keeps
    caches warm. With more ranks than cores the run is oversubscribed: no binding, and a marker
    in the results says so.
    """
    mpirun = shutil.which("mpirun", path=str(env_bin())) or shutil.which("mpirun")
    if mpirun is None:
        raise EnvironmentProblem("mpirun not found; run `make env` (tools/bootstrap.sh) first")
    cores = cpu_count()
    if np <= cores:
        binding = ["--map-by", f"slot:PE={max(1, cores // np)}", "--bind-to", "core"]
    else:
        binding = ["--map-by", "slot:OVERSUBSCRIBE", "--bind-to", "none"]
    return [mpirun, "-np", str(np), *binding, *(extra or []), *argv]
