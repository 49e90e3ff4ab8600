"""SLO search: the layouts, precisions and loads of one model on one GPU type that serve requests within a
TTFT and a TPOT target, and the Pareto frontier of output tokens/s per GPU against tokens/s per user
(``fastmodel serve --search``; docs/model_serving.md §S17).

One serving sweep (``fastmodel.serve.api.sweep``, the fused kernel over a grid) under the closed-loop load model:
TP and PP degrees whose instance fits the GPU budget, every precision asked for, concurrency 1, 2, 4 ... 1024
per instance (or the concurrencies asked for: ``--search-concurrency N`` is every one from 1 to N), in the
steady state (``client_rounds = 0``: a deployment in service has no benchmark client's start wave,
docs/model_serving.md §S7). A point is *feasible* when its status is ok, it fits memory and its TTFT and TPOT
meet the SLOs; the frontier is taken over every evaluated point that fits, and the best configuration is the
feasible one with the most output tokens/s per GPU. Everything after the kernel works on the result arrays
whole: the frontier is a sort and a cumulative maximum (``pareto_mask``) over the points a few anchor points do
not dominate (``_frontier``), and only the frontier's rows become dicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.errors import SpecError

CONCURRENCY = tuple(2**k for k in range(11))
X = "output_tokens_per_s_per_user"
Y = "output_tokens_per_s_per_gpu"


@dataclass(frozen=True)
class SearchResult:
    """The sweep, its frontier rows (per-user speed ascending), the best feasible row (or None)."""
    dataset: object
    frontier: list[dict]
    best: dict | None
    evaluated: int
    feasible: int


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
    columns = {d: c[i].tolist() for (d, c), i in zip(coords.items(), index)}
    for name in ROW_VARIABLES:
        columns[name] = values[name][flat].astype(float).tolist()
    columns["meets_slo"] = slo_ok.reshape(-1)[flat].astype(bool).tolist()
    names = list(columns)
    return [dict(zip(names, row)) for row in zip(*columns.values())]


def slo_search(model, device: str, *, input_len: int, output_len: int, ttft: float, tpot: float, gpus: int = 8,
               precisions=("bf16", "fp8"), engine: str | None = None, hbm_bytes: float | None = None,
               concurrency=CONCURRENCY) -> SearchResult:
    """Sweep TP x PP (instances within ``gpus``), precision and concurrency (requests in flight per instance;
    default the powers of two to 1024); keep what meets the SLOs."""
    import xarray as xr

    from fastmodel.serve.api import device_columns, sweep
    from fastmodel.serve.profiles import ENGINE_NAMES, profile_columns

    if ttft <= 0 or tpot <= 0:
        raise SpecError(None, "--ttft/--tpot", "SLOs must be positive durations")
    if engine is not None and engine not in ENGINE_NAMES:
        raise SpecError(None, "--engine", f"unknown engine {engine!r}; choose one of {', '.join(ENGINE_NAMES)}")
    concurrency = [int(c) for c in concurrency]
    if not concurrency or min(concurrency) < 1:
        raise SpecError(None, "--search-concurrency", "concurrencies must be at least 1")
    powers = [2**k for k in range(12) if 2**k <= gpus]
    if not powers:
        raise SpecError(None, "--gpus", "the GPU budget must be at least 1")
    hbm = hbm_bytes or device_columns(device)["hbm_bytes"]
    fixed = profile_columns(engine, None, hbm)
    ds = sweep(model, device=device, precision=list(precisions), tp=powers, pp=[p for p in (1, 2, 4) if p <= gpus],
               batch_size=concurrency, input_len=input_len, output_len=output_len, load_mode="concurrency",
               client_rounds=0, **fixed)      # a deployment in service: the steady state, no benchmark start wave
    # dims: device, precision, tp, pp, batch_size (the scalars are fixed columns); every array read once
    dims, shape = ds.status.dims, ds.status.shape
    coords = {d: ds[d].values for d in dims}
    variables = ds.data_vars.variables
    values = {name: variables[name].values.reshape(-1) for name in ROW_VARIABLES}
    sizes = coords["tp"][:, None] * coords["pp"][None, :]
    within = np.broadcast_to((sizes <= gpus)[None, None, :, :, None], shape)
    ok = (variables["status"].values == 0) & variables["fits_memory"].values & within
    slo_ok = ok & (variables["ttft"].values <= ttft) & (variables["tpot"].values <= tpot)
    flat = np.flatnonzero(ok)
    on_frontier = flat[_frontier(values[X][flat], values[Y][flat])]
    on_frontier = on_frontier[np.argsort(values[X][on_frontier], kind="stable")]   # per-user speed ascending
    feasible = int(slo_ok.sum())
    if feasible:        # the frontier's rows and the best one, gathered together
        best_flat = np.flatnonzero(slo_ok.reshape(-1))
        on_frontier = np.append(on_frontier, best_flat[np.argmax(values[Y][best_flat])])
    rows = _rows(coords, values, shape, on_frontier, slo_ok)
    best = rows.pop() if feasible else None
    data = dict(variables)
    data["within_budget"] = xr.Variable(dims, np.ascontiguousarray(within), {"description": f"tp x pp <= {gpus} GPUs"})
    data["meets_slo"] = xr.Variable(dims, slo_ok, {"description": "status ok, fits memory, within the GPU budget, "
                                                   "ttft and tpot within the SLOs"})
    ds = xr.Dataset(data, coords=ds.coords, attrs={**ds.attrs, "slo_ttft_s": float(ttft),
                                                   "slo_tpot_s": float(tpot), "slo_gpus": int(gpus)})
    return SearchResult(ds, rows, best, int(ok.sum()), feasible)


def format_search(result: SearchResult, ttft: float, tpot: float) -> str:
    """The frontier as a table and the best configuration meeting the SLOs."""
    lines = [f"{result.evaluated} configurations fit, {result.feasible} meet TTFT <= {ttft * 1e3:g} ms and "
             f"TPOT <= {tpot * 1e3:g} ms",
             "Pareto frontier (tokens/s per GPU against tokens/s per user):",
             f"{'precision':>9s} {'tp':>3s} {'pp':>3s} {'conc':>5s} {'ttft ms':>9s} {'tpot ms':>8s} "
             f"{'tok/s/user':>10s} {'tok/s/GPU':>10s}  SLO"]
    for r in result.frontier:
        lines.append(f"{r['precision']:>9s} {r['tp']:3d} {r['pp']:3d} {r['batch_size']:5d} {r['ttft'] * 1e3:9.1f} "
                     f"{r['tpot'] * 1e3:8.2f} {r[X]:10.1f} {r[Y]:10.1f}  {'yes' if r['meets_slo'] else 'no'}")
    if result.best is None:
        lines.append("no configuration meets both SLOs")
    else:
        b = result.best
        lines.append(f"best meeting the SLOs: {b['precision']} tp{b['tp']} pp{b['pp']} at concurrency "
                     f"{b['batch_size']}: {b[Y]:.1f} tok/s per GPU, {b[X]:.1f} tok/s per user, TTFT "
                     f"{b['ttft'] * 1e3:.1f} ms, TPOT {b['tpot'] * 1e3:.2f} ms")
    return "\n".join(lines)
