"""``gan3d lab``: JupyterLab on ``notebooks/`` with the gan3d kernel and the package's settings;
and :func:`parameters`, the check every notebook runs first on its parameters."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .io import repo_root

__all__ = ["LAB_SETTINGS", "lab_settings", "lab_command", "parameters", "fits_in_memory",
           "SHOWER_BYTES"]

SHOWER_BYTES = 51 * 51 * 25 * 4  # one shower's ECAL cells in float32


# JupyterLab's settings for gan3d, as overrides of its defaults (a user's own settings still win):
# no news feed and no update check - both would fetch from the internet, which offline machines
# and clusters' compute nodes cannot reach, and the news question's toast covers the notebook.
LAB_SETTINGS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                                "checkForUpdates": False}}


def lab_settings() -> Path:
    """Install :data:`LAB_SETTINGS` into the environment's JupyterLab (``overrides.d/gan3d.json``
    of its application settings, atomically); returns the file."""
    from jupyterlab.commands import get_app_dir

    from .io import ensure_dir, read_json, write_json

    path = ensure_dir(Path(get_app_dir()) / "settings" / "overrides.d") / "gan3d.json"
    if not path.is_file() or read_json(path) != LAB_SETTINGS:
        write_json(path, LAB_SETTINGS)
    return path


def lab_command(extra: Sequence[str] = ()) -> list[str]:
    """The JupyterLab command of ``gan3d lab``: notebooks/, the gan3d kernel by default, the
    settings of :func:`lab_settings`, and ``--allow-root`` when run as root (containers, CI),
    which JupyterLab otherwise refuses."""
    lab_settings()
    cmd = [sys.executable, "-m", "jupyterlab", "--notebook-dir", str(repo_root() / "notebooks"),
           "--MappingKernelManager.default_kernel_name=gan3d", *extra]
    if os.geteuid() == 0 and "--allow-root" not in extra:
        print("gan3d lab: running as root, so JupyterLab is started with --allow-root",
              file=sys.stderr)
        cmd.append("--allow-root")
    return cmd


# ---------------------------------------------------------------------------------------------
# A notebook's parameters, checked before any work

_SCALARS = {"int": int, "float": float, "str": str, "bool": bool, "dict": dict, "list": list}


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _check_one(name: str, value: Any, kind: str) -> Any:
    """``value`` as the type ``kind`` names (``int``, ``float``, ``str``, ``bool``, ``dict``,
    ``list``, ``list[T]``, ``Optional[T]``), or :class:`ParameterError`. A dict or list given as
    a string (``papermill -p`` passes strings) is read as JSON/YAML; an int is a float."""
    from .config import load_yaml
    from .exceptions import ConfigError, ParameterError

    kind = kind.replace(" ", "")
    if kind.startswith("Optional[") and kind.endswith("]"):
        return None if value is None else _check_one(name, value, kind[9:-1])
    base, _, inner = kind.partition("[")
    if base in ("dict", "list") and isinstance(value, str):
        try:
            value = load_yaml(value, f"parameter {name}")
        except ConfigError as exc:
            raise ParameterError(f"{name}: {str(exc).splitlines()[0]}") from None
    if base == "list" and isinstance(value, tuple):
        value = list(value)
    want = _SCALARS.get(base)
    if want is None:
        raise ParameterError(f"{name}: the parameters cell annotates it as {kind!r}, which the "
                             f"check does not know; use one of {', '.join(_SCALARS)}")
    ok = (isinstance(value, want) and not (want is int and isinstance(value, bool))
          or (want is float and isinstance(value, int) and not isinstance(value, bool)))
    if not ok:
        raise ParameterError(f"{name} = {value!r}: must be {kind}"
                             + (" (with papermill, lists and dicts go as YAML: -p NAME "
                                "'[1, 2]' or -y 'NAME: [1, 2]')" if base in ("list", "dict") else ""))
    if want is float:
        value = float(value)
    if base == "list" and inner:
        value = [_check_one(f"{name}[{i}]", v, inner[:-1]) for i, v in enumerate(value)]
    return value


def parameters(namespace: dict, **limits: tuple) -> dict:
    """Check a notebook's parameters in ``namespace`` (its ``globals()``), before any work: each
    name the ``parameters`` cell annotates (``n_showers: int = 2000  # meaning``, which
    ``papermill --help-notebook`` shows too) must hold its type (see :func:`_check_one`); each
    name in ``limits`` must lie in ``(low, high)`` (either None: open; a list: every element;
    a set: one of its members). Parsed and coerced values are written back into ``namespace``.
    Raises :class:`~gan3d.exceptions.ParameterError`, one line naming the parameter; returns
    the parameters."""
    from .exceptions import ParameterError

    annotations = namespace.get("__annotations__", {})
    unknown = sorted(set(limits) - set(annotations))
    if unknown:
        raise ParameterError(f"limits for {', '.join(unknown)}, which the parameters cell does "
                             "not annotate")
    checked = {}
    for name, annotation in annotations.items():
        if name not in namespace:
            continue
        value = _check_one(name, namespace[name], _type_name(annotation))
        limit = limits.get(name)
        for v in (value if isinstance(value, list) else [value]):
            if limit is None or v is None:
                continue
            if isinstance(limit, (set, frozenset)):
                if v not in limit:
                    raise ParameterError(f"{name} = {v!r}: choose one of "
                                         f"{', '.join(map(repr, sorted(limit)))}")
                continue
            low, high = limit
            if (low is not None and v < low) or (high is not None and v > high):
                span = (f"between {low} and {high}" if low is not None and high is not None
                        else f">= {low}" if low is not None else f"<= {high}")
                raise ParameterError(f"{name} = {v!r}: must be {span}")
        checked[name] = namespace[name] = value
    return checked


def fits_in_memory(nbytes: float, what: str, share: float = 0.5) -> None:
    """Refuse (:class:`~gan3d.exceptions.ParameterError`) work that would hold ``nbytes`` in
    memory when that is more than ``share`` of the memory available now; ``what`` names the
    parameters that set it."""
    import psutil

    from .exceptions import ParameterError

    free = psutil.virtual_memory().available
    if nbytes > share * free:
        raise ParameterError(f"{what}: needs about {nbytes / 1e9:.1f} GB of memory, and this "
                             f"machine has {free / 1e9:.1f} GB available; choose fewer")
