"""The input pipeline: preprocessing, and each rank's shard of the showers for training and evaluation.

Every Horovod rank reads only its own contiguous part of the showers, in its own process. The
bounds of that part are one rule (:func:`shard_bounds`, and :func:`eval_bounds` for the test-loss
evaluation, serial or distributed) used by the training shards, the evaluation batches and the
evaluation noise alike. :func:`preprocess` is the reference trainer's recipe, in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..exceptions import DataError
from .calorimeter import CELL_THRESHOLD_GEV, NETWORK_SCALE, SHAPE
from .files import ENERGY_RANGE, SLAB, count_showers, read_showers

__all__ = ["preprocess", "shard_bounds", "eval_bounds", "ShardedShowers", "GlobalOrder",
           "test_batches"]


def preprocess(ecal_gev: np.ndarray, energy_gev: np.ndarray) -> dict[str, np.ndarray]:
    """The reference trainer's preprocessing, in one place.

    ``ecal_gev`` (N, 25, 25, 25) GeV and ``energy_gev`` (N,) GeV give float32 ``image``
    (N, 25, 25, 25, 1) = ECAL x 100 (:data:`~gan3d.data.calorimeter.NETWORK_SCALE`) with cells
    below :data:`~gan3d.data.calorimeter.CELL_THRESHOLD_GEV` zeroed first, ``energy`` (N,) =
    E / 100 and ``ecal_sum`` (N,) = the sum of ``image`` (accumulated in float64).
    """
    ecal = np.asarray(ecal_gev, dtype=np.float32)
    scale = np.float32(NETWORK_SCALE)
    image = np.where(ecal < CELL_THRESHOLD_GEV, np.float32(0), ecal * scale)[..., None]
    return {"image": image,
            "energy": np.asarray(energy_gev, dtype=np.float32) / scale,
            "ecal_sum": image.sum(axis=(1, 2, 3, 4), dtype=np.float64).astype(np.float32)}

def shard_bounds(total: int, rank: int, size: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous range [lo, hi) of ``total`` showers split over ``size`` ranks:
    disjoint, covering, sizes differing by at most one."""
    return rank * total // size, (rank + 1) * total // size


def eval_bounds(total: int, rank: int, size: int, mode: str) -> tuple[int, int]:
    """The test showers [lo, hi) that ``rank`` evaluates: all on rank 0 and none elsewhere for
    ``mode="serial"`` (the paper's evaluation), :func:`shard_bounds` for ``"distributed"``."""
    if mode == "serial":
        return (0, total) if rank == 0 else (0, 0)
    if mode == "distributed":
        return shard_bounds(total, rank, size)
    raise ValueError(f"evaluation mode must be 'serial' or 'distributed', not {mode!r}")


def _segments(files, counts, lo: int, hi: int) -> list[tuple[Path, int, int]]:
    """(file, start, stop) pieces covering global shower indices [lo, hi) of concatenated files."""
    out, offset = [], 0
    for path, n in zip(files, counts):
        a, b = max(lo, offset), min(hi, offset + n)
        if a < b:
            out.append((path, a - offset, b - offset))
        offset += n
    return out


def _read_range(files, counts, lo, hi, energy_range, theta_window=None
                ) -> Iterator[dict[str, np.ndarray]]:
    """Preprocessed slabs of at most SLAB showers, read contiguously, for indices [lo, hi)."""
    for path, a, b in _segments(files, counts, lo, hi):
        for s in range(a, b, SLAB):
            yield preprocess(*read_showers(path, start=s, stop=min(b, s + SLAB),
                                           energy_range=energy_range, theta_window=theta_window))


def _concat(parts: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([p[k] for p in parts]) for k in ("image", "energy", "ecal_sum")}


