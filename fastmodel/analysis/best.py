"""Top-k tables over a sweep dataset: the best configurations by any variable, with filters."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import xarray as xr

from fastmodel.errors import FastmodelError, SweepError, checked_arguments, nearest
from fastmodel.io.aliases import resolve, variable_hint, with_aliases

_EXPR = re.compile(r"^\s*(!?)([A-Za-z_][\w.]*)\s*(?:(==|=|!=|>=|<=|>|<)\s*(.+?))?\s*$")


def open_result(path: str) -> xr.Dataset:
    """Open a sweep result (.zarr store or .nc file) of any engine, its variables' aliases added (files hold one
    name per variable, ``fastmodel.io.aliases``); an incomplete store, and a netCDF file or zarr store without a
    status variable (another program's: ranked as if a sweep result), are refused."""
    ds = _open(path)
    if not any(str(name).endswith("status") for name in ds.data_vars):    # every engine's result has one
        held = ", ".join(map(str, list(ds.data_vars)[:6])) or "no variable"
        raise FastmodelError(f"{path}: not a fastmodel sweep result (no status variable; it holds {held}); give a "
                             ".nc file or .zarr store written by 'fastmodel sweep'")
    return with_aliases(ds)


def _open(path: str) -> xr.Dataset:
    from fastmodel.io.store import check_complete

    p = Path(path)
    if not path or not p.exists():
        raise FastmodelError(f"{path or repr(path)}: no such file or store")
    if p.is_dir() or p.suffix == ".zarr":
        try:
            ds = xr.open_zarr(path)
        except Exception as error:  # noqa: BLE001 - unreadable input is a user error
            raise FastmodelError(f"{path}: cannot open as a sweep result (not a zarr store: "
                                 f"{type(error).__name__}: {' '.join(str(error).split())})") from None
        check_complete(path, ds)
        return ds
    try:
        with open(p, "rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise FastmodelError(f"{path}: cannot read: {error.strerror}") from None
    if magic[:3] != b"CDF":
        what = "an HDF5/netCDF-4 file (fastmodel writes netCDF-3)" if magic == b"\x89HDF" else "not a netCDF file"
        raise FastmodelError(f"{path}: cannot open as a sweep result: {what}; give a .nc file or .zarr store "
                             "written by 'fastmodel sweep'")
    try:
        return xr.open_dataset(path, engine="scipy")
    except Exception as error:  # noqa: BLE001 - unreadable input is a user error
        raise FastmodelError(f"{path}: cannot open as a sweep result ({type(error).__name__}: "
                             f"{' '.join(str(error).split())})") from None


def status_names(ds: xr.Dataset) -> list[str]:
    """Names of the status codes of ``ds`` (``fastmodel.registry.status_names`` of its ``status``; [] without)."""
    from fastmodel.registry import status_names as names_of

    return names_of(ds["status"]) if "status" in ds else []


def _value(ds: xr.Dataset, name: str, text: str):
    names = status_names(ds) if name == "status" else []
    if name == "status" and text in names:
        return names.index(text)
    if name == "status" and not re.match(r"^-?\d+$", text):
        raise SweepError(f"status {text!r} unknown; one of {', '.join(names)}{nearest(text, names)}")
    if ds[name].dtype.kind in "US O".replace(" ", ""):
        return _known_text(ds[name], text.strip("'\""))
    if ds[name].dtype.kind == "b":
        if text.lower() not in _TRUTH:
            raise SweepError(f"where: {name} is true or false, cannot compare with {text!r}")
        return _TRUTH[text.lower()]
    try:
        number = float(text)
    except ValueError:
        pass
    else:      # inf and nan compare false with every value (inf's tolerance is inf - inf): say so, not "none passes"
        if number != number or number in (float("inf"), float("-inf")):
            raise SweepError(f"where: {name} compares with a finite number, not {text!r}")
        return number
    units = ds[name].attrs.get("units")
    if units in _UNIT_KINDS:
        from fastmodel.spec.quantity import parse_quantity

        try:
            return parse_quantity(text, _UNIT_KINDS[units])
        except ValueError as error:
            raise SweepError(f"where: {name} is in {units}; {error}") from None
    raise SweepError(f"where: {name} is numeric, cannot compare with {text!r}")


#: the words a true/false variable compares with (``fits_memory=yes``)
_TRUTH = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
#: a variable's ``units`` attr -> the quantity kind whose unit strings a filter value may use (``tpot<50ms``)
_UNIT_KINDS = {"s": "duration", "bytes": "bytes"}


def _known_text(var: xr.DataArray, text: str) -> str:
    """``text`` if ``var`` (a coordinate or a text variable) holds it; else one line naming the nearest value."""
    values = [str(v) for v in np.unique(var.values)]
    if text not in values:
        shown = ", ".join(values[:12]) + (" ..." if len(values) > 12 else "")
        raise SweepError(f"where: {var.name}={text!r} is not in the data{nearest(text, values)}; values: {shown}")
    return text


#: relative tolerance of comparisons with a float variable or coordinate (as ``plot --sel``)
RTOL = 1e-9


def _compare(var: xr.DataArray, op: str, value) -> xr.DataArray:
    """``var OP value``; on floats equal means within RTOL, and the bounds of < > <= >= move by it."""
    if var.dtype.kind == "f" and isinstance(value, float):
        tol = RTOL * abs(value)
        close = abs(var - value) <= tol
        return {"=": close, "==": close, "!=": ~close, ">=": var >= value - tol, "<=": var <= value + tol,
                ">": var > value + tol, "<": var < value - tol}[op]
    return {"=": var == value, "==": var == value, "!=": var != value, ">=": var >= value,
            "<=": var <= value, ">": var > value, "<": var < value}[op]


def where_mask(ds: xr.Dataset, expressions: list[str]) -> xr.DataArray:
    """Boolean mask over the grid from expressions like ``fits_memory``, ``num_nodes=256``, ``status=ok``."""
    mask = xr.DataArray(True)
    names = list(ds.data_vars) + list(ds.coords)
    each = []      # (expression, its own condition): which filter emptied the grid, when together they keep none
    for expression in expressions:
        match = _EXPR.match(expression)
        if not match:
            raise SweepError(f"cannot parse filter {expression!r}; write e.g. fits_memory, num_nodes=256, throughput>100")
        negate, name, op, text = match.groups()
        if name not in names:
            raise SweepError(f"filter on unknown variable {name!r}{variable_hint(ds, name, names)}")
        var = ds[name]
        if op is None:
            if var.dtype.kind != "b":
                raise SweepError(f"filter {name!r} needs a comparison (it is not true/false)")
            cond = var.astype(bool)
        else:
            value = _value(ds, name, text)
            cond = _compare(var, op, value)
            if op in ("=", "==") and name in ds.dims and not negate and not bool(cond.any()):
                shown = ", ".join(str(v) for v in ds[name].values[:12]) + (", ..." if ds.sizes[name] > 12 else "")
                raise SweepError(f"where: {name}={text} is not in the data; values: {shown}")   # not 'no config...'
        each.append((expression, ~cond if negate else cond))
        mask = mask & each[-1][1]
    if each and not bool(mask.any()):
        raise SweepError(f"no configuration passes the filters: {_keeps_none(ds, each)}")
    return mask


def _keeps_none(ds: xr.Dataset, each: list) -> str:
    """Why filters keep no point: the ones that alone keep none (a bare number compared with a variable in seconds
    or bytes is read in that unit: ``memory_per_device<80`` is 80 bytes, say so where plausible,
    ``where_units.slip_hint``), else that only together they keep none. ``best --where memory_per_device<80`` said
    "no configuration passes the filters" and no more, and ``plot pareto`` "no point has finite step_time and
    memory_per_device"."""
    empty = [expression for expression, cond in each if not bool(cond.any())]
    if not empty:
        return f"each keeps some points, but no point passes all of {', '.join(e for e, _ in each)}"
    from fastmodel.analysis.where_units import meant_unit, slip_hint

    said = []
    for expression in empty:
        negate, name, op, text = _EXPR.match(expression).groups()
        hint = slip_hint(ds[name], op, text) if name in ds else None
        said.append(f"{expression} keeps none" + (f" ({hint} {text}{meant_unit(ds[name])})" if hint else ""))
    return "; ".join(said)


def fits_filter_applies(ds: xr.Dataset) -> bool:
    """Whether :func:`best` keeps only configurations that fit by default: the registry says so per engine
    (``RANK_ONLY_FITTING``: the real-world training and serving memory models, not MAD-Max's 3 x weights rule),
    the engine read from the dataset's ``fastmodel_engine`` attr (a file written before it had one: MAD-Max's
    ``semantics`` attr is its preset as a JSON object)."""
    from fastmodel.registry import ENGINES

    if "fits_memory" not in ds.data_vars or ds["fits_memory"].dtype.kind not in "biuf":
        return False
    engine = ds.attrs.get("fastmodel_engine")
    if engine in ENGINES:
        return bool(ENGINES[engine].RANK_ONLY_FITTING)
    return not str(ds.attrs.get("semantics", "")).lstrip().startswith("{")


def within_budget(ds: xr.Dataset):
    """The points of an SLO search's result ``ds`` within its GPU budget (``within_budget``: tp x attention_dp x pp
    <= ``gpus``, as ``fastmodel.serve.search.slo_search`` writes it) as a boolean DataArray; None for a result of no
    search. The one rule of the answers: ``plot pareto`` draws (``fastmodel.plot.serving.answers``) and :func:`best`
    ranks only these points, as the search's frontier and best configuration hold them."""
    return ds["within_budget"] > 0 if "within_budget" in ds.data_vars else None


def _names_fits_memory(where: list[str]) -> bool:
    """Whether a filter of ``where`` is about fitting in memory: ``fits_memory`` or a ``status`` filter naming
    ``does_not_fit`` (the user's own choice replaces the default)."""
    for expression in where:
        match = _EXPR.match(expression)
        if match and match.group(2) == "fits_memory":
            return True
        if match and match.group(2) == "status" and "does_not_fit" in (match.group(4) or ""):
            return True
    return False


def _inputs(ds, top, where) -> tuple[xr.Dataset, int, list[str] | None]:
    """:func:`best`'s ``ds`` (a Dataset, or the path of a result file, opened), ``top`` (a whole number; a numpy
    integer too) and ``where`` (a list of filters; one filter as a str is that list): one line for anything else."""
    if isinstance(ds, (str, Path)):
        ds = open_result(str(ds))
    if not isinstance(ds, xr.Dataset):
        hint = ": pass the Dataset (ds), not one of its variables" if isinstance(ds, xr.DataArray) else ""
        raise SweepError(f"ds: expected a result Dataset (fastmodel.sweep) or the path of a .nc/.zarr result, got "
                         f"{type(ds).__name__}{hint}")
    if isinstance(top, (bool, np.bool_)) or not isinstance(top, (int, np.integer)):
        raise SweepError(f"top: expected a whole number of configurations >= 1 (got {top!r})")
    return ds, int(top), [where] if isinstance(where, str) else where


@checked_arguments
def best(ds: xr.Dataset, by: str, top: int = 10, where: list[str] | None = None, ascending: bool | None = None,
         columns: tuple[str, ...] = ("throughput", "step_time", "exposed_comm", "tokens_per_s_per_gpu", "mfu", "tpot",
                                     "output_tokens_per_s_per_user", "memory_per_device"),
         include_oom: bool = False, memory_margin: float | None = None):
    """The ``top`` configurations of ``ds`` (a sweep's Dataset, or the path of a ``.nc`` / ``.zarr`` result) by
    ``by`` as a pandas DataFrame, best first (``where``: filters such as ``"status=ok"``, a list or one str; the
    table's columns keep the variables' units in ``df.attrs["units"]`` where given): smallest first for a variable
    that improves downward (``better = "min"`` in its attrs or the registry: times, costs, memory), largest
    first otherwise; ``ascending`` True / False forces the order.

    On datasets of the real-world memory model (:func:`fits_filter_applies`) only configurations that fit in
    usable HBM are ranked unless ``include_oom`` or a ``where`` filter names ``fits_memory``; the table's
    ``attrs["fits_filter"]`` says whether that filter applied (``applied``) and how many of the ``of``
    candidates (finite ``by`` passing ``where``) it dropped (``dropped``), and the memory margin it used
    (``margin``: bytes of HBM kept free, ``source`` "default" -- each plan's allocator cache, or ``1 - usable_hbm_fraction`` of the HBM when a device
    sets it -- or "user" for
    ``memory_margin``, bytes; fastmodel/analysis/margin.py). On an SLO search's result only the points within its
    GPU budget are ranked (:func:`within_budget`, as ``plot pareto`` draws them) unless a
    ``where`` filter names ``within_budget``; ``attrs["budget_filter"]`` says so as ``fits_filter`` does. By a
    ``disagg_*`` variable of a search, its disaggregated points are ranked under the same rules
    (:func:`disagg_points`).
    """
    import pandas as pd

    from fastmodel.analysis.margin import describe, fits_under, margin

    ds, top, where = _inputs(ds, top, where)
    by = resolve(ds.data_vars, by)     # a variable's alias ranks by it too (iteration_time: step_time)
    if (pools := _disagg_best(ds, by, top, where, ascending, columns, include_oom, memory_margin)) is not None:
        return pools
    if by in ds.dims:   # was "unknown variable 'plan'", as if the result had no plan
        raise SweepError(f"by={by!r} is a dimension of the result (filter on it, e.g. where='{by}=...'), not a "
                         f"variable to rank by; variables: {', '.join(n for n in ds.data_vars if n != 'status')}")
    if by not in ds.data_vars:
        raise SweepError(f"unknown variable {by!r}{variable_hint(ds, by, list(ds.data_vars))}")
    if top < 1:
        raise SweepError(f"top={top}: must be at least 1")
    if by == "status" or "flag_meanings" in ds[by].attrs or ds[by].dtype.kind not in "iuf":
        raise SweepError(f"by={by!r}: {by} is categorical, not a quantity to rank by; filter on it (e.g. "
                         "where='status=ok') and rank by a quantity such as throughput")
    variable = ds[by]
    extra = [dim for dim in variable.dims if "status" in ds and dim not in ds["status"].dims]
    if extra:      # memory by memory_kind: one value per kind, not one per configuration
        totals = [name for name in ds.data_vars if name.startswith(by) and name != by
                  and set(ds[name].dims) <= set(variable.dims) - set(extra)]
        raise SweepError(f"by={by!r}: {by} has one value per {', '.join(extra)} (not one per configuration); "
                         f"rank by {' or '.join(totals) or 'a variable without it'}")
    if ascending is None:
        from fastmodel.registry import better

        ascending = better(by, dict(variable.attrs)) == "min"
    mask = where_mask(ds, where or [])
    kept_free = margin(ds, memory_margin)
    applied = not include_oom and fits_filter_applies(ds) and not _names_fits_memory(where or [])
    dropped = ranked = 0
    if applied:
        fits_grid = fits_under(ds, kept_free).broadcast_like(variable).transpose(*variable.dims)
        candidates = np.isfinite(variable.where(mask).transpose(*variable.dims).values.astype(np.float64))
        fits = fits_grid.values
        dropped, ranked = int((candidates & ~fits).sum()), int(candidates.sum())
        if dropped and not (candidates & fits).any():
            raise SweepError(f"none of the {dropped:,} ranked configurations fits in usable HBM (memory_per_device; "
                             f"{describe(kept_free)}); "
                             "pass include_oom=True to rank them anyway")
        mask = mask & fits_grid
    mask, budget = _within_budget(ds, variable, mask, where or [])
    values = variable.where(mask).transpose(*variable.dims).values.astype(np.float64)
    flat = values.reshape(-1)
    finite = np.flatnonzero(np.isfinite(flat))
    if finite.size == 0:
        raise SweepError("no configuration passes the filters" if where else _no_value(ds, by))
    keys = flat[finite] if ascending else -flat[finite]
    k = min(top, finite.size)
    chosen = finite[np.argpartition(keys, k - 1)[:k]] if k < finite.size else finite
    chosen = chosen[np.argsort(keys[np.searchsorted(finite, chosen)], kind="stable")]
    index = np.unravel_index(chosen, values.shape)
    rows = {}
    for dim, idx in zip(variable.dims, index):
        rows[dim] = ds[dim].values[idx]
    if include_oom and fits_filter_applies(ds):
        columns = (*columns, "fits_memory")
    if within_budget(ds) is not None:      # an SLO search's answer: its TTFT beside its TPOT, whether it meets both
        columns = (*columns, "ttft", "meets_slo")
    for name in dict.fromkeys((by, *[c for c in columns if c in ds.data_vars])):
        rows[name] = ds[name].transpose(*variable.dims).values[index]
    if "status" in ds:
        names = status_names(ds)
        rows["status"] = [names[int(s)] if 0 <= int(s) < len(names) else str(int(s))
                          for s in ds["status"].transpose(*variable.dims).values[index]]
    if kept_free["source"] == "user" and fits_filter_applies(ds):
        _under_user_margin(ds, rows, fits_under(ds, kept_free).broadcast_like(variable)
                           .transpose(*variable.dims).values[index])
    table = pd.DataFrame(rows)
    table.attrs["fits_filter"] = {"applied": applied, "dropped": dropped, "of": ranked, "margin": kept_free}
    table.attrs["budget_filter"] = budget
    table.attrs["units"] = {name: ds[name].attrs["units"] for name in rows if name in ds.variables
                            and name != "status" and "units" in ds[name].attrs}
    return table


#: the variables of an SLO search's disaggregated points that :func:`best` reads under their plain names
_DISAGG_AS = {"disagg_status": "status", "disagg_fits_memory": "fits_memory"}


def disagg_points(ds: xr.Dataset) -> xr.Dataset:
    """An SLO search's disaggregated points (its ``disagg_*`` variables over the pools' dimensions,
    fastmodel/serve/search_grid.py) as a result of their own: ``disagg_status`` and ``disagg_fits_memory`` under the
    names :func:`best` reads (``status``, ``fits_memory``), and ``within_budget`` for the pools (status not
    ``pools_over_budget``: prefill_workers x prefill_tp + decode_workers x decode_tp <= gpus; those points hold no
    value), so that :func:`within_budget` is the rule here too, as the search's answer and ``plot pareto`` hold."""
    view = ds[[name for name in ds.data_vars if str(name).startswith("disagg_")]].rename(_DISAGG_AS)
    names = status_names(view)
    over = names.index("pools_over_budget") if "pools_over_budget" in names else -1
    view["within_budget"] = (view["status"] != over).assign_attrs(
        long_name="within the GPU budget", units="1", description=f"prefill and decode pools within "
                                                                  f"{ds.attrs.get('slo_gpus', 'the budget')} GPUs")
    return view


def _disagg_best(ds: xr.Dataset, by: str, top, where, ascending, columns, include_oom, memory_margin):
    """:func:`best` by a ``disagg_*`` variable of an SLO search: its disaggregated points (:func:`disagg_points`)
    ranked with the same filters, fit rule and GPU-budget rule, the table's columns the ``disagg_`` twins of
    ``columns`` and of the search's ``ttft`` and ``meets_slo``, its status ``disagg_status``; None for any other
    ``by`` (``disagg_status`` and ``disagg_fits_memory`` are refused as categorical, as everywhere)."""
    if not str(by).startswith("disagg_") or by in _DISAGG_AS or by not in ds.data_vars or "disagg_status" not in ds:
        return None
    filters = []
    for expression in where or []:        # a filter on disagg_status or disagg_fits_memory: their names in the view
        match = _EXPR.match(expression)
        name = match.group(2) if match else None
        filters.append(expression.replace(name, _DISAGG_AS[name], 1) if name in _DISAGG_AS else expression)
    twins = tuple(dict.fromkeys(f"disagg_{c}" for c in (*columns, "ttft", "meets_slo")))
    view = disagg_points(ds)
    _check_pool_filters(view, filters)
    table = best(view, by, top, filters, ascending, twins, include_oom, memory_margin)
    plain = {v: k for k, v in _DISAGG_AS.items()}
    units = {plain.get(name, name): unit for name, unit in table.attrs["units"].items()}
    table = table.rename(columns=plain)
    table.attrs["units"] = units
    table.attrs["fits_filter"] = {**table.attrs["fits_filter"], "rule": "disagg_fits_memory"}   # the pools' rule
    return table


def _check_pool_filters(view: xr.Dataset, filters: list[str]) -> None:
    """A filter on a name the pools lack (``tp``, a coordinate of the aggregated points) is one line naming the
    pools' coordinates that hold it (``prefill_tp``, ``decode_tp``), nearest first, then the others."""
    names = [*view.data_vars, *view.coords]
    pools = [str(c) for c in view.coords]
    for expression in filters:
        match = _EXPR.match(expression)
        name = match.group(2) if match else None
        if name is None or name in names:
            continue
        near = [c for c in pools if c.endswith(f"_{name}") or name in c]
        raise SweepError(f"filter on unknown variable {name!r}: ranking by a disagg_* variable ranks the "
                         f"disaggregated pools, whose coordinates are {', '.join(near + [c for c in pools if c not in near])}"
                         + (f" (nearest: {', '.join(near)})" if near else ""))


def _within_budget(ds: xr.Dataset, variable: xr.DataArray, mask, where: list[str]):
    """(``mask`` within an SLO search's GPU budget, what that dropped): the rule ``plot pareto`` draws by
    (:func:`within_budget`), unless a ``where`` filter names ``within_budget`` (the user's own
    choice replaces it). The second is ``best``'s ``attrs["budget_filter"]``: ``applied``, and of the ``of``
    candidates (finite ``by`` passing the filters before it) how many it ``dropped``, and the budget (``gpus``)."""
    budget = within_budget(ds)
    named = any((m := _EXPR.match(e)) and m.group(2) == "within_budget" for e in where)
    if budget is None or named or not set(budget.dims) <= set(variable.dims):     # a disagg_* variable: its status
        return mask, {"applied": False, "dropped": 0, "of": 0, "gpus": ds.attrs.get("slo_gpus")}
    candidates = np.isfinite(variable.where(mask).transpose(*variable.dims).values.astype(np.float64))
    inside = budget.broadcast_like(variable).transpose(*variable.dims).values
    return mask & budget, {"applied": True, "dropped": int((candidates & ~inside).sum()), "of": int(candidates.sum()),
                           "gpus": int(ds.attrs["slo_gpus"]) if "slo_gpus" in ds.attrs else None}


def _no_value(ds: xr.Dataset, by: str) -> str:
    """Why ``by`` has no finite value: no point is legal (the statuses there are, by count), else just that."""
    names = str(ds["status"].attrs.get("flag_meanings", "")).split() if "status" in ds else []
    codes, counts = np.unique(ds["status"].values, return_counts=True) if names else ([0], [0])
    if 0 in codes:
        return f"{by} has no finite value"
    said = ", ".join(f"{names[c] if c < len(names) else c}: {n:,}" for c, n in zip(codes.tolist(), counts.tolist()))
    return f"{by} has no finite value: no configuration is legal (status {said})"


def _under_user_margin(ds: xr.Dataset, rows: dict, fits: np.ndarray) -> None:
    """Rewrite the table's ``fits_memory`` and ``does_not_fit`` / ``ok`` statuses (``rows``, in place) for a
    margin the user set (``fits``: each row fits under it): the stored ones were decided under the default
    margin, so a row that now fits said ``does_not_fit`` beside a ranking that counts it as fitting. ``ok`` becomes
    ``does_not_fit`` only where the sweep marked points over memory (``only_fitting`` in its ``sweep`` attr:
    ``fastmodel.analysis.margin.marks_over_memory``)."""
    from fastmodel.analysis.margin import marks_over_memory

    if "fits_memory" in rows:
        rows["fits_memory"] = fits.astype(rows["fits_memory"].dtype)
    if "status" not in rows:
        return
    marks = marks_over_memory(ds)
    rows["status"] = ["ok" if status == "does_not_fit" and fit else
                      "does_not_fit" if status == "ok" and marks and not fit else status
                      for status, fit in zip(rows["status"], fits)]
