"""GPUs: one rank per GPU, and what each GPU can compute fast.

The paper ran one MPI rank per P100 (12 ranks on 3 nodes of 4). Each rank must see only its own
GPU, or every rank of a node allocates on GPU 0: :func:`pin` makes GPU ``local_rank`` of the node
the only one TensorFlow sees in this process and lets its memory grow as needed (TensorFlow
would otherwise reserve nearly all of it at start). It runs right after Horovod starts and
before TensorFlow runs anything (:func:`gan3d.parallel.distributed.init`). Without GPUs it does
nothing and the rank computes on its CPU cores.

:func:`describe` lists the GPUs with their compute capability, from which
:func:`gan3d.parallel.runtime.gpu_precision` names the fastest precision of their tensor cores
(``gan3d doctor`` says it; ``train.precision: auto`` trains in float32 on a GPU regardless).

Every function takes TensorFlow's ``tf.config`` as an argument (default: the real one), so that
the choices are tested with a faked device list on machines without GPUs.
"""

from __future__ import annotations

from typing import Any

from .. import console
from ..exceptions import ConfigError

__all__ = ["describe", "pin", "pinned"]

log = console.get_logger(__name__)
_PINNED: dict | None = None


def _config(config: Any = None) -> Any:
    if config is not None:
        return config
    import tensorflow as tf

    return tf.config


def describe(config: Any = None) -> list[dict]:
    """The GPUs TensorFlow finds: index, name and compute capability (major, minor) or None."""
    config = _config(config)
    out = []
    for i, dev in enumerate(config.list_physical_devices("GPU")):
        try:
            details = config.experimental.get_device_details(dev) or {}
        except (RuntimeError, ValueError):  # a GPU TensorFlow cannot query
            details = {}
        cc = details.get("compute_capability")
        out.append({"index": i, "device": getattr(dev, "name", str(dev)),
                    "name": details.get("device_name", "GPU"),
                    "compute_capability": tuple(cc) if cc else None})
    return out


def pin(local_rank: int, local_size: int, config: Any = None) -> dict | None:
    """Make GPU ``local_rank`` of this node the only one this process sees, with memory growth;
    its description, or None on a node without GPUs. More ranks on a node than GPUs is refused
    with how to start one rank per GPU."""
    global _PINNED
    config = _config(config)
    gpus = config.list_physical_devices("GPU")
    if not gpus:
        _PINNED = None
        return None
    if local_size > len(gpus) or not 0 <= local_rank < len(gpus):
        raise ConfigError(
            f"{local_size} ranks on this node but {len(gpus)} GPU(s): start one rank per GPU "
            f"(mpirun -np <nodes x {len(gpus)}> --map-by ppr:{len(gpus)}:node, or srun "
            f"--ntasks-per-node={len(gpus)} --gpus-per-task=1)")
    gpu, info = gpus[local_rank], describe(config)[local_rank]
    try:
        config.set_visible_devices([gpu], "GPU")
        config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as exc:  # TensorFlow had already started on its devices
        raise ConfigError(f"cannot pin GPU {local_rank}: TensorFlow was already running ({exc}); "
                          "start Horovod (gan3d.parallel.distributed.init) before any TensorFlow "
                          "op") from None
    _PINNED = info
    log.info("local rank %d of %d: GPU %d (%s, compute capability %s)", local_rank, local_size,
             local_rank, _PINNED["name"], _PINNED["compute_capability"])
    return _PINNED


def pinned() -> dict | None:
    """The GPU :func:`pin` gave this process, or None (CPU)."""
    return _PINNED
