"""Shower files in the CLIC HDF5 schema: list, split, read, write and check them.

File layouts read (energies in GeV, the last ECAL axis is depth):

* fixed angle (``EleEscan_*.h5``, and the files :mod:`gan3d.data.generate` writes): ``ECAL`` float
  (N, 25, 25, 25), ``target`` (N, 2) with the primary energy in column 1;
* variable angle: ``ECAL`` float (N, 51, 51, 25) plus ``energy`` (N,) or (N, 1); the central
  25 x 25 window ``[:, 13:38, 13:38, :]`` is kept.

Every problem a user can cause raises a named error from :mod:`gan3d.exceptions` that names the
file and the problem (never a traceback from inside h5py). The 90/10 split by file is
:func:`n_train_files`, the one rule every caller uses.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Iterator, Sequence

import h5py
import numpy as np

from ..exceptions import (CorruptDataFile, DataError, DataFileMissing, DataSchemaError,
                          DataValueError)
from ..io import atomic_path, read_json
from .calorimeter import SHAPE

__all__ = [
    "ENERGY_RANGE", "MANIFEST", "SLAB", "list_files", "n_train_files", "split_files",
    "count_showers", "read_showers", "write_showers", "shower_file", "sha256", "check_files",
]

ENERGY_RANGE = (0.1, 1000.0)  # GeV: outside it a file is broken or in the wrong unit (MeV?)
MANIFEST = "manifest.json"
_SHAPES = {SHAPE: "fixed", (51, 51, 25): "variable"}
_CROP = slice(13, 38)  # central 25 of 51 cells
SLAB = 256  # showers per contiguous read (16 MB of float32)


def list_files(folder) -> list[Path]:
    """The ``.h5`` files of ``folder``, sorted by name (the order the 90/10 split uses)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataFileMissing(f"data folder {folder} does not exist; make synthetic showers with "
                              f"`gan3d data generate` or point data.path at the CLIC files")
    files = sorted(p for p in folder.glob("*.h5") if not p.name.startswith("."))
    if not files:
        raise DataFileMissing(f"no .h5 files in {folder}; run `gan3d data generate` first")
    return files


def n_train_files(n_files: int, test_fraction: float = 0.1) -> int:
    """How many of ``n_files`` sorted files train: int(n (1 - f)), as the reference trainer does."""
    return int(n_files * (1.0 - test_fraction) + 1e-9)  # 1e-9: 10 x 0.9 must give 9


def split_files(files: Sequence, test_fraction: float = 0.1) -> tuple[list[Path], list[Path]]:
    """Split by file: the first :func:`n_train_files` sorted files train, the rest test."""
    files = sorted(Path(f) for f in files)
    n_train = n_train_files(len(files), test_fraction)
    if n_train < 1 or n_train >= len(files):
        raise DataError(f"cannot split {len(files)} files with test fraction {test_fraction}: "
                        "need at least one training and one test file; write more files")
    return files[:n_train], files[n_train:]


def _open(path) -> h5py.File:
    path = Path(path)
    if not path.is_file():
        raise DataFileMissing(f"{path}: no such data file")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise CorruptDataFile(f"{path}: not a readable HDF5 file ({exc}); it may be truncated "
                              "by an interrupted copy - copy or generate it again") from None


def _layout(f: h5py.File, path) -> tuple[str, int]:
    """('fixed' | 'variable', number of showers) after checking keys, shapes and dtypes."""
    if "ECAL" not in f:
        raise DataSchemaError(f"{path}: no 'ECAL' dataset (found {sorted(f.keys())})")
    ecal = f["ECAL"]
    kind = _SHAPES.get(tuple(ecal.shape[1:])) if ecal.ndim == 4 else None
    if kind is None:
        raise DataSchemaError(f"{path}: ECAL has shape {ecal.shape}; expected (N, 25, 25, 25) "
                              "or (N, 51, 51, 25) with depth last")
    if ecal.dtype.kind != "f":
        raise DataSchemaError(f"{path}: ECAL has dtype {ecal.dtype}; expected floating point GeV")
    key = "target" if kind == "fixed" else "energy"
    if key not in f:
        raise DataSchemaError(f"{path}: {kind}-angle file without '{key}' "
                              f"(found {sorted(f.keys())})")
    lab = f[key]
    ok_shape = (lab.ndim == 2 and lab.shape[1] >= 2) if key == "target" else (
        lab.ndim == 1 or (lab.ndim == 2 and lab.shape[1] == 1))
    if not ok_shape or lab.shape[0] != ecal.shape[0] or lab.dtype.kind not in "fiu":
        want = "(N, 2)" if key == "target" else "(N,)"
        raise DataSchemaError(f"{path}: '{key}' has shape {lab.shape} dtype {lab.dtype}; expected "
                              f"{want} numbers with N = {ecal.shape[0]} as in ECAL")
    return kind, int(ecal.shape[0])


def count_showers(path) -> int:
    """Number of showers in ``path`` (reads only metadata; checks the schema)."""
    with _open(path) as f:
        return _layout(f, path)[1]


