"""Gantt rows of a timeline window: exact bars while the ops are wide enough to see, the share of each
category per column once they are not (issue 25 item 9).

A window of a long step holds thousands of ops narrower than a pixel: drawn as bars they vanish or cover
each other by drawing order, so a category that takes a fifth of the window (the waits for communication)
could show nowhere. A *dense* window is drawn as columns instead (:func:`columns`: about two ops of the
busiest row per column, so a periodic schedule does not beat against the columns, at most :data:`COLUMNS`);
in each, the row's height is split between the categories in proportion to the time each takes in that
column (stacked in drawing order, idle time left blank). Every category present in the window then shows, with the area it takes in
time. A window whose typical op spans a few columns keeps one bar per op, and so does ``aggregate`` (ops of
one kind closer than a column merged into one bar).
"""

from __future__ import annotations

import numpy as np
from matplotlib.collections import PolyCollection

#: the most columns of a dense window: about one per pixel of a double-column figure at 300 dpi
COLUMNS = 1200
#: the fewest columns of a dense window
MIN_COLUMNS = 200
#: ops of the busiest row per column of a dense window
OPS_PER_COLUMN = 2.0
#: a window is dense when its median op spans fewer columns than this
DENSE_SPAN = 2.0


def in_window(bars, lo: float, hi: float) -> np.ndarray:
    """The (start, end) bars overlapping [lo, hi], clipped to it."""
    bars = np.asarray(bars, dtype=float).reshape(-1, 2)
    bars = bars[(bars[:, 1] > lo) & (bars[:, 0] < hi)]
    return np.stack([np.maximum(bars[:, 0], lo), np.minimum(bars[:, 1], hi)], axis=1)


def dense_columns(rows: list[list[np.ndarray]], lo: float, hi: float) -> int:
    """Columns to draw the window in (0: exact bars): dense when its median op (over every row's clipped bars)
    spans fewer than :data:`DENSE_SPAN` of :data:`COLUMNS` columns."""
    widths = np.concatenate([np.diff(bars, axis=1).ravel() for row in rows for bars in row] + [np.zeros(0)])
    widths = widths[widths > 0]
    if not widths.size or float(np.median(widths)) >= DENSE_SPAN * (hi - lo) / COLUMNS:
        return 0
    busiest = max(sum(len(bars) for bars in row) for row in rows)
    return int(np.clip(busiest / OPS_PER_COLUMN, MIN_COLUMNS, COLUMNS))


def covered(bars: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time the bars (disjoint, any order) cover before each of ``edges``: exact, by cumulative sums."""
    if bars.size == 0:
        return np.zeros(edges.size)
    order = np.argsort(bars[:, 0], kind="stable")
    starts, lengths = bars[order, 0], np.diff(bars[order], axis=1).ravel()
    before = np.concatenate([[0.0], np.cumsum(lengths)])
    last = np.searchsorted(starts, edges, side="right") - 1       # the bar starting last before each edge
    inside = np.where(last >= 0, np.clip(edges - starts[np.maximum(last, 0)], 0.0, lengths[np.maximum(last, 0)]),
                      0.0)
    return np.where(last >= 0, before[np.maximum(last, 0)] + inside, 0.0)


def draw_row(ax, y: float, height: float, layers: list[tuple[str, str, np.ndarray]], lo: float, hi: float,
             dense: int) -> list[str]:
    """Draw one row centred on ``y``: ``layers`` are (gid, colour, clipped bars), later ones on top; returns the
    gids drawn. ``dense`` (a number of columns, 0: exact bars): per column, each layer's share of the time
    stacked from the bottom of the row."""
    drawn = []
    if not dense:
        for gid, colour, bars in layers:
            if bars.size:
                ax.broken_barh(list(zip(bars[:, 0], bars[:, 1] - bars[:, 0])), (y - height / 2, height),
                               facecolors=colour, edgecolor="none", linewidth=0, gid=gid)
                drawn.append(gid)
        return drawn
    edges = np.linspace(lo, hi, dense + 1)
    width = edges[1] - edges[0]
    bottom = np.full(dense, y - height / 2)
    for gid, colour, bars in layers:
        used = (bottom - (y - height / 2)) / height
        room = np.maximum(1.0 - used, 0.0)       # merged (aggregated) bars may overlap: never above the row
        share = np.minimum(np.maximum(np.diff(covered(bars, edges)) / width, 0.0), room)
        share[share < 1e-9] = 0.0                 # rounding of the cumulative sums, not time
        if not share.any():
            continue
        cols = np.flatnonzero(share > 0)
        x0, x1, y0 = edges[cols], edges[cols + 1], bottom[cols]
        y1 = y0 + share[cols] * height
        quads = np.stack([np.stack([x0, y0], 1), np.stack([x0, y1], 1), np.stack([x1, y1], 1),
                          np.stack([x1, y0], 1)], axis=1)
        ax.add_collection(PolyCollection(quads, facecolors=colour, edgecolors="none", linewidths=0, gid=gid))
        bottom = bottom + share * height
        drawn.append(gid)
    return drawn
