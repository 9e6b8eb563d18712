"""3DGAN itself: the networks, the training step, the training loop and what it records.

* :mod:`~gan3d.gan.model` - generator and discriminator (Keras 3), their FLOPs, save and load;
* :mod:`~gan3d.gan.losses` - what a step computes, once for both backends: losses, draws, the
  order of the four updates, the test-loss sums (``keras.ops`` only, no TensorFlow);
* :mod:`~gan3d.gan.backend` - the seam: the step's base class (optimisers, state order) and the
  backends ``train.backend`` chooses from;
* :mod:`~gan3d.gan.step` - the Horovod backend: the step on TensorFlow with Horovod's all-reduce;
* :mod:`~gan3d.gan.jax` - the JAX backend (its own room): the step under ``shard_map``;
* :mod:`~gan3d.gan.training` - ``train(config)`` for every launcher and both backends;
* :mod:`~gan3d.gan.local_sgd` - local SGD's synchronisation every k steps;
* :mod:`~gan3d.gan.backend_check` - do both backends train alike;
* :mod:`~gan3d.gan.checkpoints` - atomic checkpoints for an exact resume;
* :mod:`~gan3d.gan.history` - ``history.jsonl``, TensorBoard scalars and the progress bar;
* :mod:`~gan3d.gan.simulate` - ``gan3d simulate``: showers of a trained generator in the CLIC schema;
* :mod:`~gan3d.gan.inference` - the generator with its upsampling folded into its convolutions;
* :mod:`~gan3d.gan.reference` - the reference generator shipped with the package.
"""
