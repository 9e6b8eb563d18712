"""One notebook run headless: papermill executes it, its failures are named, Ctrl-C ends it quietly.

:func:`run_notebook` is what ``gan3d reproduce`` (``pipeline``) and the notebook tests run. The
kernel's own messages (its process's stderr, not the cells' output, which the notebook keeps) go
to a log beside the executed notebook: they are Jupyter's machinery talking, such as the traceback
a kernel prints when it is shut down in the middle of a cell after Ctrl-C.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .. import console
from ..exceptions import NotebookFailed
from ..io import ensure_dir
from ..parallel.runtime import apply_process_defaults

log = console.get_logger(__name__)

__all__ = ["run_notebook", "quiet_dead_kernel_tasks"]


def run_notebook(source: str | Path, output: str | Path, parameters: Mapping[str, Any] | None = None,
                 *, cwd: str | Path | None = None, kernel: str = "gan3d", timeout: int = 3600,
                 progress: bool | str = False) -> Path:
    """Execute ``source`` into ``output`` with papermill; raise :class:`NotebookFailed` on error.

    The partly executed notebook is kept at ``output`` for inspection when a cell fails; the error
    names the notebook, the cell number and the exception. ``progress`` may be a label for a
    progress bar (cell i of n, elapsed time).
    """
    import papermill as pm  # imported when a notebook runs: it loads Jupyter's machinery
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError

    apply_process_defaults()  # kernels and MPI engines inherit PATH and the Open MPI settings
    os.environ.setdefault("IPP_NONINTERACTIVE", "1")
    source, output = Path(source), Path(output)
    if not source.is_file():
        raise NotebookFailed(f"notebook {source} does not exist")
    ensure_dir(output.parent)
    bar: bool | dict = {"desc": progress, "unit": "cell"} if isinstance(progress, str) else progress
    kernel_log = output.with_suffix(".kernel.log")  # the kernel's own stderr
    try:
        pm.execute_notebook(
            str(source), str(output), parameters=dict(parameters or {}), kernel_name=kernel,
            language="python", cwd=str(cwd) if cwd else None, progress_bar=bar,
            request_save_on_cell_execute=True, execution_timeout=timeout, start_timeout=120,
            kernel_manager_class=_logged_kernel(kernel_log),
        )
    except (PapermillExecutionError, DeadKernelError) as exc:
        why = (f"in cell {exc.exec_count} ({exc.ename}: {exc.evalue})"
               if isinstance(exc, PapermillExecutionError) else
               f"as its kernel died (killed from outside, or out of memory; its log: {kernel_log})")
        raise NotebookFailed(f"{source.name} failed {why}; the partly executed notebook is "
                             f"kept at {output}") from None
    except KeyboardInterrupt:
        quiet_dead_kernel_tasks()
        raise
    return output


def _logged_kernel(log: Path) -> type:
    """nbclient's kernel manager, with the kernel process's stderr written to ``log`` (replaced
    at each run) instead of the terminal."""
    from jupyter_client.manager import AsyncKernelManager

    class LoggedKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            with open(log, "wb") as err:  # the kernel holds its own copy of the descriptor
                return await super()._async_launch_kernel(kernel_cmd, **{**kw, "stderr": err})

    return LoggedKernelManager


def quiet_dead_kernel_tasks() -> None:
    """After Ctrl-C inside a notebook, keep nbclient's leftover cell task from speaking last.

    The interrupt stops nbclient's event loop with the cell's task still pending; nbclient then
    shuts the kernel down, and that task ends later with ``DeadKernelError('Kernel died')``,
    which nobody awaits any more. asyncio reports such a task when it is collected - at the
    interpreter's exit, after ``gan3d reproduce: interrupted`` - as "Task exception was never
    retrieved" with a traceback. That death is the interrupt's own doing, so it is logged at
    debug level; every other unretrieved exception still goes to the loop's handler.
    """
    import asyncio

    from jupyter_core.utils import ensure_event_loop  # the loop nbclient runs its cells on
    from nbclient.exceptions import DeadKernelError

    try:
        asyncio.get_running_loop()
        return  # inside Jupyter nbclient ran on a task runner's own loop, not this thread's
    except RuntimeError:
        pass
    loop = ensure_event_loop()
    previous = loop.get_exception_handler()

    def handler(loop, context: dict) -> None:
        if isinstance(context.get("exception"), DeadKernelError):
            log.debug("after the interrupt: %s (%s)", context.get("message"),
                      context.get("exception"))
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
