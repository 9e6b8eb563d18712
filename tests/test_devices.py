"""One rank per GPU and the precision each GPU computes fast, checked against a faked device
list (the machines of the test suite have no GPU; TensorFlow's tf.config is replaced by a stand-in
that records what gan3d asks of it)."""

from __future__ import annotations

import types

import pytest

from gan3d import config
from gan3d.parallel import runtime
from gan3d.exceptions import ConfigError
from gan3d.parallel import devices


class FakeConfig:
    """tf.config with ``gpus`` (name, compute capability) and a record of the calls."""

    def __init__(self, gpus, started=False):
        self.gpus = [types.SimpleNamespace(name=f"/physical_device:GPU:{i}", device_type="GPU")
                     for i in range(len(gpus))]
        self.specs = dict(zip((g.name for g in self.gpus), gpus))
        self.visible, self.growth, self.started = None, [], started
        self.experimental = types.SimpleNamespace(get_device_details=self._details,
                                                  set_memory_growth=self._growth)

    def list_physical_devices(self, kind):
        return list(self.gpus) if kind == "GPU" else []

    def set_visible_devices(self, devs, kind):
        if self.started:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self.visible = (list(devs), kind)

    def _growth(self, dev, on):
        self.growth.append((dev.name, on))

    def _details(self, dev):
        name, cc = self.specs[dev.name]
        return {"device_name": name, "compute_capability": cc}


P100, A100 = ("Tesla P100-SXM2-16GB", (6, 0)), ("NVIDIA A100-SXM4-40GB", (8, 0))


def test_each_rank_sees_only_the_gpu_of_its_local_rank_with_memory_growth():
    fake = FakeConfig([P100] * 4)
    got = devices.pin(2, 4, fake)
    assert fake.visible == ([fake.gpus[2]], "GPU")
    assert fake.growth == [("/physical_device:GPU:2", True)]
    assert got == {"index": 2, "device": "/physical_device:GPU:2", "name": P100[0],
                   "compute_capability": (6, 0)}
    assert devices.pinned() == got


def test_a_node_without_gpus_computes_on_its_cpus():
    fake = FakeConfig([])
    assert devices.pin(0, 2, fake) is None and fake.visible is None and devices.pinned() is None


def test_more_ranks_than_gpus_on_a_node_is_refused_with_the_launch_that_fixes_it():
    with pytest.raises(ConfigError, match=r"8 ranks on this node but 4 GPU\(s\).*ppr:4:node"):
        devices.pin(5, 8, FakeConfig([A100] * 4))


def test_pinning_after_tensorflow_started_says_what_to_do():
    with pytest.raises(ConfigError, match="before any TensorFlow op"):
        devices.pin(0, 1, FakeConfig([A100], started=True))


def test_auto_precision_follows_the_device():
    assert runtime.gpu_precision((8, 0)) == "bfloat16"  # A100: bfloat16 tensor cores
    assert runtime.gpu_precision((9, 0)) == "bfloat16"  # H100
    assert runtime.gpu_precision((7, 0)) == "float16"  # V100: float16 tensor cores
    assert runtime.gpu_precision((6, 0)) == "float16"  # P100 (the paper): float16 at 2x float32
    assert runtime.gpu_precision((3, 7)) == "float32"  # K80
    # training's auto is float32 on every GPU (not measured there: runtime.training_auto); the
    # tensor cores' precision is one setting away and kept when asked for
    cfg = config.resolve("quick", {"train.precision": "auto"})
    for gpu in ((6, 0), (8, 0), (9, 0)):
        assert config.resolved_precision(cfg, gpu).train.precision == "float32"
    fixed = config.resolve("quick", {"train.precision": "bfloat16"})
    assert config.resolved_precision(fixed, (8, 0)).train.precision == "bfloat16"  # asked for


def test_float16_without_a_gpu_is_refused_before_training():
    cfg = config.resolve("quick", {"train.precision": "float16"})
    with pytest.raises(ConfigError, match="float16 needs a GPU"):
        config.resolved_precision(cfg)
    assert config.resolved_precision(cfg, (7, 0)).train.precision == "float16"
    with pytest.raises(ConfigError, match="choose auto, float32, bfloat16 or float16"):
        runtime.resolve_precision("int8")
