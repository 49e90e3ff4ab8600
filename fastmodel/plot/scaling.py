"""Scaling curves: one variable against one axis, one line per value of another."""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.lines import Line2D

from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.readable import legend_label, make_readable

#: markers and line styles cycled over the lines, so lines that overlap stay distinguishable
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
LINESTYLES = ("-", "--", ":", "-.")
#: dimensions that count hardware: an ideal (linear) scaling line is drawn against them
SIZE_DIMS = ("num_nodes", "num_devices")
#: rates normalised by the device count whose names do not say so: MAD-Max's effective FLOP/s (peak x
#: flops_util of one device, fastmodel/registry/madmax.py). With ``*_per_gpu``/``*_per_device`` names and
#: fractions of peak (units '1': mfu, hfu, utilisations) they stay flat under ideal scaling
PER_DEVICE_RATES = ("eff_flop_per_s",)
#: the most lines drawn when ``top`` is not given: a one-column legend of 12 entries (+ the ideal line) at 7 pt
#: fits the 2.5 in figure height; 114 plans made a 2-column legend taller than the figure, the axes collapsed
MAX_LINES = 12


def per_device(name: str, units: str) -> bool:
    """True for a variable normalised by the device count (tokens/s per GPU, MFU): linear scaling keeps it
    constant as devices are added, where the whole cluster's rate grows with them."""
    return name.endswith(("_per_gpu", "_per_device")) or units == "1" or name in PER_DEVICE_RATES


def line_style(k: int):
    """The line style of the k-th line: the next one each time the colours (style.CYCLE) start over, so colour,
    marker and style together tell 160 lines apart (the old rule gave lines 0 and 40 the same all three)."""
    return LINESTYLES[(k // len(S.CYCLE)) % len(LINESTYLES)]


def ideal_line(x, rows, maximize: bool, flat: bool = False):
    """Linear scaling from the best value at the smallest x: a rate grows with x, a time shrinks, a rate per
    device (``flat``) stays where it starts (NaN if none)."""
    x = np.asarray(x, dtype=float)
    for j in range(x.size):
        column = rows[:, j][np.isfinite(rows[:, j])]      # an inf (a broken point) starts no line
        if column.size:
            start = column.max() if maximize else column.min()
            if flat:
                return np.full(x.shape, start)
            return start * (x / x[j]) if maximize else start * (x[j] / x)
    return np.full(x.shape, np.nan)


def _lines(da, status, hue, top):
    """(rows, names, how many hue values there were, the left-out note) of the lines to draw: the ``top`` best
    (:data:`MAX_LINES` when not given and there are more) in coordinate order."""
    rows = da.values if hue else da.values[None, :]
    names = [S.fmt_coord(v) for v in da[hue].values] if hue else [None]
    total = len(names)
    order = np.arange(total)
    if top is None and total > MAX_LINES:
        top = MAX_LINES
    if top is not None and hue:
        way = D.direction(str(da.name), da.attrs)
        signed = rows if way == "max" else -rows
        score = np.where(np.isnan(signed), -np.inf, signed).max(axis=1)
        order = np.sort(np.argsort(-score, kind="stable")[:top])
        rows, names = rows[order], [names[i] for i in order]
    if status is None:
        return rows, names, total, ""
    codes = np.asarray(status.values).reshape(total, -1)[order]    # the drawn lines' points
    drawn = xr.DataArray(codes, attrs=status.attrs)
    return rows, names, total, D.left_out_line(D.reasons_of(drawn, codes != 0), codes.size)


def scaling(data, x: str, *, var: str | None = None, hue: str | None = None, sel=None, reduce=(), top: int | None = None,
            logx: bool | None = None, logy: bool | None = None, ideal: bool | None = None, size="single",
            height: float | None = None, title: str | None = None, ax=None):
    """Plot ``var`` against dimension ``x``, one line per ``hue`` value; returns ``(fig, ax)``.

    Every other dimension must be fixed (``sel``) or reduced (``reduce``).
    ``top``: keep the ``top`` hue values with the best value anywhere (by the
    variable's direction). The default, ``top=None``, draws every hue value up to :data:`MAX_LINES` (12) and
    the best ``MAX_LINES`` of more, in the Python API as on the command line, and the legend's title says so
    (``plan: 12 best of 114``): more lines made a legend taller than the figure. For every line pass a ``top``
    at least the number of hue values (``top=ds.sizes["plan"]``). A geometric x axis is drawn on a log scale (base 2 for
    powers of two); y goes log when it spans two decades (``logx``/``logy`` force).
    Lines cycle markers and line styles. ``ideal`` (default: when x is
    num_nodes or num_devices and the variable is a rate or a time) adds the
    linear-scaling line from the best value at the smallest x.
    """
    da, status = D.prepare(data, var, sel, reduce, keep=(x, hue))
    D.check_quantity(da, "a scaling line")
    D.check_not_fixed(da.dims, sel, (("--x", x), ("--hue", hue)))  # fixed to one value: not there to draw along
    D.check_dim(da.dims, x)
    if hue is not None:
        D.check_dim(da.dims, hue)
        if hue == x:
            raise D.PlotError(f"x and hue are both {x!r}")
    keep = {x} | ({hue} if hue else set())
    extra = [d for d in da.dims if d not in keep]
    if extra:
        raise D.PlotError(f"fix or reduce the other dimensions with --sel/--reduce: {', '.join(extra)}")
    if da.dtype.kind not in "iufb":
        raise D.PlotError(f"{da.name} is not numeric")
    order = [*([hue] if hue else []), x]
    da = D.shown(da, status).transpose(*order).astype(float)      # points that do not fit or are illegal: gaps
    status = status.transpose(*order) if status is not None else None
    rows, names, total, left_out = _lines(da, status, hue, top)
    if not np.isfinite(rows).any():     # an empty axes from -0.04 to 0.04 was written, 'left out 4 of 4 points'
        hint = "; --include-oom draws the points over memory" if "does_not_fit" in left_out else ""
        raise D.PlotError(f"{da.name}: no point of this selection has a result to draw "
                          f"({left_out or 'every value is NaN'}){hint}")
    xv = da[x].values
    categorical = xv.dtype.kind in "USO"
    xpos = np.arange(xv.size) if categorical else xv.astype(float)
    units = D.units_of(da)
    factor, shown = S.display_unit(units, rows)
    xfactor, xshown = (1.0, "") if categorical else S.display_unit(D.units_of(da[x]), xpos)
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        ax.left_out = left_out     # the whole line; the legend keeps its head when it is long (legend_label)
        for k, (row, name) in enumerate(zip(rows, names)):
            ax.plot(xpos, row, marker=MARKERS[k % len(MARKERS)], linestyle=line_style(k),
                    markersize=3.5, markerfacecolor="none" if k % 2 else None, gid=f"line:{name}",
                    label=name if name is None or np.isfinite(row).any() else f"{name} (no result)")
        name = str(da.name)
        rate_or_time = D.direction(name, da.attrs) == "max" or units == "s"
        if (ideal if ideal is not None else (x in SIZE_DIMS and rate_or_time and not categorical)) and xv.size > 1:
            flat = per_device(name, units)
            line = ideal_line(xpos, rows, D.direction(name, da.attrs) == "max", flat)
            if np.isfinite(line).any():
                ax.plot(xpos, line, color="0.45", linestyle=(0, (4, 2)), linewidth=0.8, marker=None, zorder=1,
                        label="ideal (constant per device)" if flat else "ideal (linear)", gid="ideal")
        if categorical:
            ax.set_xticks(xpos, labels=[str(v) for v in xv], rotation=45, ha="right")
        else:
            if logx if logx is not None else S.is_geometric(xpos):
                base = 2 if all(S.is_power_of_two(v) for v in xpos) else 10
                ax.set_xscale("log", base=base)
            if xv.size <= 12:
                ax.set_xticks(xpos, labels=[S.fmt_coord(v) if xfactor == 1 else S.fmt_tick(v / xfactor) for v in xpos])
                ax.xaxis.set_minor_formatter("")
                ax.set_xticks([], minor=True)
        finite = rows[np.isfinite(rows)]
        if logy if logy is not None else (finite.size and np.all(finite > 0) and finite.max() / finite.min() >= 100):
            ax.set_yscale("log")
        ax.yaxis.set_minor_formatter("")
        S.unit_ticks(ax.yaxis, factor)
        ax.set_xlabel(S.label(D.long_name_of(da[x]), xshown))   # "num nodes", as the Pareto figure says
        ax.set_ylabel(S.label(D.long_name_of(da), shown))
        handles, labels = ax.get_legend_handles_labels()
        if left_out:   # a legend line of text, no line: the points of the drawn lines that are not drawn, and why
            handles, labels = [*handles, Line2D([], [], linestyle="none", marker=None)], [*labels, legend_label(fig, left_out)]
        if hue or labels:
            # beside the axes, its top level with theirs (constrained layout keeps it in the figure): a figure
            # legend at the figure's top put its title on the same line as a long title
            shown_lines = hue if len(names) == total else f"{hue}: {len(names)} best of {total:,}"
            ax.legend(handles, labels, title=shown_lines, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                      borderaxespad=0.0, handlelength=2.2, ncol=2 if len(names) > 16 else 1)
        title = title if title is not None else D.fixed_title(da, D.subject(data))   # with what --sel fixed
        if title:   # over the whole figure: a long title over the axes ran into the legend's title
            fig.suptitle(title, fontsize=8)
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax
