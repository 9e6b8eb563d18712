"""The roofline profile of the 3DGAN step: which passes run, what they cost, what a profile holds."""

from __future__ import annotations

import math

import pytest

from gan3d.gan.model import forward_flops, step_flops
from gan3d.scaling import roofline


def _total_cost(step, batch):
    layers = {(net, layer.name): layer for net, model in (("D", step.d), ("G", step.g))
              for layer in roofline._layers(model)}
    flops = nbytes = 0
    for row in roofline.step_passes(step.g, step.d):
        for count, name, _ in row["passes"]:
            f, b = roofline.pass_cost(layers[(row["net"], row["layer"])], name, batch)
            flops, nbytes = flops + count * f, nbytes + count * b
    return flops, nbytes


def test_every_layer_runs_the_passes_of_the_step(gan_step):
    rows = roofline.step_passes(gan_step.g, gan_step.d)
    d = [r for r in rows if r["net"] == "D"]
    g = [r for r in rows if r["net"] == "G"]
    assert len(d) == len(roofline._layers(gan_step.d)) and len(g) == len(roofline._layers(gan_step.g))
    for r in d:  # two D updates (trained) and two G updates through the frozen D (input gradients)
        assert sum(c for c, _, _ in r["passes"]) == 4
        assert (2, "in", True) in r["passes"] or r["passes"] == [(4, "in", True)]
    for r in g:  # the fakes of the second D update, then the two G updates
        assert r["passes"][0] == (1, "fwd", False) and r["passes"][1][0] == 2
    # the first D layer reads the shower itself: its update needs no input gradient
    assert d[0]["passes"][0][1] == "w" and d[0]["kind"] == "Conv3D"
    # a layer without weights, inside a network, passes gradients on and computes none of its own
    assert any(r["kind"] == "LeakyReLU" and r["passes"] == [(4, "in", True)] for r in d)


def test_a_convolutions_passes_cost_one_matmul_each(gan_step):
    conv = next(layer for layer in roofline._layers(gan_step.d)
                if type(layer).__name__ == "Conv3D" and layer is not roofline._layers(gan_step.d)[0])
    fwd, fwd_bytes = roofline.pass_cost(conv, "fwd", 4)
    both, both_bytes = roofline.pass_cost(conv, "both", 4)
    w, _ = roofline.pass_cost(conv, "w", 4)
    assert fwd == forward_flops(gan_step.d, by_layer=True)[conv.name] * 4
    assert both == pytest.approx(3 * fwd, rel=0.02) and w == pytest.approx(2 * fwd, rel=0.02)
    assert both_bytes > 2 * fwd_bytes
    assert roofline.pass_cost(conv, "fwd", 8)[0] == 2 * fwd  # linear in the batch


def test_the_passes_add_up_to_the_steps_flop_count(gan_step):
    """An independent count: ``step_flops`` = 10 D + 7 G per shower, less the input gradients of
    the two networks' first layers, which the step never computes."""
    flops, nbytes = _total_cost(gan_step, 16)
    expected = step_flops(gan_step.g, gan_step.d) * 16
    assert 0.80 * expected < flops <= expected
    assert nbytes > 0 and 1 < flops / nbytes < 1000  # FLOP per byte of a conv net's step


@pytest.mark.slow
def test_profile_of_a_real_step_is_consistent(gan_step):
    p = roofline.profile_step(gan_step, 2, repeats=1, step_repeats=2, progress=False)
    roof, s = p["ceilings"], p["step"]
    assert p["precision"] == "float32" and roof["peak_gflop_s"] > 1 and roof["bandwidth_gb_s"] > 0.5
    assert s["flops"] == pytest.approx(_total_cost(gan_step, 2)[0])
    assert s["layers_s"] == pytest.approx(sum(r["time_s"] for r in p["layers"]))
    assert s["limit_s"] == pytest.approx(sum(r["limit_s"] for r in p["layers"]))
    assert len(s["step_times_s"]) == 2 and s["measured_s"] > 0
    assert 0 < s["limit_s"] < s["measured_s"]  # a limit the step cannot beat
    for r in p["layers"]:
        assert r["time_s"] > 0 and r["bound"] in ("compute", "memory")
        compute = r["flops"] / roof["peak_gflop_s"] / 1e9
        memory = r["bytes"] / roof["bandwidth_gb_s"] / 1e9
        assert max(compute, memory) * 0.999 <= r["limit_s"] <= (compute + memory) * 1.001
    convs = [r for r in p["layers"] if r["kind"] == "Conv3D"]
    assert convs and all(r["flops"] > 0 and not math.isnan(r["intensity"]) for r in convs)
    table = roofline.profile_table(p, top=5)
    assert table.count("\n| ") == 6 and "limit" in table

    from gan3d.plots import scaling as plots

    fig = plots.roofline(p)
    assert len(fig.axes) == 2


def test_a_bfloat16_step_is_profiled_against_the_bfloat16_ceiling(gan_step):
    """The models keep the global float32 policy while their layers compute in bfloat16: the
    profile must ask the layers (it once took a bfloat16 step for float32, and its matmul
    ceiling, 4x lower than bfloat16's on AMX, put layers at 315 % of their limit)."""
    from gan3d.gan.model import build_discriminator, build_generator
    from gan3d.gan.step import GanStep

    assert roofline.step_precision(gan_step) == "float32"
    mixed = GanStep(build_generator(dtype="mixed_bfloat16"),
                    build_discriminator(dtype="mixed_bfloat16"))
    assert mixed.d.compute_dtype == "float32"  # what the profile used to read
    assert roofline.step_precision(mixed) == "bfloat16"
