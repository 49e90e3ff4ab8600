"""Timeline: one configuration's step as a Gantt chart, op by op, of any engine that lays its step out.

The engine's door gives the data (a :class:`~fastmodel.schedule.timeline.Timeline`, chosen by
``fastmodel.engines.timeline``): MAD-Max's scheduled Program (a compute and a communication stream, ops
coloured by category), the real-world model's busiest pipeline stage (compute on top, one row per process
group below). The waits of the compute row for communication are drawn in the ``exposed`` colour.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from matplotlib.patches import Patch

from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.readable import make_readable
from fastmodel.plot.timeline_rows import dense_columns, draw_row, in_window
from fastmodel.schedule.timeline import Timeline, idle_intervals  # noqa: F401 - idle_intervals: this module's API

#: room above the top row, in rows, for the forward | backward note of MAD-Max timelines
BARRIER_ROOM = 0.4
BAR_HEIGHT = 0.6
#: colour-blind-safe colours per op kind: the scheduler's categories (style.PALETTE) and the real-world
#: model's kinds (Okabe-Ito, completed from Paul Tol's palette); bubble and host time are greys
KIND_COLOURS = {
    **S.PALETTE,
    "attention": "#56B4E9", "memory_bound": "#999999", "recompute": "#CC79A7", "head": "#332288",
    "bubble": "#DDDDDD", "optimizer": "#117733", "overhead": "#444444", "tp": "#009E73", "cp": "#E69F00",
    "ep": "#882255", "pp": "#F0E442", "dp": "#44AA99", "offload": "#8C564B", "eval": "#AA4499",
    "straggler": "#661100",
}
KIND_LABELS = {
    **S.CATEGORY_LABELS,
    "attention": "attention", "memory_bound": "memory-bound", "recompute": "recompute", "head": "LM head",
    "bubble": "pipeline bubble", "optimizer": "optimizer", "overhead": "host overhead", "tp": "TP comm.",
    "cp": "CP comm.", "ep": "EP comm.", "pp": "PP comm.", "dp": "DP comm.", "offload": "offload copies", "eval": "evaluation",
    "straggler": "slowest-GPU wait",
}


#: the largest tick step matplotlib's MaxNLocator tries, in spans of the axis: its steps [1, 2, 2.5, 5, 10] x 10
#: at the top of its staircase (matplotlib 3.11 ticker.py, ``MaxNLocator._staircase``: ``10 * steps[1]``), times
#: 10^floor(log10(span / nbins)) <= span; a window whose span times this overflows makes it warn (ticker.py 2247)
TICK_STEP_REACH = 20.0
MAX_WINDOW_SPAN_S = sys.float_info.max / TICK_STEP_REACH


def window_bounds(window: tuple[float, float] | None, total: float, what: str = "step") -> tuple[float, float]:
    """(start, end) in seconds of the drawn window (None: all of ``what``, which lasts ``total``); PlotError
    for a window that is empty, negative, not finite, wider than the axis can tick (:data:`MAX_WINDOW_SPAN_S`)
    or starts after the end."""
    lo, hi = (0.0, total) if window is None else (float(window[0]), float(window[1]))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise D.PlotError(f"window must be finite seconds (got {window[0]}:{window[1]})")
    if not hi > lo or lo < 0:
        raise D.PlotError(f"window must be 0 <= start < end (got {window[0]}:{window[1]})")
    if not math.isfinite((hi - lo) * TICK_STEP_REACH):
        raise D.PlotError(f"window {lo:g}:{hi:g} s spans more than the time axis can tick (at most "
                          f"{MAX_WINDOW_SPAN_S:.3g} s)")
    if lo >= total:
        raise D.PlotError(f"window starts at {lo:g} s, after the {what} ends ({total:g} s)")
    return lo, hi


def merge_ops(starts: np.ndarray, ends: np.ndarray, gap: float) -> np.ndarray:
    """(start, end) bars of the ops of one row and kind; ops less than ``gap`` seconds apart share a bar."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    if starts.size == 0:
        return np.zeros((0, 2))
    breaks = np.flatnonzero(starts[1:] > ends[:-1] + gap) + 1
    first = np.concatenate([[0], breaks])
    return np.stack([starts[first], np.maximum.reduceat(ends, first)], axis=1)


