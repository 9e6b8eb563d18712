"""Every plot function draws in the house style on a new figure or on the caller's axes."""

from __future__ import annotations

import inspect
import json

import matplotlib
import numpy as np
import pytest

from gan3d import plots
from gan3d.plots import convergence as cplots
from gan3d.plots import data as dplots
from gan3d.plots import interconnect as nplots
from gan3d.plots import scaling as splots
from gan3d.plots import training as tplots
from gan3d.plots import validation as vplots

MODULES = (dplots, tplots, splots, nplots, vplots, cplots)


def _public_plot_functions():
    for module in MODULES:
        for name in module.__all__:
            fn = getattr(module, name)
            if inspect.isfunction(fn) and name != "run_label":
                yield module, name, fn


def test_every_plot_function_takes_ax_and_draws_in_the_house_style():
    found = list(_public_plot_functions())
    assert len(found) >= 20
    for module, name, fn in found:
        assert "ax" in inspect.signature(fn).parameters, f"{module.__name__}.{name}"
        assert hasattr(fn, "__wrapped__"), f"{module.__name__}.{name} is not @styled"


def _rows(n_epochs=3, workers=1):
    return [{"epoch": e, "timed": e > 1, "showers_per_s": 2.0 * workers, "time_train_s": 10.0,
             "time_eval_s": 1.0, "steps": 4, "batch_size": 2, "workers": workers,
             "threads": 2 // workers,
             **{f"{n}_{p}": 1.0 for n in "dg" for p in ("loss", "bce", "aux", "ecal")},
             **{f"test_{n}_{p}": 1.2 for n in "dg" for p in ("loss", "bce", "aux", "ecal")}}
            for e in range(1, n_epochs + 1)]


def test_a_figure_of_the_callers_axes_is_drawn_into():
    fig, axes = plots.new_figure(1, 2, width=6.0)
    out = tplots.epoch_times({"1 worker": _rows(), "2 workers": _rows(workers=2)}, ax=axes)
    assert out is fig and all(a.has_data() for a in axes)
    legend = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert legend == ["1 worker (1 x 2 threads)", "2 workers (2 x 1 thread)"]


def test_a_wrong_number_of_axes_is_refused():
    fig, ax = plots.new_figure()
    with pytest.raises(ValueError, match="2 x 4 panels"):
        tplots.loss_curves({"run": _rows()}, parts=("loss", "bce", "aux", "ecal"), ax=ax)


def test_new_figures_follow_the_style_file_and_leak_nothing():
    before = dict(matplotlib.rcParams)
    fig = dplots.profiles({100.0: np.random.default_rng(0).random((3, 25, 25, 25))})
    assert dict(matplotlib.rcParams) == before  # no pyplot state, no style left behind
    ax = fig.axes[0]
    assert ax.xaxis.label.get_fontsize() == 9.0  # gan3d.mplstyle: axes.labelsize 9
    assert ax.lines[0].get_color().lower() in ("#0072b2", "0072b2")  # the Okabe-Ito cycle's first
    assert plots.colours(9)[8] == plots.colours(1)[0]  # the cycle repeats after eight


def test_show_saves_the_figure_atomically(tmp_path):
    fig, ax = plots.new_figure()
    ax.plot([0, 1], [1, 0])
    assert plots.show(fig, tmp_path / "f.png") is None  # a notebook cell shows no return value
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "f.png"]  # no temporary left
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["f.json"]
    assert json.loads((tmp_path / "data" / "f.json").read_text())["axes"][0]["series"][0]["y"] == [1, 0]
    plots.save_figure(fig, tmp_path / "g.png", data=False)
    assert not (tmp_path / "data" / "g.json").exists()


def _known_figure():
    """Two panels whose every artist is known: what :func:`description.describe` must read."""
    fig, (a0, a1) = plots.new_figure(1, 2, width=8.0)
    a0.plot([1, 2, 3], [0.5, np.nan, 2.0], "-o", color="#0072B2", label="measured here")
    a0.axhline(1.0, color="black", ls="--")
    a0.fill_between([1, 2, 3], [0.2, 1.0, 2.0], [0.25, 1.5, 3.0], color="#999999", label="spread")
    a0.set(title="time against workers", xlabel="workers", ylabel="time (s)", xlim=(0, 4),
           ylim=(0.1, 10), yscale="log")
    a0.legend()
    a1.bar([0, 1], [3.0, 4.0], width=0.5, bottom=[0.0, 1.0], color="#E69F00", label="bars")
    a1.errorbar([0, 1], [2.0, 3.0], yerr=[0.5, 1.0], fmt="s", color="black", label="mean ± sd")
    a1.hist([1.0, 2.0, 2.5, 3.0], bins=[0, 2, 4], histtype="step", color="#009E73", label="h")
    a1.axhspan(0.5, 1.5, color="#cccccc")
    a1.set_xticks([0, 1], ["one", "two"])
    a1.set(xlim=(-1, 2), ylim=(0, 6), ylabel="showers")
    fig.suptitle("known")
    return fig


