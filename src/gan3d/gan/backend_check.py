"""Do the two backends train alike? The same steps from the same start on Horovod and on JAX.

One process (or each rank of an MPI job) of::

    python -m gan3d.gan.backend_check --backend horovod --init start.npz --output tf.npz
    python -m gan3d.gan.backend_check --backend jax --init start.npz --output jax.npz

builds the 3DGAN on its backend, loads the initial weights of ``--init`` (written there by the
first run that finds none), and takes ``--steps`` full training steps on fixed batches with fixed
random draws (label flips, energies, latent vectors: per sample, so that 1 and N processes see
the same global batch), in inference mode (BatchNorm on its moving statistics, Dropout off), as
the equality tests of data parallelism do. Process 0 writes the losses of every step and the
trained weights to ``--output``. :func:`compare` then states how far two such runs are apart:
the largest relative difference of the losses, and per weight tensor the relative norm of the
difference of the weight changes (element-wise comparison would be too strict: RMSprop's first
updates are about lr x sign(g), and a gradient near zero may take either sign).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

__all__ = ["inputs", "compare", "fingerprint", "main"]

LATENT = 200


def fingerprint(generator, energies_gev=(100.0, 400.0), seed: int = 1) -> dict:
    """What a generator computes, in numbers another backend can check: per shower, the sums of
    the output before the final ReLU (``conv4``), of its absolute value and of the shower (GeV),
    for the latents of ``energies_gev`` and ``seed`` (:func:`gan3d.gan.model.latent_vectors`).
    The pre-ReLU numbers are what make it a check: a briefly trained generator may put out zeros
    everywhere (a dead final ReLU), and zeros equal zeros on any backend."""
    import keras

    from .model import ECAL_SCALE, latent_vectors

    latent = latent_vectors(energies_gev, seed, int(generator.input_shape[-1]))
    pre = keras.Model(generator.input, generator.get_layer("relu").input)
    x = keras.ops.convert_to_numpy(pre(latent, training=False))[..., 0].astype(np.float64)
    axes = tuple(range(1, x.ndim))
    return {"energies_gev": [float(e) for e in np.ravel(energies_gev)], "seed": int(seed),
            "pre_relu_sum": x.sum(axis=axes).tolist(),
            "pre_relu_abs_sum": np.abs(x).sum(axis=axes).tolist(),
            "shower_sum_gev": (np.maximum(x, 0).sum(axis=axes) / ECAL_SCALE).tolist()}


def inputs(steps: int, batch: int, seed: int = 11) -> tuple[list[dict], list[dict]]:
    """Fixed global batches and draws for ``steps`` steps of ``batch`` showers."""
    rng = np.random.default_rng(seed)
    batches, draws = [], []
    for _ in range(steps):
        image = (rng.gamma(0.05, 0.5, (batch, 25, 25, 25, 1)) * (rng.random((batch, 25, 25, 25, 1))
                                                                 < 0.2)).astype(np.float32)
        batches.append({"image": image, "energy": rng.uniform(0.5, 4.0, batch).astype(np.float32),
                        "ecal_sum": image.sum(axis=(1, 2, 3, 4)).astype(np.float32)})
        draws.append({"flip_real": rng.random(batch) < 0.05, "flip_fake": rng.random(batch) < 0.05,
                      "e_fake": rng.uniform(0.1, 5.0, batch).astype(np.float32),
                      "z_fake": rng.standard_normal((batch, LATENT), dtype=np.float32),
                      "e_gen": rng.uniform(0.1, 5.0, (2, batch)).astype(np.float32),
                      "z_gen": rng.standard_normal((2, batch, LATENT), dtype=np.float32)})
    return batches, draws


def _share(tree: dict, rank: int, size: int) -> dict:
    """This rank's samples: the first axis, or the second for the two G updates' draws."""
    out = {}
    for k, v in tree.items():
        axis = 1 if k in ("e_gen", "z_gen") else 0
        n = v.shape[axis] // size
        out[k] = np.take(v, np.arange(rank * n, (rank + 1) * n), axis=axis)
    return out


def run(backend: str, steps: int, batch: int, init: Path, output: Path) -> None:
    if backend == "jax":
        os.environ["KERAS_BACKEND"] = "jax"
    from ..parallel import distributed

    world = distributed.init_jax() if backend == "jax" else distributed.init()  # DISTRIBUTED
    import keras

    from .model import build_discriminator, build_generator

    keras.utils.set_random_seed(1)
    g, d = build_generator(), build_discriminator()
    if backend == "jax":
        from .jax.step import JaxStep as Step
    else:
        from .horovod import HorovodStep as Step
    step = Step(g, d, seed=1)
    variables = dict(zip(_keys(step), step.model_variables()))
    if init.exists():
        start = np.load(init)
        missing = sorted(set(variables) ^ set(start.files))
        if missing:
            raise ValueError(f"{init} does not match this model: {missing[:5]}")
        for key, v in variables.items():
            v.assign(start[key])
    elif world.is_root:
        np.savez(init, **{key: v.numpy() for key, v in variables.items()})
    if backend == "jax":
        step.broadcast_state()  # DISTRIBUTED
    batches, draws = inputs(steps, batch)
    losses = [np.asarray(step.train_step(_share(b, world.rank, world.size),
                                         _share(r, world.rank, world.size), training=False))
              for b, r in zip(batches, draws)]
    if backend == "jax":
        step.sync_variables()
    if world.is_root:
        np.savez(output, losses=np.asarray(losses, np.float64), workers=world.size,
                 **{"w:" + key: v.numpy() for key, v in variables.items() if v.trainable})


def _keys(step) -> list[str]:
    """Names of the step's model variables that are equal on both backends: model and path."""
    from .step import is_seed  # keras: imported once the backend is chosen

    return [("g/" if i < n_g else "d/") + v.path for i, v in enumerate(step.model_variables())
            for n_g in [sum(not is_seed(u) for u in step.g.variables)]]


