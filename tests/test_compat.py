"""gan3d 0.1's import paths still work in 0.2, with a warning naming the new one."""

from __future__ import annotations

import importlib
import sys

import pytest

import gan3d
from gan3d._compat import MOVED


def _fresh(name: str):
    """Import ``name`` as a first import would (forget an earlier one), expecting the warning."""
    sys.modules.pop(name, None)
    if hasattr(gan3d, name.split(".")[1]) and name in MOVED:
        delattr(gan3d, name.split(".")[1])
    with pytest.warns(FutureWarning, match=f"{name} moved in gan3d 0.2"):
        return importlib.import_module(name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_module_imports_and_names_its_new_home(old):
    module = _fresh(old)
    first = importlib.import_module(MOVED[old][0])
    assert first.__spec__.name == MOVED[old][0]  # the real module keeps its own identity
    public = [n for n in getattr(first, "__all__", []) if not n.startswith("_")]
    assert public and all(getattr(module, n) is getattr(first, n) for n in public)


def test_moved_modules_are_the_same_object_and_split_ones_find_every_name():
    from gan3d.data import calorimeter, files, sample, sharding
    from gan3d.gan import step, training
    from gan3d.scaling import probes
    from gan3d.validation import physics

    assert _fresh("gan3d.step") is step  # one module: monkeypatching one patches both
    old_training = _fresh("gan3d.training")  # split: the step-rate probe moved to scaling
    assert old_training.train is training.train
    assert old_training.measure_step_rate is probes.measure_step_rate
    assert old_training._build_step is training.build_step
    old = _fresh("gan3d.datasets")
    assert old.read_showers is files.read_showers and old.ShardedShowers is sharding.ShardedShowers
    assert old.load_sample is sample.load_sample and old.THRESHOLD_GEV == 1e-6
    showers = _fresh("gan3d.showers")
    assert showers.summary is physics.sample_summary
    assert showers.sampling_fraction_fit is calorimeter.sampling_fraction_fit
    with pytest.raises(AttributeError, match="moved it to"):
        showers.no_such_name  # noqa: B018


def test_old_functions_of_the_modules_that_became_packages():
    import gan3d.scaling
    import gan3d.validation
    from gan3d.scaling import experiments
    from gan3d.validation import speed, study

    assert gan3d.scaling.run is experiments.run
    assert gan3d.scaling.read_history is experiments.timed_epoch_means  # renamed in 0.2
    assert gan3d.validation.validate is study.validate
    assert gan3d.validation.load_checkpoint is study.load_networks  # renamed in 0.2
    assert gan3d.validation.PUBLISHED_SPEED is speed.PUBLISHED_SPEED
    from gan3d.scaling import probes  # a submodule is still found as a submodule

    assert probes.__name__ == "gan3d.scaling.probes"