def timeline(config=None, *, model=None, system=None, task=None, record=None, source=None, semantics="default",
             plan: str | None = None, num_nodes: int | None = None, window: tuple[float, float] | None = None,
             aggregate: bool = False, size="double", height: float | None = None, title: str | None = None, ax=None,
             execution=None):
    """Gantt chart of one configuration's step; returns ``(fig, ax)``.

    Pass a :class:`~fastmodel.schedule.timeline.Timeline`, a resolved MAD-Max config (``fastmodel.make_config``),
    a measured-run ``record`` (RUNS.md; ``source`` names its file in errors) or the specs (``model``, ``system``, ``task``, ``semantics``, ``plan``,
    ``num_nodes``): the engine that evaluates them lays the step out (``fastmodel.engines.timeline``). One bar
    per op; ``aggregate=True`` merges ops of one kind less than 1/1000 of the window apart (closer than a
    pixel); ``window=(t0, t1)`` in seconds draws only the ops overlapping that window. The step time and the
    exposed communication are annotated. ``execution``: a dict of execution fields for real-world specs (as in
    ``fastmodel.evaluate``).
    """
    if isinstance(config, Timeline):
        tl = config
    else:
        from fastmodel import engines

        if config is None and record is None and (model is None or system is None or task is None):
            raise D.PlotError("timeline needs a config, a run record, or model, system and task")
        tl = engines.timeline(config, model=model, system=system, task=task, record=record, source=source,
                              semantics=semantics, plan=plan, num_nodes=num_nodes, execution=execution)
    return timeline_figure(tl, window=window, aggregate=aggregate, size=size, height=height, title=title, ax=ax)


def step_note(total: float, exposed: float) -> str:
    """``step 5.62 s; exposed comm. 17.0 ms (0.3% of the step)``: each time in its own unit (the exposed time read
    ``0.0170 s`` in the step's); '' for an empty step."""
    if total <= 0:
        return ""
    (tfac, tunit), (efac, eunit) = S.display_unit("s", [total]), S.display_unit("s", [exposed])
    return (f"step {S.fmt_number(total / tfac)} {tunit}; exposed comm. {S.fmt_number(exposed / efac)} {eunit} "
            f"({exposed / total:.1%} of the step)")


def timeline_figure(tl: Timeline, *, window: tuple[float, float] | None = None, aggregate: bool = False,
                    size="double", height: float | None = None, title: str | None = None, ax=None):
    """The Gantt chart of ``tl``: a row per stream that has ops, the compute row's waits in the ``exposed``
    colour; returns ``(fig, ax)``."""
    total = tl.total
    lo, hi = window_bounds(window, total)
    used = [r for r in range(len(tl.rows)) if np.any(tl.row == r)] or [tl.wait_row]
    y = {r: float(len(used) - 1 - i) for i, r in enumerate(used)}
    waits = tl.waits()
    factor, unit = S.display_unit("s", [hi - lo])
    with S.paper_rc():
        fig, ax = S.new_axes(size, height if height is not None else 0.45 * len(used) + 0.9, ax)
        layers: dict[int, list] = {}
        for r in used:
            for code, kind in enumerate(tl.kinds):
                on = (tl.row == r) & (tl.kind == code)
                if on.any():
                    bars = merge_ops(tl.start[on], tl.end[on], max((hi - lo) / 1000, 1e-9 * total)) if aggregate \
                        else np.stack([tl.start[on], tl.end[on]], axis=1)
                    layers.setdefault(r, []).append((f"ops:{tl.rows[r]}:{kind}", kind, in_window(bars, lo, hi)))
        layers.setdefault(tl.wait_row, []).append(("exposed", "exposed", in_window(waits, lo, hi)))
        dense = 0 if aggregate else dense_columns([[bars for _, _, bars in row] for row in layers.values()], lo, hi)
        handles = {}
        for r, row in layers.items():
            drawn = draw_row(ax, y[r], BAR_HEIGHT, [(gid, KIND_COLOURS[kind], bars) for gid, kind, bars in row],
                             lo, hi, dense)
            for gid, kind, _ in row:
                if gid in drawn and kind not in handles:
                    handles[kind] = Patch(facecolor=KIND_COLOURS[kind], label=KIND_LABELS[kind])
        top = len(used) - 0.5
        if tl.barrier is not None and lo <= tl.barrier <= hi:   # its note inside the axes: above them it ran
            top += BARRIER_ROOM                                  # into the title
            ax.axvline(tl.barrier, color="0.3", linewidth=0.6, linestyle="--")
            ax.annotate("fwd | bwd", (tl.barrier, top), ha="center", va="top", fontsize=6, color="0.3",
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "linewidth": 0}, gid="barrier")
        ax.set_xlim(lo, min(hi, total) if window is None else hi)
        ax.set_ylim(-0.5, top)
        ax.set_yticks([y[r] for r in used], labels=[tl.rows[r] for r in used])
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.xaxis.set_major_formatter(S.unit_formatter(factor))
        ax.set_xlabel(S.label("time", unit))
        note = step_note(total, float(np.sum(np.diff(waits, axis=1))))
        ax.set_title(title if title is not None else f"{tl.label}: {note}" if tl.label else note, loc="left")
        fig.legend(handles=list(handles.values()), loc="outside right upper", handlelength=1.2)
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax
