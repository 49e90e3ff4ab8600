"""Memory per device by kind across configurations: stacked bars with the usable-HBM line (issue 11's figure)."""

from __future__ import annotations

import numpy as np

from fastmodel.plot import style as S

#: one colour per memory kind (Okabe-Ito, colour-blind safe)
KIND_COLOURS = {
    "weights": "#0072B2", "gradients": "#56B4E9", "optimizer": "#009E73", "activations": "#E69F00",
    "kv_cache": "#CC79A7", "buffers": "#F0E442", "overhead": "#999999",
}


def memory_bars(ds, dim: str = "plan", size="single", title: str | None = None, ax=None):
    """Stacked bars of ``ds.memory`` (a real-world sweep with one remaining dimension ``dim``) by
    ``memory_kind``, in GiB, with the usable HBM of the system as a dashed line. Returns ``(fig, ax)``."""
    from fastmodel.plot.data import PlotError

    if "memory" not in ds or "memory_kind" not in ds["memory"].dims:
        raise PlotError("memory_bars needs a real-world sweep (a 'memory' variable with a memory_kind dimension)")
    memory = ds["memory"]
    extra = [d for d in memory.dims if d not in (dim, "memory_kind") and memory.sizes[d] > 1]
    if extra:
        raise PlotError(f"select one value of {', '.join(extra)} first (ds.sel(...)); only '{dim}' may vary")
    memory = memory.squeeze(drop=True).transpose(dim, "memory_kind") if dim in memory.dims else \
        memory.expand_dims(dim).transpose(dim, "memory_kind")
    values = memory.values / 2**30
    keep = np.isfinite(values).all(axis=1)
    if not keep.any():
        raise PlotError("no configuration has a memory result (all illegal)")
    labels = [S.fmt_coord(v) for v in np.asarray(memory[dim].values)[keep]]
    values = values[keep]
    with S.paper_rc():
        fig, ax = S.new_axes(size, ax=ax)
        x = np.arange(len(labels))
        bottom = np.zeros(len(labels))
        for k, kind in enumerate(np.asarray(memory["memory_kind"].values)):
            if np.all(values[:, k] == 0):
                continue
            ax.bar(x, values[:, k], bottom=bottom, color=KIND_COLOURS.get(str(kind), "0.5"), width=0.75,
                   label=str(kind).replace("_", " "), gid=f"memory:{kind}")
            bottom += values[:, k]
        if "usable_hbm_bytes" in ds.attrs:
            usable = float(ds.attrs["usable_hbm_bytes"]) / 2**30
            ax.axhline(usable, color="0.2", linestyle="--", linewidth=0.8, gid="hbm")
            ax.annotate(f"usable HBM {usable:.0f} GiB", (len(labels) - 0.5, usable), ha="right", va="bottom",
                        fontsize=6, color="0.2")
        ax.set_xticks(x, labels, rotation=90 if len(labels) > 6 else 0)
        ax.set_xlabel(dim)
        ax.set_ylabel(S.label("memory per device", "GiB"))
        if title is not None:
            ax.set_title(title, loc="left")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize=6)
    return fig, ax
