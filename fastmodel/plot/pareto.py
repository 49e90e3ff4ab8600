"""Pareto frontier over any two variables, each minimised or maximised."""

from __future__ import annotations

import numpy as np

from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.readable import legend_label, make_readable, place_labels_noted


def pareto_mask(x, y, x_dir: str = "min", y_dir: str = "min") -> np.ndarray:
    """Boolean mask of the non-dominated points of (x, y) (NaN points are never on the frontier).

    A point is dominated when another is at least as good on both axes and
    strictly better on one; equal points do not dominate each other. O(n log n).
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError("x and y must have the same size")
    for way in (x_dir, y_dir):
        if way not in ("min", "max"):
            raise ValueError(f"direction must be 'min' or 'max' (got {way!r})")
    ok = np.isfinite(x) & np.isfinite(y)
    a = np.where(x_dir == "min", x, -x)[ok]
    b = np.where(y_dir == "min", y, -y)[ok]
    mask = np.zeros(x.shape, dtype=bool)
    if a.size == 0:
        return mask
    order = np.lexsort((b, a))  # by a, then b
    a_s, b_s = a[order], b[order]
    new_group = np.concatenate([[True], a_s[1:] != a_s[:-1]])
    group = np.cumsum(new_group) - 1
    starts = np.flatnonzero(new_group)
    group_min = b_s[starts]                      # sorted by b within a group: its first is its minimum
    before = np.concatenate([[np.inf], np.minimum.accumulate(group_min)[:-1]])  # best b at strictly smaller a
    keep = (b_s == group_min[group]) & (b_s < before[group])
    idx = np.flatnonzero(ok)[order[keep]]
    mask[idx] = True
    return mask


def frontier(data, x: str, y: str, *, x_dir: str | None = None, y_dir: str | None = None, sel=None,
             where=None, label=None):
    """The points of ``data`` as a DataFrame (coordinates, x, y, ``on_frontier``), frontier first by x.

    ``x``/``y``: any variable or coordinate; directions default to the variable's ``better``
    (registry; time, cost, memory: min; throughput: max). ``where``: a boolean mask (e.g.
    ``ds.fits_memory``) restricting the points.
    """
    import pandas as pd
    import xarray as xr

    if not isinstance(data, (xr.Dataset, xr.DataArray)):
        raise D.not_data(data)
    ds = D.select(data, sel)
    xs, ys = D.get_var(ds, x), D.get_var(ds, y)
    x_dir = D.check_direction(x_dir, x, xs.attrs)
    y_dir = D.check_direction(y_dir, y, ys.attrs)
    for name, var in ((x, xs), (y, ys)):
        if var.dtype.kind in "iuf":
            D.check_quantity(var, "a Pareto axis")
        if var.dtype.kind not in "iuf":
            numeric = [n for n in D.names_of(ds) if ds[n].dtype.kind in "iuf" and n != "status"]
            raise D.PlotError(f"{name} is not numeric ({'labels' if var.dtype.kind in 'USO' else var.dtype}); "
                              f"a Pareto axis needs numbers, e.g. {', '.join(numeric[:6])}"
                              + (f"; use --label {name} to name the points" if name in ds.dims else ""))
    import xarray as xr

    if where is not None:
        where = D.select(where, {k: v for k, v in (sel or {}).items() if k in where.dims})
        xs, ys = xs.where(where), ys.where(where)
    xs, ys = xr.broadcast(xs, ys)
    left = _leave_out(ds, xs, ys, where)
    if left is not None:
        xs, ys, left = left
    dims = xs.dims
    xv = np.asarray(xs.transpose(*dims).values, dtype=float).ravel()
    yv = np.asarray(ys.transpose(*dims).values, dtype=float).ravel()
    columns = {}
    if dims:
        grids = np.meshgrid(*[xs[d].values for d in dims], indexing="ij")
        columns = {d: g.ravel() for d, g in zip(dims, grids)}
    finite = np.isfinite(xv) & np.isfinite(yv)
    if not finite.any():
        raise D.PlotError(f"no point has finite {x} and {y}" + (f": {left}" if left else ""))   # why: the statuses
    table = pd.DataFrame({**columns, x: xv, y: yv} if x != y else {**columns, x: xv})
    table["on_frontier"] = pareto_mask(xv, yv, x_dir, y_dir)
    table = table[finite].reset_index(drop=True)
    table.attrs.update(x=x, y=y, x_dir=x_dir, y_dir=y_dir, dims=list(dims), left_out=left or "",
                       x_units=D.units_of(xs), y_units=D.units_of(ys),
                       x_name=D.long_name_of(xs), y_name=D.long_name_of(ys))
    return table


def _leave_out(ds, xs, ys, where):
    """(x, y, line) with the points that are no answer left out, as the heatmap leaves them
    (:func:`fastmodel.plot.data.visible`: status ok, or over memory for a size in bytes; a real-world plan over
    HBM is ``does_not_fit``, :func:`fastmodel.plot.data.over_memory`), and the line saying how many and why
    (:func:`fastmodel.plot.data.left_out_line`; a point outside ``where`` is ``filtered_by_where``); None for data
    without a status. The frontier drew an illegal or over-memory point that had numbers as an answer."""
    import xarray as xr

    if not hasattr(ds, "data_vars") or "status" not in ds:
        return None
    status = D.over_memory(ds["status"], ds.get("fits_memory"))
    keep = D.visible(xs, status) & D.visible(ys, status)
    status, keep = (a.broadcast_like(xs).transpose(*xs.dims) for a in xr.broadcast(status, keep))
    outside = ~where.broadcast_like(xs).transpose(*xs.dims) if where is not None else None
    left = ~np.asarray(keep.values, dtype=bool)
    if outside is not None:
        left = left | np.asarray(outside.values, dtype=bool)
    extra = {"filtered_by_where": outside.values} if outside is not None else {}
    line = D.left_out_line(D.reasons_of(status, left, extra), int(np.asarray(keep.values).size))
    return xs.where(keep), ys.where(keep), line


def _label_points(ax, chosen, x, y, dims) -> list:
    """One label per chosen frontier point (its plan, or the dimensions named), unplaced: :func:`_place_labels`
    puts them where they cross neither the frontier nor each other once the figure is laid out."""
    texts = []
    for _, row in chosen.iterrows():
        text = ", ".join(S.fmt_coord(row[d]) if isinstance(row[d], str) else f"{d}={S.fmt_coord(row[d])}"
                         for d in dims)
        if text:
            texts.append(ax.annotate(text, (row[x], row[y]), xytext=(3, 3), textcoords="offset points",
                                     fontsize=5.5, color="0.15", gid="frontier-label"))
    return texts


def _place_labels(fig, ax, texts, line) -> None:
    """Labels off the frontier line and each other (:func:`fastmodel.plot.readable.place_labels_noted`); the ones
    with no room are left out and the frontier's legend entry says how many (``ax.labels_left_out``)."""
    entry = next((t for legend in fig.legends for t in legend.get_texts()
                  if t.get_text().startswith("Pareto frontier")), None)
    place_labels_noted(fig, ax, texts, [line], base=entry and entry.get_text(), show=entry and entry.set_text)


