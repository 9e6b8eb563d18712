"""The JAX backend (``train.backend: jax``): Keras 3 on JAX, one compiled data-parallel step.

* :mod:`~gan3d.gan.jax.step` - :class:`~gan3d.gan.jax.step.JaxStep`, the step under ``shard_map``
  with ``lax.pmean`` as its all-reduce;
* :mod:`~gan3d.gan.jax.backend` - how its processes join (``jax.distributed``), its precision
  rule and what it refuses; the loop itself is :func:`gan3d.gan.training.train`, shared with the
  Horovod backend.

Nothing here imports TensorFlow: the step runs on machines that have JAX alone
(``bench/device_check.py``).
"""
