"""Memory per device by kind across configurations: stacked bars with the usable-HBM line (issue 11's figure)."""

from __future__ import annotations

import re

import numpy as np

from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.readable import make_readable

#: one colour per memory kind (Okabe-Ito, colour-blind safe)
KIND_COLOURS = {
    "weights": "#0072B2", "gradients": "#56B4E9", "optimizer": "#009E73", "activations": "#E69F00",
    "kv_cache": "#CC79A7", "buffers": "#F0E442", "overhead": "#999999",
}


def _what_it_holds(ds) -> str:
    """What memory a result without a by-kind breakdown does hold, for the refusal's second half."""
    if hasattr(ds, "data_vars") and "kv_cache_memory" in ds:
        return ("a serving result holds weight_memory, kv_cache_memory, activation_memory and memory_per_device: "
                "plot one of them with `--var NAME` (heatmap, scaling)")
    return "MAD-Max results hold weights only"


def _hbm_line(attrs) -> tuple[float, str] | None:
    """The dashed line over the bars (GiB, label): the usable HBM when the result has one, else the HBM itself
    when each plan keeps its own allocator cache free (fastmodel/analysis/margin.py); None without either."""
    if "usable_hbm_bytes" in attrs:
        usable = float(attrs["usable_hbm_bytes"]) / 2**30
        return usable, f"usable HBM {usable:.0f} GiB"
    if "hbm_bytes" in attrs and "memory_margin_rule" in attrs:
        hbm = float(attrs["hbm_bytes"]) / 2**30
        return hbm, f"HBM {hbm:.0f} GiB\n(less each plan's\nallocator cache)"   # a legend entry as wide as the kinds
    return None


def memory_table(ds, dim: str | None = None, sel=None):
    """(the dimension along the bars, ``memory`` as [configuration, memory_kind]) after ``sel``.

    ``dim`` is the one dimension left with more than one value once ``sel`` is applied (dimensions of size
    one are dropped); naming it keeps it even at size one. Any other varying dimension is a one-line error. With
    no dimension left, the one bar's dimension is ``configuration``, its value the fixed coordinates joined by
    ", " (``memory_bars`` puts each on a line of its label).
    """
    from fastmodel.plot import data as D

    if not hasattr(ds, "data_vars") or "memory" not in ds or "memory_kind" not in ds["memory"].dims:
        raise D.PlotError("a memory breakdown needs a real-world training result (a 'memory' variable with a "
                          f"memory_kind dimension, from the default semantics' model); {_what_it_holds(ds)}")
    memory = D.select(ds["memory"], sel)
    D.check_not_empty(memory)
    dims = [d for d in memory.dims if d != "memory_kind"]
    if dim is not None:
        D.check_dim(dims, dim)
    varying = [d for d in dims if memory.sizes[d] > 1 and d != dim]
    if dim is None and len(varying) == 1:
        dim, varying = varying[0], []
    if varying and dim is None:    # it said "fix the others" and listed every one: which is the bars'?
        raise D.PlotError(f"the memory breakdown shows configurations along one dimension, and {', '.join(varying)} "
                          "vary: name the bars' with --dim (dim= in Python) and fix the others with --sel (ds.sel)")
    if varying:
        raise D.PlotError(f"the memory breakdown shows configurations along one dimension (only '{dim}' may vary); "
                          f"fix the others with --sel (ds.sel in Python): {', '.join(varying)}")
    fixed = [f"{d}={S.fmt_coord(memory[d].values[0])}" for d in dims if d != dim and d in memory.coords]
    fixed += [f"{d}={S.fmt_coord(memory[d].values.item())}" for d in memory.coords
              if d not in memory.dims and memory[d].ndim == 0 and d != "memory_kind"]
    memory = memory.isel({d: 0 for d in dims if d != dim}, drop=True)
    if dim is None:
        dim = "configuration"
        memory = memory.drop_vars([c for c in memory.coords if c != "memory_kind"])
        memory = memory.expand_dims({dim: [", ".join(fixed) or "configuration"]})   # one line a term in the bars'
    memory = memory.transpose(dim, "memory_kind").load()
    memory.attrs["fixed"] = ", ".join(fixed) if dim != "configuration" else ""   # for the title
    return dim, memory


def memory_bars(ds, dim: str | None = None, sel=None, size="single", height: float | None = None,
                title: str | None = None, ax=None):
    """Stacked bars of ``ds.memory`` (a real-world result) by ``memory_kind``, in GiB, one bar per value
    of the one dimension ``dim`` left after ``sel``, with the usable HBM of the system as a dashed line.
    Configurations without a result (illegal) are left out. Returns ``(fig, ax)``."""
    from fastmodel.plot.data import PlotError

    dim, memory = memory_table(ds, dim, sel)
    values = memory.values / 2**30
    keep = np.isfinite(values).all(axis=1)
    if not keep.any():
        raise PlotError("no configuration has a memory result (all illegal)")
    coords = np.asarray(memory[dim].values) if dim in memory.coords else np.arange(memory.sizes[dim])
    labels = [S.fmt_coord(v) for v in coords[keep]]
    if dim == "configuration":   # one fixed coordinate a line: a label never wider than the axes (walk 1207e); the
        labels = [re.sub(r", (?=[^\s,=]+=)", "\n", text) for text in labels]   # data keep ", " (review8 #9)
    values = values[keep]
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        x = np.arange(len(labels))
        bottom = np.zeros(len(labels))
        for k, kind in enumerate(np.asarray(memory["memory_kind"].values)):
            if np.all(values[:, k] == 0):
                continue
            ax.bar(x, values[:, k], bottom=bottom, color=KIND_COLOURS.get(str(kind), "0.5"), width=0.75,
                   label=str(kind).replace("_", " "), gid=f"memory:{kind}")
            bottom += values[:, k]
        line = _hbm_line(ds.attrs)
        if line is not None:
            # named in the legend: a label written on the line sat on the bars that cross it
            ax.axhline(line[0], color="0.2", linestyle="--", linewidth=0.8, gid="hbm", label=line[1])
        # many bars: vertical labels at the usual size; make_readable thins them to every k-th bar when they
        # would still touch (never a font below plot/readable.MIN_FONT_PT)
        ax.set_xticks(x, labels, rotation=90 if len(labels) > 6 else 0)
        left_out = int((~keep).sum())   # the illegal configurations have no bar: the axis says how many
        if dim != "configuration":
            ax.set_xlabel(dim + (f" ({left_out:,} illegal left out)" if left_out else ""))
        ax.set_ylabel(S.label("memory per device", "GiB"))
        fixed = memory.attrs.get("fixed", "")   # what --sel fixed, as the heatmap's title says it
        shown_title = title if title is not None else ": ".join(t for t in (D.subject(ds), fixed) if t)
        if title is not None or shown_title:
            ax.set_title(shown_title, loc="left")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=6)
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax
