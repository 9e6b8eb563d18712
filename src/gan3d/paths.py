"""Where things live: the repository root and the default folders under it.

Relative paths in a configuration (``data/synthetic``, ``results/train``) are taken relative to the
repository root, so that notebooks opened from ``notebooks/`` and commands run from anywhere inside
the checkout agree. Outside a checkout (an installed package) the current folder is the root.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["repo_root", "resolve_path"]


def repo_root() -> Path:
    """The checkout's root: ``$GAN3D_ROOT``, else the nearest parent with pyproject.toml."""
    env = os.environ.get("GAN3D_ROOT")
    if env:
        return Path(env).resolve()
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for p in (start, *start.parents):
            if (p / "pyproject.toml").is_file() and (p / "src" / "gan3d").is_dir():
                return p
    return Path.cwd()


def resolve_path(path: str | os.PathLike) -> Path:
    """``path`` if absolute, else relative to :func:`repo_root`."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else repo_root() / p