def _tf_dataset(make_iter, batch: int | None, cardinality: int | None, prefetch: int):
    """Wrap a generator of batch dicts as a prefetching tf.data.Dataset.

    tf.data's autotuning is off. With it, every iterator runs a model thread that sleeps with a
    growing period (10 ms doubling up to 60 s), and destroying the iterator - at the end of every
    epoch and every evaluation - waited for that thread's next wake-up: measured on 2 ranks, every
    epoch lasted exactly 81.9 s (10 ms x (2^13 - 1)) or that plus 60 s, whatever its steps took.
    Nothing here needs tuning: the buffer is a fixed ``prefetch``.
    """
    import tensorflow as tf

    spec = {"image": tf.TensorSpec((batch, *SHAPE, 1), tf.float32),
            "energy": tf.TensorSpec((batch,), tf.float32),
            "ecal_sum": tf.TensorSpec((batch,), tf.float32)}
    ds = tf.data.Dataset.from_generator(make_iter, output_signature=spec)
    if cardinality is not None:
        ds = ds.apply(tf.data.experimental.assert_cardinality(cardinality))
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.prefetch(prefetch).with_options(options)


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
                 energy_range: tuple[float, float] = ENERGY_RANGE,
                 theta_window: Sequence[float] | None = None):
        if not 0 <= rank < size or batch_size < 1:
            raise ValueError(f"need 0 <= rank < size and batch_size >= 1 (got {rank}, {size}, "
                             f"{batch_size})")
        self.files = [Path(f) for f in files]
        self.theta_window = theta_window
        self.counts = [count_showers(f, theta_window) for f in self.files]
        self.rank, self.size, self.batch_size, self.seed = rank, size, batch_size, seed
        total = sum(self.counts)
        self.lo, self.hi = shard_bounds(total, rank, size)
        smallest = total // size  # floor: the smallest of the shard sizes
        n = smallest // batch_size
        self.n_batches = min(n, max_batches) if max_batches else n
        if self.n_batches < 1:
            raise DataError(f"{total} training showers over {size} ranks leave {smallest} per "
                            f"rank, fewer than one batch of {batch_size}: use more data, fewer "
                            "ranks or a smaller batch")
        self.in_memory = (self.hi - self.lo) * int(np.prod(SHAPE)) * 4 <= memory_limit
        self.window, self.prefetch, self.energy_range = window, prefetch, energy_range
        self._cache: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.n_batches

    def _rng(self, epoch: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, self.rank])

    def _read(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        return _concat(list(_read_range(self.files, self.counts, lo, hi, self.energy_range,
                                        self.theta_window)))

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
        slabs = [(s, min(s + SLAB, self.hi)) for s in range(self.lo, self.hi, SLAB)]
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


class GlobalOrder(ShardedShowers):
    """``train.data_order = "global"``: the batches of one shuffled sequence of the whole set.

    The sequence is the concatenation of passes, each a permutation of all N training showers
    drawn from ``(seed, pass)`` alone - not the rank, not the worker count. Global batch g is
    positions [g B, (g + 1) B); step i of epoch e (counted from ``origin``, a fork's first
    epoch) on rank r of W takes g = ((e - origin) len(self) + i) W + r (:meth:`batch_index`).
    A W-worker run thus takes in one step the showers a 1-worker run of the same seed and batch
    takes in W steps, in the same order; training keys each step's latent and dropout draws by
    g, so the draws match too (the pairing of the warm-start study). Every rank holds the whole
    set in memory (62.5 kB per shower).
    """

    def __init__(self, files: Sequence, rank: int = 0, size: int = 1, batch_size: int = 32,
                 seed: int = 0, *, max_batches: int | None = None, origin: int = 0,
                 memory_limit: int = 6 << 30, prefetch: int = 2,
                 energy_range: tuple[float, float] = ENERGY_RANGE,
                 theta_window: Sequence[float] | None = None):
        super().__init__(files, rank, size, batch_size, seed, max_batches=max_batches,
                         memory_limit=memory_limit, prefetch=prefetch,
                         energy_range=energy_range, theta_window=theta_window)
        self.total, self.origin = sum(self.counts), origin
        if self.total * int(np.prod(SHAPE)) * 4 > memory_limit:
            raise DataError(f"train.data_order = 'global' holds all {self.total} training "
                            f"showers on every rank ({self.total * 62.5e-6:.1f} GB), more than "
                            f"{memory_limit / 2**30:.0f} GiB: use 'shards' or a smaller set")
        self._perm: tuple[int, np.ndarray] | None = None

    def batch_index(self, epoch: int, i: int) -> int:
        """The global batch g that step ``i`` of ``epoch`` takes on this rank."""
        return ((epoch - self.origin) * self.n_batches + i) * self.size + self.rank

    def _pass(self, p: int) -> np.ndarray:
        if self._perm is None or self._perm[0] != p:
            self._perm = (p, np.random.default_rng([self.seed, p, 0x610BA1]).permutation(self.total))
        return self._perm[1]

    def positions(self, g: int) -> np.ndarray:
        """Shower indices (into the whole set) of global batch ``g``."""
        a, b = g * self.batch_size, (g + 1) * self.batch_size
        return np.concatenate([self._pass(p)[max(a, p * self.total) - p * self.total:
                                             min(b, (p + 1) * self.total) - p * self.total]
                               for p in range(a // self.total, (b - 1) // self.total + 1)])

    def iter_numpy(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        if self._cache is None:
            self._cache = self._read(0, self.total)
        for i in range(self.n_batches):
            idx = np.sort(self.positions(self.batch_index(epoch, i)))
            yield {k: v[idx] for k, v in self._cache.items()}


def test_batches(files: Sequence, rank: int = 0, size: int = 1, batch_size: int = 32, *,
                 mode: str = "distributed", fraction: float = 1.0, tensorflow: bool = True,
                 prefetch: int = 2, energy_range: tuple[float, float] = ENERGY_RANGE,
                 theta_window: Sequence[float] | None = None):
    """Evaluation batches of the first ``fraction`` of the test showers, for this rank.

    ``mode="serial"``: rank 0 gets every shower, other ranks none (the paper's evaluation).
    ``mode="distributed"``: contiguous disjoint shards covering the showers. Nothing is dropped,
    so the last batch may be short and ranks may differ by one batch: accumulate loss sums and
    counts per rank and all-reduce them once, never per batch. Returns a ``tf.data.Dataset``
    (or, with ``tensorflow=False``, an iterator of NumPy batch dicts as in ShardedShowers).
    """
    files = [Path(f) for f in files]
    counts = [count_showers(f, theta_window) for f in files]
    total = int(round(sum(counts) * fraction))
    lo, hi = eval_bounds(total, rank, size, mode)

    def batches() -> Iterator[dict[str, np.ndarray]]:
        pool = None
        for slab in _read_range(files, counts, lo, hi, energy_range, theta_window):
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
