"""Shower files in the CLIC schema: reading, validation, preprocessing, and the sharded pipeline.

File layouts read (energies in GeV, the last ECAL axis is depth):

* fixed angle (``EleEscan_*.h5``, and the files :mod:`gan3d.showers` writes): ``ECAL`` float
  (N, 25, 25, 25), ``target`` (N, 2) with the primary energy in column 1;
* variable angle: ``ECAL`` float (N, 51, 51, 25) plus ``energy`` (N,) or (N, 1); the central
  25 x 25 window ``[:, 13:38, 13:38, :]`` is kept.

Every problem a user can cause raises a named error from :mod:`gan3d.exceptions` that names the
file and the problem (never a traceback from inside h5py).

The input pipeline (:class:`ShardedShowers`) gives every Horovod rank a contiguous shard of the
training events; see its docstring for the design.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Iterator, Sequence

import h5py
import numpy as np

from .exceptions import CorruptDataFile, DataError, DataFileMissing, DataSchemaError, DataValueError
from .io import atomic_path

__all__ = [
    "ENERGY_RANGE", "MANIFEST", "THRESHOLD_GEV", "list_files", "split_files", "count_showers",
    "read_showers", "write_showers", "shower_file", "sha256", "check_files", "preprocess",
    "load_sample", "ShardedShowers", "test_batches",
]

ENERGY_RANGE = (0.1, 1000.0)  # GeV: outside it a file is broken or in the wrong unit (MeV?)
THRESHOLD_GEV = 1e-6  # the reference trainer zeroes cells below this
MANIFEST = "manifest.json"
_SHAPES = {(25, 25, 25): "fixed", (51, 51, 25): "variable"}
_CROP = slice(13, 38)  # central 25 of 51 cells
_SLAB = 256  # showers per contiguous read (16 MB of float32)


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


def split_files(files: Sequence, test_fraction: float = 0.1) -> tuple[list[Path], list[Path]]:
    """Split by file as the reference trainer does: the first int(n (1 - f)) sorted files train."""
    files = sorted(Path(f) for f in files)
    n_train = int(len(files) * (1.0 - test_fraction) + 1e-9)  # 1e-9: 10 x 0.9 must give 9
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
    if ecal.ndim != 4 or ecal.shape[1:] != (25, 25, 25) or energy.shape != ecal.shape[:1]:
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
        chunk = (max(1, min(16, n)), 25, 25, 25)
        f.create_dataset("ECAL", shape=(n, 25, 25, 25), dtype="f4", chunks=chunk,
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
    from .io import read_json

    problems = []
    files = list_files(folder)
    for path in files:
        try:
            n = count_showers(path)
            for lo in range(0, n, _SLAB):
                read_showers(path, start=lo, stop=lo + _SLAB, energy_range=energy_range)
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


def preprocess(ecal_gev: np.ndarray, energy_gev: np.ndarray) -> dict[str, np.ndarray]:
    """The reference trainer's preprocessing, in one place.

    ``ecal_gev`` (N, 25, 25, 25) GeV and ``energy_gev`` (N,) GeV give float32 ``image``
    (N, 25, 25, 25, 1) = ECAL x 100 with cells below 1e-6 GeV zeroed first, ``energy`` (N,) =
    E / 100 and ``ecal_sum`` (N,) = the sum of ``image`` (accumulated in float64).
    """
    ecal = np.asarray(ecal_gev, dtype=np.float32)
    image = np.where(ecal < THRESHOLD_GEV, np.float32(0), ecal * np.float32(100))[..., None]
    return {"image": image,
            "energy": np.asarray(energy_gev, dtype=np.float32) / np.float32(100),
            "ecal_sum": image.sum(axis=(1, 2, 3, 4), dtype=np.float64).astype(np.float32)}


def load_sample(source: str, n_showers: int, energies: Sequence[float] = (), *,
                energy_range: tuple[float, float] = (10.0, 500.0), halfwidth: float = 5.0,
                seed: int = 0) -> dict:
    """Showers to look at: ``ecal`` (N, 25, 25, 25) GeV and ``energy`` (N,) GeV, plus
    ``by_energy`` {E: showers (n, 25, 25, 25)} for each of ``energies`` (GeV) and ``primary``
    {E: their primary energies (n,)}.

    ``source="synthetic"``: ``n_showers`` from :func:`gan3d.showers.generate` with energies
    uniform in ``energy_range``, and ``n_showers // len(energies)`` more at each fixed energy.
    Otherwise ``source`` is a folder of shower files: the first ``n_showers`` (sorted files),
    and per energy those within +- ``halfwidth`` GeV of it.
    """
    if source == "synthetic":
        from . import showers

        rng = np.random.default_rng(seed)
        energy = rng.uniform(*energy_range, n_showers).astype(np.float32)
        n_each = max(n_showers // max(len(energies), 1), 2)
        primary = {float(e): np.full(n_each, float(e), np.float32) for e in energies}
        by_energy = {e: showers.generate(p, rng=rng) for e, p in primary.items()}
        return {"ecal": showers.generate(energy, rng=rng), "energy": energy,
                "by_energy": by_energy, "primary": primary, "source": source}
    parts, have = [], 0
    for path in list_files(source):
        if have >= n_showers:
            break
        parts.append(read_showers(path, stop=n_showers - have))
        have += len(parts[-1][1])
    ecal, energy = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    near = {float(e): np.abs(energy - e) <= halfwidth for e in energies}
    near = {e: sel for e, sel in near.items() if sel.sum() >= 2}
    return {"ecal": ecal, "energy": energy, "source": str(source),
            "by_energy": {e: ecal[sel] for e, sel in near.items()},
            "primary": {e: energy[sel] for e, sel in near.items()}}


# ---------------------------------------------------------------------------------------------
# The input pipeline

def _segments(files, counts, lo: int, hi: int) -> list[tuple[Path, int, int]]:
    """(file, start, stop) pieces covering global shower indices [lo, hi) of concatenated files."""
    out, offset = [], 0
    for path, n in zip(files, counts):
        a, b = max(lo, offset), min(hi, offset + n)
        if a < b:
            out.append((path, a - offset, b - offset))
        offset += n
    return out


def _read_range(files, counts, lo, hi, energy_range) -> Iterator[dict[str, np.ndarray]]:
    """Preprocessed slabs of at most _SLAB showers, read contiguously, for indices [lo, hi)."""
    for path, a, b in _segments(files, counts, lo, hi):
        for s in range(a, b, _SLAB):
            yield preprocess(*read_showers(path, start=s, stop=min(b, s + _SLAB),
                                           energy_range=energy_range))


def _concat(parts: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in ("image", "energy", "ecal_sum")}


def _tf_dataset(make_iter, batch: int | None, cardinality: int | None, prefetch: int):
    """Wrap a generator of batch dicts as a prefetching tf.data.Dataset."""
    import tensorflow as tf

    spec = {"image": tf.TensorSpec((batch, 25, 25, 25, 1), tf.float32),
            "energy": tf.TensorSpec((batch,), tf.float32),
            "ecal_sum": tf.TensorSpec((batch,), tf.float32)}
    ds = tf.data.Dataset.from_generator(make_iter, output_signature=spec)
    if cardinality is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    return ds.prefetch(prefetch)


class ShardedShowers:
    """One Horovod rank's shard of the training showers, freshly shuffled every epoch.

    Design (``files`` are the sorted training files, seen as one sequence of N showers):

    * **Disjoint shards that cover the set.** Rank r of ``size`` owns the contiguous range
      [r N // size, (r + 1) N // size): no shower is on two ranks, every shower is on one, and
      shard sizes differ by at most one. A rank reads only its range, in contiguous slabs of
      256 showers, in its own process (h5py serialises every call behind one lock).
    * **The same number of batches on every rank.** ``len(self)`` = floor(smallest shard /
      batch_size), capped by ``max_batches``; it is computed from file metadata alone, so all
      ranks agree without talking and every collective is reached equally often (otherwise
      Horovod hangs). The remainder is dropped; a new shuffle drops different showers.
    * **A fresh, seeded shuffle every epoch** from ``(seed, epoch, rank)``: reproducible, and
      different per epoch and per rank. The global batch (all ranks together) is then a
      stratified sample of the whole training set.
    * **Memory.** A shard whose preprocessed images fit in ``memory_limit`` bytes (62.5 kB per
      shower) is loaded once and batches are gathered from memory. A larger one is streamed:
      each epoch visits its slabs in shuffled order and shuffles showers within a window of
      ``window`` slabs, so memory stays at about ``window`` x 16 MB.

    ``epoch(e)`` gives a prefetching ``tf.data.Dataset`` of batch dicts (``image`` (B, 25, 25,
    25, 1), ``energy`` (B,), ``ecal_sum`` (B,), float32, see :func:`preprocess`);
    ``iter_numpy(e)`` the same batches as NumPy arrays without TensorFlow.
    """

    def __init__(self, files: Sequence, rank: int = 0, size: int = 1, batch_size: int = 32,
                 seed: int = 0, *, max_batches: int | None = None, memory_limit: int = 2 << 30,
                 window: int = 4, prefetch: int = 2,
                 energy_range: tuple[float, float] = ENERGY_RANGE):
        if not 0 <= rank < size or batch_size < 1:
            raise ValueError(f"need 0 <= rank < size and batch_size >= 1 (got {rank}, {size}, "
                             f"{batch_size})")
        self.files = [Path(f) for f in files]
        self.counts = [count_showers(f) for f in self.files]
        self.rank, self.size, self.batch_size, self.seed = rank, size, batch_size, seed
        total = sum(self.counts)
        self.lo, self.hi = rank * total // size, (rank + 1) * total // size
        smallest = total // size  # floor: the smallest of the shard sizes
        n = smallest // batch_size
        self.n_batches = min(n, max_batches) if max_batches else n
        if self.n_batches < 1:
            raise DataError(f"{total} training showers over {size} ranks leave {smallest} per "
                            f"rank, fewer than one batch of {batch_size}: use more data, fewer "
                            "ranks or a smaller batch")
        self.in_memory = (self.hi - self.lo) * 25**3 * 4 <= memory_limit
        self.window, self.prefetch, self.energy_range = window, prefetch, energy_range
        self._cache: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n_batches

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, self.rank])

    def _read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return _concat(list(_read_range(self.files, self.counts, lo, hi, self.energy_range)))

    def iter_numpy(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        """This rank's ``len(self)`` batches of epoch ``epoch``, as dicts of NumPy arrays."""
        rng, b = self._rng(epoch), self.batch_size
        if self.in_memory:
            if self._cache is None:
                self._cache = self._read(self.lo, self.hi)
            order = rng.permutation(self.hi - self.lo)
            for i in range(self.n_batches):
                idx = np.sort(order[i * b:(i + 1) * b])  # sorted: gathers walk memory forwards
                yield {k: v[idx] for k, v in self._cache.items()}
            return
        yield from self._stream(rng)

    def _stream(self, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
        slabs = [(s, min(s + _SLAB, self.hi)) for s in range(self.lo, self.hi, _SLAB)]
        order = rng.permutation(len(slabs))
        pool, made, b = None, 0, self.batch_size
        for w in range(0, len(order), self.window):
            parts = [self._read(*slabs[j]) for j in order[w:w + self.window]]
            pool = _concat(([pool] if pool is not None else []) + parts)
            perm = rng.permutation(len(pool["energy"]))
            full = len(perm) // b
            for i in range(full):
                yield {k: v[perm[i * b:(i + 1) * b]] for k, v in pool.items()}
                made += 1
                if made == self.n_batches:
                    return
            pool = {k: v[perm[full * b:]] for k, v in pool.items()}

    def epoch(self, epoch: int):
        """A prefetching ``tf.data.Dataset`` of this rank's batches of epoch ``epoch``."""
        return _tf_dataset(lambda: self.iter_numpy(epoch), self.batch_size, self.n_batches,
                           self.prefetch)


def test_batches(files: Sequence, rank: int = 0, size: int = 1, batch_size: int = 32, *,
                 mode: str = "distributed", fraction: float = 1.0, tensorflow: bool = True,
                 prefetch: int = 2, energy_range: tuple[float, float] = ENERGY_RANGE):
    """Evaluation batches of the first ``fraction`` of the test showers, for this rank.

    ``mode="serial"``: rank 0 gets every shower, other ranks none (the paper's evaluation).
    ``mode="distributed"``: contiguous disjoint shards covering the showers. Nothing is dropped,
    so the last batch may be short and ranks may differ by one batch: accumulate loss sums and
    counts per rank and all-reduce them once, never per batch. Returns a ``tf.data.Dataset``
    (or, with ``tensorflow=False``, an iterator of NumPy batch dicts as in ShardedShowers).
    """
    if mode not in ("serial", "distributed"):
        raise ValueError(f"test_batches: mode must be 'serial' or 'distributed', not {mode!r}")
    files = [Path(f) for f in files]
    counts = [count_showers(f) for f in files]
    total = int(round(sum(counts) * fraction))
    if mode == "serial":
        lo, hi = (0, total) if rank == 0 else (0, 0)
    else:
        lo, hi = rank * total // size, (rank + 1) * total // size

    def batches() -> Iterator[dict[str, np.ndarray]]:
        pool = None
        for slab in _read_range(files, counts, lo, hi, energy_range):  # contiguous slabs
            pool = slab if pool is None else _concat([pool, slab])
            full = len(pool["energy"]) // batch_size * batch_size
            for i in range(0, full, batch_size):
                yield {k: v[i:i + batch_size] for k, v in pool.items()}
            pool = {k: v[full:] for k, v in pool.items()}
        if pool is not None and len(pool["energy"]):
            yield pool  # the short last batch

    if not tensorflow:
        return batches()
    return _tf_dataset(batches, None, -(-(hi - lo) // batch_size), prefetch)
