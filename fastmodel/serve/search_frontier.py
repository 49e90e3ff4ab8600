"""The SLO search's answer over its grids (docs/model_serving.md §S17): the Pareto frontier of output tokens/s per
GPU against tokens/s per user over every point that fits, the feasible point with the most tokens/s per GPU, the
points of least TTFT and TPOT when none is feasible, and the rows (dicts) of those points alone. A grid, as
:func:`fastmodel.serve.search.slo_search` hands it: ``(coords, values, shape, ok, slo_ok, mode)`` -- its coordinate
arrays, the flat arrays of ``ROW_VARIABLES``, its shape, the points that fit, the points meeting the SLOs.
"""

from __future__ import annotations

import numpy as np

X = "output_tokens_per_s_per_user"
Y = "output_tokens_per_s_per_gpu"


def _frontier(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points of (x, y), both maximised, as ``pareto_mask(x, y, "max", "max")``.

    Any point dominates what is at most as good on both axes and worse on one, and a dominated point is dominated
    by some frontier point (domination is transitive), which no anchor removes: so dropping what an anchor
    dominates leaves the frontier unchanged, and the sort runs on the survivors only. The anchors: the points
    with the most ``w x / max|x| + (1 - w) y / max|y|`` for nine weights w (O(n) each). One pass drops what they
    strictly dominate: with the anchors sorted by x, a point below the highest anchor at or right of its x
    (a suffix maximum, found by one ``searchsorted``) is worse in y and no better in x; ties stay for the sort."""
    from fastmodel.plot.pareto import pareto_mask

    finite = np.flatnonzero(np.isfinite(x) & np.isfinite(y))    # pareto_mask never keeps the others
    x, y = x[finite], y[finite]
    if x.size == 0:
        return finite
    anchors = np.empty(9, dtype=np.intp)
    u, v = np.empty_like(x), np.empty_like(y)                  # the weighted sums in place: no temporaries
    sx, sy = (max(float(v.max()), -float(v.min())) for v in (x, y))
    sx, sy = 1 / sx if sx > 0 else 1.0, 1 / sy if sy > 0 else 1.0
    for i, w in enumerate(np.linspace(0.0, 1.0, 9)):
        np.multiply(x, w * sx, out=u)
        np.multiply(y, (1 - w) * sy, out=v)
        anchors[i] = np.argmax(np.add(u, v, out=u))
    order = np.argsort(x[anchors], kind="stable")
    ax, ay = x[anchors][order], y[anchors][order]
    ceiling = np.append(np.maximum.accumulate(ay[::-1])[::-1], -np.inf)   # highest anchor y at x' >= ax[i]
    survivors = np.flatnonzero(~(y < ceiling[np.searchsorted(ax, x, side="left")]))
    return finite[survivors[pareto_mask(x[survivors], y[survivors], "max", "max")]]


#: the result variables a row of the search reports (after the grid coordinates and before ``meets_slo``)
ROW_VARIABLES = ("ttft", "tpot", X, Y, "memory_per_device")


def _rows(coords: dict, values: dict, shape: tuple, flat: np.ndarray, slo_ok: np.ndarray) -> list[dict]:
    """One dict per flat index into the sweep's grid, in the order given: ``coords`` the grid's coordinate
    arrays (dimension order), ``values`` the flat arrays of ROW_VARIABLES. The values are gathered from the
    result arrays at once; only the selected rows become dicts."""
    flat = np.asarray(flat, dtype=np.intp)
    index = np.unravel_index(flat, shape)
    columns = {d: np.asarray(c)[i].tolist() for (d, c), i in zip(coords.items(), index)}
    for name in ROW_VARIABLES:
        columns[name] = values[name][flat].astype(float).tolist()
    columns["meets_slo"] = slo_ok.reshape(-1)[flat].astype(bool).tolist()
    names = list(columns)
    return [dict(zip(names, row)) for row in zip(*columns.values())]


def _answer(grids):
    """(frontier rows by per-user speed, best row or None, points that fit, points meeting the SLOs) over every
    grid (aggregated, disaggregated): the frontier of their union, the feasible point with the most tokens/s per
    GPU."""
    flats = [np.flatnonzero(g[3]) for g in grids]
    x = np.concatenate([g[1][X][f] for g, f in zip(grids, flats)])
    y = np.concatenate([g[1][Y][f] for g, f in zip(grids, flats)])
    owner = np.concatenate([np.full(f.size, i) for i, f in enumerate(flats)])
    index = np.concatenate(flats)
    front = _frontier(x, y)
    front = front[np.argsort(x[front], kind="stable")]                 # per-user speed ascending
    best = None
    for i, g in enumerate(grids):
        good = np.flatnonzero(g[4].reshape(-1))
        if good.size:
            k = good[np.argmax(g[1][Y][good])]
            if best is None or g[1][Y][k] > best[1]:
                best = (i, g[1][Y][k], k)
    rows = []
    for i, g in enumerate(grids):       # the frontier's rows and the best one, gathered together per grid
        mine = index[front[owner[front] == i]]
        if best is not None and best[0] == i:
            mine = np.append(mine, best[2])
        part = [dict(r, mode=g[5]) for r in _rows(g[0], g[1], g[2], mine, g[4])]
        if best is not None and best[0] == i:
            best_row = part.pop()
        rows.extend(part)
    rows.sort(key=lambda r: r[X])
    return rows, best_row if best is not None else None, sum(int(g[3].sum()) for g in grids), \
        sum(int(g[4].sum()) for g in grids)


def _least(grids, name: str) -> dict | None:
    """The row of the least ``name`` (ttft, tpot) among the points that fit of every grid; None when none fits."""
    found = None
    for i, g in enumerate(grids):
        fit = np.flatnonzero(g[3].reshape(-1))
        fit = fit[np.isfinite(g[1][name][fit])]
        if fit.size:
            k = fit[np.argmin(g[1][name][fit])]
            if found is None or g[1][name][k] < found[1]:
                found = (i, g[1][name][k], k)
    if found is None:
        return None
    g = grids[found[0]]
    return dict(_rows(g[0], g[1], g[2], [found[2]], g[4])[0], mode=g[5])
