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
    by = {(r["net"], r["layer"]): r for r in p["layers"]}
    peak, bw = roof["peak_gflop_s"] * 1e9, roof["bandwidth_gb_s"] * 1e9  # FLOP/s, bytes/s
    # D conv2 by hand, batch 2: 5^3 x 32 -> 8 channels from the padded 29^3 x 32 input to 25^3.
    # FLOPs: forward 2 x (2 x 4,000 x 125,000 + 125,000 bias adds), each gradient one matmul.
    fwd, grad = 2 * (2 * 4000 * 125_000 + 125_000), 2 * 2 * 4000 * 125_000
    x, y, w = 4 * 2 * 29**3 * 32, 4 * 2 * 25**3 * 8, 4 * (4000 * 8 + 8)  # bytes: in, out, weights
    both = (fwd + 2 * grad, (x + y + w) + y + (x + w) + x + w)  # + dy; dx, w; x again; dw
    inp = (fwd + grad, (x + y + w) + y + (x + w))  # the frozen D's passes: dx only
    conv2 = by[("D", "conv2")]
    assert conv2["passes"] == "2xboth + 2xin"
    assert (conv2["flops"], conv2["bytes"]) == (2 * both[0] + 2 * inp[0], 2 * both[1] + 2 * inp[1])
    assert conv2["limit_s"] == pytest.approx(2 * max(both[0] / peak, both[1] / bw)
                                             + 2 * max(inp[0] / peak, inp[1] / bw))
    # D lrelu2 on 2 x 25^3 x 8 = 250,000 values: 4 input-gradient passes of 1 + 1 FLOP and five
    # 1-MB tensors each (x, y; dy, dx, x again): 0.1 FLOP per byte, memory-bound on any machine.
    lrelu = by[("D", "lrelu2")]
    assert (lrelu["flops"], lrelu["bytes"], lrelu["bound"]) == (4 * 500_000, 4 * 5_000_000, "memory")
    assert lrelu["limit_s"] == pytest.approx(4 * 5e6 / bw)
    assert len(s["step_times_s"]) == 2 and s["measured_s"] > 0
    assert 0 < s["limit_s"] < s["measured_s"]  # a limit the step cannot beat
    for r in p["layers"]:
        assert r["time_s"] > 0
        # the roofline's ridge point: compute-bound when the intensity exceeds peak / bandwidth
        assert r["bound"] == ("compute" if r["flops"] / r["bytes"] >= peak / bw else "memory")
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
    from gan3d.gan.horovod import HorovodStep

    assert roofline.step_precision(gan_step) == "float32"
    mixed = HorovodStep(build_generator(dtype="mixed_bfloat16"),
                    build_discriminator(dtype="mixed_bfloat16"))
    assert mixed.d.compute_dtype == "float32"  # what the profile used to read
    assert roofline.step_precision(mixed) == "bfloat16"


def test_the_reading_counts_the_memory_bound_layers_and_their_time():
    layers = [{"bound": "memory", "time_s": 0.2}, {"bound": "compute", "time_s": 0.6},
              {"bound": "memory", "time_s": 0.2}]
    step = {"of_limit": 0.25, "limit_s": 0.5, "measured_s": 2.0, "layers_s": 1.0,
            "outside_layers_s": 1.0}
    text = roofline.reading({"layers": layers, "step": step})
    assert text.startswith("Reading: the step reaches **25 %** of its limit on this machine "
                           "(0.50 s of 2.00 s). 2 of 3 layers are memory-bound")
    assert "take 40 % of the layers' time; 1.00 s per step lie outside" in text