def _check_values(ecal, energy, path, start, energy_range) -> None:
    def first(bad_rows):
        return start + int(np.argmax(bad_rows))
    finite = np.isfinite(ecal).all(axis=(1, 2, 3))
    if not finite.all():
        raise DataValueError(f"{path}: NaN or infinite cell energies in {np.sum(~finite)} showers "
                             f"(first: shower {first(~finite)})")
    negative = (ecal < 0).any(axis=(1, 2, 3))
    if negative.any():
        raise DataValueError(f"{path}: negative cell energies in {np.sum(negative)} showers "
                             f"(first: shower {first(negative)}); cells must be energies >= 0 GeV")
    lo, hi = energy_range
    bad = ~((energy >= lo) & (energy <= hi))  # also catches NaN
    if bad.any():
        i = first(bad)
        raise DataValueError(f"{path}: primary energy {energy[i - start]!r} GeV of shower {i} is "
                             f"outside [{lo}, {hi}] GeV (wrong unit, or a broken file)")


def read_showers(path, *, start: int = 0, stop: int | None = None,
                 energy_range: tuple[float, float] = ENERGY_RANGE) -> tuple[np.ndarray, np.ndarray]:
    """Showers ``start:stop`` of one file: ``ecal`` float32 (N, 25, 25, 25) GeV and ``energy``
    float32 (N,) GeV. Variable-angle files are cropped to the central 25 x 25 window.

    Raises DataFileMissing, CorruptDataFile, DataSchemaError or DataValueError naming the file.
    """
    with _open(path) as f:
        kind, n = _layout(f, path)
        stop = n if stop is None else min(stop, n)
        if not 0 <= start <= stop:
            raise DataError(f"{path}: cannot read showers {start}:{stop} of {n}")
        try:
            if kind == "fixed":
                ecal = f["ECAL"][start:stop]
                energy = f["target"][start:stop, 1]
            else:
                ecal = f["ECAL"][start:stop, _CROP, _CROP, :]
                energy = f["energy"][start:stop].reshape(-1)
        except OSError as exc:  # a truncated file opens, then fails on the missing chunks
            raise CorruptDataFile(f"{path}: showers {start}:{stop} cannot be read ({exc}); the "
                                  "file is damaged or truncated - copy or make it again") from None
    ecal = np.asarray(ecal, dtype=np.float32)
    energy = np.asarray(energy, dtype=np.float32)
    _check_values(ecal, energy, path, start, energy_range)
    return ecal, energy


def write_showers(path, ecal: np.ndarray, energy: np.ndarray) -> Path:
    """Write showers in the fixed-angle CLIC schema, atomically (see :func:`shower_file`).

    ``ecal`` (N, 25, 25, 25) GeV, ``energy`` (N,) GeV.
    """
    ecal, energy = np.asarray(ecal, np.float32), np.asarray(energy, np.float32)
    if ecal.ndim != 4 or ecal.shape[1:] != SHAPE or energy.shape != ecal.shape[:1]:
        raise ValueError(f"write_showers: got ECAL {ecal.shape} and energy {energy.shape}")
    with shower_file(path, len(energy)) as f:
        f["ECAL"][...] = ecal
        f["target"][:, 1] = energy
    return Path(path)


@contextlib.contextmanager
def shower_file(path, n: int) -> Iterator[h5py.File]:
    """An empty fixed-angle file for ``n`` showers, renamed into place only when closed cleanly.

    Fill ``f["ECAL"][a:b]`` (GeV) and ``f["target"][a:b, 1]`` (GeV) in any order;
    ``target[:, 0]`` is the PDG id 11. ECAL is gzip level 1 in 16-shower chunks: about 12x
    smaller than raw for these sparse showers, and the fastest of the standard filters to read.
    """
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        chunk = (max(1, min(16, n)), *SHAPE)
        f.create_dataset("ECAL", shape=(n, *SHAPE), dtype="f4", chunks=chunk,
                         compression="gzip", compression_opts=1)
        target = f.create_dataset("target", shape=(n, 2), dtype="f4")
        target[:, 0] = 11.0
        yield f


def sha256(path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_files(folder, *, energy_range: tuple[float, float] = ENERGY_RANGE) -> list[str]:
    """Validate every file of ``folder`` (schema, every value, manifest checksums if present).

    Returns one line per problem, each naming the file; an empty list means all is well.
    """
    problems = []
    files = list_files(folder)
    for path in files:
        try:
            n = count_showers(path)
            for lo in range(0, n, SLAB):
                read_showers(path, start=lo, stop=lo + SLAB, energy_range=energy_range)
        except DataError as exc:
            problems.append(str(exc))
    manifest = Path(folder) / MANIFEST
    if manifest.is_file():
        for entry in read_json(manifest).get("files", []):
            path = Path(folder) / entry["name"]
            if not path.is_file():
                problems.append(f"{path}: listed in {MANIFEST} but missing")
            elif sha256(path) != entry["sha256"]:
                problems.append(f"{path}: checksum differs from {MANIFEST}; the file was changed")
    return problems
