"""``gan3d lab``: JupyterLab on ``notebooks/`` with the gan3d kernel and the package's settings."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from .io import repo_root

__all__ = ["LAB_SETTINGS", "lab_settings", "lab_command"]


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
