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

from dataclasses import dataclass, field

import numpy as np

from fastmodel.errors import SpecError, checked_arguments

CONCURRENCY = tuple(2**k for k in range(11))
X = "output_tokens_per_s_per_user"
Y = "output_tokens_per_s_per_gpu"


@dataclass(frozen=True)
class SearchResult:
    """The sweep, its frontier rows (per-user speed ascending), the best feasible row (or None); when no point is
    feasible, ``closest``: the row with the least TTFT and the one with the least TPOT among the points that fit
    (``{"ttft": row, "tpot": row}``, each None when none fits; empty when a point is feasible)."""
    dataset: object
    frontier: list[dict]
    best: dict | None
    evaluated: int
    feasible: int
    closest: dict = field(default_factory=dict)


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


def engine_list(engine, device: str | None = None, field: str = "--engine") -> list[str]:
    """The engines to sweep, as labels (``"vllm"``, ``"vllm 0.10.2"``): None (the default engine of the device's
    vendor, ``profiles.VENDOR_DEFAULT_ENGINE``, at its newest version), a name with an optional version, a comma
    list or a sequence of them, each read by ``profiles.engine_choice`` (a record's spelling works too:
    TensorRT-LLM, vLLM); with a ``device``, an engine that does not run on it is refused (S56). An error names
    ``field`` (the flag; :func:`slo_search` passes its argument's name)."""
    from fastmodel.serve.profiles import engine_choice, engine_label
    from fastmodel.spec.devices import device_vendor

    vendor = device_vendor(device) if device is not None else "nvidia"
    names = [None] if engine is None else [e for part in ([engine] if isinstance(engine, str) else engine)
                                           for e in str(part).split(",") if e.strip()]
    if not names:     # [] or "" ran the default engine as if left out
        raise SpecError(None, field, f"no engine named; give trtllm, vllm or sglang, or leave {field.lstrip('-')} "
                        "out (None) for the default engine")
    return list(dict.fromkeys(engine_label(*engine_choice(name, field, vendor=vendor, device=device)[:2])
                              for name in names))


def _duration(name: str, value) -> float:
    """An SLO in seconds from a number or a duration text (``"500ms"``, as ``--ttft`` takes it); one line else."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    from fastmodel.spec.quantity import parse_quantity

    try:
        return parse_quantity(value, "duration")
    except (ValueError, TypeError) as error:
        raise SpecError(None, name, str(error)) from None


def _names(value) -> tuple:
    """One name (a str) as a tuple of it (``precisions="fp8"`` is ``("fp8",)``, not its letters); else a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


def _budget(gpus) -> tuple[int, list[int]]:
    """(the GPU budget as an int, the powers of two up to it): a whole number >= 1 (a numpy integer too); "4" and
    None were a bare TypeError, 2.5 ran as 2."""
    if isinstance(gpus, (bool, np.bool_)) or not isinstance(gpus, (int, np.integer)) or gpus < 1:
        raise SpecError(None, "gpus", f"a whole number of GPUs, at least 1 (got {gpus!r})")
    return int(gpus), [2**k for k in range(12) if 2**k <= gpus]


def _axis(name: str, values, default: list[int], low: int, gpus: int | None = None) -> list[int]:
    """An axis's values (``default`` when None), each at least ``low``; with ``gpus`` (EP and attention DP, which
    span GPUs of one instance) one at most the budget: else no point is within it (a search "where nothing fits")."""
    values = [int(v) for v in values] if values is not None else default
    if not values:      # said "values must be at least 1", of no value
        raise SpecError(None, name, f"no value given; give one or more, e.g. {[0, 3] if low == 0 else [1, 2, 4]}")
    if min(values) < low:
        raise SpecError(None, name, f"values must be at least {low}")
    if gpus is not None and min(values) > gpus:
        raise SpecError(None, name, f"{min(values)} is over the GPU budget: an instance has tp x attention_dp x pp "
                        f"GPUs, at most gpus={gpus}")
    return list(dict.fromkeys(values))


