"""The throughput-latency frontier of LLM serving: tokens/s per GPU against tokens/s per user.

The standard figure of serving papers: for every curve (a device, a plan, a
precision: any dimension of a serving sweep), the Pareto frontier over every
other swept dimension (batch size or concurrency, TP, lengths ...) of
``output_tokens_per_s_per_gpu`` (y, higher is better) against
``output_tokens_per_s_per_user`` = 1 / tpot (x, higher is better). Points that do
not fit in memory or are illegal (``status`` != 0) are left out, and the legend says how many and why. A
misspelt keyword of an entry point is one line naming the nearest parameter (``fastmodel.errors.ArgumentError``).
"""

from __future__ import annotations

import numpy as np

from fastmodel.analysis.best import within_budget
from fastmodel.errors import checked_arguments
from fastmodel.plot import data as D
from fastmodel.plot import style as S
from fastmodel.plot.pareto import pareto_mask
from fastmodel.plot.readable import legend_label, make_readable, place_labels_noted
from fastmodel.plot.scaling import MAX_LINES

X = "output_tokens_per_s_per_user"
Y = "output_tokens_per_s_per_gpu"
#: Okabe-Ito colours, one per curve (the paper style's cycle)
COLOURS = S.CYCLE
MARKERS = "os^vD<>p"
AXIS_NAMES = {X: "output tokens/s per user", Y: "output tokens/s per GPU"}


@checked_arguments
def serving_frontiers(ds, curve: str = "device", x: str = X, y: str = Y, sel=None, keep=None, x_dir: str = "max",
                      y_dir: str = "max") -> dict:
    """``{curve value: (x, y, labels)}``: each curve's frontier points sorted by x, labelled with the
    swept values (e.g. ``batch_size=64``) of the other dimensions that vary along it. ``keep``: a boolean grid of
    the points that may stand (within the GPU budget, passing --where), besides status ok and fitting."""
    whole, ds = ds, D.select(ds, sel)
    if curve not in ds.dims and curve in (sel or {}) and curve in ds.coords:   # --sel device=H100: its one curve
        ds = ds.expand_dims(curve)
    ok = answers(ds, _selected(keep, sel))
    D.check_dim(list(ds.dims), curve, "curve dimension")
    x, y = (D.get_var(ds, name).name for name in (x, y))
    out = {}
    for value in ds[curve].values:
        part = ds.sel({curve: [value]})     # kept as a dimension of one: a curve of one point is an array too
        stands = ok.sel({curve: [value]})   # not ``keep``: the reasons below are of the whole selection's keep
        xs = part[x].where(stands)
        ys = part[y].where(stands)
        dims = xs.dims
        xv = np.asarray(xs.values, dtype=float).ravel()
        yv = np.asarray(ys.transpose(*dims).values, dtype=float).ravel()
        mask = pareto_mask(xv, yv, x_dir, y_dir)
        if not mask.any():
            continue
        index = np.flatnonzero(mask)
        order = index[np.argsort(xv[index])]
        grids = np.unravel_index(order, xs.shape)
        varying = [d for d in dims if part.sizes[d] > 1]
        labels = [", ".join(f"{d}={S.fmt_coord(part[d].values[g[k]])}" for d, g in zip(dims, grids)
                            if d in varying) for k in range(order.size)]
        out[value.item() if hasattr(value, "item") else value] = (xv[order], yv[order], labels)
    if not out:   # why, as the legend would have said it
        raise D.PlotError(f"no point of the sweep is legal and fits in memory (status 0) for a {curve} frontier: "
                          f"{left_out(whole, sel, keep)}")
    if len(out) > MAX_LINES:   # 52 plans drew a legend over the axes, colours repeating (and a layout warning)
        raise D.PlotError(f"--curve {curve}: {len(out)} frontiers are too many to tell apart in one figure (at most "
                          f"{MAX_LINES}, as plot scaling draws); keep some with --sel {curve}=VALUE (repeatable), or "
                          "draw the curves along a dimension with fewer values")
    return out


def answers(ds, keep=None):
    """The aggregated points that stand as answers: status ok, fitting in memory (unless --include-oom), within the
    GPU budget of an SLO search (``within_budget``), and in ``keep`` (e.g. --where)."""
    ok = ds["status"] == 0
    if "fits_memory" in ds and not ds["status"].attrs.get("include_oom"):    # --include-oom: drawn
        ok = ok & (ds["fits_memory"] > 0)
    budget = within_budget(ds)      # an SLO search (fastmodel serve --search -o): points over the GPU budget leave
    if budget is not None:
        ok = ok & budget
    return ok if keep is None else ok & keep


def _selected(keep, sel):
    """``keep`` (a boolean grid, or None) under the selection ``sel``, as the dataset is."""
    return None if keep is None else D.select(keep, {k: v for k, v in (sel or {}).items() if k in keep.dims})


@checked_arguments
def left_out(ds, sel=None, keep=None) -> str:
    """The line saying which points the figure left out and why (:func:`fastmodel.plot.data.left_out_line`): each
    aggregated point that is not an answer (:func:`answers`) by its status, else ``does_not_fit``,
    ``over_gpu_budget`` or ``filtered_by_where``; a disaggregated point (``disagg_*``) by its status, else
    ``does_not_fit``, named ``disagg:REASON``; '' when every point stands."""
    ds, keep = D.select(ds, {k: v for k, v in (sel or {}).items() if k in ds.dims}), _selected(keep, sel)
    reasons, total = [], 0
    if "status" in ds:
        status = ds["status"]
        budget = within_budget(ds)
        extra = {"does_not_fit": ds["fits_memory"] <= 0 if "fits_memory" in ds else False,
                 "over_gpu_budget": ~budget if budget is not None else False,
                 "filtered_by_where": ~keep if keep is not None else False}
        extra = {k: np.broadcast_to(np.asarray(v.broadcast_like(status).transpose(*status.dims).values
                                               if hasattr(v, "dims") else v), status.shape) for k, v in extra.items()}
        left = ~np.asarray(answers(ds, keep).broadcast_like(status).transpose(*status.dims).values, dtype=bool)
        reasons += D.reasons_of(status, left, extra)
        total += status.size
    if "disagg_status" in ds:
        status = ds["disagg_status"]
        fits = np.asarray(ds["disagg_fits_memory"].values) > 0
        left = ~((np.asarray(status.values) == 0) & fits)
        reasons += [f"disagg:{r}" for r in D.reasons_of(status, left, {"does_not_fit": ~fits})]
        total += status.size
    return D.left_out_line(reasons, total)


@checked_arguments
def serving_pareto(ds, curve: str = "device", x: str = X, y: str = Y, sel=None, label_points: bool = True,
                   size="single", height: float | None = None, title: str | None = None, ax=None, where=None,
                   x_dir: str | None = None, y_dir: str | None = None):
    """One frontier per value of ``curve``: tokens/s per GPU (y) against tokens/s per user (x), log-log,
    frontier points labelled with the batch (or whichever dimensions vary along the curve). Points that are no
    answer (not ok, over memory, over an SLO search's GPU budget, or outside ``where``, a boolean grid) are left
    out, and a legend entry says how many and why (``ax.left_out``, :func:`left_out`).
    Returns ``(fig, ax)``; the frontiers are ``ax.frontiers``."""
    import xarray as xr

    if not isinstance(ds, xr.Dataset):
        raise D.not_data(ds)
    for name in (x, y):             # an unknown variable: one line naming the nearest, not xarray's KeyError
        if name not in ds and f"disagg_{name}" not in ds:
            D.get_var(ds, name)
    # each axis's better direction: tokens/s are higher-is-better, ttft and tpot lower (--x-dir / --y-dir force it),
    # so --x ttft keeps the fastest first tokens
    x_dir, y_dir = (D.check_direction(way, name, _attrs(ds, name)) for way, name in ((x_dir, x), (y_dir, y)))
    by_mode = curve == "mode" and "mode" not in ds.dims and is_search(ds)   # agg against disagg: one curve each
    agg = ds.expand_dims(mode=["agg"]) if by_mode and x in ds else ds
    frontiers = serving_frontiers(agg, curve, x, y, sel, where, x_dir, y_dir) if x in ds else {}  # disagg only: none
    disagg = disagg_frontier(D.select(ds, {k: v for k, v in (sel or {}).items() if k in ds.dims
                                           and f"disagg_{x}" in ds and k in ds[f"disagg_{x}"].dims}), x, y,
                             x_dir, y_dir)
    frontiers.update({"disagg": v for v in disagg.values()} if by_mode else disagg)
    with S.paper_rc():
        fig, ax = S.new_axes(size, height, ax)
        texts = []
        for i, (value, (xv, yv, labels)) in enumerate(frontiers.items()):
            colour = COLOURS[i % len(COLOURS)]
            ax.plot(xv, yv, color=colour, marker=MARKERS[i % len(MARKERS)], markersize=3, linewidth=1.0,
                    label=S.fmt_coord(value), gid=f"frontier-{value}")
            if label_points:
                step = max(1, len(labels) // 6)
                texts += [ax.annotate(_short(labels[k]), (xv[k], yv[k]), xytext=(3, 3), textcoords="offset points",
                                      fontsize=5, color=colour, gid=f"point-label-{value}")
                          for k in range(0, len(labels), step)]
        ax.set_xscale("log")
        ax.set_yscale("log")
        better = {"min": "lower is better", "max": "higher is better"}
        for k, (axis, name, way) in enumerate(((ax.xaxis, x, x_dir), (ax.yaxis, y, y_dir))):
            # plain numbers (1,000 and 20, not 10^3 and 2 x 10^1) in the variable's display unit, as elsewhere (a
            # --curve on a training result labelled memory_per_device 1e+10 with no unit and step time without [s])
            drawn = np.concatenate([np.asarray(f[k], dtype=float) for f in frontiers.values()] or [np.zeros(0)])
            factor, shown = (1.0, "") if name in AXIS_NAMES else S.display_unit(_attrs(ds, name).get("units"), drawn)
            axis.set_minor_formatter(S.log_minor_formatter(axis, factor))
            S.unit_ticks(axis, factor)
            axis.set_label_text(S.label(f"{AXIS_NAMES.get(name, name.replace('_', ' '))} ({better[way]})", shown))
        ax.best = mark_slo(ax, D.select(ds, sel), x, y)
        ax.left_out = left_out(ds, sel, where)
        if ax.left_out:   # said, never silent: the points that are no answer (status, memory, budget, --where)
            ax.plot([], [], linestyle="none", marker="x", color="0.55", label=legend_label(fig, ax.left_out),
                    gid="left-out")
        handles, names = ax.get_legend_handles_labels()   # below the axes: never over a curve or its labels
        fig.legend(handles, names, title=curve, loc="outside lower center", ncol=min(len(names), 3),
                   title_fontsize=7)
        fixed = D.select(ds[x], sel) if x in ds else ds.get(f"disagg_{x}")   # the title says what --sel fixed
        shown_title = title if title is not None else D.fixed_title(fixed, D.subject(ds)) if fixed is not None \
            else D.subject(ds)
        if title is not None or shown_title:
            ax.set_title(shown_title)
    ax.frontiers = frontiers
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    _place_point_labels(fig, ax, texts)
    return fig, ax


def _place_point_labels(fig, ax, texts) -> None:
    """Point labels off every frontier line, the TPOT target, each other and the SLO's star
    (readable.place_labels_noted); the legend's title says how many had no room (``ax.labels_left_out``)."""
    lines = [line for line in ax.lines if str(line.get_gid()).startswith(("frontier-", "slo-tpot"))]
    star = [(ax, ax.best, 9.0)] if ax.best is not None else ()
    legend = fig.legends[0] if fig.legends else None
    place_labels_noted(fig, ax, texts, lines, star, base=legend and legend.get_title().get_text(),
                       show=legend and legend.set_title)


def _short(label: str) -> str:
    """A point's label on the figure: the long dimension names shortened."""
    for name, short in (("batch_size=", "b="), ("attention_dp=", "adp="), ("spec_tokens=", "k="), ("engine=", "")):
        label = label.replace(name, short)
    return label


def _attrs(ds, name: str) -> dict:
    """The attrs of variable ``name`` (or of its ``disagg_`` twin) for its better direction."""
    for candidate in (name, f"disagg_{name}"):
        if candidate in ds.variables:
            return dict(ds[candidate].attrs)
    return {}


def is_search(ds) -> bool:
    """Whether ``ds`` is an SLO search's result (``fastmodel serve --search -o``): its points have a mode (agg,
    and disagg where it searched disaggregated pools), which ``--curve mode`` draws one frontier each of."""
    return "slo_modes" in ds.attrs or "disagg_status" in ds


@checked_arguments
def disagg_frontier(ds, x: str = X, y: str = Y, x_dir: str = "max", y_dir: str = "max") -> dict:
    """``{"mode=disagg": (x, y, labels)}``: the frontier of an SLO search's disaggregated points (``disagg_*``
    variables, fastmodel/serve/search_disagg.py) that are legal, within the budget and fit; {} when it has none."""
    if f"disagg_{x}" not in ds or f"disagg_{y}" not in ds:
        return {}
    xs = ds[f"disagg_{x}"]
    ok = (ds["disagg_status"].values == 0) & (ds["disagg_fits_memory"].values > 0)
    xv = np.where(ok, np.asarray(xs.values, dtype=float), np.nan).ravel()
    yv = np.where(ok, np.asarray(ds[f"disagg_{y}"].transpose(*xs.dims).values, dtype=float), np.nan).ravel()
    mask = pareto_mask(xv, yv, x_dir, y_dir) & np.isfinite(xv) & np.isfinite(yv)
    if not mask.any():
        return {}
    index = np.flatnonzero(mask)
    order = index[np.argsort(xv[index])]
    grids = np.unravel_index(order, xs.shape)
    at = [{d: S.fmt_coord(ds[d].values[g[k]]) for d, g in zip(xs.dims, grids)} for k in range(order.size)]
    labels = [f"P{c['prefill_workers']}xtp{c['prefill_tp']}+D{c['decode_workers']}xtp{c['decode_tp']}, "
              f"batch_size={c['batch_size']}" for c in at]
    return {"mode=disagg": (xv[order], yv[order], labels)}


@checked_arguments
def mark_slo(ax, ds, x: str = X, y: str = Y):
    """On an SLO search (``meets_slo`` and the ``slo_tpot_s`` attribute): the TPOT target as the vertical line
    x = 1 / tpot (tokens/s per user; the SLO is met to its right) and the best point meeting both SLOs (most
    tokens/s per GPU) as a star; returns that point's (x, y) or None."""
    if ("meets_slo" not in ds and "disagg_meets_slo" not in ds) or "slo_tpot_s" not in ds.attrs:
        return None
    if x == X:
        ax.axvline(1.0 / float(ds.attrs["slo_tpot_s"]), color="0.4", linestyle="--", linewidth=0.8,
                   label=f"TPOT <= {1e3 * float(ds.attrs['slo_tpot_s']):g} ms", gid="slo-tpot")
    best = None
    for prefix in ("", "disagg_"):       # the aggregated points, then an SLO search's disaggregated ones
        if f"{prefix}meets_slo" not in ds or f"{prefix}{x}" not in ds:
            continue
        meets = np.asarray(ds[f"{prefix}meets_slo"].values, dtype=bool)
        if not meets.any():
            continue
        yv = np.where(meets, np.asarray(ds[f"{prefix}{y}"].values, dtype=float), -np.inf)
        k = np.unravel_index(int(np.argmax(yv)), yv.shape)
        if best is None or yv[k] > best[1]:
            best = (float(np.asarray(ds[f"{prefix}{x}"].values)[k]), float(yv[k]))
    if best is None:
        return None
    ax.plot(*best, marker="*", markersize=9, color="black", linestyle="none", gid="slo-best",
            label=f"best meeting TTFT <= {1e3 * float(ds.attrs['slo_ttft_s']):g} ms")
    return best
