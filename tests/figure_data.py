"""Reading what a notebook's figures draw (``data/<figure>.json``, gan3d.plots.description) in
the notebook tests: the panels of a figure, its series by kind and label, and their values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def panels(folder: Path, figure: str) -> list[dict]:
    """The panels (Axes, colour bars left out) of ``folder/figure``, as its description has them."""
    d = json.loads((folder / "data" / f"{Path(figure).stem}.json").read_text())
    assert d["format"] == 1 and d["figure"] == figure
    return d["axes"]


def described(folder: Path, figure: str) -> dict:
    """The whole description of ``folder/figure`` (suptitle, figure texts, panels)."""
    return json.loads((folder / "data" / f"{Path(figure).stem}.json").read_text())


def series(ax: dict, kind: str | None = None, label: str | None = None) -> list[dict]:
    """The series of one panel, of ``kind`` and with ``label`` (a prefix) when given."""
    return [s for s in ax["series"] if (kind is None or s["kind"] == kind)
            and (label is None or (s["label"] or "").startswith(label))]


def one(ax: dict, kind: str, label: str | None = None) -> dict:
    """The single series of ``kind`` (and ``label`` prefix) in a panel."""
    found = series(ax, kind, label)
    assert len(found) == 1, (kind, label, [(s["kind"], s["label"]) for s in ax["series"]])
    return found[0]


def values(s: dict, key: str) -> np.ndarray:
    """A series' column as floats (null -> NaN)."""
    return np.array([np.nan if v is None else v for v in s[key]], float)


def image_sum(s: dict) -> float:
    """The sum of an image's values (masked cells, null, count as zero)."""
    return float(sum(v for row in s["values"] for v in row if v is not None))


def integral(h: dict) -> float:
    """sum(value x bin width) of a histogram series."""
    return float(np.sum(values(h, "values") * np.diff(values(h, "edges"))))