def _agg_grid(model, device, engines, precisions, axes: dict, fixed: dict, hbm: float, moe: bool):
    """(dims, coords, variables) of the aggregated grid: one kernel sweep per engine, stacked on a leading
    ``engine`` dimension (one engine: a view, no copy); attention DP that does not divide the concurrency, or on a
    dense model, keeps its place with its status (``attention_dp_not_dividing``, ``attention_dp_dense``)."""
    from fastmodel.registry.serve import SERVE_STATUS
    from fastmodel.serve.api import sweep
    from fastmodel.serve.profiles import engine_profile
    from fastmodel.serve.profiles_device import reported_name
    from fastmodel.spec.devices import device_vendor

    vendor, name = device_vendor(device), reported_name(device)
    # each engine's profile as columns, at the search's HBM (``hbm_bytes``), on the device's vendor and name: every
    # profile column is given, so the sweep's own engine (the default) sets none of them
    sets = [sweep(model, device=device, precision=list(precisions), load_mode="concurrency", client_rounds=0,
                  **axes, **fixed, **engine_profile(engine, hbm, vendor=vendor, device_name=name)[0])
            for engine in engines]
    dims = ("engine", *sets[0].status.dims)
    coords = {"engine": np.array(engines), **{d: sets[0][d].values for d in dims[1:]}}
    names = list(sets[0].data_vars)
    stacked = {n: (sets[0][n].values[None] if len(sets) == 1 else np.stack([d[n].values for d in sets]))
               for n in names}
    status = stacked["status"]
    adp = coords["attention_dp"]
    if adp.max() > 1:
        status = status.copy()
        a, c = _shaped(coords, dims, "attention_dp"), _shaped(coords, dims, "batch_size")
        legal = status == 0
        status[legal & np.broadcast_to(c % a != 0, status.shape)] = SERVE_STATUS["attention_dp_not_dividing"]
        if not moe:
            status[legal & np.broadcast_to(a > 1, status.shape)] = SERVE_STATUS["attention_dp_dense"]
        marked = legal & (status != 0)      # no result there, as the kernel's illegal points and the disaggregated
        stacked = {n: np.where(marked, np.nan if v.dtype.kind == "f" else False, v) if v.dtype.kind in "fb" else v
                   for n, v in stacked.items()}       # search's hold (NaN, fits_memory false): best ranks none
    variables = {n: xr_variable(dims, stacked[n], sets[0][n].attrs) for n in names if n != "status"}
    variables["status"] = xr_variable(dims, status, sets[0]["status"].attrs)
    return dims, coords, variables


def xr_variable(dims, values, attrs):
    import xarray as xr

    return xr.Variable(dims, values, attrs)


#: bytes a disaggregated point of the search holds at its peak: the float temporaries of
#: ``search_disagg.disagg_point_arrays`` (an aggregated point: the kernel's result columns and status, twice for
#: the copy that stacks the engines)
DISAGG_BYTES = 8 * 24


def _check_size(engines_x_precisions: int, powers: int, moe: bool, concurrency, ep, attention_dp, spec_tokens,
                modes) -> None:
    """Refuse (SweepError, one line) a search whose grid would not fit in memory, from the axes' lengths alone
    (``len`` of a ``range`` is free): before a concurrency axis of 10^9 is built as a list."""
    from fastmodel.registry.serve import SERVE_RESULTS
    from fastmodel.sweeps.size import check_grid_memory

    def size(values, default: int) -> int:
        return default if values is None else len(values) if hasattr(values, "__len__") else 1

    conc = size(concurrency, 1)
    agg = engines_x_precisions * powers * 3 * size(ep, powers if moe else 1) \
        * size(attention_dp, powers if moe else 1) * size(spec_tokens, 1) * conc
    disagg = engines_x_precisions * powers**4 * conc if "disagg" in modes else 0
    per_point = 2 * (8 * len(SERVE_RESULTS) + 1)
    check_grid_memory(agg + disagg, agg * per_point + disagg * DISAGG_BYTES,
                      "search fewer concurrencies (concurrency=...), precisions, engines or GPUs")


def _shaped(coords: dict, dims, name: str) -> np.ndarray:
    """Coordinate ``name`` shaped to broadcast against an array of ``dims``."""
    shape = [1] * len(dims)
    shape[dims.index(name)] = len(coords[name])
    return np.asarray(coords[name]).reshape(shape)


@checked_arguments
def slo_search(model, device: str, *, input_len: int, output_len: int, ttft: float, tpot: float, gpus: int = 8,
               precisions=("bf16", "fp8"), engine=None, hbm_bytes: float | None = None,
               concurrency=CONCURRENCY, ep=None, attention_dp=None, modes=("agg",), spec_tokens=(0,),
               spec_acceptance: float = 0.0) -> SearchResult:
    """Sweep every engine (``engine``: a name or several), TP x PP x EP x attention DP (instances within
    ``gpus``; EP and attention DP default to the powers of two to ``gpus`` for a MoE model, 1 for a dense one),
    precision, speculative decoding (``spec_tokens``: draft lengths, 0 off; at ``spec_acceptance``) and
    concurrency (requests in flight per instance; default the powers of two to 1024): the aggregated grid with
    ``"agg"`` in ``modes``, the disaggregated pools of ``search_disagg`` with ``"disagg"`` (only the grids of the
    modes asked for are swept); keep what meets the SLOs. ``ttft`` and ``tpot``: seconds, or a duration with its
    unit as the CLI takes it (``"500ms"``); ``precisions``, ``engine`` and ``modes``: one name or several."""
    import xarray as xr

    from fastmodel.registry import label_coordinates
    from fastmodel.serve.api import dataset_attrs, device_columns, model_columns

    ttft, tpot = _duration("ttft", ttft), _duration("tpot", tpot)
    precisions, modes = _names(precisions), _names(modes)
    from fastmodel.errors import nearest
    from fastmodel.serve.precisions import PRECISIONS

    odd = next((p for p in precisions if p not in PRECISIONS), None)     # named as the argument (review9 #8)
    if not precisions or odd is not None:      # said "precision: unknown value None" / "precision: ... 'fp3'"
        said = f"unknown value {odd!r}; choose one of" if precisions else "no precision named; choose one or more of"
        hint = nearest(str(odd), PRECISIONS) if odd is not None else ""
        raise SpecError(None, "precisions", f"{said} {', '.join(PRECISIONS)}{hint}")
    for name, value in (("ttft", ttft), ("tpot", tpot)):
        if not value > 0:
            raise SpecError(None, name, f"{value:g} s: an SLO must be a positive duration, e.g. 2s or 50ms")
    engines = engine_list(engine, device, "engine")
    gpus, powers = _budget(gpus)
    modes = list(dict.fromkeys(m for m in (p.strip().lower() for s in modes for p in str(s).split(",")) if m))
    if not modes:       # '' or ',' said "choose agg, disagg or both (got )"
        raise SpecError(None, "modes", "no mode named; choose agg, disagg or both")
    if set(modes) - {"agg", "disagg"}:
        odd = next((m for m in modes if m not in ("agg", "disagg")), "")
        raise SpecError(None, "modes", f"choose agg, disagg or both (got {odd!r})"
                        + nearest(odd, ("agg", "disagg")))
    if modes == ["disagg"] and gpus < 2:
        raise SpecError(None, "modes", f"disagg needs gpus=2 or more (a prefill pool and a decode pool), got gpus={gpus}")
    moe = model_columns(model).get("moe_experts", 0) > 0
    _check_size(len(engines) * len(precisions), len(powers), moe, concurrency, ep, attention_dp, spec_tokens, modes)
    concurrency = _axis("concurrency", concurrency, [], 1)
    if not 0.0 <= spec_acceptance <= 1.0:
        raise SpecError(None, "spec_acceptance", "an acceptance rate is between 0 and 1")
    hbm = hbm_bytes or device_columns(device)["hbm_bytes"]
    axes = dict(tp=powers, pp=[p for p in (1, 2, 4) if p <= gpus], ep=_axis("ep", ep, powers if moe else [1], 1, gpus),
                attention_dp=_axis("attention_dp", attention_dp, powers if moe else [1], 1, gpus),
                spec_tokens=_axis("spec_tokens", spec_tokens, [0], 0), batch_size=concurrency)
    if max(axes["spec_tokens"]) > 0 and spec_acceptance <= 0.0:
        raise SpecError(None, "spec_acceptance", "speculative decoding (spec_tokens=1 or more) needs the rate at "
                        "which draft tokens are accepted")
    fixed = dict(input_len=input_len, output_len=output_len, spec_acceptance=spec_acceptance)
    grids, data, all_coords = [], {}, {}
    if "agg" in modes:
        dims, coords, variables = _agg_grid(model, device, engines, precisions, axes, fixed, hbm, moe)
        shape = variables["status"].shape
        values = {name: variables[name].values.reshape(-1) for name in ROW_VARIABLES}
        sizes = _shaped(coords, dims, "tp") * _shaped(coords, dims, "pp") * _shaped(coords, dims, "attention_dp")
        within = np.broadcast_to(sizes <= gpus, shape)
        ok = (variables["status"].values == 0) & variables["fits_memory"].values & within
        slo_ok = ok & (variables["ttft"].values <= ttft) & (variables["tpot"].values <= tpot)
        grids.append((coords, values, shape, ok, slo_ok, "agg"))
        data.update(variables)
        data["within_budget"] = xr.Variable(dims, np.ascontiguousarray(within), {
            "long_name": "within the GPU budget", "units": "1", "description": f"tp x attention_dp x pp <= {gpus} GPUs"})
        data["meets_slo"] = xr.Variable(dims, slo_ok, {"long_name": "meets the SLOs", "units": "1", "description":
                                                       "status ok, fits memory, within the GPU budget, ttft and tpot "
                                                       "within the SLOs"})
        all_coords.update({d: coords[d] for d in dims})
    if "disagg" in modes:
        grids.append(_disagg(model, device, engines, precisions, gpus, concurrency, input_len, output_len, hbm,
                             ttft, tpot, data))
        all_coords.update(grids[-1][0])
    rows, best, evaluated, feasible = _answer(grids)
    closest = {} if best is not None else {name: _least(grids, name) for name in ("ttft", "tpot")}
    call = dict(model=model, device=device, input_len=input_len, output_len=output_len, ttft=ttft, tpot=tpot, gpus=gpus,
                precisions=precisions, engine=engine, hbm_bytes=hbm_bytes, concurrency=concurrency, ep=ep,
                attention_dp=attention_dp, modes=modes, spec_tokens=spec_tokens, spec_acceptance=spec_acceptance)
    made = dict(device=str(device), input_len=int(input_len), output_len=int(output_len), call=call)
    ds = xr.Dataset(data, coords=all_coords, attrs={**dataset_attrs(model, "concurrency", **made),
                                                    "slo_ttft_s": float(ttft), "slo_tpot_s": float(tpot),
                                                    "slo_gpus": int(gpus), "slo_modes": ",".join(modes)})
    label_coordinates(ds)
    return SearchResult(ds, rows, best, evaluated, feasible, closest)


