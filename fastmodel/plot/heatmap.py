"""Heatmap of any 2-D slice of any variable, with illegal/infeasible cells shown and the best cell marked."""

from __future__ import annotations

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.collections import PatchCollection
from matplotlib.patches import Patch, Rectangle

from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.masked import status_codes
from fastmodel.plot.readable import make_readable
from fastmodel.registry import status_names

ILLEGAL_STYLE = {"facecolor": "#d9d9d9", "edgecolor": "#808080", "hatch": "xxx"}
INFEASIBLE_STYLE = {"facecolor": "#f0f0f0", "edgecolor": "#a0a0a0", "hatch": "///"}
NORESULT_STYLE = {"facecolor": "#bdbdbd", "edgecolor": "none", "hatch": None}
#: legal points over an SLO search's GPU budget (``over_gpu_budget``, fastmodel/plot/data.py ``over_budget``)
OVER_BUDGET_STYLE = {"facecolor": "#f0f0f0", "edgecolor": "#a0a0a0", "hatch": "\\\\\\"}
#: the most cells ``annotate`` writes a number in: 50 x 50. A number at the 5 pt minimum font
#: (plot/readable.MIN_FONT_PT) is ~15 pt wide, so even a 7.16 in page-wide map fits ~30 columns of them; a
#: 10^6-cell map took over 5 minutes of text layout to print unreadable numbers
MAX_ANNOTATED_CELLS = 2500


