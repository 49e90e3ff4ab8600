"""Breakdown: stacked bars of where the time goes, serialized vs overlapped (the paper's validation figure), of
any engine whose registry declares a ``BREAKDOWN`` of its step; or of memory by kind (``quantity="memory"``)."""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.patches import Patch

from fastmodel.errors import nearest
from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.masked import status_reasons
from fastmodel.plot.readable import make_readable

#: colour and legend label of each component a breakdown can stack (Okabe-Ito + greys; a process group's exposed
#: and whole communication share its colour): the scheduler's op categories and the real-world model's terms
STYLE = {
    **{c: (S.PALETTE[c], S.CATEGORY_LABELS[c]) for c in S.PALETTE},
    "attention": ("#56B4E9", "attention"), "memory_bound": ("#999999", "memory-bound"),
    "optimizer": ("#555555", "optimizer"), "bubble": ("#DDDDDD", "pipeline bubble"), "tp": ("#009E73", "TP comm."),
    "cp": ("#E69F00", "CP comm."), "ep": ("#CC79A7", "EP comm."), "pp": ("#F0E442", "PP comm."),
    "dp": ("#D55E00", "DP comm."), "host_wait": ("#000000", "host-bound wait"),
    "offload": ("#8C564B", "offload copies"), "eval": ("#AA4499", "evaluation"),
    "straggler": ("#661100", "slowest-GPU wait"),
}


def _component(name: str) -> str:
    if name in ("exposed_comm", "pipeline_bubble"):
        return {"exposed_comm": "exposed", "pipeline_bubble": "bubble"}[name]
    return name.removeprefix("time_").removeprefix("comm_").removeprefix("exposed_")


def breakdown_of(data):
    """The registry's breakdown (``registry.<engine>.BREAKDOWN``) whose components ``data`` holds; PlotError
    naming what is missing otherwise."""
    from fastmodel.registry import ENGINES

    found = [b for b in (m.BREAKDOWN for m in ENGINES.values()) if b is not None]
    names = set(data.variables) if isinstance(data, xr.Dataset) else set(data[0].variables) if data else set()
    for candidate in found:
        if {*candidate.serialized, *candidate.overlapped, candidate.total} <= names:
            return candidate
    if {"ttft", "tpot", "decode_gemm"} <= names:     # it listed MAD-Max's step components for a serving result
        raise D.PlotError("breakdown draws training steps; a serving result's times by kind are its variables "
                          "prefill_gemm ... decode_comm: plot one with --var NAME (heatmap, scaling)")
    missing = sorted({*found[0].serialized, *found[0].overlapped, found[0].total} - names)
    raise D.PlotError(f"breakdown needs the variables {', '.join(missing)} (or another engine's step components)")


def breakdown_table(data, sel=None, labels=None) -> tuple[list[str], dict[str, np.ndarray]]:
    """(config labels, {variable: values}) for the components of each configuration.

    ``data``: a Dataset with at most one dimension of several values left after ``sel`` (one bar pair per value),
    or a list of 0-d Datasets (e.g. from ``fastmodel.evaluate``). Its components are the engine's ``BREAKDOWN`` of the
    registry; the total is ``step_time``.
    """
    if isinstance(data, (list, tuple)):
        if not data:
            raise D.PlotError("breakdown needs at least one configuration")
        data = xr.concat([d.drop_vars([c for c in d.coords]) for d in data], dim="config", coords="minimal",
                         compat="override", join="override")
        data = data.assign_coords(config=[d.attrs.get("plan", str(i)) for i, d in enumerate(data)]) \
            if labels is None else data.assign_coords(config=list(labels))
    if not isinstance(data, xr.Dataset):
        raise D.PlotError(f"breakdown needs a Dataset or a list of Datasets, got {type(data).__name__}")
    parts = breakdown_of(data)
    names = list(dict.fromkeys((*parts.serialized, *parts.overlapped, parts.total)))
    shown, dim, values = _one_dimension(data, names, parts.total, sel, labels)
    if not np.all(np.isfinite(values[parts.total])):
        bad = [shown[i] for i in np.flatnonzero(~np.isfinite(values[parts.total]))]
        listed = ", ".join(bad[:12]) + (f" ... ({len(bad)} of {len(shown)})" if len(bad) > 12 else "")
        why = status_reasons(D.select(data["status"], sel)) if "status" in data else ""   # NaN status: masked
        others = f"; keep the others with --sel {dim}=VALUE (repeatable)" if len(bad) < len(shown) else ""
        raise D.PlotError(f"no result (illegal or does not fit) for {dim}={listed}"
                          f"{f' (status {why})' if why else ''}{others}")
    return shown, values


