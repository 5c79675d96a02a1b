"""Overlapping labels in a matplotlib figure: tick labels, axis labels and titles whose boxes intersect.

`ChapterRun.figure` runs `overlapping_labels` on every figure it saves, warns in the notebook and records
the pairs in `figure_checks.json`, which the report shows under the figure. The check draws the figure
(without rendering pixels) and compares the window extents of every visible, non-empty label:

    tick labels (major and minor, both sides) of every axes, colorbars included, that fall inside the view
    axis labels and axes titles, and the figure's suptitle / supxlabel / supylabel

Each label is the rectangle its glyphs occupy, rotated with the text (slanted tick labels are slanted rectangles,
not the axis-aligned boxes around them, which touch even when the text does not). Two labels overlap when the
rectangles' projections overlap by more than `tolerance_px` pixels on every axis of either rectangle (the
separating-axis test for convex polygons).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text


def _ticks_in_view(axis) -> list:
    low, high = sorted(axis.get_view_interval())
    span = (high - low) * 1e-9
    ticks = axis.get_major_ticks() + axis.get_minor_ticks()
    return [t for t in ticks if low - span <= t.get_loc() <= high + span]


def _labels(fig: Figure) -> list[tuple[str, Text]]:
    """(description, text artist) of every visible non-empty label of the figure."""
    found: list[tuple[str, Text]] = []
    for number, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        where = f"axes {number}"
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if not axis.get_visible():
                continue
            for tick in _ticks_in_view(axis):
                for label in (tick.label1, tick.label2):
                    found.append((f"{where} {name} tick {label.get_text()!r}", label))
            found.append((f"{where} {name} label {axis.label.get_text()!r}", axis.label))
        for title in (ax.title, ax._left_title, ax._right_title):
            found.append((f"{where} title {title.get_text()!r}", title))
    for attr in ("_suptitle", "_supxlabel", "_supylabel"):
        text = getattr(fig, attr, None)
        if text is not None:
            found.append((f"figure {attr.strip('_')} {text.get_text()!r}", text))
    return [(d, t) for d, t in found if t.get_visible() and t.get_text().strip()]


def _rectangle(text: Text, renderer) -> np.ndarray:
    """The 4 corners [4, 2] (display pixels) of the rectangle a label's glyphs occupy, rotated as drawn.

    A rotated rectangle's bounding box shares its centre, so the corners are the unrotated size turned about the
    centre of the drawn (axis-aligned) extent.
    """
    box = text.get_window_extent(renderer)
    angle = np.deg2rad(text.get_rotation() % 180)
    if np.isclose(np.sin(2 * angle), 0):  # 0 or 90 degrees: the box is the rectangle
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    rotation = text.get_rotation()
    text.set_rotation(0)
    try:
        flat = text.get_window_extent(renderer)
    finally:
        text.set_rotation(rotation)
    half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [flat.width / 2, flat.height / 2]  # [4, 2]
    turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    return half @ turn.T + [(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]


def _overlap_px(a: np.ndarray, b: np.ndarray) -> float:
    """The smallest overlap of the two rectangles' projections over their edge normals (<= 0: they are apart)."""
    smallest = np.inf
    for corners in (a, b):
        for edge in (corners[1] - corners[0], corners[3] - corners[0]):
            norm = np.hypot(*edge)
            if norm == 0:
                continue
            axis = np.array([-edge[1], edge[0]]) / norm
            pa, pb = a @ axis, b @ axis
            smallest = min(smallest, min(pa.max(), pb.max()) - max(pa.min(), pb.min()))
    return smallest


def overlapping_labels(fig: Figure, tolerance_px: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of label descriptions whose drawn rectangles overlap (empty when the figure reads cleanly)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    shapes = [(d, _rectangle(t, renderer)) for d, t in _labels(fig)]
    return [(d1, d2) for (d1, r1), (d2, r2) in combinations(shapes, 2) if _overlap_px(r1, r2) > tolerance_px]
