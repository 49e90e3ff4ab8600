"""Memory over one training step: one panel per pipeline rank, memory by kind stacked over the rank's
operations, with the HBM and usable-HBM lines (in the style of PyTorch's memory snapshot)."""

from __future__ import annotations

import numpy as np

from fastmodel.plot import style as S
from fastmodel.plot.memory import KIND_COLOURS
from fastmodel.plot.readable import make_readable

#: at most this many pipeline ranks get a panel (the first, evenly spaced middle ones, the last)
MAX_PANELS = 4


def panel_stages(n: int, most: int = MAX_PANELS) -> list[int]:
    """The ranks drawn: all of ``n`` up to ``most``, else the first, the last and evenly spaced ones between."""
    if n <= most:
        return list(range(n))
    return sorted({int(round(i * (n - 1) / (most - 1))) for i in range(most)})


def memory_timeline(data=None, *, model=None, system=None, task=None, record=None, source=None, plan=None,
                    num_nodes=None, memory_margin=None, size="double", title: str | None = None, execution=None):
    """Stacked memory by kind (GiB) over one step, one panel per pipeline rank (at most ``MAX_PANELS``); ``data``
    is a ``MemoryTimeline`` (``fastmodel.engines.memory_timeline``), else it is built from the specs (run as
    ``execution`` says: a dict of execution fields, as in ``fastmodel.evaluate``) or ``record``. Lines: the HBM,
    the usable HBM (HBM minus ``memory_margin``) and the worst rank's reserved peak plus the overhead (what the
    device shows in use with the allocator's cache).
    Returns ``(fig, axes)``."""
    if data is None:
        from fastmodel import engines

        data = engines.memory_timeline(model=model, system=system, task=task, record=record, source=source,
                                       plan=plan, num_nodes=num_nodes, memory_margin=memory_margin,
                                       execution=execution)
    ranks = panel_stages(len(data.stages))
    gib = 2.0 ** 30
    with S.paper_rc():
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=S.figure_size(size, 1.1 + 1.0 * len(ranks)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(ranks), 1, sharey=True, squeeze=False)[:, 0]
        for ax, rank in zip(axes, ranks):
            stage = data.stages[rank]
            x = np.arange(len(stage.labels))
            bottom = np.zeros(len(x))
            for k, kind in enumerate(data.kinds):
                values = stage.values[:, k] / gib
                if not values.any():
                    continue
                ax.fill_between(x, bottom, bottom + values, step="mid", color=KIND_COLOURS.get(kind, "0.5"),
                                linewidth=0, label=kind.replace("_", " "), gid=f"memory:{kind}")
                bottom = bottom + values
            ax.axhline(data.hbm_bytes / gib, color="0.1", linewidth=0.8, gid="hbm")
            ax.axhline(data.usable_bytes / gib, color="0.2", linestyle="--", linewidth=0.8, gid="usable")
            ax.axhline(data.reserved_bytes / gib, color="#D55E00", linestyle=":", linewidth=0.8, gid="reserved")
            ax.set_xlim(-0.5, len(x) - 0.5)
            ax.set_ylabel(f"rank {rank}\nGiB")
            ticks = x[1:-1:max(1, (len(x) - 2) // 12)]
            ax.set_xticks(ticks, [stage.labels[i] for i in ticks], rotation=90)
        axes[-1].set_xlabel("operations of the step (F j / B j: forward / backward of micro-batch j)")
        top = axes[0]
        top.annotate(f"HBM {data.hbm_bytes / gib:.0f} GiB", (1.0, data.hbm_bytes / gib),
                     xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=6)
        top.annotate(f"usable {data.usable_bytes / gib:.0f}", (0.0, data.usable_bytes / gib),
                     xycoords=("axes fraction", "data"), ha="left", va="top", fontsize=6, color="0.2")
        top.annotate(f"reserved + overhead {data.reserved_bytes / gib:.1f}", (1.0, data.reserved_bytes / gib),
                     xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=6, color="#D55E00")
        top.set_title(title if title is not None else f"memory over one step: {data.title}", loc="left")
        handles, labels = top.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize=6)
    make_readable(fig)
    return fig, axes