def _one_dimension(data, names: list[str], total: str, sel, labels) -> tuple[list[str], str, dict[str, np.ndarray]]:
    """(bar labels, the dimension, variable -> values) of ``names`` after ``sel``: the configurations must lie
    along one dimension (or be a single one); dimensions left with one value are dropped."""
    data = D.select(data[names], sel)
    dims = data[total].dims
    varying = [d for d in dims if data.sizes[d] > 1]
    if len(varying) > 1:
        raise D.PlotError(f"breakdown shows configurations along one dimension; fix the others with --sel: "
                          f"{', '.join(varying)}")
    if len(dims) > 1:       # dimensions of one value dropped (as memory_table does): the bars along the other
        data = data.squeeze([d for d in dims if d != (varying or dims[-1:])[0]])
    data = data.load()
    if data[total].ndim == 0:
        data = data.expand_dims(config=[labels[0] if labels else "configuration"])
    dim = data[total].dims[0]
    D.check_not_empty(data[total])
    shown = list(labels) if labels is not None else [S.fmt_coord(v) for v in data[dim].values]
    return shown, dim, {n: np.asarray(data[n].values, dtype=float) for n in names}


#: what a breakdown can stack
QUANTITIES = ("time", "memory")


def breakdown(data, sel=None, labels=None, *, quantity: str = "time", size="single", height: float | None = None,
              title: str | None = None, ax=None):
    """Stacked bars per configuration; returns ``(fig, ax)``.

    ``quantity="time"``: "Serialized" (every component of the engine's ``BREAKDOWN`` in the registry summed)
    next to "Overlapped" (compute + exposed communication = step time): MAD-Max GEMM + embedding + every
    collective vs GEMM + embedding + exposed communication; the real-world model's compute (GEMM, attention,
    memory-bound) + optimizer + pipeline bubble + each process group's whole or exposed communication. ``quantity="memory"`` (real-world results): memory
    per device by kind with the usable-HBM line (:func:`fastmodel.plot.memory.memory_bars`).
    """
    if quantity not in QUANTITIES:
        raise D.PlotError(f"unknown quantity {quantity!r}{nearest(quantity, QUANTITIES)}; one of "
                          f"{', '.join(QUANTITIES)}")
    if quantity == "memory":
        from fastmodel.plot.memory import memory_bars

        if labels is not None or isinstance(data, (list, tuple)):
            raise D.PlotError("a memory breakdown takes one Dataset (a real-world result), not a list or labels")
        return memory_bars(data, sel=sel, size=size, height=height, title=title, ax=ax)
    names, values = breakdown_table(data, sel, labels)
    parts = breakdown_of(data)
    serialized, overlapped = parts.serialized, parts.overlapped
    colours = {c: colour for c, (colour, _) in STYLE.items()}
    legend = {c: text for c, (_, text) in STYLE.items()}
    factor, unit = S.display_unit("s", np.concatenate([[values["time_gemm"].max()], values[parts.total]]))
    single = len(names) == 1
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        width, positions, ticklabels = 0.38, [], []
        used = []
        for i, _ in enumerate(names):
            for j, (kind, parts) in enumerate((("Serialized", serialized), ("Overlapped", overlapped))):
                x = i + (j - 0.5) * (width + 0.04)
                bottom = 0.0
                for part in parts:
                    height_ = float(values[part][i])
                    component = _component(part)
                    ax.bar(x, height_, width, bottom=bottom, color=colours[component], linewidth=0,
                           gid=f"{kind}:{component}:{i}")
                    if height_ > 0 and component not in used:
                        used.append(component)
                    bottom += height_
                ax.annotate(S.fmt_number(bottom / factor), (x, bottom), xytext=(0, 1.5), textcoords="offset points",
                            ha="center", va="bottom", fontsize=6)
                positions.append(x)
                ticklabels.append(kind if single else {"Serialized": "ser.", "Overlapped": "ovl."}[kind])
        ax.set_xticks(positions, labels=ticklabels)
        ax.tick_params(axis="x", length=0)
        if not single:
            for i, name in enumerate(names):
                ax.annotate(name, (i, 0), xycoords=("data", "axes fraction"), xytext=(0, -14),
                            textcoords="offset points", ha="center", va="top", fontsize=6)
        ax.yaxis.set_major_formatter(S.unit_formatter(factor))
        ax.set_ylabel(S.label("time per step", unit))
        # room for the totals over the bars, under a title (a margin cannot pass the sticky edge of a zero-height
        # part stacked on top)
        tallest = max((p.get_y() + p.get_height() for p in ax.patches), default=0.0)
        ax.set_ylim(0.0, tallest * 1.14 if tallest > 0 else 1.0)
        order = [c for c in dict.fromkeys(_component(p) for p in (*serialized, *overlapped)) if c in used]
        fig.legend(handles=[Patch(facecolor=colours[c], label=legend[c]) for c in order],
                   loc="outside right upper", handlelength=1.2)
        subject = D.subject(data) if title is None else ""
        if title is None and isinstance(data, xr.Dataset):   # and what --sel fixed, as the heatmap's title says
            subject = D.fixed_title(D.select(data[breakdown_of(data).total], sel), subject)
        if title is not None:
            ax.set_title(title)
        elif single or subject:
            ax.set_title(", ".join(t for t in (subject, names[0] if single else "") if t))
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax
