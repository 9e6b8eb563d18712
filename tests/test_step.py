"""One 3DGAN training step on one process: targets, losses, draws, seeds, state, an update."""

from __future__ import annotations

import numpy as np
import pytest

from gan3d.gan import horovod, step


def test_ecal_target_is_the_published_fit():
    from gan3d.data.calorimeter import sampling_fraction_fit

    e_gev = np.array([10.0, 100.0, 250.0, 500.0])
    got = np.asarray(step.ecal_target(e_gev / 100.0))
    # Network units: GeV x 100 of the deposited energy E x sampling fraction.
    np.testing.assert_allclose(got, e_gev * sampling_fraction_fit(e_gev) * 100.0, rtol=1e-5)
    assert got[0] / 100 == pytest.approx(10.0 * 0.0218, rel=0.01)  # 2.2 % at 10 GeV


def test_losses_match_keras_definitions():
    import keras

    y = np.array([1.0, 0.0, 1.0, 0.0], dtype=np.float32)
    p = np.array([0.9, 0.2, 1.0, 0.0], dtype=np.float32)
    ours = np.asarray(step.bce(y, p))
    ref = np.asarray(keras.losses.binary_crossentropy(y[:, None], p[:, None]))
    np.testing.assert_allclose(ours, ref, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(step.mape(np.float32(2.0), np.float32(1.5))), 25.0)


def test_draws_shapes_ranges_and_five_percent_flips(gan_step):
    gan_step.reseed(3, 0, 0)
    d = {k: np.asarray(v) for k, v in gan_step.draw(20_000).items()}
    assert d["z_fake"].shape == (20_000, 200) and d["z_gen"].shape == (2, 20_000, 200)
    assert d["e_gen"].shape == (2, 20_000)
    assert 0.1 <= d["e_fake"].min() and d["e_fake"].max() <= 5.0  # 10-500 GeV in units of 100 GeV
    for key in ("flip_real", "flip_fake"):
        assert d[key].mean() == pytest.approx(0.05, abs=0.005)
    assert abs(d["z_fake"].std() - 1.0) < 0.01


def test_reseed_depends_on_rank_and_epoch_only(gan_step):
    def seeds(rank, epoch):
        gan_step.reseed(3, rank, epoch)
        return [v.numpy().tolist() for v in gan_step.seed_variables()]

    assert seeds(0, 1) == seeds(0, 1)
    assert seeds(0, 1) != seeds(1, 1)
    assert seeds(0, 1) != seeds(0, 2)
    assert len(seeds(0, 0)) == 5  # step noise + the discriminator's four Dropout layers


def test_optimiser_state_exists_before_the_first_step(gan_step):
    # Built in the constructor, so that rank 0 can broadcast it before training starts.
    n_g, n_d = len(gan_step.g.trainable_variables), len(gan_step.d.trainable_variables)
    assert len(gan_step.optimizer_variables()) == (n_g + 2) + (n_d + 2)  # velocities + iter + lr


def _batch(b: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    image = (rng.gamma(0.05, 2.0, (b, 25, 25, 25, 1)) * (rng.random((b, 25, 25, 25, 1)) < 0.3))
    image = image.astype(np.float32)
    return {"image": image, "energy": rng.uniform(0.1, 5.0, b).astype(np.float32),
            "ecal_sum": image.sum(axis=(1, 2, 3, 4)).astype(np.float32)}


def test_one_step_updates_every_weight_of_both_networks(gan_step):
    """All four updates are applied: every trainable variable of G and D moves (a missing
    optimiser.apply, or gradients that do not reach a layer, would leave some unchanged)."""
    before = [v.numpy().copy() for v in gan_step.g.trainable_variables + gan_step.d.trainable_variables]
    gan_step.set_learning_rate(1e-3)
    losses = np.asarray(gan_step.train_step(_batch(2)))
    after = [v.numpy() for v in gan_step.g.trainable_variables + gan_step.d.trainable_variables]
    assert losses.shape == (len(horovod.LOSS_NAMES),) and np.isfinite(losses).all()
    unchanged = [v.path for v, a, b in zip(gan_step.g.trainable_variables
                                           + gan_step.d.trainable_variables, before, after)
                 if np.array_equal(a, b)]
    assert unchanged == []
    # The step's losses computed here from the networks' outputs, with the textbook BCE and MAPE
    # and the reference's weights 2, 0.1, 0.1: at learning rate 0 and in inference mode every
    # update sees the same networks, so D's record is the mean of its real and fake batches and
    # G's of its two batches. Labels: real 1, fake 0, each flipped where the draw says so.
    from gan3d.data.calorimeter import sampling_fraction_fit

    b, rng = 2, np.random.default_rng(7)
    draws = {"flip_real": np.array([True, True]), "flip_fake": np.array([False, True]),
             "e_fake": rng.uniform(0.1, 5.0, b).astype(np.float32),
             "z_fake": rng.standard_normal((b, 200)).astype(np.float32),
             "e_gen": rng.uniform(0.1, 5.0, (2, b)).astype(np.float32),
             "z_gen": rng.standard_normal((2, b, 200)).astype(np.float32)}
    batch = _batch(b, 3)
    gan_step.set_learning_rate(0.0)
    got = np.asarray(gan_step.train_step(batch, draws, training=False), np.float64)
    gan_step.set_learning_rate(1e-3)

    def record(image, labels, e, ecal):  # [total, BCE, MAPE(E), MAPE(ECAL)] of one batch
        p, aux, total = (np.asarray(t, np.float64)[:, 0] for t in gan_step.d(image, training=False))
        # Keras' BCE clips p to [eps, 1 - eps] in float32: a saturated D (p = 1 exactly, as the
        # session's shared step may be by now) then costs -log(eps), not infinity
        eps = np.float32(1e-7)
        p = np.clip(p, eps, np.float32(1) - eps)
        bce = -(labels * np.log(p) + (1 - labels) * np.log(1 - p))
        parts = [bce.mean(), *(100 * np.mean(np.abs(y - x) / np.abs(y)) for y, x in
                               ((e, aux), (ecal, total)))]
        return np.array([2.0 * parts[0] + 0.1 * parts[1] + 0.1 * parts[2], *parts])

    def fakes(e, z):  # G's showers of E = 100 e GeV and their ECAL target E x fit(E) x 100
        shower = gan_step.g(e[:, None] * z, training=False)
        return shower, 100 * e * sampling_fraction_fit(100 * e) * 100

    fake, target = fakes(draws["e_fake"], draws["z_fake"])
    d = (record(batch["image"], np.array([0.0, 0.0]), batch["energy"], batch["ecal_sum"])
         + record(fake, np.array([0.0, 1.0]), draws["e_fake"], target)) / 2
    g = sum(record(f, np.ones(b), draws["e_gen"][i], t) for i in range(2)
            for f, t in [fakes(draws["e_gen"][i], draws["z_gen"][i])]) / 2
    np.testing.assert_allclose(got, np.concatenate([d, g]), rtol=2e-4)


def test_evaluation_sums_do_not_change_the_model(gan_step):
    state = [v.numpy().copy() for v in gan_step.state_variables()]
    b = 3
    rng = np.random.default_rng(1)
    draws = {"e_fake": rng.uniform(0.1, 5.0, b).astype(np.float32),
             "z_fake": rng.standard_normal((b, 200)).astype(np.float32),
             "e_gen": rng.uniform(0.1, 5.0, (2, b)).astype(np.float32),
             "z_gen": rng.standard_normal((2, b, 200)).astype(np.float32)}
    sums = np.asarray(gan_step.eval_sums(_batch(b, 2), draws))
    again = np.asarray(gan_step.eval_sums(_batch(b, 2), draws))
    assert sums.shape == (8,) and np.isfinite(sums).all()
    np.testing.assert_array_equal(sums, again)  # inference mode: no noise, no dropout
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(state, gan_step.state_variables()))


def test_batch_statistics_averaging_is_the_identity_on_one_process(gan_step):
    stats = [v for v in gan_step.model_variables() if not v.trainable]
    before = [v.numpy().copy() for v in stats]
    gan_step.average_batch_statistics()
    assert len(stats) == 2 * (2 + 3)  # moving mean and variance of 2 BatchNorms in G, 3 in D
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, stats))


@pytest.mark.slow
def test_loss_scaling_changes_nothing_but_skips_a_step_whose_gradients_overflow():
    """float16 training (GPUs before Ampere) scales the loss up before the gradients and down
    after the all-reduce. On finite gradients that is the same update as without scaling; a step
    whose scaled gradients overflow is skipped and the scale halved, on every rank alike. (CPU
    TensorFlow has no float16 3-D pooling, so the mechanism is checked in float32 here.)"""
    import keras

    from gan3d.gan.model import build_discriminator, build_generator

    def make(loss_scale):
        keras.utils.set_random_seed(5)
        return horovod.HorovodStep(build_generator(), build_discriminator(), seed=5, loss_scale=loss_scale)

    plain, scaled = make(False), make(True)
    for a, b in zip(plain.model_variables(), scaled.model_variables()):
        b.assign(a)
    b_ = 2
    rng = np.random.default_rng(4)
    draws = {"flip_real": np.zeros(b_, bool), "flip_fake": np.zeros(b_, bool),
             "e_fake": rng.uniform(0.1, 5.0, b_).astype(np.float32),
             "z_fake": rng.standard_normal((b_, 200)).astype(np.float32),
             "e_gen": rng.uniform(0.1, 5.0, (2, b_)).astype(np.float32),
             "z_gen": rng.standard_normal((2, b_, 200)).astype(np.float32)}
    batch = _batch(b_, 7)
    l0 = np.asarray(plain.train_step(batch, draws, training=False))
    l1 = np.asarray(scaled.train_step(batch, draws, training=False))
    np.testing.assert_allclose(l1, l0, rtol=1e-5)  # the losses are reported unscaled
    for a, b in zip(plain.g.trainable_variables + plain.d.trainable_variables,
                    scaled.g.trainable_variables + scaled.d.trainable_variables):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-6)
    scale = float(scaled.d_opt.dynamic_scale.numpy())
    assert scale == 2.0**15  # Keras' initial scale: no overflow so far
    scaled.d_opt.dynamic_scale.assign(3e38)  # the next D loss overflows float32 when scaled
    before = [v.numpy().copy() for v in scaled.d.trainable_variables]
    losses = np.asarray(scaled.train_step(batch, draws, training=False))
    assert np.isfinite(losses).all()  # the run goes on: nothing non-finite reaches the history
    assert float(scaled.d_opt.dynamic_scale.numpy()) < 3e38 / 2  # halved (twice: two D updates)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, scaled.d.trainable_variables))
    scaled.set_learning_rate(2e-3)
    assert float(scaled.g_opt.learning_rate.numpy()) == pytest.approx(2e-3)
