"""Local SGD: each worker takes ``train.sync_every`` = k steps alone, then the workers average
their models and optimiser states.

k = 1 is the paper's data parallelism (gradients all-reduced before each of the step's four
updates, :mod:`gan3d.gan.horovod`). With k > 1 the steps run without any communication
(``HorovodStep.train_step(local=True)``) and every k-th step :meth:`HorovodStep.average_state` all-reduces
every floating-point state variable - G's and D's weights, their BatchNorm statistics and both
RMSprop mean-square accumulators - once. Per step that moves 2 (|G| + |D|) / k numbers instead of
2 |G| + 2 |D| gradients: 1/k of the paper's traffic, in 1/(4k) as many messages.

A non-finite loss on one rank is found at the next synchronisation (and at every epoch's end):
the flag travels with the epoch's losses, so every rank stops at the same point with the same
error. Between synchronisations the ranks' models differ; the per-epoch physics monitors read
rank 0's, and the run ends with a synchronisation, so the saved generator is the average.
"""

from __future__ import annotations

import time

import numpy as np

from ..exceptions import NonFiniteLoss
from ..parallel import distributed

__all__ = ["LocalSync"]


class LocalSync:
    """Local SGD's bookkeeping on one rank; inactive (every method a no-op) for k = 1 or 1 rank."""

    def __init__(self, step, world, every: int, checkpoints: str):
        self.step, self.world, self.every = step, world, int(every)
        self.active = self.every > 1 and world.size > 1
        self.where = checkpoints
        self.bad = False
        self.syncs, self.seconds, self.bytes = 0, 0.0, 0
        self._last = -1  # step count of the newest synchronisation

    def after_step(self, done: int, losses: np.ndarray) -> None:
        """Call after each step; ``done`` counts the run's steps so far (from 1, across epochs)."""
        if not self.active:
            return
        self.bad |= not bool(np.isfinite(losses).all())
        if done % self.every == 0:
            self.sync(done)

    def sync(self, done: int) -> None:
        """Average the ranks' states (after checking that no rank has seen a non-finite loss)."""
        t0 = time.perf_counter()
        self._check(float(np.asarray(distributed.allreduce(  # DISTRIBUTED
            np.array([float(self.bad)]), "sum", name="local_sgd_flag"))[0]))
        self.bytes = self.step.average_state()  # DISTRIBUTED
        self.seconds += time.perf_counter() - t0
        self.syncs += 1
        self._last = done

    def epoch_end(self, sums: np.ndarray, done: int, last: bool) -> np.ndarray:
        """The epoch's loss sums as the mean over ranks (each rank summed its own losses); the
        run's last epoch ends with a synchronisation."""
        if not self.active:
            return sums
        total = np.asarray(distributed.allreduce(np.append(sums, float(self.bad)),  # DISTRIBUTED
                                                 "sum", name="local_sgd_epoch"), dtype=np.float64)
        self._check(total[-1])
        if last and self._last != done:
            self.sync(done)
        return total[:-1] / self.world.size

    def take_stats(self) -> dict:
        """``sync_every``, ``syncs`` and ``time_sync_s`` (rank 0's seconds) since the last call."""
        out = {"sync_every": self.every, "syncs": self.syncs, "time_sync_s": self.seconds}
        self.syncs, self.seconds = 0, 0.0
        return out

    def _check(self, flagged: float) -> None:
        if flagged > 0:
            raise NonFiniteLoss(
                f"a non-finite loss on {int(flagged)} rank(s) since the last synchronisation of "
                f"local SGD (train.sync_every = {self.every}); the last good checkpoint in "
                f"{self.where} is kept - lower train.learning_rate or train.sync_every")
