"""Breakdown: stacked bars of where the time goes, serialized vs overlapped (the paper's validation figure)."""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.patches import Patch

from fastmodel.errors import nearest
from fastmodel.kernels.layout import CATEGORY_NAMES
from fastmodel.plot import data as D
from fastmodel.plot import style as S

#: "Serialized": every component summed; "Overlapped": compute + exposed comm = iteration time
SERIALIZED = tuple(f"time_{c}" for c in CATEGORY_NAMES)
OVERLAPPED = ("time_gemm", "time_emb", "exposed_comm")


def _component(name: str) -> str:
    return "exposed" if name == "exposed_comm" else name.removeprefix("time_")


def breakdown_table(data, sel=None, labels=None) -> tuple[list[str], dict[str, np.ndarray]]:
    """(config labels, {variable: values}) for the components of each configuration.

    ``data``: a Dataset with at most one dimension left after ``sel`` (one bar
    pair per value), or a list of 0-d Datasets (e.g. from ``fastmodel.evaluate``).
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
    missing = [n for n in (*SERIALIZED, "exposed_comm", "iteration_time") if n not in data]
    if missing:
        raise D.PlotError(f"breakdown needs the variables {', '.join(missing)}")
    data = D.select(data[[*SERIALIZED, "exposed_comm", "iteration_time"]], sel)
    if data.iteration_time.ndim > 1:
        raise D.PlotError(f"breakdown shows configurations along one dimension; fix the others with --sel: "
                          f"{', '.join(data.iteration_time.dims)}")
    data = data.load()
    if data.iteration_time.ndim == 0:
        data = data.expand_dims(config=[labels[0] if labels else "configuration"])
    dim = data.iteration_time.dims[0]
    if data[dim].size == 0:
        raise D.PlotError("the selection is empty")
    names = list(labels) if labels is not None else [S.fmt_coord(v) for v in data[dim].values]
    values = {n: np.asarray(data[n].values, dtype=float) for n in (*SERIALIZED, "exposed_comm", "iteration_time")}
    if not np.all(np.isfinite(values["iteration_time"])):
        bad = [names[i] for i in np.flatnonzero(~np.isfinite(values["iteration_time"]))]
        raise D.PlotError(f"no result (illegal or does not fit) for {dim}={', '.join(bad)}")
    return names, values


#: what a breakdown can stack
QUANTITIES = ("time", "memory")


def breakdown(data, sel=None, labels=None, *, quantity: str = "time", size="single", height: float | None = None,
              title: str | None = None, ax=None):
    """Stacked bars per configuration; returns ``(fig, ax)``.

    ``quantity="time"``: "Serialized" (GEMM + embedding + every collective) next to "Overlapped" (GEMM +
    embedding + exposed communication = iteration time). ``quantity="memory"`` (real-world results): memory
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
    if isinstance(data, xr.Dataset) and "memory" in data and not all(n in data for n in SERIALIZED):
        raise D.PlotError("the time breakdown needs MAD-Max results (time_gemm, time_emb, the collectives, "
                          "exposed_comm); for a real-world result stack memory instead (--quantity memory)")
    names, values = breakdown_table(data, sel, labels)
    factor, unit = S.display_unit("s", np.concatenate([[values["time_gemm"].max()], values["iteration_time"]]))
    single = len(names) == 1
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        width, positions, ticklabels = 0.38, [], []
        used = []
        for i, _ in enumerate(names):
            for j, (kind, parts) in enumerate((("Serialized", SERIALIZED), ("Overlapped", OVERLAPPED))):
                x = i + (j - 0.5) * (width + 0.04)
                bottom = 0.0
                for part in parts:
                    height_ = float(values[part][i])
                    component = _component(part)
                    ax.bar(x, height_, width, bottom=bottom, color=S.PALETTE[component], linewidth=0,
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
        ax.set_ylabel(S.label("time per iteration", unit))
        ax.margins(y=0.08)
        order = [c for c in (*CATEGORY_NAMES, "exposed") if c in used]
        fig.legend(handles=[Patch(facecolor=S.PALETTE[c], label=S.CATEGORY_LABELS[c]) for c in order],
                   loc="outside right upper", handlelength=1.2)
        if title is not None:
            ax.set_title(title)
        elif single:
            ax.set_title(names[0])
    return fig, ax
