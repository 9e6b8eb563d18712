"""Synthetic data sets on disk: shower files in the CLIC schema, written in parallel, with a manifest.

    gan3d data generate --profile quick          # the command line
    generate_dataset(cfg.data)                   # from Python; idempotent

Files are named ``EleEscan_1_001.h5``... (the real data's pattern, zero-padded so that sorted order
is generation order), hold showers of :func:`gan3d.data.showers.generate` with energies uniform in
[energy_min, energy_max] GeV, and are written atomically (:func:`gan3d.data.files.shower_file`) by
one process per core, each file from its own seed so that the output does not depend on the
number of processes. ``manifest.json`` beside them records the parameters, the seed, the counts
and the checksums and is written last: its presence means every file is complete.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np

from .. import console
from ..exceptions import DataError, OutputNotWritable
from ..io import ensure_dir, folder_lock, provenance, read_json, resolve_path, write_json
from ..parallel.runtime import cpu_count
from .files import MANIFEST, sha256, shower_file
from . import showers

__all__ = ["generate_dataset", "file_names"]

_BLOCK = 512  # showers generated and written at a time inside one file
_COUNTER = None  # showers done, shared with the parent's progress bar (set in workers)


def file_names(n_files: int) -> list[str]:
    """``EleEscan_1_001.h5``...: zero-padded so that sorted order is generation order."""
    width = max(3, len(str(n_files)))
    return [f"EleEscan_1_{j:0{width}d}.h5" for j in range(1, n_files + 1)]


def _make_file(task: tuple) -> dict:
    """Write one file of the data set (runs in a worker); returns its manifest entry."""
    path, n, seed, index, e_min, e_max = task
    rng = np.random.default_rng([seed, index])  # per file: output independent of worker count
    # Round to float32 first so the stored label is exactly the energy the shower was made with.
    energies = rng.uniform(e_min, e_max, n).astype(np.float32)
    with shower_file(path, n) as f:
        f["target"][:, 1] = energies
        for lo in range(0, n, _BLOCK):
            f["ECAL"][lo:lo + _BLOCK] = showers.generate(energies[lo:lo + _BLOCK], rng=rng)
            if _COUNTER is not None:
                with _COUNTER.get_lock():
                    _COUNTER.value += min(_BLOCK, n - lo)
    return {"name": Path(path).name, "n_showers": n, "bytes": Path(path).stat().st_size,
            "sha256": sha256(path)}


def _init_worker(counter) -> None:
    global _COUNTER
    _COUNTER = counter


def _run_tasks(tasks: list[tuple], workers: int, total: int, progress: bool) -> list[dict]:
    """Run ``_make_file`` over ``tasks`` on ``workers`` processes with one progress bar."""
    # fork is cheapest and needs no import guard in the caller's script, but forking a process
    # that runs TensorFlow's thread pools can deadlock the children: spawn then.
    ctx = mp.get_context("spawn" if "tensorflow" in sys.modules else "fork")
    counter = ctx.Value("q", 0)
    with console.progress(total=total, unit="shower", desc="showers", disable=not progress) as bar:
        if workers == 1:
            _init_worker(counter)
            try:
                out = []
                for task in tasks:
                    out.append(_make_file(task))
                    bar.update(counter.value - bar.n)
                return out
            finally:
                _init_worker(None)
        return _run_pool(ctx, counter, tasks, workers, bar)


def _run_pool(ctx, counter, tasks: list[tuple], workers: int, bar) -> list[dict]:
    """``_make_file`` over ``tasks`` in a pool; a worker that dies (killed, or failing while it
    starts) ends the whole run with a named error instead of a pool that waits forever."""
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(counter,))
    try:
        futures = [pool.submit(_make_file, task) for task in tasks]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
            bar.update(counter.value - bar.n)
            if any(f.done() and f.exception() for f in futures):
                break
        out = [f.result() for f in futures]  # re-raises a worker's exception here
    except BrokenProcessPool as exc:
        raise DataError(f"a process writing synthetic showers died ({exc}); no data set was "
                        "published. If the caller is a script, put its code under "
                        "`if __name__ == '__main__':`") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    bar.update(bar.total - bar.n)
    return out


def _intact(folder: Path, manifest: dict) -> bool:
    return all((folder / e["name"]).is_file() and (folder / e["name"]).stat().st_size == e["bytes"]
               for e in manifest.get("files", []))


def generate_dataset(data_cfg, *, progress: bool = True, workers: int | None = None) -> dict:
    """Write ``data_cfg.n_showers`` showers into ``data_cfg.n_files`` files under ``data_cfg.path``.

    Energies are uniform in [energy_min, energy_max] GeV; files are in the fixed-angle CLIC
    schema and written atomically by ``workers`` processes (default: all cores); ``manifest.json``
    beside them records the parameters, seed, counts and checksums and is written last. If a
    manifest with the same parameters exists and its files are intact, nothing is regenerated.
    Safe to call from several processes at once (a file lock serialises them). Returns the
    manifest plus ``folder``, ``reused`` and, when generated, ``seconds`` and ``showers_per_s``.
    """
    if getattr(mp.current_process(), "_inheriting", False):
        # A spawned worker re-imports the caller's script: without a __main__ guard it would
        # call us again and wait forever on the folder lock its parent holds.
        raise RuntimeError("generate_dataset was called while a worker process was starting: "
                           "put the calling script's code under `if __name__ == '__main__':`")
    folder = ensure_dir(resolve_path(data_cfg.path))
    params = {"generator": showers.generator_parameters(), "seed": data_cfg.seed,
              "n_showers": data_cfg.n_showers, "n_files": data_cfg.n_files,
              "energy_min": data_cfg.energy_min, "energy_max": data_cfg.energy_max}
    with folder_lock(folder, ".generate.lock"):
        path = folder / MANIFEST
        old = read_json(path) if path.is_file() else None
        names = file_names(data_cfg.n_files)
        _refuse_foreign(folder, names, old)  # before anything is reused or deleted
        if old and old.get("parameters") == params and _intact(folder, old):
            return {**old, "folder": str(folder), "reused": True}
        _clear(folder, old, path)
        sizes = np.diff(np.linspace(0, data_cfg.n_showers, data_cfg.n_files + 1).astype(int))
        tasks = [(folder / name, int(n), data_cfg.seed, i, data_cfg.energy_min, data_cfg.energy_max)
                 for i, (name, n) in enumerate(zip(names, sizes))]
        workers = max(1, min(workers or cpu_count(), len(tasks)))
        start = time.perf_counter()
        files = _run_tasks(tasks, workers, data_cfg.n_showers, progress)
        seconds = time.perf_counter() - start
        manifest = {"parameters": params, "files": files, "complete": True,
                    "provenance": provenance({"workers": workers, "seconds": seconds})}
        write_json(path, manifest)  # last: its presence means every file is complete
    return {**manifest, "folder": str(folder), "reused": False, "seconds": seconds,
            "showers_per_s": data_cfg.n_showers / seconds}


def _refuse_foreign(folder: Path, names: list[str], old: dict | None) -> None:
    """Raise if ``folder`` holds .h5 files that are neither ours nor to be written now."""
    ours = set(names) | {entry["name"] for entry in (old or {}).get("files", [])}
    foreign = sorted(p.name for p in folder.glob("*.h5") if p.name not in ours)
    if foreign:
        raise OutputNotWritable(
            f"{folder} holds other .h5 files ({', '.join(foreign[:3])}...) that training would mix "
            "with the synthetic showers; choose an empty folder (data.path) or remove them")


def _clear(folder: Path, old: dict | None, manifest: Path) -> None:
    """Remove the previous data set: its manifest first, then its files and stale temporaries."""
    manifest.unlink(missing_ok=True)  # first, so an interrupted run never looks complete
    for entry in (old or {}).get("files", []):
        (folder / entry["name"]).unlink(missing_ok=True)
    for part in folder.glob(".EleEscan_1_*"):  # temporary files of workers killed mid-file
        part.unlink(missing_ok=True)
