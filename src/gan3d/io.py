"""Atomic writes and provenance: no half-written file ever looks complete.

Every file gan3d writes (data, checkpoints, results, figures) goes through :func:`atomic_path`:
the content is written to a temporary name in the same folder and renamed into place only after
it was closed without error (a rename within one file system is atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from . import __version__
from .exceptions import OutputNotWritable
from .runtime import cpu_count

__all__ = ["atomic_path", "write_json", "read_json", "ensure_dir", "provenance", "git_commit"]


def ensure_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents); raise :class:`OutputNotWritable` if that is impossible."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputNotWritable(f"cannot create output folder {p}: {exc.strerror}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise OutputNotWritable(f"output folder {p} is not writable; choose another or fix its permissions")
    return p


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success rename it to ``path``, else delete it.

    The temporary name keeps the final suffix (h5py, matplotlib and Keras pick formats by it).
    """
    final = Path(path)
    ensure_dir(final.parent)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{final.stem}.", suffix=(suffix if suffix is not None else final.suffix) + ".part",
        dir=final.parent,
    )
    os.close(fd)
    tmp_path = Path(tmp)
    # Keep the real suffix last so libraries choosing a format by extension are not confused.
    real_tmp = tmp_path.with_name(tmp_path.name[: -len(".part")])
    try:
        tmp_path.rename(real_tmp)
        os.chmod(real_tmp, 0o644)  # mkstemp makes 0600; results and data are meant to be shared
        yield real_tmp
        os.replace(real_tmp, final)
    except BaseException:
        for p in (tmp_path, real_tmp):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        raise


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically. NumPy scalars and arrays are converted."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=_default, allow_nan=True) + "\n")
    return Path(path)


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """The current commit (with ``-dirty`` if the tree has changes), or None outside git."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("-dirty" if dirty else "")


def _version(module: str) -> str | None:
    """Version of ``module`` without importing it (importing TensorFlow takes ~15 s)."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__version__", "?")
    for dist in (module, f"{module}-cpu"):  # tensorflow ships as tensorflow-cpu here
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def provenance(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Who made a result: package version, commit, machine, time (UTC), key library versions."""
    versions = {}
    for name in ("numpy", "h5py", "tensorflow", "keras", "horovod", "mpi4py", "matplotlib"):
        version = _version(name)
        if version:  # an absent optional library is simply not listed
            versions[name] = version
    info = {
        "gan3d": __version__,
        "commit": git_commit(),
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "hostname": platform.node(),
            "processor": platform.processor() or platform.machine(),
            "cores": cpu_count(),
            "python": platform.python_version(),
        },
        "versions": versions,
    }
    info.update(extra or {})
    return info
