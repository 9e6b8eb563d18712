"""Discriminator layers for mixed precision on CPUs: Keras's functions and weights, fewer passes.

The discriminator's memory-bound layers and its one-channel first convolution dominate a
bfloat16 training step on a CPU once the other convolutions run on bfloat16 hardware
(``bench/bench_roofline.py``). Each class here is the Keras layer it subclasses, with the same
configuration, weights and mathematical function, computed another way:

* :class:`FoldedConv3D`: a stride-1 ``"same"`` convolution whose first kernel axis is folded into
  the input channels (5 shifted copies of a 1-channel input make a 5-channel one, convolved by a
  (1, 5, 5) kernel): oneDNN's kernels are slow for 1 input channel. Pure ``keras.ops``.
* :class:`FusedBatchNormalization`: in training, TensorFlow's fused batch-norm kernel (one pass
  for the statistics, one for the output; one fused gradient) instead of the unfused moments and
  normalisation. Other backends, inference and masks: Keras's own code.
* :class:`MaskDropout`: the keep mask from 16-bit random numbers (half the Philox draws of
  Keras's 32-bit uniform ones), applied as one factor per element (0 or the scale: one multiply
  forward and one backward, where Keras selects and scales); the rate is kept to 1/65,536 and
  the scale makes the layer unbiased. TensorFlow only; elsewhere Keras's dropout.

They round differently from the layers they replace, so :func:`gan3d.gan.model.build_discriminator`
uses them only where the numbers are not pinned: ``fast_cpu=True``, which
:func:`gan3d.gan.training.build_step` sets for mixed precision on a CPU (``train.cpu_layers:
auto``), or in float32 too when asked (``fast``). Float32 training by default (the equality
tests, the committed convergence study) never builds them.
"""

from __future__ import annotations

import keras
from keras import ops

__all__ = ["FoldedConv3D", "FusedBatchNormalization", "MaskDropout", "MASK_BITS"]

MASK_BITS = 16


def _tensorflow():
    """The ``tensorflow`` module when it is Keras's backend, else None."""
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    return tf


@keras.saving.register_keras_serializable(package="gan3d")
class FoldedConv3D(keras.layers.Conv3D):
    """A ``Conv3D`` (stride 1, ``padding="same"``, channels last) computed with its first kernel
    axis folded into the input channels; same kernel, bias and output."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if (self.padding != "same" or set(self.strides) != {1} or set(self.dilation_rate) != {1}
                or self.data_format != "channels_last" or self.groups != 1):
            raise ValueError(f"FoldedConv3D {self.name}: needs stride 1, no dilation, one group, "
                             f"padding 'same' and channels_last (got strides {self.strides}, "
                             f"dilation {self.dilation_rate}, groups {self.groups}, padding "
                             f"{self.padding!r}, {self.data_format})")

    def convolution_op(self, inputs, kernel):
        k, kh, kw, c, o = kernel.shape
        n = inputs.shape[1]
        lo = (k - 1) // 2  # TensorFlow's and JAX's split of "same" padding
        x = ops.pad(inputs, [[0, 0], [lo, k - 1 - lo], [0, 0], [0, 0], [0, 0]])
        x = ops.concatenate([x[:, i:i + n] for i in range(k)], axis=-1)  # channel i * c + j
        w = ops.reshape(ops.transpose(kernel, (1, 2, 0, 3, 4)), (1, kh, kw, k * c, o))
        return ops.conv(x, w, strides=1, padding="same", data_format="channels_last")


@keras.saving.register_keras_serializable(package="gan3d")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """``BatchNormalization`` over the last axis whose training pass is TensorFlow's fused kernel
    (the 4-D or 5-D input seen as 4-D); the moving statistics follow Keras's update."""

    def call(self, inputs, training=None, mask=None):
        tf = _tensorflow()
        rank = len(inputs.shape)
        if (tf is None or not (training and self.trainable) or mask is not None or self.renorm
                or rank not in (4, 5) or self.axis not in (-1, rank - 1)):
            return super().call(inputs, training=training, mask=mask)
        x = tf.cast(inputs, "float32")
        shape = tf.shape(x)
        if rank == 5:
            x = tf.reshape(x, tf.stack([shape[0], shape[1] * shape[2], shape[3], shape[4]]))
        channels = inputs.shape[-1]
        gamma = tf.cast(self.gamma, "float32") if self.scale else tf.ones([channels])
        beta = tf.cast(self.beta, "float32") if self.center else tf.zeros([channels])
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            x, gamma, beta, epsilon=self.epsilon, is_training=True)
        # The kernel returns the unbiased (n - 1) variance; Keras's moving average uses the biased.
        n = tf.cast(tf.size(x) // channels, "float32")
        variance = variance * (n - 1.0) / n
        m = self.momentum
        self.moving_mean.assign(self.moving_mean * m + mean * (1.0 - m))
        self.moving_variance.assign(self.moving_variance * m + variance * (1.0 - m))
        return tf.cast(tf.reshape(y, shape), self.compute_dtype)


@keras.saving.register_keras_serializable(package="gan3d")
class MaskDropout(keras.layers.Dropout):
    """``Dropout`` whose keep mask compares 16-bit random numbers with ``rate x 2^16``."""

    def call(self, inputs, training=False):
        tf = _tensorflow()
        if tf is None or not training or self.rate == 0 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        threshold = int(round(self.rate * 2 ** MASK_BITS))
        scale = 2 ** MASK_BITS / (2 ** MASK_BITS - threshold)  # E[output] = input
        seed = tf.cast(self.seed_generator.next(), "int32")
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None,
                                           dtype=tf.uint32)
        draws = tf.reshape(tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size], tf.shape(inputs))
        # One factor per element (0 or scale): one multiply forward, one backward.
        factor = tf.where(draws >= threshold, tf.constant(scale, inputs.dtype),
                          tf.constant(0.0, inputs.dtype))
        return inputs * factor
