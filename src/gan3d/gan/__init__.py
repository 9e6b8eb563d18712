"""3DGAN itself: the networks, the training step, the training loop and what it records.

* :mod:`~gan3d.gan.model` - generator and discriminator (Keras 3), their FLOPs, save and load;
* :mod:`~gan3d.gan.step` - one data-parallel training step: losses, four updates, evaluation;
* :mod:`~gan3d.gan.training` - ``train(config)`` for every launcher, and the step-rate probe;
* :mod:`~gan3d.gan.jax_step`, :mod:`~gan3d.gan.jax_training` - the same step and loop on Keras'
  JAX backend (``train.backend: jax``), with :mod:`~gan3d.gan.losses` (its losses, no TensorFlow);
  :mod:`~gan3d.gan.backend_check` - do both train alike;
* :mod:`~gan3d.gan.checkpoints` - atomic checkpoints for an exact resume;
* :mod:`~gan3d.gan.history` - ``history.jsonl``, TensorBoard scalars and the progress bar;
* :mod:`~gan3d.gan.simulate` - ``gan3d simulate``: showers of a trained generator in the CLIC schema;
* :mod:`~gan3d.gan.inference` - the generator with its upsampling folded into its convolutions;
* :mod:`~gan3d.gan.reference` - the reference generator shipped with the package.
"""