def _disagg(model, device, engines, precisions, gpus, concurrency, input_len, output_len, hbm, ttft, tpot, data):
    """The disaggregated grid (``search_disagg``) as a grid of ``_answer`` and as ``disagg_*`` variables."""
    import xarray as xr

    from fastmodel.registry import attrs, status_attrs
    from fastmodel.serve.search_disagg import disagg_grid

    coords, arrays = disagg_grid(model, device, engines=engines, precisions=precisions, gpus=gpus,
                                 concurrency=concurrency, input_len=input_len, output_len=output_len, hbm=hbm)
    dims = tuple(coords)
    ok = (arrays["status"] == 0) & arrays["fits_memory"]
    slo_ok = ok & (arrays["ttft"] <= ttft) & (arrays["tpot"] <= tpot)
    for name in (*ROW_VARIABLES, "fits_memory"):
        labels = attrs(name)      # the registry's, as the aggregated grid's variable of that name
        data[f"disagg_{name}"] = xr.Variable(dims, np.ascontiguousarray(arrays[name]),
                                             {**labels, "long_name": f"{labels['long_name']} (disaggregated)"})
    data["disagg_status"] = xr.Variable(dims, arrays["status"], status_attrs("serve"))
    data["disagg_meets_slo"] = xr.Variable(dims, slo_ok, {"long_name": "meets the SLOs (disaggregated)", "units": "1",
                                                          "description": "status ok (pools within the budget), "
                                                          "fits memory, ttft and tpot within the SLOs"})
    values = {name: np.ascontiguousarray(arrays[name]).reshape(-1) for name in ROW_VARIABLES}
    return coords, values, ok.shape, ok, slo_ok, "disagg"


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


def layout(row: dict) -> str:
    """A row's layout: ``tp4 pp1 ep1 adp1 k0`` (aggregated), ``P2xtp2+D1xtp4`` (disaggregated pools)."""
    if row.get("mode") == "disagg":
        return f"P{row['prefill_workers']}xtp{row['prefill_tp']}+D{row['decode_workers']}xtp{row['decode_tp']}"
    return f"tp{row['tp']} pp{row['pp']} ep{row['ep']} adp{row['attention_dp']} k{row['spec_tokens']}"


