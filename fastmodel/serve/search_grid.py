"""The SLO search's arguments and grids (``fastmodel serve --search``; docs/model_serving.md §S17): the engines,
SLOs, GPU budget and axes read and checked, the grid's memory checked before it is built, the aggregated grid (one
kernel sweep per engine, stacked) and the disaggregated pools of ``search_disagg`` as ``disagg_*`` variables.
"""

from __future__ import annotations

import numpy as np

from fastmodel.errors import SpecError
from fastmodel.serve.search_frontier import ROW_VARIABLES


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
    disagg = engines_x_precisions * powers**4 * size(spec_tokens, 1) * conc if "disagg" in modes else 0
    per_point = 2 * (8 * len(SERVE_RESULTS) + 1)
    check_grid_memory(agg + disagg, agg * per_point + disagg * DISAGG_BYTES,
                      "search fewer concurrencies (concurrency=...), precisions, engines or GPUs")


def _shaped(coords: dict, dims, name: str) -> np.ndarray:
    """Coordinate ``name`` shaped to broadcast against an array of ``dims``."""
    shape = [1] * len(dims)
    shape[dims.index(name)] = len(coords[name])
    return np.asarray(coords[name]).reshape(shape)


def _disagg(model, device, engines, precisions, gpus, concurrency, input_len, output_len, hbm, ttft, tpot, data,
            spec=((0,), 0.0)):
    """The disaggregated grid (``search_disagg``) as a grid of ``_answer`` and as ``disagg_*`` variables;
    ``spec``: (the draft lengths, their acceptance) of the decode pool (S18)."""
    import xarray as xr

    from fastmodel.registry import attrs, status_attrs
    from fastmodel.serve.search_disagg import disagg_grid

    coords, arrays = disagg_grid(model, device, engines=engines, precisions=precisions, gpus=gpus,
                                 concurrency=concurrency, input_len=input_len, output_len=output_len, hbm=hbm,
                                 spec_tokens=spec[0], spec_acceptance=spec[1])
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