def heatmap(data, x: str | None = None, y: str | None = None, *, var: str | None = None, sel=None, reduce=(),
            relative_to=None, relative_dim: str = "plan", status=None, annotate: bool = False,
            best: str | None = "auto", cmap: str | None = None, log: bool | None = None,
            size="single", height: float | None = None, title: str | None = None, ax=None):
    """Draw ``var`` over two dimensions (``x`` columns, ``y`` rows); returns ``(fig, ax)``.

    ``data``: a sweep Dataset (with ``var``; its ``status`` marks illegal and
    infeasible cells) or a DataArray (``status`` optional; NaN cells are "no
    result"). Other dimensions must be fixed with ``sel={dim: value}`` or
    reduced with ``reduce=[("max", dim)]`` (max|min|argmax|argmin).
    ``relative_to``: a baseline value of ``relative_dim`` (a plan); the map then
    shows the gain over it (>1 better) on a diverging scale. ``best``: ``'max'``,
    ``'min'``, ``'auto'`` (from the variable's name) or None to mark no cell.
    The image array is the data slice itself (SI units; ticks show scaled units).
    """
    da, st = D.prepare(data, var, sel, reduce, relative_to, relative_dim, status, keep=(x, y))
    D.check_not_fixed(da.dims, sel, (("--x", x), ("--y", y)))   # was "unknown dimension 'plan'; dimensions: ..."
    for name in (x, y):                 # a wrong x or y first: it is why the other dimensions seem too many
        if name is not None:
            D.check_dim(da.dims, name)
    if x is not None and x == y:
        raise D.PlotError(f"x and y are both {x!r}")
    if da.ndim != 2:
        extra = [d for d in da.dims if d not in (x, y)]
        raise D.PlotError(f"a heatmap needs 2 dimensions, the data has {da.ndim} ({', '.join(da.dims)}); "
                          f"fix or reduce the others with --sel/--reduce: {', '.join(extra)}")
    x = D.check_dim(da.dims, x) if x is not None else da.dims[1]
    y = D.check_dim(da.dims, y) if y is not None else next(d for d in da.dims if d != x)
    if x == y:
        raise D.PlotError(f"x and y are both {x!r}")
    da = da.transpose(y, x)
    st = st.transpose(y, x) if st is not None else None
    _refuse_nothing_drawn(da, st)
    ny, nx = da.shape
    if annotate and nx * ny > MAX_ANNOTATED_CELLS:
        raise D.PlotError(f"--annotate writes a number in each cell; {ny:,} x {nx:,} cells are too many to read (at "
                          f"most {MAX_ANNOTATED_CELLS:,}): leave out --annotate, or draw fewer with --sel")
    if height is None and not isinstance(size, tuple):
        # the best cell's legend entry takes two lines: room for the second, so the rows keep theirs
        height = round(min(9.0, max(S.figure_size(size)[1], 0.9 + 0.13 * ny) + (0.12 if best else 0.0)), 2)
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        da = _as_labels(da)
        categorical = da.dtype.kind in "USO"
        if categorical:
            image, cbar_ticks, cbar_labels, cmap_obj, norm = _categorical(da.values)
        else:
            values = np.asarray(da.values, dtype=float)
            image = np.ma.masked_invalid(values)
            if st is not None:  # real-world sweeps keep results of points that do not fit: only sizes show them
                hide = ~np.asarray(D.visible(da, st).values)
                image = np.ma.masked_where(hide | np.ma.getmaskarray(image), values)
            cmap_obj, norm = _scale(da, image, cmap, log)
        im = ax.imshow(image, cmap=cmap_obj, norm=norm, origin="lower", aspect="auto",
                       extent=(-0.5, nx - 0.5, -0.5, ny - 0.5), interpolation="nearest")
        cbar = fig.colorbar(im, ax=ax, fraction=0.06, pad=0.02)
        cbar.outline.set_linewidth(0.5)
        units = D.units_of(da)
        if categorical:
            cbar.set_ticks(cbar_ticks, labels=cbar_labels)
            cbar.set_label(S.label(D.long_name_of(da), units))
        else:
            factor, shown = S.display_unit(units, image.compressed())
            S.unit_ticks(cbar.ax.yaxis, factor)
            if isinstance(norm, mcolors.LogNorm):  # label minor ticks only when few major ones show
                cbar.ax.yaxis.set_minor_formatter(S.unit_formatter(factor) if _few_decades(norm) else "")
            if da.attrs.get("ratio") and image.count():  # 1 stays white; the bar shows only the range of the data
                lo, hi = float(image.min()), float(image.max())
                if hi > lo:
                    cbar.ax.set_ylim(max(lo, norm.vmin), min(hi, norm.vmax))
            cbar.set_label(S.label(D.long_name_of(da), shown))
        _ticks(ax, da, x, y)
        handles = _missing_cells(ax, image if not categorical else np.ma.masked_equal(image, -1), st)
        if annotate and not categorical:
            _annotate(ax, im, image, factor)
        if best and best != "none" and not categorical and image.count():
            handles.append(_mark_best(ax, da, image, best, factor, shown))
        if handles:
            fig.legend(handles=handles, loc="outside lower center", ncol=1 if fig.get_figwidth() < 5 else 2,
                       handlelength=1.4)
        if da[y].dtype.kind in "USO":  # categories read top to bottom in coordinate order
            ax.invert_yaxis()
        ax.set_title(title if title is not None else D.fixed_title(da, D.subject(data)))
        for spine in ax.spines.values():
            spine.set_visible(False)
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax


def _refuse_nothing_drawn(da, st) -> None:
    """A one-line PlotError, as ``plot scaling`` says it, for a map of numbers with no cell to colour: every point
    hidden (a real-world sweep's points over HBM, :func:`fastmodel.plot.data.visible`) or NaN. It drew a fully
    hatched map beside an empty colour bar and said nothing (exit 0)."""
    if da.dtype.kind not in "fiu" or da.name == "status" or "flag_meanings" in da.attrs:
        return
    drawn = np.isfinite(np.asarray(da.values, dtype=float))
    if st is not None:
        drawn &= np.asarray(D.visible(da, st).values)
    if drawn.any():
        return
    left_out = D.left_out_line(D.reasons_of(st, ~drawn & (np.asarray(st.values) != 0)), da.size) if st is not None \
        else ""
    hint = "; --include-oom draws the points over memory" if "does_not_fit" in left_out else ""
    raise D.PlotError(f"{da.name}: no point of this selection has a result to draw "
                      f"({left_out or 'every value is NaN'}){hint}")


def _as_labels(da):
    """Status codes and booleans are categories, not quantities: their names, for a categorical map."""
    if da.name == "status" or "flag_meanings" in da.attrs:
        names = np.array(status_names(da) or ["ok"], dtype=object)
        codes = status_codes(da).reshape(np.shape(da.values))
        labels = np.where((codes >= 0) & (codes < len(names)), names[np.clip(codes, 0, len(names) - 1)], "")
        return da.copy(data=labels.astype(object))
    if da.dtype.kind == "b":
        name = str(da.name)
        yes, no = ("fits", "does not fit") if name == "fits_memory" else (name, f"not {name}")
        return da.copy(data=np.where(np.asarray(da.values), yes, no).astype(object))
    return da


def _few_decades(norm) -> bool:
    return norm.vmax / norm.vmin < 30


def _scale(da, image, cmap, log):
    """(colormap, norm): diverging log scale around 1 for gains, else sequential (log if it spans decades)."""
    finite = image.compressed()
    if da.attrs.get("ratio"):
        spread = float(np.max(np.abs(np.log(finite[finite > 0])))) if np.any(finite > 0) else 0.0
        spread = max(spread, np.log(1.05))
        return _cmap(cmap or "RdBu"), mcolors.LogNorm(vmin=np.exp(-spread), vmax=np.exp(spread))
    if log is None:
        log = finite.size > 1 and np.all(finite > 0) and finite.max() / finite.min() >= 100
    if log and finite.size and np.all(finite > 0):
        return _cmap(cmap or "viridis"), mcolors.LogNorm(vmin=finite.min(), vmax=finite.max())
    return _cmap(cmap or "viridis"), None


def _cmap(name):
    import matplotlib

    return matplotlib.colormaps[name].with_extremes(bad=(1.0, 1.0, 1.0, 0.0))  # overlays draw masked cells


def _categorical(values):
    """Codes (−1 where empty, masked) and a listed colormap for a categorical map (argmax over plans)."""
    import matplotlib

    labels = [v for v in dict.fromkeys(str(v) for v in values.ravel()) if v not in ("", "nan", "None")]
    codes = np.full(values.shape, -1, dtype=float)
    for i, name in enumerate(labels):
        codes[values.astype(str) == name] = i
    colours = S.CYCLE if len(labels) <= len(S.CYCLE) else [matplotlib.colormaps["tab20"](i % 20)
                                                           for i in range(len(labels))]
    cmap = mcolors.ListedColormap([colours[i] for i in range(max(1, len(labels)))]).with_extremes(
        bad=(1.0, 1.0, 1.0, 0.0))
    norm = mcolors.BoundaryNorm(np.arange(-0.5, max(1, len(labels)) + 0.5), cmap.N)
    return np.ma.masked_less(codes, 0), list(range(len(labels))), labels, cmap, norm


def _ticks(ax, da, x, y):
    for axis, dim, n in ((ax.xaxis, x, da.shape[1]), (ax.yaxis, y, da.shape[0])):
        coord = da[dim]
        factor, shown = (1.0, "") if coord.dtype.kind in "USO" else S.display_unit(D.units_of(coord), coord.values)
        labels = [S.fmt_coord(v) if coord.dtype.kind in "USO" else _coord_label(v, factor) for v in coord.values]
        axis.set_ticks(np.arange(n), labels=labels)
        axis.set_label_text(S.label(D.long_name_of(coord), shown))   # "num nodes", as the Pareto figure says
        axis.set_tick_params(length=0)
    if da.shape[1] > 6 and max(len(t.get_text()) for t in ax.get_xticklabels()) > 4:
        for text in ax.get_xticklabels():
            text.set_rotation(45)
            text.set_ha("right")


def _coord_label(value, factor):
    return S.fmt_coord(value) if factor == 1.0 else S.fmt_number(float(value) / factor)


