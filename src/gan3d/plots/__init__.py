"""Figures: one look for all of them (``gan3d.mplstyle``), no pyplot global state, atomic saves.

Plot functions live in submodules by topic (``plots.data``, ``plots.training``, ``plots.scaling``,
``plots.validation``). Every one of them

* takes data and an optional ``ax``: ``None`` makes a new Figure in the house style; otherwise the
  Axes to draw on (an array of them, of the shape the function's docstring names, for figures of
  several panels), whose Figure is then used;
* draws inside the house style (:func:`styled`) and returns the Figure.

Notebooks save and display a figure with :func:`show`; scripts save with :func:`save_figure`.
Both write, beside the figure, what it draws as JSON (``data/<name>.json``,
:mod:`gan3d.plots.description`).
"""

from __future__ import annotations

import contextlib
import functools
from importlib import resources
from pathlib import Path
from typing import Iterator

import matplotlib
import matplotlib.style
import numpy as np

matplotlib.use("Agg", force=False)  # headless by default; notebooks may still show inline
from matplotlib.figure import Figure  # noqa: E402

from ..io import atomic_path  # noqa: E402
from . import description  # noqa: E402

__all__ = ["style", "styled", "new_figure", "panels", "colours", "save_figure", "show", "Figure",
           "LABELS"]

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


def colours(n: int) -> list[str]:
    """The first ``n`` colours of the house cycle (repeating), resolved now: a "C0" given to an
    Axes made outside the style would take another cycle's colour."""
    with style():
        cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float | None = None,
               height: float | None = None, **kwargs):
    """A Figure and its axes in the house style, without pyplot (so nothing leaks between plots).

    Axes come squeezed as from ``Figure.subplots``: one Axes, a 1-D array for one row or
    column, else 2-D.
    """
    with style():
        w = width or 4.2 * ncols
        h = height or 3.3 * nrows
        fig = Figure(figsize=(w, h), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=True, **kwargs)
    return fig, axes


def panels(ax, nrows: int = 1, ncols: int = 1, **kwargs):
    """(Figure, axes) for a plot function: a new figure (:func:`new_figure` with ``kwargs``) when
    ``ax`` is None, else the caller's ``ax`` - ``nrows x ncols`` Axes, squeezed the same way - and
    its Figure. Raises ValueError when the caller passes the wrong number of Axes."""
    if ax is None:
        return new_figure(nrows, ncols, **kwargs)
    given = np.asarray(ax, dtype=object)
    if given.size != nrows * ncols:
        raise ValueError(f"this figure draws {nrows} x {ncols} panels; pass that many Axes "
                         f"(got {given.size}) or ax=None")
    axes = given.reshape(nrows, ncols)
    squeezed = axes[0, 0] if axes.size == 1 else np.squeeze(axes, axis=tuple(
        i for i, n in enumerate(axes.shape) if n == 1))
    return axes[0, 0].get_figure(root=True), squeezed


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 130, data: bool = True) -> Path:
    """Write ``fig`` atomically (PNG, PDF or SVG by suffix); returns the path.

    With ``data`` (the default) also what it draws, as JSON in ``data/<name>.json`` beside it
    (:mod:`gan3d.plots.description`): the values each figure plots, for tests and diffs.
    """
    path = Path(path)
    with style(), atomic_path(path) as tmp:
        if path.suffix.lower() == ".png":
            _save_png(fig, tmp, dpi)
        else:
            fig.savefig(tmp, dpi=dpi)
    if data:
        description.write(fig, path)
    return path


def _save_png(fig: Figure, path: Path, dpi: int) -> None:
    """A PNG as small as it goes without changing a pixel (the committed figures have a size
    budget): RGB where the figure is opaque everywhere (an alpha channel of 255s costs ~10 %),
    compressed as far as zlib goes."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    image = Image.open(buf)
    if image.mode == "RGBA" and image.getchannel("A").getextrema() == (255, 255):
        image = image.convert("RGB")
    image.save(path, format="PNG", optimize=True)


def show(fig: Figure, path: str | Path, *, dpi: int = 130) -> None:
    """Save ``fig`` to ``path`` (:func:`save_figure`) and, inside a notebook, display the saved
    image: what the reader sees is exactly the file the figure pipeline collects."""
    saved = save_figure(fig, path, dpi=dpi)
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:  # pragma: no cover - IPython comes with Jupyter, always installed here
        return
    if get_ipython() is not None:
        display(Image(filename=str(saved)))
