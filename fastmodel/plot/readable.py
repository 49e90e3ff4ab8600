"""Figures readable at any size (issue 25 item 9): no text under a minimum size, no tick labels on top of
each other.

Every figure function ends with :func:`make_readable`:

- every visible text of the figure (tick labels, annotations, legends, titles) is at least
  :data:`MIN_FONT_PT` points, and titles wrap at the figure's width; a default title longer than
  :data:`MAX_TITLE_LINES` lines keeps its model and system and ellipsizes what ``--sel`` fixed (:func:`shorten_titles`);
- on each axis whose ticks are fixed category labels (plans, systems, stream names), the labels are
  measured as drawn: a crowded x axis is turned vertical, and labels that still overlap are thinned to
  every k-th one, the smallest k that leaves :data:`GAP_PT` between neighbours (the first label stays, so
  the order reads as before); every item keeps a (minor) tick and the axis label says ``(every k-th
  labelled)``, so no item goes missing unannounced. Numeric axes keep matplotlib's own locators, which never overlap.
  An axis the caller labelled by a rule it states (``make_readable(fig, fixed=[axis])``: the memory
  timeline's passes) is left as labelled: a second rule under it contradicted the first.
"""

from __future__ import annotations

import math
import re
import warnings

from matplotlib.text import Text
from matplotlib.ticker import FixedLocator

#: the smallest font of any figure, in points (a 3.5 in column printed at 100 %)
MIN_FONT_PT = 5.0
#: the least space between two neighbouring tick labels, in points
GAP_PT = 1.0
#: the least distance between the unlabelled ticks of a thinned axis (0.4 pt wide), in points; closer, they merge
#: into a solid bar and are left out (the axis label still says every k-th item is labelled)
MIN_TICK_SPACING_PT = 2.0


def make_readable(fig, fixed=()) -> None:
    """Raise every text of ``fig`` to :data:`MIN_FONT_PT` and thin crowded category tick labels, except on the
    axes of ``fixed``: their labels were chosen by a rule the figure states (the memory timeline's passes)."""
    enforce_min_font(fig)
    wrap_titles(fig)
    with warnings.catch_warnings(record=True) as said:    # a long title may collapse the layout until shortened
        warnings.simplefilter("always")
        fig.draw_without_rendering()        # lays the figure out: tick labels get their final places
    if shorten_titles(fig):
        fig.draw_without_rendering()        # the shorter title gave the axes their height back
    else:
        for warning in said:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if any(axis is kept for kept in fixed):
                continue
            if isinstance(axis.get_major_locator(), FixedLocator) and len(axis.get_majorticklocs()) > 1:
                _separate(fig, axis)


