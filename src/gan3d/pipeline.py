"""The figure pipeline: run the study's notebooks headlessly with papermill.

:func:`run_notebook` executes one notebook; the full ``reproduce`` pipeline builds on it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .exceptions import NotebookFailed
from .io import ensure_dir

__all__ = ["run_notebook"]


def run_notebook(source: str | Path, output: str | Path, parameters: Mapping[str, Any] | None = None,
                 *, cwd: str | Path | None = None, kernel: str = "gan3d", timeout: int = 3600,
                 progress: bool = False) -> Path:
    """Execute ``source`` into ``output`` with papermill; raise :class:`NotebookFailed` on error.

    The partly executed notebook is kept at ``output`` for inspection when a cell fails; the error
    names the notebook, the cell number and the exception.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from .runtime import apply_process_defaults

    apply_process_defaults()  # kernels and MPI engines inherit PATH and the Open MPI settings
    os.environ.setdefault("IPP_NONINTERACTIVE", "1")
    source, output = Path(source), Path(output)
    if not source.is_file():
        raise NotebookFailed(f"notebook {source} does not exist")
    ensure_dir(output.parent)
    try:
        pm.execute_notebook(
            str(source), str(output), parameters=dict(parameters or {}), kernel_name=kernel,
            language="python", cwd=str(cwd) if cwd else None, progress_bar=progress,
            request_save_on_cell_execute=True, execution_timeout=timeout, start_timeout=120,
        )
    except PapermillExecutionError as exc:
        raise NotebookFailed(
            f"{source.name} failed in cell {exc.exec_count} ({exc.ename}: {exc.evalue}); "
            f"the partly executed notebook is kept at {output}"
        ) from None
    return output