def none_legal(ds) -> str:
    """When no aggregated point is legal (``--ep 3`` on a dense model), the status that ruled out most of them:
    "0 configurations fit" alone reads as a memory verdict. A disaggregated-only search has no aggregated
    ``status``: nothing to say."""
    from fastmodel.registry import status_names

    if "status" not in ds:
        return ""
    codes = np.asarray(ds["status"].values).reshape(-1)
    if codes.size == 0 or (codes == 0).any() or ("disagg_status" in ds and (ds["disagg_status"].values == 0).any()):
        return ""
    names = status_names(ds["status"])
    values, counts = np.unique(codes, return_counts=True)
    top = int(values[np.argmax(counts)])
    return f"; none is legal (most are {names[top] if top < len(names) else top})"


def format_search(result: SearchResult, ttft: float, tpot: float) -> str:
    """The frontier as a table (mode, engine, precision, layout) and the best configuration meeting the SLOs; the
    engine column widens to its longest label (a versioned one, "vllm 0.10.2")."""
    ew = max([6, *(len(str(r["engine"])) for r in result.frontier)])
    lines = [f"{result.evaluated} configurations fit, {result.feasible} meet TTFT <= {ttft * 1e3:g} ms and "
             f"TPOT <= {tpot * 1e3:g} ms{none_legal(result.dataset)}",
             "Pareto frontier (tokens/s per GPU against tokens/s per user):",
             f"{'mode':6s} {'engine':{ew}s} {'precision':>9s} {'layout':24s} {'conc':>5s} {'ttft ms':>9s} "
             f"{'tpot ms':>8s} {'tok/s/user':>10s} {'tok/s/GPU':>10s}  SLO"]
    for r in result.frontier:
        lines.append(f"{r['mode']:6s} {r['engine']:{ew}s} {r['precision']:>9s} {layout(r):24s} {r['batch_size']:5d} "
                     f"{r['ttft'] * 1e3:9.1f} {r['tpot'] * 1e3:8.2f} {r[X]:10.1f} {r[Y]:10.1f}  "
                     f"{'yes' if r['meets_slo'] else 'no'}")
    if result.best is None:
        lines.append(no_match(result, ttft, tpot))
    else:
        b = result.best
        lines.append(f"best meeting the SLOs: {b['mode']} {b['engine']} {b['precision']} {layout(b)} at "
                     f"concurrency {b['batch_size']}: {b[Y]:.1f} tok/s per GPU, {b[X]:.1f} tok/s per user, TTFT "
                     f"{b['ttft'] * 1e3:.1f} ms, TPOT {b['tpot'] * 1e3:.2f} ms")
    return "\n".join(lines)


def no_match(result: SearchResult, ttft: float, tpot: float) -> str:
    """One line when no configuration meets the SLOs (``serve --search`` prints it alone and exits 1): the SLOs,
    and the closest point per SLO (the least TTFT and the least TPOT that fit, each with its other latency); when
    none fits, how many were searched and, if none is legal, why."""
    said = f"no configuration meets TTFT <= {ttft * 1e3:g} ms and TPOT <= {tpot * 1e3:g} ms"
    first, second = result.closest.get("ttft"), result.closest.get("tpot")
    if not result.evaluated:
        ds = result.dataset
        searched = sum(int(ds[n].size) for n in ("status", "disagg_status") if n in ds)
        return f"{said}: none of the {searched} configurations searched fits{none_legal(ds)}"
    if first is None or second is None:     # a result made without its closest rows
        return f"{said} (of {result.evaluated} that fit)"

    def where(r: dict) -> str:
        return f"{r['mode']} {r['engine']} {r['precision']} {layout(r)} at concurrency {r['batch_size']}"

    return (f"{said} (of {result.evaluated} that fit): the best TTFT found is {first['ttft'] * 1e3:.1f} ms "
            f"({where(first)}, TPOT {first['tpot'] * 1e3:.2f} ms), the best TPOT {second['tpot'] * 1e3:.2f} ms "
            f"({where(second)}, TTFT {second['ttft'] * 1e3:.1f} ms)")