def time_steps(backend: str, steps: int, warmup: int, batch: int, output: Path) -> None:
    """Showers per second of ``steps`` training steps (own draws, training mode, float32) after
    ``warmup`` steps that compile; ``batch`` per process. Process 0 writes JSON to ``output``."""
    import json
    import time

    if backend == "jax":
        os.environ["KERAS_BACKEND"] = "jax"
    from ..parallel import distributed

    world = distributed.init_jax() if backend == "jax" else distributed.init()  # DISTRIBUTED
    import keras

    from .model import build_discriminator, build_generator

    keras.utils.set_random_seed(1)
    if backend == "jax":
        from .jax.step import JaxStep as Step
    else:
        from .horovod import HorovodStep as Step
    step = Step(build_generator(), build_discriminator(), seed=1)
    step.broadcast_state()  # DISTRIBUTED
    step.reseed(1, world.rank, 0)
    batches, _ = inputs(1, batch * world.size, seed=world.rank)
    mine = _share(batches[0], world.rank, world.size)
    for _ in range(warmup):
        np.asarray(step.train_step(mine))
    distributed.barrier()  # DISTRIBUTED: start the timed steps together
    t0 = time.perf_counter()
    for _ in range(steps):
        np.asarray(step.train_step(mine))  # the losses on the host: each step has finished
    seconds = time.perf_counter() - t0
    if world.is_root:
        rate = steps * batch * world.size / seconds
        output.write_text(json.dumps({"backend": backend, "workers": world.size, "batch": batch,
                                      "steps": steps, "seconds": seconds, "showers_per_s": rate}))


def compare(a: str | Path, b: str | Path, init: str | Path) -> dict:
    """How far two runs are apart: ``loss_rel`` (largest |a - b| / |a| over steps and losses) and
    ``update_rel`` (largest over weight tensors of |dw_a - dw_b| / |dw_a|, dw = final - initial)."""
    ra, rb, start = np.load(a), np.load(b), np.load(init)
    la, lb = ra["losses"], rb["losses"]
    loss_rel = float(np.max(np.abs(la - lb) / np.maximum(np.abs(la), 1e-12)))
    updates = {}
    for key in ra.files:
        if key.startswith("w:"):
            w0 = start[key[2:]]
            da, db = ra[key] - w0, rb[key] - w0
            updates[key[2:]] = float(np.linalg.norm(da - db) / max(np.linalg.norm(da), 1e-30))
    worst = max(updates, key=updates.get)
    return {"loss_rel": loss_rel, "update_rel": updates[worst], "worst_tensor": worst,
            "steps": int(la.shape[0]), "workers": (int(ra["workers"]), int(rb["workers"]))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("horovod", "jax"), required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=4,
                   help="showers per step over all processes (a multiple of their number)")
    p.add_argument("--init", type=Path, help="initial weights (written by the first run)")
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--time", type=int, metavar="N",
                   help="instead: time N training steps of --batch showers per process")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps before --time's")
    args = p.parse_args(argv)
    if args.time:
        time_steps(args.backend, args.time, args.warmup, args.batch, args.output)
    elif args.init is None:
        p.error("--init is needed (or --time N)")
    else:
        run(args.backend, args.steps, args.batch, args.init, args.output)
    return 0


if __name__ == "__main__":
    from ..parallel.launch import guard, in_mpi_job

    sys.exit(guard(main) if in_mpi_job() else main())
