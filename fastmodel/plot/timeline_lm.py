"""Timeline of one real-world configuration: the busiest stage's compute stream and one row per process group."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch

from fastmodel.lm.timeline import KINDS, STREAMS, Timeline
from fastmodel.plot import style as S
from fastmodel.plot.readable import make_readable
from fastmodel.plot.timeline import idle_intervals, window_bounds
from fastmodel.plot.timeline_rows import dense_columns, draw_row, in_window

BAR_HEIGHT = 0.6
#: colour-blind-safe colours per op kind (Okabe-Ito, completed from Paul Tol's palette), one per kind;
#: bubble and host time are greys
KIND_COLOURS = {
    "gemm": "#0072B2", "attention": "#56B4E9", "memory_bound": "#999999", "recompute": "#CC79A7",
    "head": "#332288", "bubble": "#DDDDDD", "optimizer": "#117733", "overhead": "#444444",
    "tp": "#009E73", "cp": "#E69F00", "ep": "#882255", "pp": "#F0E442", "dp": "#44AA99",
}
KIND_LABELS = {
    "gemm": "GEMM", "attention": "attention", "memory_bound": "memory-bound", "recompute": "recompute",
    "head": "LM head", "bubble": "pipeline bubble", "optimizer": "optimizer", "overhead": "host overhead",
    "tp": "TP comm.", "cp": "CP comm.", "ep": "EP comm.", "pp": "PP comm.", "dp": "DP comm.",
}


def lm_timeline_figure(tl: Timeline, *, window: tuple[float, float] | None = None, aggregate: bool = False,
                       size="double", height: float | None = None, title: str = "", ax=None):
    """Gantt chart of ``tl`` (``fastmodel.lm.timeline.timeline``): compute on top, a row per communicating
    process group below; waits of the compute stream for communication in the ``exposed`` colour.
    ``aggregate`` merges back-to-back ops of one kind closer than 1/1000 of the window; returns ``(fig, ax)``."""
    total = tl.step_time
    lo, hi = window_bounds(window, total, "step")
    used = [s for s in range(len(STREAMS)) if np.any(tl.stream == s)]
    rows = {s: float(len(used) - 1 - i) for i, s in enumerate(used)}
    factor, unit = S.display_unit("s", [hi - lo])
    with S.paper_rc():
        fig, ax = S.new_axes(size, height if height is not None else 0.45 * len(used) + 0.9, ax)
        layers = {}
        for stream in used:
            on = tl.stream == stream
            kinds, starts, ends = tl.kind[on], tl.start[on], tl.end[on]
            if aggregate:
                kinds, starts, ends = _merge(kinds, starts, ends, (hi - lo) / 1000)
            for code, kind in enumerate(KINDS):
                mine = kinds == code
                if mine.any():
                    bars = in_window(np.stack([starts[mine], ends[mine]], axis=1), lo, hi)
                    layers.setdefault(stream, []).append((f"ops:{STREAMS[stream]}:{kind}", kind, bars))
        compute = STREAMS.index("compute")
        if compute in rows:
            layers.setdefault(compute, []).append(("exposed", "exposed", in_window(_compute_waits(tl), lo, hi)))
        dense = 0 if aggregate else dense_columns([[bars for _, _, bars in row] for row in layers.values()], lo, hi)
        handles = {}
        for stream, row in layers.items():
            colours = [(gid, KIND_COLOURS.get(kind, S.PALETTE.get(kind)), bars) for gid, kind, bars in row]
            drawn = draw_row(ax, rows[stream], BAR_HEIGHT, colours, lo, hi, dense)
            for gid, kind, _ in row:
                if gid in drawn and kind not in handles:
                    label = S.CATEGORY_LABELS["exposed"] if kind == "exposed" else KIND_LABELS[kind]
                    handles[kind] = Patch(facecolor=KIND_COLOURS.get(kind, S.PALETTE.get(kind)), label=label)
        ax.set_xlim(lo, min(hi, total) if window is None else hi)
        ax.set_ylim(-0.5, len(used) - 0.5)
        ax.set_yticks([rows[s] for s in used], labels=[STREAMS[s] for s in used])
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.xaxis.set_major_formatter(S.unit_formatter(factor))
        ax.set_xlabel(S.label("time", unit))
        exposed = tl.exposed()
        tfac, tunit = S.display_unit("s", [total])
        note = (f"step {S.fmt_number(total / tfac)} {tunit}; exposed comm. {S.fmt_number(exposed / tfac)} {tunit} "
                f"({exposed / total:.1%})" if total > 0 else "")
        ax.set_title(f"{title}: {note}" if title else note, loc="left")
        fig.legend(handles=list(handles.values()), loc="outside right upper", handlelength=1.2)
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax


def _merge(kinds, starts, ends, gap):
    """Merge runs of back-to-back ops of one kind (less than ``gap`` apart, no other op between them)."""
    order = np.argsort(starts, kind="stable")
    kinds, starts, ends = kinds[order], starts[order], ends[order]
    if kinds.size == 0:
        return kinds, starts, ends
    new_run = np.ones(kinds.size, dtype=bool)
    new_run[1:] = (kinds[1:] != kinds[:-1]) | (starts[1:] > ends[:-1] + gap)
    first = np.flatnonzero(new_run)
    return kinds[first], starts[first], np.maximum.reduceat(ends, first)


def _compute_waits(tl: Timeline) -> np.ndarray:
    """(start, end) of the gaps in the compute stream: where it waits for communication."""
    on = tl.stream == STREAMS.index("compute")
    return idle_intervals(tl.start[on], tl.end[on], tl.step_time, 1e-9)
