"""What a figure draws, as data: a small JSON file beside every figure the package saves.

A PNG can only be looked at; its description can be tested and diffed. :func:`describe` reads a
drawn Figure back - per Axes its title, labels, limits, scales, tick labels and legend, and per
series (lines, scatters, error bars, bars, histograms, bands, spans, images) its label and the
values it plots - and :func:`write` stores that as ``data/<figure name>.json`` next to the
figure (:func:`data_path`). :func:`gan3d.plots.save_figure` writes both.

The format (``"format": 1``)::

    {"format": 1, "figure": "name.png", "suptitle": str | null, "texts": [str],
     "axes": [{"title", "xlabel", "ylabel", "xlim": [lo, hi], "ylim", "xscale", "yscale",
               ("zlabel", "zlim", "zscale" in 3-D), ("xticks"/"yticks": {"at", "labels"} where
               labels were set by hand), ("legend": [str], "legend_title"), ("axis": "off"),
               "series": [{"kind", "label", ...}], "texts": [str], "patches": {type: count}}]}

Series kinds and their values (data coordinates; integers exact, other numbers to 7
significant digits, null for NaN or infinite):

* ``line``: ``x``, ``y`` (``z`` in 3-D), ``n`` points, ``color``, ``linestyle``, ``marker``
  (``drawstyle`` for steps); ``hline``/``vline``: ``y``/``x``, a line across the panel;
* ``scatter``: ``x``, ``y`` (``z``), ``n``, ``c`` (the colour values, when mapped);
* ``errorbar``: ``x``, ``y``, ``n``, and the bars' ends ``y_low``, ``y_high`` (``x_low``,
  ``x_high``) where it has them;
* ``bars``: ``orientation``, ``at`` (bar centres), ``values`` (heights, or widths when
  horizontal), ``base`` (bottom or left), ``width`` (thickness);
* ``histogram``: ``edges`` (n + 1), ``values`` (n), ``filled`` (from ``hist`` and ``stairs``);
* ``band``: ``x``, ``low``, ``high`` (``fill_between``; ``regions`` pieces, ``step`` if stepped);
* ``hspan``/``vspan``: ``low``, ``high`` (``axhspan``/``axvspan``);
* ``image``/``mesh``: ``shape``, ``clim``, ``norm``, ``values`` (rows, when at most
  :data:`MAX_VALUES`), ``extent`` (images), ``colorbar`` ({``label``, ``limits``}) if it has one.

A series of more than :data:`MAX_POINTS` points keeps every ``stride``-th one (``n`` stays the
full count), so that a description stays small (tens of kB) next to its figure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.cbook import flatten
from matplotlib.collections import LineCollection, PathCollection, PolyCollection, QuadMesh
from matplotlib.colors import LogNorm, to_hex
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Polygon, Rectangle, StepPatch
from matplotlib.path import Path as MplPath
from matplotlib.spines import Spine
from matplotlib.ticker import FixedLocator

from ..io import atomic_path

__all__ = ["FORMAT", "MAX_POINTS", "MAX_VALUES", "describe", "data_path", "write"]

FORMAT = 1
MAX_POINTS = 1000   # points kept per series (every stride-th beyond)
MAX_VALUES = 4096   # values of an image or mesh kept (none beyond: shape and limits only)


def data_path(figure: str | Path) -> Path:
    """Where the description of the figure saved at ``figure`` goes: ``data/<stem>.json``
    beside it (a folder of its own, so a figure collection never takes it for a figure)."""
    figure = Path(figure)
    return figure.parent / "data" / f"{figure.stem}.json"


def write(fig: Figure, figure: str | Path) -> Path:
    """Write :func:`describe` of ``fig`` (already drawn, e.g. saved) atomically to
    :func:`data_path` of ``figure``; returns that path."""
    path = data_path(figure)
    text = _dumps({"format": FORMAT, "figure": Path(figure).name, **describe(fig)})
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    return path


def _dumps(obj, depth: int = 0) -> str:
    """JSON with one key per line and each list of numbers or strings on one line: small, and a
    change of a figure's data shows as a change of the lines of that series."""
    pad = " " * (depth + 1)
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {_dumps(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        return "[\n" + ",\n".join(pad + _dumps(v, depth + 1) for v in obj) + "\n" + " " * depth + "]"
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def describe(fig: Figure) -> dict[str, Any]:
    """The figure's panels and what each draws (the module docstring gives the format).

    Limits are read as they are now: describe a figure after it was drawn (saved), when its
    autoscaling and layout are final. Colour bars are not panels: they are described with the
    image, mesh or scatter they belong to.
    """
    bars = _colorbar_axes(fig)
    titles = {id(getattr(fig, f"_sup{k}", None)) for k in ("title", "xlabel", "ylabel")}
    return {"suptitle": fig.get_suptitle() or None,
            "texts": [t.get_text() for t in fig.texts if t.get_text() and id(t) not in titles],
            "axes": [_axes(ax) for ax in fig.axes if id(ax) not in bars]}


# ---------------------------------------------------------------------------------------------
# Numbers


def _num(v) -> float | int | None:
    """A JSON number: an integer as it is (message sizes, counts), any other to 7 significant
    digits (float32's precision); None for NaN, infinities and masked values."""
    if v is None or v is np.ma.masked or not math.isfinite(v := float(v)):
        return None
    out = v if v.is_integer() else float(f"{v:.7g}")
    return int(out) if out.is_integer() and abs(out) < 2**53 else out


def _nums(values, stride: int = 1) -> list:
    a = np.ma.filled(np.ma.asarray(values, dtype=float).ravel(), np.nan)
    return [_num(v) for v in a[::stride]]


def _stride(n: int) -> int:
    return max(1, math.ceil(n / MAX_POINTS))


def _label(artist) -> str | None:
    text = artist.get_label()
    return None if not text or text.startswith("_") else str(text)


def _colour(c) -> str | None:
    try:
        return to_hex(c, keep_alpha=False)
    except (ValueError, TypeError):
        return None


def _points(**columns) -> dict[str, Any]:
    """Columns of one series (equal lengths), thinned to MAX_POINTS, with their count."""
    n = len(next(iter(columns.values()))) if columns else 0
    k = _stride(n)
    out: dict[str, Any] = {name: _nums(v, k) for name, v in columns.items()}
    out["n"] = n
    if k > 1:
        out["stride"] = k
    return out


# ---------------------------------------------------------------------------------------------
# Axes


def _colorbar_axes(fig: Figure) -> set[int]:
    found = set()
    for ax in fig.axes:
        for m in (*ax.images, *ax.collections):
            cb = getattr(m, "colorbar", None)
            if cb is not None:
                found.add(id(cb.ax))
    return found


def _ticks(axis) -> dict | None:
    """Tick positions and their labels where the ticks were set by hand (categories, names)."""
    if not isinstance(axis.get_major_locator(), FixedLocator):
        return None
    at = axis.get_majorticklocs()
    return {"at": _nums(at), "labels": [str(s) for s in axis.get_major_formatter().format_ticks(at)]}


def _axes(ax) -> dict[str, Any]:
    title = ax.get_title() or " ".join(t for t in (ax.get_title("left"), ax.get_title("right")) if t)
    out: dict[str, Any] = {"title": title or None, "xlabel": ax.get_xlabel() or None,
                           "ylabel": ax.get_ylabel() or None,
                           "xlim": _nums(ax.get_xlim()), "ylim": _nums(ax.get_ylim()),
                           "xscale": ax.get_xscale(), "yscale": ax.get_yscale()}
    three_d = hasattr(ax, "get_zlim")
    if three_d:
        out.update(zlabel=ax.get_zlabel() or None, zlim=_nums(ax.get_zlim()),
                   zscale=ax.get_zscale())
    for name, axis in (("xticks", ax.xaxis), ("yticks", ax.yaxis)):
        ticks = _ticks(axis)
        if ticks:
            out[name] = ticks
    legend = ax.get_legend()
    if legend is not None:
        out["legend"] = [t.get_text() for t in legend.get_texts()]
        if legend.get_title().get_text():
            out["legend_title"] = legend.get_title().get_text()
    if not ax.axison:
        out["axis"] = "off"
    series, patches = _series(ax)
    out["series"] = series
    out["texts"] = [t.get_text() for t in ax.texts if t.get_text()]
    if patches:
        out["patches"] = patches
    return out


def _series(ax) -> tuple[list[dict], dict[str, int]]:
    """Each data artist of ``ax`` in drawing order; artists of one container (error bars, bars)
    as one series; other patches counted by type."""
    owner = {id(a): c for c in ax.containers for a in flatten(c) if a is not None}
    done: set[int] = set()
    series: list[dict] = []
    patches: dict[str, int] = {}
    for artist in ax.get_children():
        if artist is ax.patch:
            continue
        c = owner.get(id(artist))
        if c is not None:
            if id(c) not in done:
                done.add(id(c))
                series.append(_container(c))
            continue
        item = _artist(ax, artist)
        if item is not None:
            series.append(item)
        elif isinstance(artist, Patch) and not isinstance(artist, Spine):
            name = type(artist).__name__
            patches[name] = patches.get(name, 0) + 1
    return series, patches


def _artist(ax, a) -> dict | None:
    if isinstance(a, Line2D):
        return _line(ax, a)
    if isinstance(a, QuadMesh):
        return _mapped(a, "mesh")
    if isinstance(a, AxesImage):
        return _mapped(a, "image")
    if isinstance(a, PathCollection):
        return _scatter(a)
    if isinstance(a, PolyCollection) and not isinstance(a, LineCollection):
        return _band(a)
    if isinstance(a, LineCollection):
        return {"kind": "segments", "label": _label(a), "n": len(a.get_segments())}
    if isinstance(a, StepPatch):
        d = a.get_data()
        return {"kind": "histogram", "label": _label(a), "edges": _nums(d.edges),
                "values": _nums(d.values), "filled": bool(a.get_fill())}
    if isinstance(a, Rectangle):
        return _span(ax, a)
    if isinstance(a, Polygon):
        return _hist_polygon(a)
    return None


def _style(line: Line2D) -> dict:
    """A line's colour, and its line style, marker and draw style where it has them."""
    style = {"color": _colour(line.get_color()), "linestyle": line.get_linestyle(),
             "marker": str(line.get_marker()), "drawstyle": line.get_drawstyle()}
    return {k: v for k, v in style.items()
            if v not in ("None", "none", "", " ") and (k != "drawstyle" or v != "default")}


def _line(ax, line: Line2D) -> dict:
    style, base = _style(line), {"label": _label(line)}
    transform = line.get_transform()
    if transform is ax.get_yaxis_transform():  # axhline: x in axes fractions
        return {"kind": "hline", **base, "y": _num(line.get_ydata()[0]), **style}
    if transform is ax.get_xaxis_transform():  # axvline
        return {"kind": "vline", **base, "x": _num(line.get_xdata()[0]), **style}
    if hasattr(line, "get_data_3d"):
        x, y, z = line.get_data_3d()
        return {"kind": "line", **base, **_points(x=x, y=y, z=z), **style}
    return {"kind": "line", **base, **_points(x=line.get_xdata(), y=line.get_ydata()), **style}


def _scatter(c: PathCollection) -> dict:
    offsets3d = getattr(c, "_offsets3d", None)
    if offsets3d is not None:
        cols = dict(zip("xyz", offsets3d))
    else:
        xy = np.ma.asarray(c.get_offsets())
        cols = {"x": xy[:, 0], "y": xy[:, 1]} if xy.size else {"x": [], "y": []}
    if c.get_array() is not None and len(c.get_array()) == len(cols["x"]):
        cols["c"] = c.get_array()
    out = {"kind": "scatter", "label": _label(c), **_points(**cols)}
    faces = c.get_facecolors()
    if len(faces) == 1 and c.get_array() is None:
        out["color"] = _colour(faces[0])
    out.update(_colorbar(c))
    return out


def _mapped(m, kind: str) -> dict:
    values = np.ma.asarray(m.get_array())
    out: dict[str, Any] = {"kind": kind, "label": _label(m), "shape": list(values.shape),
                           "clim": _nums(m.get_clim()),
                           "norm": "log" if isinstance(m.norm, LogNorm) else "linear"}
    if kind == "image":
        out["extent"] = _nums(m.get_extent())
    if values.size <= MAX_VALUES:
        out["values"] = [_nums(row) for row in values.reshape(values.shape[0], -1)]
    out.update(_colorbar(m))
    return out


def _colorbar(m) -> dict:
    cb = getattr(m, "colorbar", None)
    if cb is None:
        return {}
    long_axis = cb.ax.yaxis if cb.orientation == "vertical" else cb.ax.xaxis
    return {"colorbar": {"label": long_axis.get_label_text() or None,
                         "limits": _nums((cb.vmin, cb.vmax))}}


def _band(c: PolyCollection) -> dict:
    """fill_between: each closed path is start (x0, y2_0), the N points (x, y1), end (xN, y2_N),
    the N points (x, y2) backwards (and a closing vertex)."""
    xs, lo, hi = [], [], []
    paths = c.get_paths()
    for p in paths:
        v = p.vertices
        if p.codes is not None and p.codes[-1] == MplPath.CLOSEPOLY:
            v = v[:-1]
        n = (len(v) - 2) // 2
        if n < 1:
            continue
        x, y1, y2 = v[1:n + 1, 0], v[1:n + 1, 1], v[n + 2:2 * n + 2, 1][::-1]
        xs.append(x)
        lo.append(np.minimum(y1, y2))
        hi.append(np.maximum(y1, y2))
    cat = (lambda parts: np.concatenate(parts) if parts else np.array([]))
    out = {"kind": "band", "label": _label(c), **_points(x=cat(xs), low=cat(lo), high=cat(hi)),
           "regions": len(xs)}
    faces = c.get_facecolors()
    if len(faces):
        out["color"] = _colour(faces[0])
    step = getattr(c, "_step", None)
    if step:
        out["step"] = step
    return out


def _span(ax, r: Rectangle) -> dict | None:
    """axhspan / axvspan (a rectangle spanning the panel); other rectangles are patches."""
    transform = r.get_data_transform()
    x0, y0, w, h = r.get_x(), r.get_y(), r.get_width(), r.get_height()
    if transform is ax.get_yaxis_transform():
        return {"kind": "hspan", "label": _label(r), "low": _num(min(y0, y0 + h)),
                "high": _num(max(y0, y0 + h)), "color": _colour(r.get_facecolor())}
    if transform is ax.get_xaxis_transform():
        return {"kind": "vspan", "label": _label(r), "low": _num(min(x0, x0 + w)),
                "high": _num(max(x0, x0 + w)), "color": _colour(r.get_facecolor())}
    return None


def _hist_polygon(p: Polygon) -> dict | None:
    """``hist(histtype="step" | "stepfilled")``: the outline (e0, b), (e0, m0), (e1, m0), (e1, m1),
    ..., (en, m_n-1), (en, b), 2n + 2 vertices (stepfilled: and 2n - 1 back along the base)."""
    v = p.get_xy()
    n = (len(v) - 2) // 2 if len(v) % 2 == 0 else (len(v) - 1) // 4
    if n < 1 or 2 * n + 2 > len(v):
        return None
    head = v[:2 * n + 2]
    x, y = head[:, 0], head[:, 1]
    if not (np.array_equal(x[0::2], x[1::2]) and np.array_equal(y[1:-1:2], y[2:-1:2])
            and y[0] == y[-1]):
        return None
    return {"kind": "histogram", "label": _label(p), "edges": _nums(x[0::2]),
            "values": _nums(y[1:-1:2]), "filled": bool(p.get_fill()),
            "color": _colour(p.get_edgecolor() if not p.get_fill() else p.get_facecolor())}


def _container(c) -> dict:
    if isinstance(c, BarContainer):
        return _bars(c)
    if isinstance(c, ErrorbarContainer):
        return _errorbar(c)
    return {"kind": type(c).__name__, "label": _label(c)}


def _bars(c: BarContainer) -> dict:
    horizontal = getattr(c, "orientation", None) == "horizontal"
    box = np.array([[r.get_x(), r.get_y(), r.get_width(), r.get_height()] for r in c.patches],
                   float).reshape(-1, 4)
    x, y, w, h = (box[:, [1, 0, 3, 2]] if horizontal else box).T  # position, base, thickness, value
    values = h
    if getattr(c, "datavalues", None) is not None and len(c.datavalues) == len(box):
        values = c.datavalues  # as given: a NaN stays NaN
    out = {"kind": "bars", "label": _label(c),
           "orientation": "horizontal" if horizontal else "vertical",
           **_points(at=x + w / 2, values=values, base=y, width=w)}
    faces = {_colour(r.get_facecolor()) for r in c.patches}
    if len(faces) == 1:
        out["color"] = faces.pop()
    return out


def _errorbar(c: ErrorbarContainer) -> dict:
    data_line, _caps, bar_lines = c.lines
    out: dict[str, Any] = {"kind": "errorbar", "label": _label(c)}
    if data_line is not None:
        out.update(_points(x=data_line.get_xdata(), y=data_line.get_ydata()), **_style(data_line))
    # Bar segments come in the order x error bars, then y error bars.
    cols = list(bar_lines)
    for axis, has in (("x", c.has_xerr), ("y", c.has_yerr)):
        if has and cols:
            seg = cols.pop(0).get_segments()
            k = 0 if axis == "x" else 1
            ends = np.array([[s[0][k], s[-1][k]] if len(s) else [np.nan, np.nan]  # NaN point
                             for s in seg], float).reshape(-1, 2)
            stride = out.get("stride", 1)
            out[f"{axis}_low"] = _nums(ends.min(axis=1), stride)
            out[f"{axis}_high"] = _nums(ends.max(axis=1), stride)
    return out
