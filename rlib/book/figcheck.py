"""Overlapping labels in a matplotlib figure: tick labels, axis labels and titles whose boxes intersect.

`ChapterRun.figure` runs `overlapping_labels` on every figure it saves, warns in the notebook and records
the pairs in `figure_checks.json`, which the report shows under the figure. The check draws the figure
(without rendering pixels) and compares the window extents of every visible, non-empty label:

    tick labels (major and minor, both sides) of every axes, colorbars included, that fall inside the view
    axis labels and axes titles, and the figure's suptitle / supxlabel / supylabel

Two labels overlap when their boxes share more than `tolerance_px` pixels in both directions.
"""

from __future__ import annotations

from itertools import combinations

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


def overlapping_labels(fig: Figure, tolerance_px: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of label descriptions whose drawn boxes overlap (empty when the figure reads cleanly)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    boxes = [(d, t.get_window_extent(renderer)) for d, t in _labels(fig)]
    pairs = []
    for (d1, b1), (d2, b2) in combinations(boxes, 2):
        dx = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
        dy = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
        if dx > tolerance_px and dy > tolerance_px:
            pairs.append((d1, d2))
    return pairs
