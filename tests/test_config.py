"""Configuration: profiles, the one validated override path, round trips."""

from __future__ import annotations

import json

import pytest

from gan3d.config import Config, from_dict, parse_overrides, resolve, to_dict
from gan3d.exceptions import ConfigError


def test_profiles_differ_where_the_paper_says():
    quick, paper = resolve("quick"), resolve("paper")
    assert (paper.train.batch_size, paper.train.epochs) == (512, 40)
    assert (paper.data.n_showers, paper.data.n_files) == (200_000, 80)
    assert paper.data.test_fraction == pytest.approx(0.1)
    assert paper.train.eval_mode == "serial"  # the paper evaluated on one GPU
    assert quick.data.n_showers < paper.data.n_showers and quick.train.batch_size < 512


def test_overrides_are_typed_and_applied():
    cfg = resolve("quick", {"train.epochs": 5, "train.loss_weights": [8, 0.2, 0.1],
                            "scale.workers": [1, 2, 4], "train.learning_rate": 2})
    assert cfg.train.epochs == 5
    assert cfg.train.loss_weights == (8.0, 0.2, 0.1)
    assert cfg.scale.workers == (1, 2, 4)
    assert isinstance(cfg.train.learning_rate, float)


@pytest.mark.parametrize("key,value,words", [
    ("train.epoch", 3, ["train.epoch", "epochs"]),           # typo: lists the real keys
    ("training.epochs", 3, ["training.epochs", "train"]),    # unknown section
    ("train.epochs", "3", ["train.epochs", "int"]),          # wrong type
    ("train.epochs", 2.5, ["train.epochs", "int"]),
    ("train.scale_lr", 1, ["train.scale_lr", "bool"]),
    ("train.eval_mode", "fast", ["train.eval_mode", "'serial'", "'distributed'"]),
    ("train.loss_weights", [1, 2], ["train.loss_weights", "3"]),
    ("train.epochs", 0, ["train.epochs", "at least 1"]),     # impossible value
    ("data.energy_min", 600.0, ["energy_min"]),
])
def test_bad_overrides_name_the_key_and_the_allowed_values(key, value, words):
    with pytest.raises(ConfigError) as err:
        resolve("quick", {key: value})
    for w in words:
        assert w in str(err.value)


def test_unknown_profile():
    with pytest.raises(ConfigError, match="quick, paper"):
        resolve("huge")


def test_a_key_given_twice_is_a_named_error_and_no_profile_has_one():
    from gan3d.config import PROFILES, load_yaml

    with pytest.raises(ConfigError, match=r"'monitor_showers' is given twice \(lines 2 and 3\)"):
        load_yaml("study:\n  monitor_showers: 16\n  monitor_showers: 8\n", "quick.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml("a: [1\n", "x.yaml")
    assert load_yaml("a: {b: 1, c: [1, 2]}\n") == {"a": {"b": 1, "c": [1, 2]}}
    for name in PROFILES:  # every shipped profile parses with the strict loader
        resolve(name)


def test_parse_overrides_reads_yaml_values():
    assert parse_overrides(["train.epochs=3", "scale.workers=[1, 2]", "data.path=/x y"]) == {
        "train.epochs": 3, "scale.workers": [1, 2], "data.path": "/x y"}
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_overrides(["epochs"])


def test_a_float_in_exponent_form_is_a_float():
    """YAML 1.1 reads ``1e-4`` (no dot) as a string: ``--set train.learning_rate=1e-4`` and a
    profile's ``learning_rate: 1e-4`` are numbers all the same; a word stays a word."""
    from gan3d.config import load_yaml

    for raw, want in [("1e-4", 1e-4), ("2E-3", 2e-3), ("5.e-1", 0.5), (".5e+1", 5.0),
                      ("+1.5e2", 150.0), ("1.0e-4", 1e-4), ("0.5", 0.5)]:
        value = parse_overrides([f"train.learning_rate={raw}"])["train.learning_rate"]
        assert resolve("quick", {"train.learning_rate": value}).train.learning_rate == want
    assert parse_overrides(["data.energy_min=-1.5e2"]) == {"data.energy_min": -150.0}
    assert load_yaml("train:\n  learning_rate: 1e-4\n") == {"train": {"learning_rate": 1e-4}}
    for word in ["1e", "e-4", "one", "1e-4x", "1_e4"]:
        assert parse_overrides([f"data.path={word}"]) == {"data.path": word}
    assert parse_overrides(["train.epochs=3"]) == {"train.epochs": 3}  # ints stay ints
    with pytest.raises(ConfigError, match="train.epochs.*int"):  # 1e3 is a float, not an int
        resolve("quick", parse_overrides(["train.epochs=1e3"]))
    with pytest.raises(ConfigError, match=r"override 'scale.workers=\[1': its value is not valid YAML"):
        parse_overrides(["scale.workers=[1"])


def test_config_is_frozen_and_round_trips_through_json():
    cfg = resolve("paper", {"train.epochs": 7})
    with pytest.raises(AttributeError):
        cfg.train.epochs = 1  # type: ignore[misc]
    again = from_dict(json.loads(json.dumps(to_dict(cfg))))
    assert again == cfg and isinstance(again, Config)


def test_replace_goes_through_validation():
    cfg = resolve("quick")
    assert cfg.replace(**{"train.workers": 3}).train.workers == 3
    with pytest.raises(ConfigError):
        cfg.replace(**{"train.workers": 0})


@pytest.mark.parametrize("override, key", [
    ("train.loss_weights=[.nan,0.1,0.1]", "train.loss_weights"),
    ("train.learning_rate=.inf", "train.learning_rate"),
    ("data.energy_max=.nan", "data.energy_max"),
    ("train.loss_weights=[0,0,0]", "train.loss_weights"),
    ("train.loss_weights=[-1,0.1,0.1]", "train.loss_weights"),
    ("validation.energy_bins=[-50]", "validation.energy_bins"),
    ("warm.learning_rate=0", "warm.learning_rate"),
    ("study.monitor_showers=1", "study.monitor_showers"),
])
def test_a_value_the_code_cannot_use_is_named_before_any_work(override, key):
    """A NaN passes every comparison, so it is refused by name, as are values out of range -
    from the command line's YAML as from a profile."""
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        resolve("quick", parse_overrides([override]))
