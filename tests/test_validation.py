"""Orchestration of the validation: energies, reference samples, checkpoints, the metrics JSON,
the speed measurement. Generators here are untrained (built and saved in a temporary folder):
these tests check the machinery, not a trained GAN."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from gan3d import config
from gan3d.data import files, showers
from gan3d.validation import monitors, physics
from gan3d.validation.speed import inference_speed, speed_table
from gan3d.validation import study as validation
from gan3d.exceptions import CheckpointError, ConfigError
from markdown_table import rows


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A training output folder with an untrained generator and discriminator, initialised from
    a fixed seed (an unseeded initialisation made the 'told apart at once' check fail in about
    one run in three: some random generators draw showers a 30-shower classifier misses)."""
    import keras

    from gan3d.gan import model

    keras.utils.set_random_seed(1234)
    folder = tmp_path_factory.mktemp("train_1w")
    model.save_generator(model.build_generator(), folder / "generator.keras")
    model.save_discriminator(model.build_discriminator(), folder / "discriminator.keras")
    return folder


def small_config(**extra):
    return config.resolve("quick", {"validation.n_showers": 30, "validation.energy_bins": [100.0],
                                    **extra})


def test_energy_sets_are_in_their_bins_and_reproducible():
    sets = validation.energy_sets(50, [50.0, 300.0], 5.0, (10.0, 500.0), seed=3)
    assert list(sets) == ["inclusive", "50", "300"]
    assert np.all((sets["50"] >= 45) & (sets["50"] <= 55))
    assert np.all((sets["300"] >= 295) & (sets["300"] <= 305))
    assert sets["inclusive"].min() >= 10 and sets["inclusive"].max() <= 500
    again = validation.energy_sets(50, [50.0, 300.0], 5.0, (10.0, 500.0), seed=3)
    assert all(np.array_equal(sets[k], again[k]) for k in sets)


def test_missing_generator_is_named(tmp_path, checkpoint):
    empty = tmp_path / "train_2w"
    empty.mkdir()
    with pytest.raises(CheckpointError, match="train_2w.*generator.keras"):
        validation.validate([checkpoint, empty], ["1 worker", "2 workers"], small_config(),
                            results_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()  # failed before any work or output


def test_one_label_per_checkpoint(tmp_path, checkpoint):
    with pytest.raises(ConfigError, match="labels"):
        validation.validate([checkpoint], ["a", "b"], small_config(), results_dir=tmp_path)


@pytest.fixture(scope="module")
def small_run(checkpoint, tmp_path_factory):
    """validate() of one untrained generator: 30 showers, inclusive and 100 GeV."""
    out = tmp_path_factory.mktemp("validation")
    result = validation.validate([checkpoint], ["untrained"], small_config(), results_dir=out,
                                 low_level=False, progress=False)
    return result, json.loads((out / "metrics.json").read_text())


def test_validate_writes_metrics_for_every_bin(small_run):
    result, data = small_run
    assert data["bins"] == ["inclusive", "100"] == result.bins
    assert data["config"]["validation"]["n_showers"] == 30 and "commit" in data["provenance"]
    for key in result.bins:
        ref, gen = data["reference"][key], data["generators"]["untrained"]["bins"][key]
        assert ref["n_reference"] == ref["n_generated"] == gen["n_generated"] == 30
        # an untrained generator is told apart at once; the second reference sample is not
        assert gen["classifier_high"]["auc"] > 0.9
        assert gen["separation_power"]["sampling_fraction"] > 0.9
        assert ref["three_dgan"]["total"] < 0.2 < gen["three_dgan"]["total"]
        assert math.isnan(gen["fpd"]["value"]) and "showers" in gen["fpd"]["note"]  # 30 < 2 x 151
    # same primary energies for GAN and reference
    np.testing.assert_array_equal(result.reference["100"].energy,
                                  result.generators["untrained"]["100"].energy)
    disc = result.generators["untrained"]["inclusive"].discriminator
    assert disc is not None and disc["energy_gev"].shape == (30,)
    table = validation.metrics_table(data)
    assert table.count("\n") == 1 + 6 * 2  # header, rule, 6 metrics x (reference + generator)
    head = validation.headline(data)
    assert set(head) == {"reference (2nd sample)", "untrained"}


def test_a_folder_holding_another_validation_is_refused_before_any_work(small_run, checkpoint):
    from gan3d.exceptions import OutputExists

    result, _ = small_run
    before = result.path.read_bytes()
    with pytest.raises(OutputExists, match="metrics.json.*--force"):
        validation.validate([checkpoint], ["again"], small_config(),
                            results_dir=result.path.parent, low_level=False, progress=False)
    assert result.path.read_bytes() == before


def test_figures_show_the_summaries(small_run):
    from gan3d.plots import validation as vplots

    result, data = small_run
    samples = result.samples("inclusive")
    assert list(samples) == ["reference", "untrained"]
    fig = vplots.profiles(samples)
    z_lin = fig.axes[2]  # row 0, column 2: longitudinal, linear
    np.testing.assert_allclose(z_lin.lines[0].get_ydata(), samples["untrained"].profiles["z"])
    assert fig.axes[5].get_yscale() == "log"
    assert len(vplots.ecal_sum_per_bin({k: result.samples(k) for k in result.bins}).axes) == 1
    overview = vplots.metric_overview(data)
    assert [a.get_title() for a in overview.axes] == [
        "classifier on the 151 high-level features", "Frechet physics distance (FPD)",
        "3DGAN metric: moments and profiles", "sampling-fraction histograms"]
    assert all(a.get_ylabel() for a in overview.axes)  # each says what its axis measures
    reg = vplots.energy_regression(result.reference["inclusive"],
                                   {"untrained": samples["untrained"]})
    assert reg.axes[0].get_title() == "untrained"
    assert len(vplots.hits_and_spectrum(samples).axes) == 3
    moments = vplots.moments(samples)  # barycentre, variance and third moment along x, y, z
    assert len(moments.axes) == 9 and "third moment along z" in moments.axes[8].get_xlabel()
    per_bin = vplots.profiles_per_bin({k: result.samples(k) for k in result.bins})
    assert len(per_bin.axes) == 2 * 2 * (len(result.bins) - 1)  # profile + ratio, z and x, per bin
    bins = {k: result.samples(k) for k in result.bins}
    table = validation.resolution_table(bins)
    assert list(table) == ["reference", "untrained"]
    assert table["reference"]["energy"] == [float(k) for k in result.bins if k != "inclusive"]
    res = vplots.energy_resolution(bins)
    assert len(res.axes) == 2 and "resolution" in res.axes[0].get_ylabel()
    ratio = res.axes[1].containers[0].lines[0].get_ydata()  # GAN / reference, one point per bin
    expected = np.divide(table["untrained"]["resolution"], table["reference"]["resolution"])
    np.testing.assert_allclose(ratio, expected)
    assert np.all(np.asarray(table["untrained"]["resolution"]) > 0)
    check = vplots.validator_check({"reference": {"AUC": 0.5, "FPD": 0.01},
                                    "wider": {"AUC": 1.0, "FPD": 20.0}})
    assert [a.get_title() for a in check.axes] == ["AUC", "FPD"]
    # samples smaller than twice the features have no FPD (NaN): the panel says so
    small = vplots.validator_check({"reference": {"AUC": 0.5, "FPD": np.nan},
                                    "wider": {"AUC": 1.0, "FPD": np.nan}})
    assert "not computed" in small.axes[1].texts[-1].get_text()


def test_relative_resolution_and_its_error():
    """sigma/mean of a sample with a known spread, its standard error, and the a/sqrt(E) (+) b
    fit recovering the terms that made the spreads."""
    from gan3d.validation.physics import relative_resolution, resolution_fit

    rng = np.random.default_rng(3)
    rel, err = relative_resolution(rng.normal(2.0, 0.1, 20_000))
    assert abs(rel - 0.05) < 3 * err and 0.0002 < err < 0.0003  # 0.05 / sqrt(2 x 19,999)
    assert all(np.isnan(relative_resolution([1.0])))
    energies = np.array([50.0, 100.0, 200.0, 400.0])
    truth = np.hypot(0.15 / np.sqrt(energies), 0.01)
    fitted = [relative_resolution(rng.normal(1.0, t, 20_000))[0] for t in truth]
    fit = resolution_fit(energies, fitted, 20_000)
    assert abs(fit["a"] - 0.15) < 0.01 and abs(fit["b"] - 0.01) < 0.003


def test_clic_reference_comes_from_held_out_files(tmp_path):
    for i in range(10):  # 9 training files, 1 held out (the last by name)
        e = np.full(8, 100.0 if i == 9 else 300.0)
        files.write_showers(tmp_path / f"EleEscan_{i}_0.h5", showers.generate(e, i), e)
    cfg = config.resolve("quick", {"data.source": "clic", "data.path": str(tmp_path),
                                   "validation.energy_bins": [100.0]})
    a, b = validation.reference_pair(cfg, "100", np.full(4, 100.0), seed=0)
    assert len(a.energy) == len(b.energy) == 4 and np.all(a.energy == 100.0)
    assert not np.array_equal(a.ecal, b.ecal)  # two different halves
    with pytest.raises(ConfigError, match="295-305 GeV"):  # 300 GeV: training files only
        validation.reference_pair(cfg, "300", np.full(4, 300.0), seed=0)


@pytest.mark.slow
def test_distortion_check_flags_each_distortion():
    check = validation.distortion_check(n_showers=400, seed=5)
    value = validation.metric_value
    ref = check["reference"]
    assert value(check["sampling x1.05"], "sep:sampling_fraction") > 3 * value(ref, "sep:sampling_fraction")
    assert value(check["20% wider"], "sep:x_var") > 0.5 > value(ref, "sep:x_var")
    assert value(check["1 layer deeper"], "sep:z_mean") > 3 * value(ref, "sep:z_mean")
    assert value(check["20% wider"], "fpd") > value(ref, "fpd") + 5 * ref["fpd"]["error"]
    with pytest.raises(KeyError, match="nonsense"):
        value(ref, "sep:nonsense")


def test_inference_speed_rows_and_geant4_estimate():
    t0 = time.perf_counter()
    speed = inference_speed(batch_sizes=(2,), min_showers=2, repeats=1,
                            precisions=("float32", "bfloat16"))
    wall = time.perf_counter() - t0
    gan = [r for r in speed["rows"] if r["source"].startswith("GAN")]
    assert [(r["source"], r["precision"], r["batch_size"]) for r in gan] == [
        ("GAN", "float32", 2), ("GAN, folded", "float32", 2),
        ("GAN", "bfloat16", 2), ("GAN, folded", "bfloat16", 2)]
    # Each row timed at least one call of batch_size showers inside this call (one repeat): the
    # seconds its rate implies, batch_size / showers_per_s, add up to less than the whole call.
    assert sum(r["batch_size"] / r["showers_per_s"] for r in speed["rows"]) < wall
    est = speed["published"][0]
    assert est["gan_float32_over_geant4"] == pytest.approx(67000 / 1.73)
    fastest = max(r["showers_per_s"] for r in gan if r["precision"] == "float32")
    assert est["showers_per_s"] == pytest.approx(fastest / (67000 / 1.73))
    assert "doi:10.5220/0010245002510258" in est["source"]
    assert ["GAN", "bfloat16", "2"] in [r[:3] for r in rows(speed_table(speed))]


@pytest.mark.slow
def test_compare_with_the_low_level_classifier():
    e = np.random.default_rng(0).uniform(50.0, 150.0, 300)
    ref = validation.Showers(showers.generate(e, 1), e)
    wide = validation.Showers(physics.widen_transverse(showers.generate(e, 2), 1.2), e)
    m = validation.compare(ref, wide, low_level=True, seed=0)
    low = m["classifier_low"]
    assert low["kind"] == "mlp" and low["n_test"] == 120
    assert low["auc"] > 0.5 + 3 * low["auc_err"]  # the voxels show the wider showers too
    assert math.isnan(m["fpd"]["value"])  # 300 showers < 2 x 151 features: not computed


def test_what_notebook_04_says_is_computed_from_its_numbers():
    cfg = config.resolve("quick")
    assert validation.settings_line(cfg).startswith(f"profile quick: {cfg.validation.n_showers} "
                                                    "showers per sample, bins [")
    m = {"classifier_high": {"auc": 0.5}, "fpd": {"value": 0.01, "error": 0.005},
         "separation_power": {"sampling_fraction": 0.02, "x_var": 0.03, "z_mean": 0.04}}
    wider = dict(m, classifier_high={"auc": 0.9},
                 separation_power={**m["separation_power"], "x_var": 0.6})
    check = {"reference": m, "sampling x1.05": m, "20% wider": wider, "1 layer deeper": m}
    cases = validation.check_cases(check)
    assert cases["20% wider"] == {"S(sampling fraction)": 0.02, "S(x variance)": 0.6,
                                  "S(z barycentre)": 0.04, "AUC": 0.9, "FPD": 0.01}
    text = validation.check_reading(check, 300)
    assert ("*20% wider*: S(x variance) 0.6 against 0.03 for the second reference sample (x20); "
            "AUC 0.90") in text
    assert text.endswith("FPD 0.01 ± 0.005, the noise floor at 300 showers: `metrics.json` carries "
                         "every error next to its value.")
    no_fpd = {"value": np.nan, "error": np.nan, "note": "needs at least 302 showers per sample"}
    text = validation.check_reading({k: dict(v, fpd=no_fpd) for k, v in check.items()}, 60)
    assert "and no FPD (needs at least 302 showers per sample), the noise floor at 60" in text
    table = {"1 worker": {"energy": [50.0, 100.0], "resolution": [0.02, 0.015],
                          "error": [0.001, 0.0005], "fit": {"a": 0.15, "b": 0.0012}}}
    assert validation.resolution_lines(table) == (
        f"{'1 worker':>45}: 50 GeV 2.00 ± 0.10 %, 100 GeV 1.50 ± 0.05 %; "
        "fit 0.150/sqrt(E) (+) 0.0012")
    t = cfg.train
    assert validation.train_showers(cfg) == t.epochs * t.steps_per_epoch * t.batch_size
    assert validation.paper_train_showers() == 40 * 180_000  # 40 epochs of 90 % of 200,000
    ref = {"auc_high": 0.5, "fpd": 0.01, "fpd_error": 0.01, "three_dgan": 0.1,
           "sep:sampling_fraction": 0.01}
    head = {"reference (2nd sample)": ref, "1 worker": dict(ref, auc_high=0.7), "2 workers": ref}
    lines = validation.headline_lines(head, cfg).splitlines()
    assert lines[1] == (f"{'1 worker':>24}: AUC 0.700, FPD 0.01 +- 0.01, 3DGAN metric 0.1, "
                        "S(sampling fraction) 0.010")
    assert lines[-1].endswith("the paper profile: 7,200,000 (40 epochs of 180,000)")
    note = validation.closing_note(head, cfg)
    assert "**1 worker**: AUC 0.70 (reference 0.50)" in note
    assert "told apart from the reference" in note
    assert "**2 workers**: AUC 0.50 (reference 0.50), FPD 0.01 ± 0.01 (reference 0.01 ± 0.01) - " \
           "close to the reference's noise floor" in note
    per_target = {name: {"value": 1.0, "reference": 1.1, "met": name == "max_layer"}
                  for name in monitors.TARGETS}
    result = {"per_energy": {50.0: per_target | {"profile_distance": 0.1234}},
              "targets_met": 1, "targets": 5}
    head_row, row = rows(validation.targets_table(result))
    assert head_row == ["energy", *monitors.TARGETS, "longitudinal profile distance"]
    assert row[0] == "50.0 GeV" and row[-1] == "0.123"
    assert row[1 + list(monitors.TARGETS).index("max_layer")] == "1 vs 1.1 **met**"
    assert validation.targets_table(result).endswith("\n\n1 of 5 (energy, target) pairs met.")


def test_each_features_own_auc_names_what_a_distortion_changed():
    """The per-feature AUC equals scikit-learn's ROC AUC of the feature alone (folded to >= 0.5);
    showers made 20 % wider are told apart by their transverse features, not by their energy
    fractions per layer, while two reference samples stay near 0.5; spread is the ratio of the
    standard deviations."""
    from sklearn.metrics import roc_auc_score

    e = np.random.default_rng(0).uniform(50.0, 150.0, 300)
    ref = physics.high_level_features(showers.generate(e, 1), e)
    ref2 = physics.high_level_features(showers.generate(e, 3), e)[0]
    wide = physics.high_level_features(physics.widen_transverse(showers.generate(e, 2), 1.2), e)[0]
    hr, names = ref
    top = validation.feature_aucs(hr, wide, names, top=len(names))
    assert list(top) == sorted(top, key=lambda n: -top[n]["auc"])  # most separating first
    for j in (0, 40, 75, 100, 150):
        y = np.r_[np.zeros(len(hr)), np.ones(len(wide))]
        auc = roc_auc_score(y, np.r_[hr[:, j], wide[:, j]])
        assert top[names[j]]["auc"] == pytest.approx(max(auc, 1 - auc), abs=1e-12)
    # wider showers hit more cells and are wider: the transverse features lead, the energy
    # fractions per layer (which a transverse widening keeps) do not
    first = list(top)[:10]
    assert all(n.startswith(("width_", "sparsity_")) for n in first), first
    assert all(top[n]["auc"] > 0.9 for n in first)
    assert max(top[f"width_x_{z}"]["auc"] for z in range(25)) > 0.8
    assert max(top[f"e_layer_{z}"]["auc"] for z in range(25)) < 0.75
    floor = validation.feature_aucs(hr, ref2, names, top=1)
    assert list(floor.values())[0]["auc"] < 0.7
    s = hr[:, names.index("e_total")]
    scaled = hr.copy()
    scaled[:, names.index("e_total")] = 2 * (s - s.mean()) + s.mean()  # twice the spread
    assert validation.feature_aucs(hr, scaled, names, top=len(names))["e_total"]["spread"] == \
        pytest.approx(2.0)


def test_the_separating_table_reads_the_features_and_the_floor():
    result = {"reference": {"inclusive": {"feature_auc": {"e_layer_3": {"auc": 0.61, "spread": 1.0}}}},
              "generators": {"long-1w": {"bins": {"inclusive": {"feature_auc": {
                  "sparsity_12": {"auc": 0.93, "spread": 0.59},
                  "e_layer_6": {"auc": 0.88, "spread": 0.61}}}}}}}
    text = validation.separating_table(result)
    assert "share of cells hit, layer 12 | 0.930" in text and "energy fraction, layer 6" in text
    assert "AUC 0.610" in text and text.index("layer 12") < text.index("layer 6")
