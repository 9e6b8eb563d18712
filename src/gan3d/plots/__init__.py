"""Figures: one look for all of them, no pyplot global state, atomic saves.

Plot functions live in submodules by topic (``plots.data``, ``plots.training``, ``plots.scaling``,
``plots.validation``). Each takes data (and optionally an ``ax``) and returns the Figure. Use
:func:`new_figure` to get a Figure in the house style and :func:`save_figure` to write it.
"""

from __future__ import annotations

import contextlib
import functools
from importlib import resources
from pathlib import Path
from typing import Iterator

import matplotlib
import matplotlib.style

matplotlib.use("Agg", force=False)  # headless by default; notebooks may still show inline
from matplotlib.figure import Figure  # noqa: E402

from ..io import atomic_path  # noqa: E402

__all__ = ["style", "styled", "new_figure", "save_figure", "Figure", "LABELS"]

# How each source is told apart on every figure.
LABELS = {
    "measured": "measured here",
    "paper": "paper (Hesam et al. 2019)",
    "model": "performance model",
    "reference": "reference showers",
    "gan": "GAN",
}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """The house style (gan3d.mplstyle) for figures made inside the block."""
    path = resources.files("gan3d").joinpath("gan3d.mplstyle")
    with matplotlib.style.context(str(path)):
        yield


def styled(fn):
    """Decorator: create every artist of a plot function inside the house style."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with style():
            return fn(*args, **kwargs)
    return wrapper


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float | None = None,
               height: float | None = None, **kwargs):
    """A Figure and its axes in the house style, without pyplot (so nothing leaks between plots)."""
    with style():
        w = width or 4.2 * ncols
        h = height or 3.3 * nrows
        fig = Figure(figsize=(w, h), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=True, **kwargs)
    return fig, axes


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 130) -> Path:
    """Write ``fig`` atomically (PNG, PDF or SVG by suffix); returns the path."""
    path = Path(path)
    with style(), atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi)
    return path