def _missing_cells(ax, image, status):
    """Overlay illegal (hatched grey), infeasible and over-budget (hatched light grey) cells; legend handles saying
    why. A point over an SLO search's GPU budget is a legal plan, so its entry says "over the GPU budget", not
    "illegal: over_gpu_budget"."""
    masked = np.ma.getmaskarray(image)
    if not masked.any():
        return []
    groups = []
    if status is None:
        groups.append(("no result (NaN)", masked, NORESULT_STYLE, None))
    else:
        codes = status_codes(status).reshape(np.shape(status.values))   # NaN (a ds.where mask): no result
        names = status_names(status)
        dnf = names.index("does_not_fit") if "does_not_fit" in names else -1
        budget = names.index("over_gpu_budget") if "over_gpu_budget" in names else -1
        infeasible = masked & (codes == dnf)
        over = masked & (codes == budget)
        illegal = masked & (codes > 0) & (codes != dnf) & (codes != budget)
        other = masked & ~infeasible & ~over & ~illegal
        groups.append(("does not fit in memory", infeasible, INFEASIBLE_STYLE, None))
        groups.append(("over the GPU budget", over, OVER_BUDGET_STYLE, None))
        groups.append(("illegal: ", illegal, ILLEGAL_STYLE, codes))
        groups.append(("no result", other, NORESULT_STYLE, None))
    handles = []
    for text, cells, style, codes in groups:
        if not cells.any():
            continue
        if codes is not None:
            text += D.status_legend(codes[cells], names)
        rows, cols = np.nonzero(cells)
        rects = [Rectangle((c - 0.5, r - 0.5), 1, 1) for r, c in zip(rows, cols)]
        collection = PatchCollection(rects, facecolor=style["facecolor"], edgecolor=style["edgecolor"],
                                     linewidth=0.0, hatch=style["hatch"], label=text)
        collection.set_gid("missing")
        ax.add_collection(collection)
        handles.append(Patch(facecolor=style["facecolor"], edgecolor=style["edgecolor"], hatch=style["hatch"],
                             linewidth=0.4, label=f"{text} ({cell_count(len(rows))})"))
    return handles


def cell_count(n: int) -> str:
    """``1 cell`` / ``63 cells``: how many cells a legend entry of the missing ones stands for."""
    return f"{n:,} cell" + ("" if n == 1 else "s")


def _annotate(ax, im, image, factor):
    ny, nx = image.shape
    fontsize = 6 if nx * ny <= 80 else 5
    fmt = S.fixed_formatter(image.compressed() / factor)  # one format for every cell
    for r in range(ny):
        for c in range(nx):
            if image.mask is not np.ma.nomask and np.ma.getmaskarray(image)[r, c]:
                continue
            value = float(image[r, c])
            color = "white" if S.luminance(im.cmap(im.norm(value))) < 0.45 else "black"
            ax.text(c, r, fmt(value / factor), ha="center", va="center", fontsize=fontsize, color=color)


def _mark_best(ax, da, image, best, factor, shown):
    way = D.direction(str(da.name), da.attrs) if best == "auto" else best
    if way not in ("max", "min"):
        raise D.PlotError(f"best must be 'max', 'min', 'auto' or None (got {best!r})")
    if da.attrs.get("ratio"):
        way = "max"
    filled = image.filled(-np.inf if way == "max" else np.inf)
    r, c = np.unravel_index(np.argmax(filled) if way == "max" else np.argmin(filled), filled.shape)
    ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.4, gid="best"))
    value = S.fmt_number(float(image[r, c]) / factor)
    y, x = da.dims       # the cell named too: a row between two thinned labels is otherwise a guess
    where = ", ".join(f"{d}={S.fmt_quantity(da[d].values[k], D.units_of(da[d]))}" for d, k in ((y, r), (x, c)))
    return Patch(fill=False, edgecolor="black", linewidth=1.2, label=f"best ({way}): {value} {shown}".rstrip()
                 + f"\nat {where}")