def test_a_png_is_matplotlibs_pixels_without_an_alpha_channel_it_does_not_need(tmp_path):
    import matplotlib.pyplot as plt
    from PIL import Image

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], label="a line")
    ax.legend()
    plots.save_figure(fig, tmp_path / "ours.png", data=False)
    with plots.style():
        fig.savefig(tmp_path / "theirs.png", dpi=130)
    with Image.open(tmp_path / "ours.png") as ours, Image.open(tmp_path / "theirs.png") as theirs:
        assert ours.mode == "RGB" and theirs.mode == "RGBA"  # opaque: the alpha channel dropped
        assert np.array_equal(np.asarray(ours.convert("RGBA")), np.asarray(theirs))  # pixels
    assert (tmp_path / "ours.png").stat().st_size < (tmp_path / "theirs.png").stat().st_size
    fig.patch.set_alpha(0.0)  # a transparent figure keeps its alpha
    plots.save_figure(fig, tmp_path / "clear.png", data=False)
    with Image.open(tmp_path / "clear.png") as clear:
        assert clear.mode == "RGBA"
    plt.close(fig)


def test_a_figure_is_described_by_what_it_draws(tmp_path):
    from gan3d.plots import description

    plots.save_figure(_known_figure(), tmp_path / "known.png")
    got = json.loads(description.data_path(tmp_path / "known.png").read_text())
    assert description.data_path(tmp_path / "known.png") == tmp_path / "data" / "known.json"
    first = {"title": "time against workers", "xlabel": "workers", "ylabel": "time (s)",
             "xlim": [0, 4], "ylim": [0.1, 10], "xscale": "linear", "yscale": "log",
             "legend": ["measured here", "spread"], "series": [
                 {"kind": "line", "label": "measured here", "x": [1, 2, 3], "y": [0.5, None, 2],
                  "n": 3, "color": "#0072b2", "linestyle": "-", "marker": "o"},
                 {"kind": "hline", "label": None, "y": 1, "color": "#000000", "linestyle": "--"},
                 {"kind": "band", "label": "spread", "x": [1, 2, 3], "low": [0.2, 1, 2],
                  "high": [0.25, 1.5, 3], "n": 3, "regions": 1, "color": "#999999"}],
             "texts": []}
    second = {"title": None, "xlabel": None, "ylabel": "showers", "xlim": [-1, 2], "ylim": [0, 6],
              "xscale": "linear", "yscale": "linear",
              "xticks": {"at": [0, 1], "labels": ["one", "two"]}, "series": [
                  {"kind": "bars", "label": "bars", "orientation": "vertical", "at": [0, 1],
                   "values": [3, 4], "base": [0, 1], "width": [0.5, 0.5], "n": 2,
                   "color": "#e69f00"},
                  {"kind": "errorbar", "label": "mean ± sd", "x": [0, 1], "y": [2, 3], "n": 2,
                   "color": "#000000", "marker": "s", "y_low": [1.5, 2], "y_high": [2.5, 4]},
                  {"kind": "histogram", "label": "h", "edges": [0, 2, 4], "values": [1, 3],
                   "filled": False, "color": "#009e73"},
                  {"kind": "hspan", "label": None, "low": 0.5, "high": 1.5, "color": "#cccccc"}],
              "texts": []}
    assert got == {"format": 1, "figure": "known.png", "suptitle": "known", "texts": [],
                   "axes": [first, second]}


