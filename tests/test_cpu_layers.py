"""The discriminator's CPU layers compute Keras's functions with Keras's weights, and the fast
discriminator is the same network: same outputs, gradients, moving statistics and saved form."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from gan3d.gan import cpu_layers, model  # noqa: E402


def _grads(layer, x, **kw):
    x = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = layer(x, **kw)
        loss = tf.reduce_sum(tf.cast(y, "float32") ** 3)
    return [y.numpy(), tape.gradient(loss, x).numpy(),
            *(tape.gradient(loss, w).numpy() for w in layer.trainable_weights)]


@pytest.mark.parametrize("channels", [1, 3])
def test_folded_convolution_is_the_convolution(channels):
    x = np.random.default_rng(0).normal(size=(2, 9, 8, 7, channels)).astype("float32")
    plain = keras.layers.Conv3D(4, 5, padding="same")
    folded = cpu_layers.FoldedConv3D(4, 5, padding="same")
    plain.build(x.shape)
    folded.build(x.shape)
    folded.set_weights(plain.get_weights())
    assert [w.shape for w in folded.weights] == [w.shape for w in plain.weights]
    for a, b in zip(_grads(plain, x), _grads(folded, x)):  # output, input and weight gradients
        np.testing.assert_allclose(b, a, rtol=2e-4, atol=2e-4 * np.abs(a).max())


def test_folded_convolution_refuses_what_it_cannot_fold():
    for bad in ({"padding": "valid"}, {"padding": "same", "strides": 2}):
        with pytest.raises(ValueError, match="FoldedConv3D"):
            cpu_layers.FoldedConv3D(4, 5, **bad)


def test_fused_batch_norm_trains_like_keras():
    x = np.random.default_rng(1).normal(2.0, 3.0, (4, 6, 7, 8, 5)).astype("float32")
    plain = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-3)
    fused = cpu_layers.FusedBatchNormalization(momentum=0.9, epsilon=1e-3)
    for layer in (plain, fused):
        layer.build(x.shape)
        layer.gamma.assign(np.linspace(0.5, 2.0, 5))
        layer.beta.assign(np.linspace(-1.0, 1.0, 5))
    for a, b in zip(_grads(plain, x, training=True), _grads(fused, x, training=True)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * np.abs(a).max())
    # The moving statistics moved, and alike (Keras's biased variance, not the kernel's n - 1).
    assert not np.allclose(plain.moving_mean.numpy(), 0.0)
    np.testing.assert_allclose(fused.moving_mean.numpy(), plain.moving_mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(fused.moving_variance.numpy(), plain.moving_variance.numpy(),
                               rtol=1e-5)
    # Inference and a frozen layer: Keras's own code, the same numbers.
    fused.set_weights(plain.get_weights())
    np.testing.assert_array_equal(fused(x, training=False).numpy(), plain(x, training=False).numpy())
    fused.trainable = plain.trainable = False
    np.testing.assert_array_equal(fused(x, training=True).numpy(), plain(x, training=True).numpy())


def test_mask_dropout_drops_the_rate_and_keeps_the_mean():
    layer = cpu_layers.MaskDropout(0.2, seed=3)
    ones = tf.ones((64, 25, 25, 25, 4))  # 4 million elements: the rate to about 2e-4
    first = layer(ones, training=True).numpy()
    assert abs(float((first == 0).mean()) - 0.2) < 0.002
    assert abs(float(first.mean()) - 1.0) < 0.003  # unbiased: kept values scaled up
    # Inverted dropout: what is kept is scaled by 1 / (1 - rate) = 1.25 (to the 16-bit mask's
    # resolution, 2^-16 of the rate), the one other value than 0.
    kept = np.unique(first[first != 0])
    assert kept.size == 1 and kept[0] == pytest.approx(1 / (1 - 0.2), rel=1e-5)
    second = layer(ones, training=True).numpy()
    assert 0.3 < float(((first == 0) != (second == 0)).mean()) < 0.34  # a fresh mask per call
    np.testing.assert_array_equal(layer(ones, training=False).numpy(), ones.numpy())
    # Seeded like Keras's dropout: the same seed state gives the same mask.
    state = layer.seed_generator.state.numpy()
    again = layer(ones, training=True).numpy()
    layer.seed_generator.state.assign(state)
    np.testing.assert_array_equal(layer(ones, training=True).numpy(), again)


def test_fast_discriminator_is_the_same_network(tmp_path):
    keras.utils.set_random_seed(5)
    plain = model.build_discriminator()
    fast = model.build_discriminator(fast_cpu=True)
    assert fast.count_params() == plain.count_params() == 73_450
    assert [w.shape for w in fast.weights] == [w.shape for w in plain.weights]
    assert {"pad2", "pad3"}.isdisjoint(layer.name for layer in fast.layers)
    fast.set_weights(plain.get_weights())
    x = np.random.default_rng(2).gamma(0.5, 1.0, (3, 25, 25, 25, 1)).astype("float32")
    for a, b in zip(plain(x, training=False), fast(x, training=False)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4)
    loaded = model.load_discriminator(model.save_discriminator(fast, tmp_path / "d.keras"))
    assert type(loaded.get_layer("bn2")) is cpu_layers.FusedBatchNormalization
    for a, b in zip(fast(x, training=False), loaded(x, training=False)):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_train_cpu_layers_chooses_the_discriminator():
    """auto: the CPU layers under mixed precision on a CPU, Keras's in float32 (the committed
    study's numbers); fast and keras force either."""
    from gan3d import config
    from gan3d.gan import training

    mine = (cpu_layers.FoldedConv3D, cpu_layers.FusedBatchNormalization, cpu_layers.MaskDropout)

    def built(**overrides):
        step = training.build_step(config.resolve("quick", overrides))
        return {type(layer) for layer in step.d.layers + step.g.layers}, step

    kinds, bf16 = built(**{"train.precision": "bfloat16"})
    assert set(mine) <= kinds
    assert bf16.d.get_layer("conv1").compute_dtype == "bfloat16"
    kinds, f32 = built(**{"train.precision": "float32"})
    assert kinds.isdisjoint(mine) and f32.d.get_layer("pad2")  # the reference's explicit padding
    kinds, _ = built(**{"train.precision": "float32", "train.cpu_layers": "fast"})
    assert set(mine) <= kinds
    kinds, _ = built(**{"train.precision": "bfloat16", "train.cpu_layers": "keras"})
    assert kinds.isdisjoint(mine)
    with pytest.raises(config.ConfigError, match="cpu_layers"):
        config.resolve("quick", {"train.cpu_layers": "yes"})


@pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                    reason="JAX is not installed here; the accelerator machines have it")
def test_fast_discriminator_runs_under_jax():
    code = textwrap.dedent("""
        import numpy as np, keras
        from gan3d.gan import model
        assert keras.backend.backend() == "jax"
        keras.utils.set_random_seed(0)
        plain, fast = model.build_discriminator(), model.build_discriminator(fast_cpu=True)
        fast.set_weights(plain.get_weights())
        x = np.random.default_rng(0).gamma(0.5, 1.0, (2, 25, 25, 25, 1)).astype("float32")
        for a, b in zip(plain(x, training=False), fast(x, training=False)):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4)
        assert all(np.isfinite(np.asarray(o)).all() for o in fast(x, training=True))
    """)
    env = dict(os.environ, KERAS_BACKEND="jax")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