def _label_dims(table, label):
    import pandas as pd

    dims = table.attrs["dims"]
    if label is not None:
        for d in ([label] if isinstance(label, str) else label):
            D.check_dim(dims, d, "label dimension")
        return [label] if isinstance(label, str) else list(label)
    varying = [d for d in dims if table[d].nunique() > 1]  # every dimension that tells frontier points apart
    text = [d for d in varying if not pd.api.types.is_numeric_dtype(table[d])]
    return text + [d for d in varying if d not in text]


def pareto(data, x: str, y: str, *, x_dir: str | None = None, y_dir: str | None = None, sel=None, where=None,
           label=None, max_labels: int = 16, log: bool | None = None, size="single", height: float | None = None,
           title: str | None = None, ax=None):
    """Scatter of every point, dominated ones faded, the frontier drawn and its points labelled.

    Labels name the point's plan (or other string coordinates, else the
    varying dimensions; ``label=`` picks). Returns ``(fig, ax)``; the frontier
    table (:func:`frontier`) is ``ax.frontier``.
    """
    table = frontier(data, x, y, x_dir=x_dir, y_dir=y_dir, sel=sel, where=where, label=label)
    dims = _label_dims(table, label)
    front = table[table.on_frontier].sort_values([x, y])
    rest = table[~table.on_frontier]
    xv, yv = table[x].to_numpy(), table[y].to_numpy() if x != y else table[x].to_numpy()
    xf, xu = S.display_unit(table.attrs["x_units"], xv)
    yf, yu = S.display_unit(table.attrs["y_units"], yv)
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        ax.scatter(rest[x], rest[y], s=6, color="0.6", alpha=0.35, linewidths=0, label="dominated" if len(rest) else None,
                   gid="dominated")
        ax.scatter(front[x], front[y], s=14, color=S.PALETTE["gemm"], zorder=3, linewidths=0, label="Pareto frontier",
                   gid="frontier")
        step = "post" if table.attrs["x_dir"] == "min" else "pre"  # the edge of the dominated region
        (line,) = ax.step(front[x], front[y], where=step, color=S.PALETTE["gemm"], linewidth=0.9, zorder=2,
                          gid="frontier-line")
        for axis, values, name in (("x", xv, x), ("y", yv, y)):
            levels = np.unique(values)
            geometric = name in table.attrs["dims"] and S.is_geometric(levels)
            use_log = log if log is not None else (geometric or (np.all(values > 0) and values.max() / values.min() >= 50))
            if use_log:
                base = 2 if geometric and all(S.is_power_of_two(v) for v in levels) else 10
                (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=base)
                if geometric and levels.size <= 12:
                    (ax.set_xticks if axis == "x" else ax.set_yticks)(levels, labels=[S.fmt_coord(v) for v in levels])
        S.unit_ticks(ax.xaxis, xf)
        S.unit_ticks(ax.yaxis, yf)
        for axis, factor in ((ax.xaxis, xf), (ax.yaxis, yf)):   # a log axis of under two decades: 20, 30, 50
            axis.set_minor_formatter(S.log_minor_formatter(axis, factor) if axis.get_scale() == "log" else "")
        better = {"min": "lower is better", "max": "higher is better"}
        ax.set_xlabel(S.label(f"{table.attrs['x_name']} ({better[table.attrs['x_dir']]})", xu))
        ax.set_ylabel(S.label(f"{table.attrs['y_name']} ({better[table.attrs['y_dir']]})", yu))
        chosen = front if len(front) <= max_labels else front.iloc[np.linspace(0, len(front) - 1, max_labels).round()
                                                                   .astype(int)]
        # a dimension with one value on the whole frontier is named once, in the legend, not on every point
        same = [d for d in dims if len(front) > 1 and front[d].nunique() == 1]
        texts = _label_points(ax, chosen, x, y, [d for d in dims if d not in same])
        if same:
            first = front.iloc[0]
            text = ", ".join(S.fmt_coord(first[d]) if isinstance(first[d], str) else f"{d}={S.fmt_coord(first[d])}"
                             for d in same)
            for collection in ax.collections:
                if collection.get_gid() == "frontier":
                    collection.set_label(f"Pareto frontier ({text})")
        if table.attrs["left_out"]:   # said, never silent: the points that are no answer, and why
            ax.plot([], [], linestyle="none", marker="x", color="0.55", label=legend_label(fig, table.attrs["left_out"]),
                    gid="left-out")
        fig.legend(loc="outside lower center", ncol=2)   # under the x label, as the other figures' legends
        shown_title = title if title is not None else _default_title(data, x, y, sel)
        if title is not None or shown_title:
            ax.set_title(shown_title)
    ax.frontier = table
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    _place_labels(fig, ax, texts, line)
    return fig, ax


def _default_title(data, x: str, y: str, sel) -> str:
    """What the result is of and what ``sel`` fixed (``LLaMA2-70B on dc-a: global_batch=2048 samples``), as the
    heatmap's title says it."""
    var = next((v for v in (y, x) if v in getattr(data, "data_vars", ())), None)
    return D.fixed_title(D.select(data[var], sel), D.subject(data)) if var is not None else D.subject(data)
