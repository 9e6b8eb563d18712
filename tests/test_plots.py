"""Every plot function draws in the house style on a new figure or on the caller's axes."""

from __future__ import annotations

import inspect

import matplotlib
import numpy as np
import pytest

from gan3d import plots
from gan3d.plots import convergence as cplots
from gan3d.plots import data as dplots
from gan3d.plots import network as nplots
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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]
