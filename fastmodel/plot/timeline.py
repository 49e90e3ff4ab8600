"""Timeline: the compute and communication streams of one configuration as a Gantt chart."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.patches import Patch

from fastmodel.kernels.madmax.layout import CATEGORY_NAMES, STREAM_COMM, STREAM_COMPUTE
from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.readable import make_readable
from fastmodel.plot.timeline_rows import dense_columns, draw_row, in_window

ROWS = {STREAM_COMPUTE: 1.0, STREAM_COMM: 0.0}
BAR_HEIGHT = 0.6


@dataclass(frozen=True)
class Schedule:
    """Per-op schedule of one configuration (times in seconds)."""

    names: tuple[str, ...]
    stream: np.ndarray
    category: np.ndarray   # index into CATEGORY_NAMES
    start: np.ndarray
    end: np.ndarray
    barrier: float | None  # forward/backward barrier time, if the program has one

    @property
    def iteration_time(self) -> float:
        return float(self.end.max()) if self.end.size else 0.0

    def idle_compute(self) -> np.ndarray:
        """(start, end) intervals where the compute stream waits: the exposed communication."""
        on = self.stream == STREAM_COMPUTE
        return idle_intervals(self.start[on], self.end[on], self.iteration_time, 1e-12)


def window_bounds(window: tuple[float, float] | None, total: float, what: str) -> tuple[float, float]:
    """(start, end) in seconds of the drawn window (None: all of ``what``, which lasts ``total``); PlotError
    for a window that is empty, negative or starts after the end."""
    lo, hi = (0.0, total) if window is None else (float(window[0]), float(window[1]))
    if not hi > lo or lo < 0:
        raise D.PlotError(f"window must be 0 <= start < end (got {window[0]}:{window[1]})")
    if lo >= total:
        raise D.PlotError(f"window starts at {lo:g} s, after the {what} ends ({total:g} s)")
    return lo, hi


def idle_intervals(starts: np.ndarray, ends: np.ndarray, total: float, rel_tol: float) -> np.ndarray:
    """(start, end) of the gaps between the ops of one stream over [0, total], gaps shorter than
    ``rel_tol x total`` left out."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    lo = np.concatenate([[0.0], ends])
    hi = np.concatenate([starts, [total]])
    keep = hi - lo > rel_tol * max(total, 1e-30)
    return np.stack([lo[keep], hi[keep]], axis=1)


def schedule(config) -> Schedule:
    """The full per-op schedule of a resolved Config (through ``engine.trace``)."""
    from fastmodel.madmax.engine import trace

    program, start, end = trace(config)
    barrier_ops = np.flatnonzero(program.op_barrier)
    barrier = float(start[barrier_ops[0]]) if barrier_ops.size else None
    return Schedule(tuple(program.op_names), np.asarray(program.op_stream), np.asarray(program.op_category),
                    np.asarray(start, dtype=float), np.asarray(end, dtype=float), barrier)


def merge_ops(sched: Schedule, stream: int, category: int, gap: float = 0.0) -> np.ndarray:
    """(start, end) of the ops of one stream and category; ops less than ``gap`` seconds apart share a bar."""
    on = (sched.stream == stream) & (sched.category == category)
    order = np.argsort(sched.start[on], kind="stable")
    starts, ends = sched.start[on][order], sched.end[on][order]
    if starts.size == 0:
        return np.zeros((0, 2))
    tol = max(gap, 1e-9 * sched.iteration_time)
    breaks = np.flatnonzero(starts[1:] > ends[:-1] + tol) + 1
    first = np.concatenate([[0], breaks])
    return np.stack([starts[first], np.maximum.reduceat(ends, first)], axis=1)


def timeline(config=None, *, model=None, system=None, task=None, semantics="default", plan: str | None = None,
             num_nodes: int | None = None, window: tuple[float, float] | None = None, aggregate: bool = False,
             size="double", height: float | None = 1.9, title: str | None = None, ax=None):
    """Gantt chart of one configuration's two streams, coloured by op category; returns ``(fig, ax)``.

    Pass a resolved ``config`` (``fastmodel.make_config``) or the make_config
    arguments. One bar per op; ``aggregate=True`` merges ops of one category less
    than 1/1000 of the window apart, i.e. closer than a pixel (readable for 80-layer models); ``window=(t0, t1)`` in seconds
    draws only the ops overlapping that window. Idle time of the compute stream
    (the exposed communication) is drawn in the ``exposed`` colour; iteration
    time and exposed communication are annotated.
    """
    if config is None:
        if model is None or system is None or task is None:
            raise D.PlotError("timeline needs a config or model, system and task")
        from fastmodel.api import make_config

        config = make_config(model, system, task, semantics, plan, num_nodes)
    sched = schedule(config)
    total = sched.iteration_time
    lo, hi = window_bounds(window, total, "iteration")
    factor, unit = S.display_unit("s", [hi - lo])
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        rows = {}
        for stream in (STREAM_COMPUTE, STREAM_COMM):
            for code, name in enumerate(CATEGORY_NAMES):
                on = (sched.stream == stream) & (sched.category == code)
                if on.any():
                    bars = merge_ops(sched, stream, code, (hi - lo) / 1000) if aggregate else \
                        np.stack([sched.start[on], sched.end[on]], 1)
                    rows.setdefault(stream, []).append((f"ops:{stream}:{name}", name, in_window(bars, lo, hi)))
        rows.setdefault(STREAM_COMPUTE, []).append(("exposed", "exposed", in_window(sched.idle_compute(), lo, hi)))
        exposed = float(np.sum(np.diff(sched.idle_compute(), axis=1)))
        dense = 0 if aggregate else dense_columns([[bars for _, _, bars in layers] for layers in rows.values()], lo, hi)
        shown = []
        for stream, layers in rows.items():
            drawn = draw_row(ax, ROWS[stream], BAR_HEIGHT, [(gid, S.PALETTE[name], bars) for gid, name, bars in layers],
                             lo, hi, dense)
            shown += [name for gid, name, _ in layers if gid in drawn and name not in shown]
        handles = [Patch(facecolor=S.PALETTE[name], label=S.CATEGORY_LABELS[name]) for name in shown]
        if sched.barrier is not None and lo <= sched.barrier <= hi:
            ax.axvline(sched.barrier, color="0.3", linewidth=0.6, linestyle="--")
            ax.annotate("fwd | bwd", (sched.barrier, 1.5), ha="center", va="bottom", fontsize=6, color="0.3",
                        annotation_clip=False)
        ax.set_xlim(lo, min(hi, total) if window is None else hi)
        ax.set_ylim(-0.5, 1.5)
        ax.set_yticks([ROWS[STREAM_COMPUTE], ROWS[STREAM_COMM]], labels=["compute", "comm."])
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.xaxis.set_major_formatter(S.unit_formatter(factor))
        ax.set_xlabel(S.label("time", unit))
        share = exposed / total if total > 0 else 0.0
        tfac, tunit = S.display_unit("s", [total])
        note = (f"iteration {S.fmt_number(total / tfac)} {tunit}; exposed comm. "
                f"{S.fmt_number(exposed / tfac)} {tunit} ({share:.1%} of iteration)")
        ax.set_title(title if title is not None else f"{config.model.name}, {config.plan.label}: {note}", loc="left")
        fig.legend(handles=handles, loc="outside right upper", handlelength=1.2)
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax
