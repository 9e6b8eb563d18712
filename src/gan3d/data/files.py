"""Shower files in the CLIC HDF5 schema: list, split, read, write and check them.

File layouts read (energies in GeV, the last ECAL axis is depth):

* fixed angle (``EleEscan_*.h5``, and the files :mod:`gan3d.data.generate` writes): ``ECAL`` float
  (N, 25, 25, 25), ``target`` (N, 2) with the primary energy in column 1;
* variable angle: ``ECAL`` float (N, 51, 51, 25) plus ``energy`` (N,) or (N, 1); the central
  25 x 25 window ``[:, 13:38, 13:38, :]`` is kept. Such files may hold ``theta`` (and ``eta``):
  showers at several angles are refused unless ``data.theta_window`` keeps one range.

Every problem a user can cause raises a named error from :mod:`gan3d.exceptions` that names the
file and the problem (never a traceback from inside h5py); every slab read is checked for
values that cannot be showers in GeV (:mod:`gan3d.data.checks`). Files that a GAN wrote carry the
attribute ``origin = "gan"`` and are read whatever their showers look like. The 90/10 split by
file is :func:`n_train_files`, the one rule every caller uses.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import h5py
import numpy as np

from ..exceptions import (CorruptDataFile, DataError, DataFileMissing, DataSchemaError,
                          DataValueError)
from ..io import atomic_path, read_json
from .calorimeter import SHAPE
from .checks import check_values, constant_energy, implausible, visible_fraction

__all__ = [
    "ENERGY_RANGE", "MANIFEST", "SLAB", "ORIGIN_ATTR", "GAN_ORIGIN", "Layout", "list_files",
    "n_train_files", "split_files", "layout", "count_showers", "read_showers", "write_showers",
    "shower_file", "sha256", "screen", "CheckReport", "check_folder", "check_files",
]

ENERGY_RANGE = (0.1, 1000.0)  # GeV: outside it a file is broken or in the wrong unit (MeV?)
MANIFEST = "manifest.json"
_SHAPES = {SHAPE: "fixed", (51, 51, 25): "variable"}
_CROP = slice(13, 38)  # central 25 of 51 cells
SLAB = 256  # showers per contiguous read (16 MB of float32)
ORIGIN_ATTR, GAN_ORIGIN = "origin", "gan"  # file attribute of showers a GAN generated


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


def _dataset(f: h5py.File, key: str, path) -> h5py.Dataset | None:
    """``f[key]`` if it is a dataset, None if absent; a group or a broken link is an error."""
    try:
        obj = f.get(key)
    except (KeyError, OSError) as exc:  # a dangling external or soft link
        raise CorruptDataFile(f"{path}: '{key}' cannot be opened ({exc})") from None
    if obj is not None and not isinstance(obj, h5py.Dataset):
        raise DataSchemaError(f"{path}: '{key}' is an HDF5 {type(obj).__name__.lower()}, not a "
                              "dataset; the CLIC schema stores it as one array")
    return obj


@dataclass(frozen=True)
class Layout:
    """What :func:`layout` found in a file: ``kind`` fixed | variable, ``n`` showers kept (of
    ``n_stored``), ``keep`` their indices when an angle window selects some (else None), and
    ``generated`` when a GAN wrote the file (:func:`shower_file` with ``origin="gan"``)."""

    kind: str
    n: int
    n_stored: int
    keep: np.ndarray | None = None
    generated: bool = False


def _labels(f: h5py.File, kind: str, n: int, path) -> None:
    key = "target" if kind == "fixed" else "energy"
    lab = _dataset(f, key, path)
    if lab is None:
        raise DataSchemaError(f"{path}: {kind}-angle file without '{key}' "
                              f"(found {sorted(f.keys())})")
    ok_shape = (lab.ndim == 2 and lab.shape[1] >= 2) if key == "target" else (
        lab.ndim == 1 or (lab.ndim == 2 and lab.shape[1] == 1))
    if not ok_shape or lab.shape[0] != n or lab.dtype.kind not in "fiu":
        want = "(N, 2)" if key == "target" else "(N,)"
        raise DataSchemaError(f"{path}: '{key}' has shape {lab.shape} dtype {lab.dtype}; expected "
                              f"{want} numbers with N = {n} as in ECAL")


def _angles(f: h5py.File, n: int, path, window) -> np.ndarray | None:
    """Indices of the showers inside the polar-angle ``window``; None when all are kept.

    Files of showers at one angle need no window. Files at several angles are refused without
    one: an energy-conditioned GAN would silently average over the angles."""
    for key in ("theta", "eta"):
        ds = _dataset(f, key, path)
        if ds is not None and (ds.shape[:1] != (n,) or ds.size != n or ds.dtype.kind not in "fiu"):
            raise DataSchemaError(f"{path}: '{key}' has shape {ds.shape} dtype {ds.dtype}; "
                                  f"expected (N,) numbers with N = {n} as in ECAL")
    theta = _dataset(f, "theta", path)
    if theta is None:
        return None
    theta = np.asarray(theta[...], np.float64).reshape(-1)
    if window:
        lo, hi = window
        return np.flatnonzero((theta >= lo) & (theta <= hi))
    if np.ptp(theta) > 1e-6 * max(1.0, float(np.abs(theta).max())):
        raise DataSchemaError(
            f"{path}: showers at {len(np.unique(np.round(theta, 6)))} polar angles (theta "
            f"{theta.min():.4g}-{theta.max():.4g}); an energy-only GAN would mix them. Keep one "
            "range with data.theta_window=[lo, hi] (in the file's theta unit)")
    return None


def layout(path, theta_window: Sequence[float] | None = None) -> Layout:
    """The :class:`Layout` of ``path`` after checking every dataset's type, shape and dtype.

    Raises DataFileMissing, CorruptDataFile, DataSchemaError, or DataValueError for a file that
    holds no showers (or none inside ``theta_window``)."""
    with _open(path) as f:
        return _layout(f, path, theta_window)


def _layout(f: h5py.File, path, theta_window=None) -> Layout:
    ecal = _dataset(f, "ECAL", path)
    if ecal is None:
        raise DataSchemaError(f"{path}: no 'ECAL' dataset (found {sorted(f.keys())})")
    kind = _SHAPES.get(tuple(ecal.shape[1:])) if ecal.ndim == 4 else None
    if kind is None:
        raise DataSchemaError(f"{path}: ECAL has shape {ecal.shape}; expected (N, 25, 25, 25) "
                              "or (N, 51, 51, 25) with depth last")
    if ecal.dtype.kind != "f":
        raise DataSchemaError(f"{path}: ECAL has dtype {ecal.dtype}; expected floating point GeV")
    n = int(ecal.shape[0])
    _labels(f, kind, n, path)
    keep = _angles(f, n, path, theta_window) if kind == "variable" else None
    kept = n if keep is None else len(keep)
    if kept == 0:
        raise DataValueError(f"{path}: holds no showers" + (
            "" if n == 0 else f" with theta inside data.theta_window {list(theta_window)}"))
    generated = f.attrs.get(ORIGIN_ATTR) == GAN_ORIGIN
    return Layout(kind, kept, n, keep, bool(generated))


def count_showers(path, theta_window: Sequence[float] | None = None) -> int:
    """Number of showers in ``path`` (inside ``theta_window`` if given); checks the schema."""
    return layout(path, theta_window).n


def _read_rows(f: h5py.File, lay: Layout, start: int, stop: int):
    """ECAL rows and energies of kept showers ``start:stop`` (contiguous reads)."""
    rows = slice(start, stop) if lay.keep is None else lay.keep[start:stop]
    if lay.kind == "fixed":
        return f["ECAL"][rows], f["target"][rows, 1]
    if isinstance(rows, slice):
        return f["ECAL"][rows, _CROP, _CROP, :], f["energy"][rows].reshape(-1)
    if len(rows) == 0:
        return np.empty((0, *SHAPE), np.float32), np.empty(0, np.float32)
    lo, hi = int(rows[0]), int(rows[-1]) + 1  # one contiguous read, then the kept rows
    ecal = f["ECAL"][lo:hi, _CROP, _CROP, :][rows - lo]
    return ecal, f["energy"][lo:hi].reshape(-1)[rows - lo]


def read_showers(path, *, start: int = 0, stop: int | None = None,
                 energy_range: tuple[float, float] = ENERGY_RANGE,
                 theta_window: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Showers ``start:stop`` of one file: ``ecal`` float32 (N, 25, 25, 25) GeV and ``energy``
    float32 (N,) GeV. Variable-angle files are cropped to the central 25 x 25 window; with a
    ``theta_window`` the indices count the showers inside it.

    Every slab is checked (:func:`gan3d.data.checks.check_values`): impossible values and, unless
    a GAN wrote the file, showers that cannot be GeV (MeV, preprocessed, swapped columns, empty).
    Raises DataFileMissing, CorruptDataFile, DataSchemaError or DataValueError naming the file.
    """
    with _open(path) as f:
        lay = _layout(f, path, theta_window)
        stop = lay.n if stop is None else min(stop, lay.n)
        if not 0 <= start <= stop:
            raise DataError(f"{path}: cannot read showers {start}:{stop} of {lay.n}")
        try:
            ecal, energy = _read_rows(f, lay, start, stop)
        except OSError as exc:  # a truncated file opens, then fails on the missing chunks
            raise CorruptDataFile(f"{path}: showers {start}:{stop} cannot be read ({exc}); the "
                                  "file is damaged or truncated - copy or make it again") from None
    ecal = np.asarray(ecal, dtype=np.float32)
    energy = np.asarray(energy, dtype=np.float32)
    check_values(ecal, energy, str(path), start, energy_range, generated=lay.generated)
    return ecal, energy


def write_showers(path, ecal: np.ndarray, energy: np.ndarray,
                  attrs: Mapping[str, object] | None = None) -> Path:
    """Write showers in the fixed-angle CLIC schema, atomically (see :func:`shower_file`).

    ``ecal`` (N, 25, 25, 25) GeV, ``energy`` (N,) GeV; ``attrs`` become file attributes.
    """
    ecal, energy = np.asarray(ecal, np.float32), np.asarray(energy, np.float32)
    if ecal.ndim != 4 or ecal.shape[1:] != SHAPE or energy.shape != ecal.shape[:1]:
        raise ValueError(f"write_showers: got ECAL {ecal.shape} and energy {energy.shape}")
    with shower_file(path, len(energy), attrs) as f:
        f["ECAL"][...] = ecal
        f["target"][:, 1] = energy
    return Path(path)


@contextlib.contextmanager
def shower_file(path, n: int, attrs: Mapping[str, object] | None = None) -> Iterator[h5py.File]:
    """An empty fixed-angle file for ``n`` showers, renamed into place only when closed cleanly.

    Fill ``f["ECAL"][a:b]`` (GeV) and ``f["target"][a:b, 1]`` (GeV) in any order;
    ``target[:, 0]`` is the PDG id 11. ECAL is gzip level 1 in 16-shower chunks: about 12x
    smaller than raw for these sparse showers, and the fastest of the standard filters to read.
    ``attrs`` become file attributes: ``{ORIGIN_ATTR: GAN_ORIGIN, ...}`` marks GAN showers.
    """
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs.update(dict(attrs or {}))
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


def screen(path, theta_window: Sequence[float] | None = None) -> list[str]:
    """A quick check where data enter training: the schema, the first slab's values and
    plausibility (raising as :func:`read_showers` does), and notes on what is legitimate but
    worth a warning (a fixed-energy file, showers a GAN made, showers outside the angle window)."""
    lay = layout(path, theta_window)
    read_showers(path, stop=SLAB, theta_window=theta_window)
    notes = []
    with _open(path) as f:
        column = f["target"][:, 1] if lay.kind == "fixed" else f["energy"][...].reshape(-1)
    energy = np.asarray(column)[lay.keep] if lay.keep is not None else np.asarray(column)
    fixed = constant_energy(energy)
    if fixed is not None:
        notes.append(f"{path}: every shower has the primary energy {fixed:g} GeV (a fixed-energy "
                     "sample: the GAN learns no energy dependence from it)")
    if lay.generated:
        notes.append(f"{path}: these showers were written by a GAN, not simulated")
    if lay.keep is not None:
        notes.append(f"{path}: {lay.n} of {lay.n_stored} showers inside data.theta_window "
                     f"{list(theta_window)}")
    return notes


@dataclass
class CheckReport:
    """What :func:`check_folder` found: ``problems`` (one line per bad file: it must not be
    used), ``notes`` (legitimate but worth knowing: fixed energies, GAN-made files), counts."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: int = 0
    showers: int = 0


def _check_file(path: Path, report: CheckReport, energy_range, theta_window) -> None:
    """Read every slab of one file (raising on its first problem); add its notes."""
    lay = layout(path, theta_window)
    energies, fractions, sample = [], [], None
    for lo in range(0, lay.n, SLAB):
        ecal, energy = read_showers(path, start=lo, stop=lo + SLAB, energy_range=energy_range,
                                    theta_window=theta_window)
        energies.append(energy)
        fractions.append(visible_fraction(ecal, energy))
        sample = sample or (None if not lay.generated else implausible(ecal, energy))
    report.showers += lay.n
    fixed = constant_energy(np.concatenate(energies))
    if fixed is not None:
        report.notes.append(f"{path}: every shower has the primary energy {fixed:g} GeV (a "
                            "fixed-energy sample: an energy-conditioned GAN learns no energy "
                            "dependence from it)")
    if lay.generated:
        frac = np.concatenate(fractions)
        median = f"{np.median(frac):.3g}" if frac.size else "n/a (all empty)"
        report.notes.append(f"{path}: showers written by a GAN; median visible fraction "
                            f"{median}" + (f" - implausible as data: {sample}" if sample else ""))
    if lay.keep is not None:
        report.notes.append(f"{path}: {lay.n} of {lay.n_stored} showers inside data.theta_window "
                            f"{list(theta_window)}")


def check_folder(folder, *, energy_range: tuple[float, float] = ENERGY_RANGE,
                 theta_window: Sequence[float] | None = None) -> CheckReport:
    """Check every file of ``folder`` (or the one ``.h5`` file it names): schema, every value,
    plausibility, manifest checksums.

    A file's first problem is its one line in ``problems``; other files are still checked, so a
    folder with one bad file among good ones names that file only. Never raises for a bad file.
    """
    report = CheckReport()
    one = Path(folder).is_file()
    for path in [Path(folder)] if one else list_files(folder):
        report.files += 1
        try:
            _check_file(path, report, energy_range, theta_window)
        except DataError as exc:
            report.problems.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - one line per file, never a traceback
            report.problems.append(f"{path}: cannot be read as a shower file "
                                   f"({type(exc).__name__}: {exc})")
    manifest = Path(folder) / MANIFEST
    if not one and manifest.is_file():
        for entry in read_json(manifest).get("files", []):
            path = Path(folder) / entry["name"]
            if not path.is_file():
                report.problems.append(f"{path}: listed in {MANIFEST} but missing")
            elif sha256(path) != entry["sha256"]:
                report.problems.append(f"{path}: checksum differs from {MANIFEST}; the file was "
                                       "changed")
    return report


def check_files(folder, *, energy_range: tuple[float, float] = ENERGY_RANGE,
                theta_window: Sequence[float] | None = None) -> list[str]:
    """The problems of :func:`check_folder`: one line per bad file; empty when all is well."""
    return check_folder(folder, energy_range=energy_range, theta_window=theta_window).problems
