"""Run inside MPI ranks (or alone) by tests/test_training_mpi.py; each check writes JSON results.

    python training_checks.py OUT_DIR PLAN_JSON

``PLAN_JSON`` is a list of ``[name, mode, args]`` run in order in the same processes (starting
TensorFlow and Horovod once is most of the cost); results go to ``OUT_DIR/<name>/rank<r>.json``.
Modes:

* ``sync`` (args: steps, batch, precision): models built from a different seed on every rank, broadcast from rank 0, then k
  training steps on different data per rank; writes SHA-256 digests of the initial weights, of
  every trainable weight and optimiser variable after the steps, and of all model variables after the
  BatchNorm statistics were averaged, plus the per-rank seeds and losses.
* ``local``: local SGD - k steps without communication on different data per rank, then
  ``average_state``; writes digests before and after, the losses, and the sum of every state
  variable before and after the averaging.
* ``equal`` (args: HALF): the data-parallel equality check on a fixed global batch of 2 x HALF
  showers with fixed per-sample noise; a rank of a world of size n takes its 1/n of it. Writes
  averaged gradients and the weight update of one full step, in inference mode (exact equality
  expected) and with per-rank BatchNorm statistics (Dropout off, so BN is the only difference).
* ``train`` (args: list of ``[overrides, resume]``): ``gan3d.gan.training.train`` once per pair
  (dotted overrides of the quick profile), in order; rank 0 writes the results.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np


def _digest(variables) -> list[str]:
    return [hashlib.sha256(np.ascontiguousarray(v.numpy()).tobytes()).hexdigest() for v in variables]


def _write(out: str, rank: int, payload: dict) -> None:
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(payload, fh)


def _step(seed: int = 5, precision: str = "float32"):
    from gan3d.config import resolve
    from gan3d.gan.training import build_step

    return build_step(resolve("quick", {"train.seed": seed, "train.precision": precision}))


def _random_batch(rng, b: int) -> dict:
    image = (rng.gamma(0.05, 2.0, (b, 25, 25, 25, 1)) * (rng.random((b, 25, 25, 25, 1)) < 0.3))
    image = image.astype(np.float32)
    return {"image": image, "energy": rng.uniform(0.1, 5.0, b).astype(np.float32),
            "ecal_sum": image.sum(axis=(1, 2, 3, 4)).astype(np.float32)}


def sync(out: str, steps: int = 2, b: int = 2, precision: str = "float32") -> None:
    from gan3d.parallel import distributed

    world = distributed.init()
    step = _step(seed=5 + world.rank, precision=precision)  # different initial weights ...
    initial = _digest(step.g.trainable_variables + step.d.trainable_variables)
    step.broadcast_state()  # ... until rank 0's are broadcast
    step.reseed(5, world.rank, 0)
    seeds = [v.numpy().tolist() for v in step.seed_variables()]
    rng = np.random.default_rng([11, world.rank])  # different data on every rank
    losses = [np.asarray(step.train_step(_random_batch(rng, b))).tolist() for _ in range(steps)]
    trained = _digest(step.g.trainable_variables + step.d.trainable_variables)
    optimiser = _digest(step.optimizer_variables())
    bn_before = _digest([v for v in step.model_variables() if not v.trainable])
    step.average_batch_statistics()
    conv = next(x for x in step.d.layers if "Conv" in type(x).__name__)  # its compute policy
    _write(out, world.rank, {"rank": world.rank, "size": world.size, "seeds": seeds,
                             "initial": initial, "policy": conv.dtype_policy.name,
                             "layers": sorted({type(x).__name__ for x in step.d.layers}),
                             "losses": losses, "trained": trained, "optimiser": optimiser,
                             "bn_before_sync": bn_before, "all_after_sync": _digest(step.state_variables())})


def local(out: str, steps: int = 2, b: int = 2) -> None:
    from gan3d.parallel import distributed

    world = distributed.init()
    step = _step()
    step.broadcast_state()
    step.reseed(5, world.rank, 0)
    rng = np.random.default_rng([12, world.rank])
    losses = [np.asarray(step.train_step(_random_batch(rng, b), local=True)).tolist()
              for _ in range(steps)]
    state = [v for v in step.state_variables() if "float" in str(v.dtype)]
    before, sums_before = _digest(state), [float(np.sum(v.numpy(), dtype=np.float64)) for v in state]
    nbytes = step.average_state()
    _write(out, world.rank, {"losses": losses, "before": before, "after": _digest(state),
                             "sums_before": sums_before, "bytes": nbytes,
                             "sums_after": [float(np.sum(v.numpy(), dtype=np.float64)) for v in state],
                             "all_after": _digest(step.state_variables())})


def _global_batch(half: int) -> tuple[dict, dict]:
    """A fixed batch of 2 x half showers and fixed per-sample draws (same on every rank)."""
    rng = np.random.default_rng(2024)
    n = 2 * half
    batch = _random_batch(rng, n)
    draws = {"flip_real": rng.random(n) < 0.3, "flip_fake": rng.random(n) < 0.3,
             "e_fake": rng.uniform(0.1, 5.0, n).astype(np.float32),
             "z_fake": rng.standard_normal((n, 200)).astype(np.float32),
             "e_gen": rng.uniform(0.1, 5.0, (2, n)).astype(np.float32),
             "z_gen": rng.standard_normal((2, n, 200)).astype(np.float32)}
    return batch, draws


def _part(tree: dict, lo: int, hi: int) -> dict:
    return {k: (v[:, lo:hi] if k in ("e_gen", "z_gen") else v[lo:hi]) for k, v in tree.items()}


def equal(out: str, half: int) -> None:
    from gan3d.parallel import distributed

    world = distributed.init()
    n = 2 * half
    lo, hi = world.rank * n // world.size, (world.rank + 1) * n // world.size
    batch, draws = _global_batch(half)
    batch, draws = _part(batch, lo, hi), _part(draws, lo, hi)
    step = _step()
    step.broadcast_state()
    result = {"rank": world.rank, "size": world.size}
    flat = lambda gs: np.concatenate([np.ravel(g.numpy()) for g in gs]).tolist()  # noqa: E731
    d_inf, g_inf = step.gradients(batch, draws, training=False)
    for layer in step.d.layers + step.g.layers:
        if hasattr(layer, "rate"):
            layer.rate = 0.0  # Dropout off: per-rank BN statistics are then the only difference
    saved = [v.numpy().copy() for v in step.model_variables()]
    d_bn, g_bn = step.gradients(batch, draws, training=True)
    for v, value in zip(step.model_variables(), saved):
        v.assign(value)  # undo the moving-statistics update of that training-mode pass
    before = [v.numpy().copy() for v in step.g.trainable_variables + step.d.trainable_variables]
    step.set_learning_rate(1e-3)
    step.train_step(batch, draws, training=False)
    after = [v.numpy() for v in step.g.trainable_variables + step.d.trainable_variables]
    result.update(d_inf=flat(d_inf), g_inf=flat(g_inf), d_bn=flat(d_bn), g_bn=flat(g_bn),
                  update=np.concatenate([np.ravel(a - b) for a, b in zip(after, before)]).tolist())
    _write(out, world.rank, result)


def train(out: str, runs: list) -> None:
    """Train once per ``[overrides, resume]`` pair of ``runs``, one after the other."""
    from gan3d.parallel import distributed
    from gan3d.config import resolve
    from gan3d.gan.training import train as run

    results = [run(resolve("quick", overrides), resume=resume).to_dict()
               for overrides, resume in runs]
    if distributed.world().is_root:
        _write(out, 0, {"runs": results})


def main() -> None:
    from gan3d.parallel.launch import guard

    out, plan = sys.argv[1], json.loads(sys.argv[2])
    modes = {"sync": sync, "local": local, "equal": equal, "train": train}
    for name, mode, args in plan:
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        guard(modes[mode], folder, *args)


if __name__ == "__main__":
    main()
