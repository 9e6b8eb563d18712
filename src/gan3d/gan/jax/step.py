"""The 3DGAN step on Keras 3's JAX backend (``train.backend: jax``): one compiled function.

The same step as the Horovod backend's (its order, losses and draws, optimisers and state order are
:mod:`gan3d.gan.step`'s) - D on a real batch (labels flipped with p =
``label_flip``), D on ``G(E' z)`` with G in inference mode, then G twice through D whose weights
are not trained, each update ``w0 BCE + w1 MAPE(E) + w2 MAPE(ECAL sum)`` with RMSprop, learning
rate scaled by the loop - written with Keras' stateless API (``stateless_call``,
``stateless_apply``) so that JAX can differentiate and compile it whole.

Data parallelism: the step runs under ``shard_map`` over the mesh of every device of every
process (:func:`gan3d.parallel.jaxdist.mesh`, axis ``"workers"``); each device takes its share of
the global batch, and ``lax.pmean`` averages the gradients before each of the four updates and
the losses at the end - the Horovod backend's all-reduces, placed by XLA inside the compiled step.
Weights and RMSprop state are replicated; BatchNorm statistics and random-number states are per
device (each device sees its own batches and draws its own noise, as each Horovod rank does) and
are averaged at the end of every epoch (:meth:`JaxStep.average_batch_statistics`).

The Keras variables of ``g`` and ``d`` hold the state between epochs (checkpoints, evaluation,
physics monitors and the saved ``.keras`` files read them); during an epoch the state lives in
JAX arrays and is written back by :meth:`JaxStep.sync_variables`.
"""

from __future__ import annotations

import inspect

import keras
import numpy as np

from ..step import DRAW_NAMES, Step, ecal_target, eval_sums, gan_step, parts
from ..step import is_seed as _is_seed

__all__ = ["JaxStep"]


def _shard_map():
    try:
        from jax import shard_map  # JAX >= 0.6
    except ImportError:
        from jax.experimental.shard_map import shard_map
    flag = {"check_vma": False} if "check_vma" in inspect.signature(shard_map).parameters \
        else {"check_rep": False}
    return shard_map, flag


class JaxStep(Step):
    """Models, RMSprop state and the compiled data-parallel step on the JAX backend; the same
    methods as :class:`gan3d.gan.horovod.HorovodStep` that the training loop calls."""

    def __init__(self, generator: keras.Model, discriminator: keras.Model, **settings):
        import jax

        from ...parallel import jaxdist

        if keras.backend.backend() != "jax":
            raise RuntimeError("JaxStep needs Keras' JAX backend (KERAS_BACKEND=jax before "
                               "keras is imported)")
        super().__init__(generator, discriminator, **settings)
        self._lr_index = [i for i, v in enumerate(self.g_opt.variables)
                          if v.path.endswith("learning_rate")][0]
        self.lr = float(settings.get("learning_rate", 1e-3))
        self.seed = int(settings.get("seed", 0))
        self.mesh = jaxdist.mesh()
        self.n_local = len(jax.local_devices())
        self.n_devices = len(jax.devices())
        self.rank = jax.process_index()
        self._seeds = self._seed_states(self.seed, self.rank, 0)
        self._rep = self._loc = None  # JAX arrays while an epoch runs
        self._dirty = False
        self._compiled = {}
        self._eval_fn = jax.jit(self._eval_local)

    # -- state ------------------------------------------------------------------------------
    def broadcast_state(self) -> None:
        from ...parallel import distributed

        distributed.broadcast(self.state_variables(), root_rank=0)  # DISTRIBUTED
        self._rep = self._loc = None

    def reseed(self, seed: int, rank: int, epoch: int) -> None:
        """Random states of every local device from (seed, device, epoch), as HorovodStep per rank;
        loads the Keras variables into the step's arrays."""
        self.sync_variables()
        self._seeds = self._seed_states(seed, rank, epoch)
        self._push()

    def _seed_states(self, seed: int, rank: int, epoch: int) -> list[list[np.ndarray]]:
        """Per local device: the step's noise key, then one state per Dropout layer."""
        n = 1 + self.dropout_seeds()
        return [self.seed_words(seed, rank * self.n_local + j, epoch, n)
                for j in range(self.n_local)]

    def set_learning_rate(self, lr: float) -> None:
        self.lr = float(lr)

    # -- arrays <-> Keras variables ---------------------------------------------------------
    def _global(self, local: np.ndarray, spec):
        import jax
        from jax.sharding import NamedSharding

        return jax.make_array_from_process_local_data(NamedSharding(self.mesh, spec),
                                                      np.asarray(local))

    def _push(self) -> None:
        from jax.sharding import PartitionSpec as P

        rep = [[v.numpy() for v in vs] for vs in (self.g.trainable_variables,
                                                 self.d.trainable_variables,
                                                 self.g_opt.variables, self.d_opt.variables)]
        self._rep = [[self._global(a, P()) for a in group] for group in rep]
        def seeds(k):  # (local devices, 2) uint32 states, as HorovodStep.reseed sets them
            return np.stack([words[k] for words in self._seeds])

        loc, k = [], 1
        for model in (self.g, self.d):
            group = []
            for v in model.non_trainable_variables:
                if _is_seed(v):
                    value, k = seeds(k), k + 1
                else:
                    value = np.stack([v.numpy()] * self.n_local)
                group.append(self._global(value, P("workers")))
            loc.append(group)
        loc.append(self._global(seeds(0), P("workers")))
        self._loc = loc
        self._dirty = False

    def sync_variables(self) -> None:
        """Write the step's arrays (device 0 of this process) back into the Keras variables."""
        if self._rep is None or not self._dirty:
            return
        groups = (self.g.trainable_variables, self.d.trainable_variables, self.g_opt.variables,
                  self.d_opt.variables)
        for vs, arrays in zip(groups, self._rep):
            for v, a in zip(vs, arrays):
                v.assign(np.asarray(a.addressable_data(0)))
        for model, arrays in zip((self.g, self.d), self._loc[:2]):
            for v, a in zip(model.non_trainable_variables, arrays):
                if not _is_seed(v):
                    v.assign(np.asarray(a.addressable_data(0))[0])
        self._dirty = False

    def average_batch_statistics(self) -> None:
        """Mean of BatchNorm moving statistics over devices (and processes); then the Keras
        variables hold the epoch's state."""
        import jax
        from jax.sharding import PartitionSpec as P

        if self._loc is None:
            return
        if "avg" not in self._compiled:
            shard_map, flag = _shard_map()

            def avg(loc):
                return jax.tree.map(lambda a: jax.lax.pmean(a, "workers")  # DISTRIBUTED
                                    if a.dtype == np.float32 else a, loc)
            self._compiled["avg"] = jax.jit(shard_map(avg, mesh=self.mesh, in_specs=(P("workers"),),
                                                      out_specs=P("workers"), **flag))
        self._loc = self._compiled["avg"](self._loc)
        self._dirty = True
        self.sync_variables()

    # -- the step ---------------------------------------------------------------------------
    def train_step(self, batch: dict, draws: dict | None = None, *, training: bool = True,
                   local: bool = False):
        """One step on this process's ``batch``; returns the (8,) losses, mean over devices.
        ``draws`` (per-sample random inputs as :meth:`HorovodStep.draw`) replaces the step's own."""
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        if local:
            raise RuntimeError("local SGD (train.sync_every > 1) needs train.backend horovod")
        if self._rep is None:
            self._push()
        fn = self._compiled_step(draws is not None, bool(training))
        data = [self._global(np.asarray(batch[k], np.float32).reshape(
            (-1, *SHAPES[k])), P("workers")) for k in ("image", "energy", "ecal_sum")]
        args = [self._rep, self._loc, data, self._global(np.float32(self.lr), P())]
        if draws is not None:
            args.append({k: self._global(np.asarray(draws[k]), spec)
                         for k, spec in _draw_specs().items()})
        self._rep, self._loc, losses = fn(*args)
        self._dirty = True
        return np.asarray(jnp.asarray(losses.addressable_data(0)), dtype=np.float32)

    def _compiled_step(self, with_draws: bool, training: bool):
        import jax
        from jax.sharding import PartitionSpec as P

        key = ("step", with_draws, training)
        if key not in self._compiled:
            shard_map, flag = _shard_map()
            specs = (P(), P("workers"), P("workers"), P())
            if with_draws:
                specs += (_draw_specs(),)

            def step(rep, loc, data, lr, draws=None):
                return self._device_step(rep, loc, data, lr, draws, training)
            self._compiled[key] = jax.jit(shard_map(step, mesh=self.mesh, in_specs=specs,
                                                    out_specs=(P(), P("workers"), P()), **flag),
                                          donate_argnums=(0, 1))
        return self._compiled[key]

    def _draw(self, key, b):
        import jax

        k = jax.random.split(key, 1 + len(DRAW_NAMES))
        keys = iter(k[1:])  # one key per draw, in the order they are drawn
        return k[0], self.draws_from(
            lambda shape, lo, hi: jax.random.uniform(next(keys), shape, minval=lo, maxval=hi),
            lambda shape: jax.random.normal(next(keys), shape), b)

    def _device_step(self, rep, loc, data, lr, draws, training):
        """One device's share of the step; ``loc`` entries carry a leading axis of length 1."""
        import jax

        pmean = lambda tree: jax.lax.pmean(tree, "workers")  # noqa: E731 - DISTRIBUTED
        gt, dt, go, do = rep
        gn, dn, key = jax.tree.map(lambda a: a[0], loc)
        image, energy, ecal = data
        if draws is None:
            key, draws = self._draw(key, image.shape[0])
        # The step's state, threaded through the four updates in gan_step's order.
        s = {"gt": gt, "dt": dt, "gn": gn, "dn": dn,
             "go": [lr if i == self._lr_index else v for i, v in enumerate(go)],
             "do": [lr if i == self._lr_index else v for i, v in enumerate(do)]}

        def d_loss(dt, dn, x, labels, e, ec):
            out, dn = self.d.stateless_call(dt, dn, x, training=training)
            total, record = self.weighted_losses(parts(out, labels, e, ec))
            return total, (record, dn)

        def g_loss(gt, gn, dn, z, e):
            fake, gn = self.g.stateless_call(gt, gn, e[:, None] * z, training=training)
            out, dn = self.d.stateless_call(s["dt"], dn, fake, training=training)
            total, record = self.weighted_losses(
                parts(out, keras.ops.ones_like(e), e, ecal_target(e)))
            return total, (record, gn, dn)

        def d_update(x, labels, e, ec):
            (_, (record, s["dn"])), grads = jax.value_and_grad(d_loss, has_aux=True)(
                s["dt"], s["dn"], x, labels, e, ec)
            s["dt"], s["do"] = self.d_opt.stateless_apply(s["do"], pmean(grads),  # DISTRIBUTED
                                                          s["dt"])
            return record

        def g_update(z, e):
            (_, (record, s["gn"], s["dn"])), grads = jax.value_and_grad(g_loss, has_aux=True)(
                s["gt"], s["gn"], s["dn"], z, e)
            s["gt"], s["go"] = self.g_opt.stateless_apply(s["go"], pmean(grads),  # DISTRIBUTED
                                                          s["gt"])
            return record

        def generate(latent):  # G in inference mode, its current weights
            return self.g.stateless_call(s["gt"], s["gn"], latent, training=False)[0]

        step_losses = gan_step(image, energy, ecal, draws, d_update, g_update, generate)
        loc = jax.tree.map(lambda a: a[None], [s["gn"], s["dn"], key])
        return [s["gt"], s["dt"], s["go"], s["do"]], loc, pmean(step_losses)  # DISTRIBUTED

    # -- evaluation -------------------------------------------------------------------------
    def eval_sums(self, batch: dict, draws: dict):
        """Summed test losses of this process's batch, as :meth:`HorovodStep.eval_sums`."""
        self.sync_variables()
        values = [[v.value for v in vs] for vs in (self.g.trainable_variables,
                                                  self.g.non_trainable_variables,
                                                  self.d.trainable_variables,
                                                  self.d.non_trainable_variables)]
        data = {k: np.asarray(batch[k], np.float32) for k in ("image", "energy", "ecal_sum")}
        return self._eval_fn(values, data, {k: np.asarray(v) for k, v in draws.items()})

    def _eval_local(self, values, batch, draws):
        gt, gn, dt, dn = values
        g = lambda x: self.g.stateless_call(gt, gn, x, training=False)[0]  # noqa: E731
        d = lambda x: self.d.stateless_call(dt, dn, x, training=False)[0]  # noqa: E731
        return eval_sums(self.weights, g, d, batch["image"], batch["energy"].reshape(-1),
                                batch["ecal_sum"].reshape(-1), draws, self.latent_size)


SHAPES = {"image": (25, 25, 25, 1), "energy": (), "ecal_sum": ()}


def _draw_specs():
    from jax.sharding import PartitionSpec as P

    return {"flip_real": P("workers"), "flip_fake": P("workers"), "e_fake": P("workers"),
            "z_fake": P("workers"), "e_gen": P(None, "workers"), "z_gen": P(None, "workers")}