def legend_label(fig, text: str, share: float = 0.5) -> str:
    """``text`` as a legend entry that fits ``share`` of the figure's width at the legend font (about 0.6 em per
    character): whole when it fits, else its head before the first colon ("left out 8 of 36 points"). A long entry,
    a Pareto figure's "left out ... points: 4 batch_not_divisible, ..." line, widened a 3.5 in figure saved with
    ``bbox_inches='tight'`` to 5.6 in, as a long title did (:func:`wrap_titles`); wrapped over lines it pushed the
    legend into the axes. The whole line stays in the figure's data attrs and on stderr."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties

    points = FontProperties(size=rcParams["legend.fontsize"]).get_size_in_points()
    chars = max(16, int(share * fig.get_figwidth() * 72 / (0.6 * points)))
    return text if len(text) <= chars else text.split(":")[0]


#: the most lines a default title (``SUBJECT: dim=value, ...``) wraps onto before what --sel fixed is ellipsized:
#: four lines of 8 pt over a 2.5 in figure left the axes under half its height
MAX_TITLE_LINES = 3
#: a default title (fastmodel.plot.data.fixed_title): the subject, then the coordinates --sel fixed
_SEL_TITLE = re.compile(r"^(?P<subject>.+?): (?P<fixed>[A-Za-z_][\w.]*=.*)$", re.S)
_SEL_ITEM = re.compile(r", (?=[A-Za-z_][\w.]*=)")


def shorten_titles(fig, max_lines: int = MAX_TITLE_LINES) -> bool:
    """Ellipsize the fixed coordinates of every default title (``LLaMA2-70B on dc-a: num_nodes=64, ...``) that
    wraps onto more than ``max_lines`` lines: the subject (model, system, task) stays, then as many fixed
    coordinates as fit, then ``… (3 more fixed)``. Titles of another form (``--title``) are left whole. The figure
    must have been drawn (wrapping needs the renderer). Returns whether a title changed."""
    texts = [t for ax in fig.axes for t in (ax.title, ax._left_title, ax._right_title)]
    texts += [fig._suptitle] if getattr(fig, "_suptitle", None) is not None else []
    changed = False
    for text in texts:
        match = _SEL_TITLE.match(text.get_text())
        if not match or _lines(text) <= max_lines:
            continue
        items = _SEL_ITEM.split(match["fixed"])
        for kept in range(len(items) - 1, -1, -1):
            shown = ", ".join(items[:kept] + [f"\u2026 ({len(items) - kept} more fixed)"])
            text.set_text(f"{match['subject']}: {shown}")
            if _lines(text) <= max_lines:
                break
        changed = True
    return changed


def _lines(text) -> int:
    """How many lines ``text`` wraps onto as drawn."""
    return text._get_wrapped_text().count("\n") + 1 if text.get_wrap() and text._renderer is not None else \
        text.get_text().count("\n") + 1


def wrap_titles(fig) -> None:
    """Break every axes title into lines at its axes' width, and the figure's suptitle at the figure's: a title
    longer than the figure widened the saved file past its column (``savefig.bbox = 'tight'`` takes in all text),
    e.g. a 3.5 in heatmap saved 4.7 in wide; wrapped at the figure's width (matplotlib's ``wrap``), a title over
    the axes still ran into a legend beside them. A title set later on the same axes wraps too."""
    for ax in fig.axes:
        for text in (ax.title, ax._left_title, ax._right_title):
            text.set_wrap(True)
            text._get_wrap_line_width = _within(text, ax)
    if getattr(fig, "_suptitle", None) is not None:
        fig._suptitle.set_wrap(True)


def _within(text, ax):
    """The wrap width of ``text`` (matplotlib 3.11 ``Text._get_wrap_line_width``, the room to the figure's edge),
    at most the width of ``ax`` as laid out."""
    from matplotlib.text import Text

    return lambda: min(ax.bbox.width, Text._get_wrap_line_width(text))


def enforce_min_font(fig) -> None:
    for text in fig.findobj(Text):
        if text.get_fontsize() < MIN_FONT_PT:
            text.set_fontsize(MIN_FONT_PT)


def visible_labels(axis) -> list:
    """The tick labels of ``axis`` that show text, in tick order."""
    lo, hi = sorted(axis.get_view_interval())
    return [label for label, loc in zip(axis.get_majorticklabels(), axis.get_majorticklocs())
            if label.get_visible() and label.get_text() and lo - 0.5 <= loc <= hi + 0.5]


def crowded(axis, renderer, gap_pt: float = GAP_PT) -> bool:
    """True when two neighbouring tick labels of ``axis`` come closer than ``gap_pt`` as drawn."""
    gap = gap_pt * axis.figure.dpi / 72.0
    boxes = [label.get_window_extent(renderer) for label in visible_labels(axis)]
    horizontal = axis.axis_name == "x"
    spans = sorted((b.x0, b.x1) if horizontal else (b.y0, b.y1) for b in boxes)
    return any(nxt[0] - cur[1] < gap for cur, nxt in zip(spans, spans[1:]))


def _separate(fig, axis) -> None:
    renderer = fig.canvas.get_renderer()
    if not crowded(axis, renderer):
        return
    if axis.axis_name == "x" and any(label.get_rotation() % 180 != 90 for label in axis.get_majorticklabels()):
        for label in axis.get_majorticklabels():
            label.set_rotation(90)
            label.set_horizontalalignment("center")
            label.set_rotation_mode("default")
        fig.draw_without_rendering()
        if not crowded(axis, renderer):
            return
    locs = list(axis.get_majorticklocs())
    texts = [label.get_text() for label in axis.get_majorticklabels()]
    style = axis.get_majorticklabels()[0]
    rotation, align, size = style.get_rotation(), style.get_horizontalalignment(), style.get_fontsize()
    step = max(2, _step_needed(axis, renderer, locs))
    if _spacing_pt(axis, locs) >= MIN_TICK_SPACING_PT:   # every item keeps a tick, labelled or not, while they
        axis.set_ticks(locs, minor=True)                 # stay apart: 1,000 rows drew a solid black bar
        axis.set_tick_params(which="minor", length=2.0, width=0.4)
    while step < len(locs):
        axis.set_ticks(locs[::step], labels=texts[::step])
        for label in axis.get_majorticklabels():
            label.set_rotation(rotation)
            label.set_horizontalalignment(align)
            label.set_fontsize(size)
        _say_thinned(axis, step)
        fig.draw_without_rendering()
        if not crowded(axis, renderer):
            return
        step += 1
    axis.set_ticks(locs[:1], labels=texts[:1])
    _say_thinned(axis, len(locs))


def thinned_note(step: int) -> str:
    """What a thinned axis says after its label: ``every 2nd labelled``."""
    suffix = "th" if 10 <= step % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(step % 10, "th")
    return f"every {step}{suffix} labelled"


def _say_thinned(axis, step: int) -> None:
    """Append (or update) the thinning note of ``axis``'s label: a reader sees that items sit between labels."""
    text = axis.label.get_text().split(" (every ")[0]
    axis.set_label_text(f"{text} ({thinned_note(step)})" if text else thinned_note(step))


def _spacing_pt(axis, locs) -> float:
    """The distance between two neighbouring ticks of ``axis`` at ``locs``, in points."""
    if len(locs) < 2:
        return math.inf
    horizontal = axis.axis_name == "x"
    a, b = (axis.axes.transData.transform((loc, 0) if horizontal else (0, loc)) for loc in locs[:2])
    return abs(b[0 if horizontal else 1] - a[0 if horizontal else 1]) * 72.0 / axis.figure.dpi


def _step_needed(axis, renderer, locs) -> int:
    """Every how many labels fit: the widest label (along the axis) plus the gap over the tick spacing."""
    boxes = [label.get_window_extent(renderer) for label in visible_labels(axis)]
    if not boxes or len(locs) < 2:
        return 1
    horizontal = axis.axis_name == "x"
    widest = max((b.width if horizontal else b.height) for b in boxes) + GAP_PT * axis.figure.dpi / 72.0
    transform = axis.axes.transData
    points = [transform.transform((loc, 0) if horizontal else (0, loc)) for loc in locs[:2]]
    spacing = abs(points[1][0 if horizontal else 1] - points[0][0 if horizontal else 1])
    return max(1, math.ceil(widest / max(spacing, 1e-9)))


def marker_boxes(markers, to_px: float) -> list:
    """The display boxes of ``markers`` ((ax, (x, y) in data, size in points)): each a square ``size`` points wide
    centred on its point (``to_px``: pixels per point), which a label must keep clear of (:func:`drop_overlapping`,
    :func:`place_labels`)."""
    from matplotlib.transforms import Bbox

    boxes = []
    for ax, xy, size in markers:
        cx, cy = ax.transData.transform(xy)
        half = size * to_px / 2
        boxes.append(Bbox.from_extents(cx - half, cy - half, cx + half, cy + half))
    return boxes


def drop_overlapping(fig, texts, markers=(), gap_pt: float = GAP_PT) -> list:
    """Hide each of ``texts`` (annotations, in order of priority) whose box, as drawn, comes closer than ``gap_pt``
    to one kept before it or to a marker of ``markers`` ((ax, (x, y) in data, size in points)); returns the kept
    ones. Point labels of a dense curve otherwise print on each other (and on the SLO's star)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    to_px = fig.dpi / 72.0
    boxes = marker_boxes(markers, to_px)
    kept = []
    for text in texts:
        box = text.get_window_extent(renderer).padded(gap_pt * to_px / 2)
        if any(box.overlaps(other) for other in boxes):
            text.set_visible(False)
            continue
        kept.append(text)
        boxes.append(box)
    return kept


#: the least space between a point label and a curve, a marker or another label, in points
LABEL_GAP_PT = 2.0
#: where a point label may sit, as offsets from its point in points, tried in order: the four diagonals close to
#: the point, beside it (right, left, above, below: centred on it), then the diagonals farther out; a label takes
#: the first that crosses no curve, no kept label and no marker
LABEL_OFFSETS_PT = ((3, 3), (-3, -3), (-3, 3), (3, -3), (4, 0), (-4, 0), (0, 4), (0, -4),
                    (6, 9), (-6, -9), (-6, 9), (6, -9))


def display_path(line):
    """The path of ``line`` (a Line2D) as drawn, in display pixels: a step line's corners included."""
    import numpy as np
    from matplotlib.cbook import STEP_LOOKUP_MAP
    from matplotlib.path import Path

    x = np.asarray(line.get_xdata(), dtype=float)
    y = np.asarray(line.get_ydata(), dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = STEP_LOOKUP_MAP[line.get_drawstyle()](x[keep], y[keep])
    return Path(line.get_transform().transform(np.column_stack([x, y])))   # axvline: x in data, y in axes


def place_labels(fig, texts, lines, markers=(), gap_pt: float = LABEL_GAP_PT) -> int:
    """Put each of ``texts`` (annotations in offset points, in order of priority) at the first offset of
    :data:`LABEL_OFFSETS_PT` where its box, as drawn, stays ``gap_pt`` clear of every path of ``lines`` (Line2D),
    of the labels placed before it and of ``markers`` ((ax, (x, y) in data, size in points)), inside its axes or,
    when no offset inside is clear, wholly outside them (off the spines and ticks) inside the figure, clear of the
    axis labels, title and legends; a label
    with no such place is hidden. Returns how many were hidden, for the figure to say. A label written to one
    fixed side of its point sat on the frontier line of a staircase (and on its neighbours)."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    to_px = fig.dpi / 72.0
    paths = [display_path(line) for line in lines]
    boxes = marker_boxes(markers, to_px)
    frame = [a.get_tightbbox(renderer) for ax in {t.axes for t in texts} for a in (ax.xaxis, ax.yaxis, ax.title)
             if a.get_visible()] + [legend.get_window_extent(renderer) for legend in fig.legends]
    hidden = 0
    for text in texts:
        box = _first_clear(text, renderer, gap_pt * to_px / 2, paths, boxes, [b for b in frame if b is not None])
        if box is None:
            text.set_visible(False)
            hidden += 1
        else:
            boxes.append(box)
    return hidden


def _first_clear(text, renderer, pad, paths, boxes, frame):
    """The box of ``text`` at the first clear offset (inside its axes, else inside the figure clear of
    ``frame``), the text left there; None when there is none."""
    text.set_visible(True)
    outer = text.get_figure(root=True).bbox
    for area, more in ((text.axes.bbox, []), (outer, [*frame, text.axes.bbox])):    # wholly inside, else outside
        for dx, dy in LABEL_OFFSETS_PT:
            text.xyann = (dx, dy)
            text.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
            text.set_verticalalignment("bottom" if dy > 0 else "top" if dy < 0 else "center_baseline")
            box = text.get_window_extent(renderer).padded(pad)
            if area.contains(box.x0, box.y0) and area.contains(box.x1, box.y1) \
                    and not any(path.intersects_bbox(box, filled=False) for path in paths) \
                    and not any(box.overlaps(other) for other in boxes + more):
                return box
    return None


def place_labels_noted(fig, ax, texts, lines, markers=(), base: str | None = None, show=None) -> None:
    """:func:`place_labels`, then the count of labels with no room appended to a legend text ``base`` (written by
    ``show``; none when ``base`` is None) and the labels placed again, since the longer legend text may have moved
    the axes; ``ax.labels_left_out`` is the count."""
    hidden = place_labels(fig, texts, lines, markers)
    if hidden and base is not None:
        show(f"{base}\n{labels_left_out(hidden, len(texts))}")
        hidden = place_labels(fig, texts, lines, markers)
        show(f"{base}\n{labels_left_out(hidden, len(texts))}" if hidden else base)
    ax.labels_left_out = hidden


def labels_left_out(hidden: int, total: int) -> str:
    """The figure's note on point labels :func:`place_labels` hid: ``2 of 9 labels left out (no room)``."""
    return f"{hidden} of {total} labels left out (no room)" if hidden else ""