def test_a_description_stays_small_and_leaves_colour_bars_out():
    from gan3d.plots import description

    fig, (a0, a1) = plots.new_figure(1, 2)
    x = np.linspace(0.0, 1.0, 2500)
    a0.plot(x, x**2)
    a0.barh([0.0, 1.0], [3.0, np.nan], height=0.5, left=1.0, color="#CC79A7", label="rates")
    im = a1.imshow(np.arange(12.0).reshape(3, 4))
    fig.colorbar(im, ax=a1, label="energy (GeV)")
    got = description.describe(fig)
    assert len(fig.axes) == 3 and len(got["axes"]) == 2  # the colour bar is the image's
    line = got["axes"][0]["series"][0]
    assert line["n"] == 2500 and line["stride"] == 3 and len(line["x"]) == 834
    assert line["y"][-1] == pytest.approx(x[2499 - 2499 % 3] ** 2, rel=1e-6)
    bars = got["axes"][0]["series"][1]  # horizontal: the values are the bars' lengths
    assert bars == {"kind": "bars", "label": "rates", "orientation": "horizontal", "at": [0, 1],
                    "values": [3, None], "base": [1, 1], "width": [0.5, 0.5], "n": 2,
                    "color": "#cc79a7"}
    image = got["axes"][1]["series"][0]
    assert image["shape"] == [3, 4] and image["values"][2] == [8, 9, 10, 11]
    assert image["colorbar"] == {"label": "energy (GeV)", "limits": [0, 11]}


def test_the_verdict_grid_holds_each_comparison_as_a_line_and_each_quantity_as_a_cell():
    """Cells coloured by verdict (the image's codes), each holding the mean difference and its
    90 % interval in margins; a row of one seed has no interval and no tally; a comparison
    against another reference than 1 worker names it."""
    from gan3d.plots import description

    row = {"candidate": "1w-bf16", "reference": "1w", "monitor": "max_layer", "n": 1,
           "verdict": "too few seeds", "diff": 0.1, "low": None, "high": None, "margin": 0.5,
           "diffs": [0.1]}
    two = {**row, "candidate": "2w-sqrt", "n": 3, "verdict": "equivalent", "low": -0.2,
           "high": 0.3, "diffs": [0.0, 0.1, 0.2]}
    far = {**two, "monitor": "g_loss", "verdict": "different", "diff": 1.0, "low": 0.8,
           "high": 1.2}
    k16 = {**two, "candidate": "2w-linear-k16", "reference": "2w-linear", "verdict": "inconclusive",
           "low": -0.6, "high": 0.8}
    fig = cplots.verdict_grid([row, two, far, k16])
    (ax,) = description.describe(fig)["axes"]
    image = next(s for s in ax["series"] if s["kind"] == "image")
    codes = {v: cplots.GRID_VERDICTS.index(v) for v in cplots.GRID_VERDICTS}
    blank = codes["too few seeds"]
    # the lr rules' lines first, by workers and rule, then the others; each line's tally
    assert image["values"] == [[codes["equivalent"], codes["different"]],
                               [codes["too few seeds"], blank],
                               [codes["inconclusive"], blank]]
    assert ax["texts"] == ["+0.2\n[-0.4, +0.6]", "+2.0\n[+1.6, +2.4]", "+0.2",
                           "+0.2\n[-1.2, +1.6]", "1 equivalent\n1 different",
                           "too few seeds\nfor a verdict", "0 equivalent\n0 different"]
    assert ax["yticks"]["labels"] == [
        "2 workers, lr x sqrt N (3 seeds)", "1 worker, bfloat16 (1 seed)",
        "2 workers, lr x N, local SGD k=16\nvs 2 workers, lr x N (3 seeds)"]
    plain = {**two, "candidate": "2w-none", "verdict": "equivalent"}
    four = {**two, "candidate": "4w-linear", "verdict": "equivalent"}
    wu = {**two, "candidate": "2w-linear-wu1", "verdict": "equivalent"}
    lines = description.describe(cplots.verdict_grid([plain, four, row, two, wu]))["axes"][0]
    assert [t.split(" (")[0] for t in lines["yticks"]["labels"]] == [
        "2 workers, lr x N, warm-up 1", "2 workers, lr x sqrt N", "2 workers, plain lr",
        "4 workers, lr x N", "1 worker, bfloat16"]
    assert ax["xticks"]["labels"][:2] == ["shower\nmaximum", "G loss"]
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_warm_start_curves_tell_every_configuration_apart_past_the_colour_cycle():
    """The committed study holds more configurations than the house cycle has colours: no two of
    its lines may share colour, line style and marker, and the legend names each once."""
    from gan3d.convergence import readings, warmstart
    from gan3d.io import repo_root

    warm = warmstart.load(repo_root() / "studies" / "warm_start.json")
    configs = readings.warm_configs(warm)
    assert len(configs) > len(set(plots.colours(len(configs))))  # the case this guards
    fig = cplots.monitor_bands(warm, configs, ("profile_distance",))
    lines = fig.axes[0].get_lines()
    looks = {(matplotlib.colors.to_hex(ln.get_color()), ln.get_linestyle(), ln.get_marker())
             for ln in lines}
    assert len(lines) == len(configs) == len(looks)
    names = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(names) == len(set(names)) == len(configs)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_the_long_runs_curves_mark_each_change_of_learning_rate():
    """A dotted line per change of lr, on every panel, at the showers seen when the new rate
    began: none for a run at one rate, one for a fork's lr x 2, two once it is lowered too."""
    def history(lrs):
        return [{"epoch": e, "showers_seen": 1600 * e, "lr": lr, "mon_targets_met": 10,
                 **{f"mon_{n}_100": 0.1 for n in ("profile_distance", "sampling_fraction",
                                                  "ecal_sum_spread")}}
                for e, lr in enumerate(lrs, 1)]

    def dotted(fig):
        return [[ln.get_xdata()[0] for ln in a.get_lines() if ln.get_linestyle() == ":"]
                for a in fig.axes]

    steady = tplots.runs_learning_curves({"one rate": history([1e-3] * 6)})
    assert dotted(steady) == [[]] * 4
    pair = tplots.runs_learning_curves({"1 worker": history([1e-3] * 4 + [1e-4] * 2),
                                        "2 workers": history([1e-3] * 2 + [2e-3] * 2 + [2e-4] * 2)})
    assert all(sorted(x) == [3200.0, 6400.0, 6400.0] for x in dotted(pair))
    named = sorted(t.get_text() for t in pair.legends[0].get_texts()
                   if t.get_text().startswith("lr "))
    assert named == ["lr 0.001 -> 0.0001 from 6,400 showers (1 worker)",
                     "lr 0.001 -> 0.002 from 3,200 showers (2 workers)",
                     "lr 0.002 -> 0.0002 from 6,400 showers (2 workers)"]
    assert not any(a.texts for a in pair.axes)  # nothing written over the curves
    import matplotlib.pyplot as plt

    plt.close("all")


def test_the_lessons_readings_are_its_numbers():
    from gan3d.plots import concepts

    assert concepts.broadcast_reading([1.5, 2.5], [1.5, 1.5]) == (
        "Before: 2 different checksums; after the broadcast: all equal to rank 0's (1.5000).")
    sizes = [4096, 262144, 2097152]
    ring, mpi, predicted = [1e-4, 1e-3, 4e-3], [2e-4, 1e-3, 2e-3], [1.5e-4, 1e-3, 4e-3]
    text = concepts.ring_reading(sizes, ring, mpi, {"latency_s": 2e-5, "bandwidth_Bps": 1.5e9},
                                 predicted)
    assert text.startswith("Fitted to the hand-written ring: α = 20 µs per step and BW = 1.50 "
                           "GB/s; the model is at most 50 % off a measurement (at 4 KiB")
    assert "At 2048 KiB MPI's own all-reduce takes 0.50× the ring's time" in text
    assert "(relative difference 3e-07); with each rank's own batch statistics it moves by " \
           "**4.2 %**" in concepts.data_parallel_reading(3e-7, 0.042)
    assert concepts.lr_reading(1.8, 1.1, 2).startswith(
        "After one epoch, 2 workers with the plain rate are at 1.80× the one-worker loss, with "
        "lr × 2 at 1.10×")
    speedups = {"serial evaluation (waits injected)": [1.0, 1.5],
                "distributed evaluation (waits injected)": [1.0, 1.9]}
    assert concepts.amdahl_reading(0.26, 0.25, speedups, 2).startswith(
        "Fitted serial share **26.0 %** against the 25 % injected. With serial evaluation 2 "
        "workers reach 1.50×; evaluating on every worker, 1.90×")
    checks = {"ring_equals_library": {"max_abs_difference": 2e-7},
              "data_parallel": {"rel_inference": 3e-8, "rel_batchnorm": 0.042},
              "amdahl": {"serial_fitted": 0.26}}
    assert concepts.summary_line(checks, 0.25) == (
        "broadcast: all ranks equal after, differ before; ring = library to 2e-07; data parallel "
        "3e-08 (BN fixed) vs 0.042 (per-rank BN); Amdahl fit 26.0 % of 25 %")
