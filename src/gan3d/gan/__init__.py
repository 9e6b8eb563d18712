"""3DGAN itself: the networks, the training step, the training loop and what it records.

* :mod:`~gan3d.gan.model` - generator and discriminator (Keras 3), their FLOPs, save and load;
* :mod:`~gan3d.gan.step` - one training step, written once for both backends: the losses, the
  draws, the four updates in order, what every backend's step holds (``keras.ops`` only);
* :mod:`~gan3d.gan.horovod` - the Horovod backend: one update is a TensorFlow tape, Horovod's
  all-reduce of the gradients and RMSprop;
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
