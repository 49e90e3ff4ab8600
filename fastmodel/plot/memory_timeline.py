"""Memory over one training step: one panel per pipeline rank, memory by kind stacked over the rank's
operations, with the HBM and usable-HBM lines (in the style of PyTorch's memory snapshot)."""

from __future__ import annotations

import re

import matplotlib as mpl
import numpy as np

from fastmodel.plot import style as S
from fastmodel.plot.memory import KIND_COLOURS
from fastmodel.plot.readable import GAP_PT, crowded, make_readable

#: at most this many pipeline ranks get a panel (the first, evenly spaced middle ones, the last)
MAX_PANELS = 4
_OP = re.compile(r"^[FB](\d+)\b")
#: the least room between two per-operation ticks, in points (closer, the ticks are left out)
MIN_TICK_GAP_PT = 1.5
#: how a thinned label rule says the ticks mark every operation
TICK_NOTE = "; a tick marks every operation"
#: the x label of the lowest panel
XLABEL = "operations of the step (F j / B j: forward / backward of micro-batch j)"


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
            ax.set_ylabel(f"rank {rank}\nmemory [GiB]")
        # the data's note on marked labels (DualPipe's reverse direction: F j'), inside the parenthesis
        xlabel = XLABEL[:-1] + f"; {data.label_note})" if data.label_note else XLABEL
        xlabel = xlabel if fig.get_figwidth() >= 5 else xlabel.replace(" (", "\n(")   # a column: two lines
        axes[-1].set_xlabel(xlabel)
        top = axes[0]
        top.annotate(f"HBM {data.hbm_bytes / gib:.0f} GiB", (1.0, data.hbm_bytes / gib),
                     xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=6)
        top.annotate(f"usable {data.usable_bytes / gib:.0f} GiB", (0.0, data.usable_bytes / gib),
                     xycoords=("axes fraction", "data"), ha="left", va="top", fontsize=6, color="0.2")
        top.annotate(f"reserved + overhead {data.reserved_bytes / gib:.1f} GiB", (1.0, data.reserved_bytes / gib),
                     xycoords=("axes fraction", "data"), ha="right", va="bottom", fontsize=6, color="#D55E00")
        top.set_title(title if title is not None else f"memory over one step: {data.title}", loc="left")
        handles, labels = top.get_legend_handles_labels()
        # beside the top panel, its top level with the panel's: a figure legend at the figure's top ran into the
        # title and the HBM note of a one-column figure
        top.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=6)
        rule = label_ops(fig, axes, [data.stages[rank] for rank in ranks])
        if not tick_every_op(fig, axes, [len(data.stages[rank].labels) for rank in ranks]):
            rule = rule.replace(TICK_NOTE, "")
        if rule:
            axes[-1].set_xlabel(f"{xlabel}\n{rule}")
    make_readable(fig, fixed=[ax.xaxis for ax in axes])   # label_ops chose them: thinning them again
    return fig, axes                                       # said a second, contradicting rule


def short_label(text: str) -> str:
    """A moment's tick label: ``optimizer step`` shortened to ``opt. step``, the others as they are."""
    return "opt. step" if text == "optimizer step" else text


def micro_batch(text: str) -> int | None:
    """The micro-batch of an operation's label (``F3``, ``B3``, ``B3 emb``, DualPipe's reverse ``F3'`` -> 3); None
    for ``start`` and the optimizer step."""
    match = _OP.match(text)
    return int(match.group(1)) if match else None


def label_sets(labels) -> list[tuple[list[int], str]]:
    """The label sets tried, fewest labels last, each with the rule said under the axis ('' for all): every
    operation; the forward and backward passes (F j, B j; sub-steps such as ``B j emb`` left to their ticks);
    one forward per micro-batch j = 0, s, 2s ... (s = 1, 2, 4 ... while s < the micro-batch count), its first
    ``F j`` (an interleaved schedule runs ``F j`` once per chunk; DualPipe's two directions each number their
    micro-batches from 0, ``F j`` and the reverse ``F j'``: every occurrence was labelled, every level crowded;
    the first of the two is labelled, its mark saying which direction).
    A rule keeps whole passes: thinning every k-th operation dropped some micro-batches' forwards and others'
    backwards (F1, F3 missing beside B1); it names only micro-batches that exist."""
    batches = [micro_batch(text) for text in labels]
    passes = [i for i, text in enumerate(labels) if batches[i] is not None and text.split()[0] == text]
    sets = [(list(range(len(labels))), ""), (passes, "labelled: F j and B j" + TICK_NOTE)]
    first: dict[int, int] = {}     # micro-batch -> the index of its first forward
    forwards = [i for i in passes if labels[i].startswith("F")]
    for i in forwards:
        first.setdefault(batches[i], i)
    count = 1 + max((j for j in batches if j is not None), default=0)
    which = "the first forward (F j)" if len(forwards) > len(first) else "the forward (F j)"
    stride = 1
    while True:
        kept = sorted(j for j in first if j % stride == 0)
        sets.append((sorted(first[j] for j in kept), f"labelled: {which} of {said_micro_batches(kept, stride)}"
                     + TICK_NOTE))
        stride *= 2
        if stride >= count:
            return sets


def said_micro_batches(kept: list[int], stride: int) -> str:
    """The micro-batches a forward level labels, as said under the axis, naming only ones that exist:
    ``every micro-batch``, ``micro-batches 0, 2`` (four or fewer), ``micro-batches 0, 8, 16, ..., 1016``."""
    if stride == 1:
        return "every micro-batch"
    if len(kept) <= 4:
        return ("micro-batch " if len(kept) == 1 else "micro-batches ") + ", ".join(map(str, kept))
    return f"micro-batches {kept[0]}, {kept[1]}, {kept[2]}, ..., {kept[-1]}"


def tick_every_op(fig, axes, counts) -> bool:
    """A (minor) tick at every operation of each panel, unless they would sit under :data:`MIN_TICK_GAP_PT` apart
    on a panel as last drawn (a thousand micro-batches drew a solid black bar): then none; True when drawn."""
    widths = [ax.get_window_extent().width * 72.0 / fig.dpi for ax in axes]
    if any(count > 1 and width / count < MIN_TICK_GAP_PT for width, count in zip(widths, counts)):
        return False
    for ax, count in zip(axes, counts):
        ax.set_xticks(range(count), minor=True)
    return True


def label_ops(fig, axes, stages) -> str:
    """Label every panel's operations with the first rule of :func:`label_sets` whose labels overlap on no
    panel (horizontal, else vertical), the same rule on all; returns it ('' when every operation is labelled)."""
    renderer = fig.canvas.get_renderer()
    sets = [label_sets(stage.labels) for stage in stages]
    room = fig.get_figwidth() * 72.0 / (0.9 * mpl.rcParams["xtick.labelsize"] + GAP_PT)   # vertical labels at most
    for level in range(min(len(s) for s in sets)):
        if max(len(choice[level][0]) for choice in sets) > room:   # cannot fit: not worth a draw (1,000s of ticks)
            continue
        for rotation in (0, 90):
            for ax, stage, choice in zip(axes, stages, sets):
                keep = choice[level][0]
                ax.set_xticks(keep, [short_label(stage.labels[i]) for i in keep], rotation=rotation)
            fig.draw_without_rendering()
            if not any(crowded(ax.xaxis, renderer) for ax in axes):
                return sets[0][level][1]
    return sets[0][level][1]
