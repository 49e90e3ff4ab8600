"""Preparing sweep data for a figure: selection, reduction, ratios, status, directions, labels.

Shared by every plot kind and by the CLI, so ``--sel``/``--reduce`` mean the
same thing everywhere and every error is one line naming what is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

import numpy as np
import xarray as xr

from fastmodel.errors import FastmodelError, nearest
from fastmodel.io.aliases import resolve, variable_hint
from fastmodel.registry import status_names, variable

REDUCTIONS = ("max", "min", "argmax", "argmin")

_MAXIMIZE = ("throughput", "flop_per_s", "util", "speedup", "gain", "fits_memory", "tokens_per_s", "mfu",
             "bandwidth", "efficiency")


class PlotError(FastmodelError):
    """A figure cannot be made from the given data and options."""


def direction(name: str, attrs: dict | None = None) -> str:
    """Default optimisation direction of a variable: its ``better`` attr or registry entry
    (:func:`fastmodel.registry.better`); for a name no registry has (a derived variable, a coordinate),
    ``'max'`` for rates and gains, else ``'min'``.
    """
    from fastmodel.registry import better

    registered = better(name, attrs)
    if registered:
        return registered
    lowered = name.lower()
    return "max" if any(key in lowered for key in _MAXIMIZE) else "min"


def check_direction(value: str | None, name: str, attrs: dict | None = None) -> str:
    if value is None:
        return direction(name, attrs)
    if value not in ("min", "max"):
        raise PlotError(f"direction for {name} must be 'min' or 'max' (got {value!r})")
    return value


def not_data(data) -> PlotError:
    """The one line for ``data`` that is no xarray object (a path: pareto said "'str' object has no attribute")."""
    hint = f" {data!r:.60} (a result file: open it with xarray.open_dataset)" if isinstance(data, str) else ""
    return PlotError(f"expected an xarray Dataset or DataArray, got {type(data).__name__}{hint}")


def names_of(ds: xr.Dataset) -> list[str]:
    return [*ds.data_vars, *ds.coords]


def get_var(ds: xr.Dataset, name: str) -> xr.DataArray:
    """``ds[name]`` (a variable or a coordinate, by its name or an alias of it); one-line error with the
    nearest name."""
    name = resolve(ds.variables, name)
    if name not in ds.variables:
        choices = [n for n in names_of(ds) if n != "status"]
        raise PlotError(f"unknown variable {name!r}{variable_hint(ds, name, choices)}; variables: {', '.join(ds.data_vars)}")
    return ds[name]


def is_categorical(obj: xr.DataArray) -> bool:
    """Status codes, true/false flags and labels: categories, not quantities."""
    return obj.name == "status" or "flag_meanings" in obj.attrs or obj.dtype.kind in "bUSO"


def check_quantity(obj: xr.DataArray, what: str) -> None:
    """PlotError unless ``obj`` is a quantity (a line, an axis or a ratio of status codes is meaningless)."""
    if is_categorical(obj):
        raise PlotError(f"{obj.name} is categorical, not a quantity: {what} needs numbers; "
                        f"draw it with 'plot heatmap --var {obj.name}' or filter on it with --where")


def check_dim(dims: Iterable[str], name: str, what: str = "dimension") -> str:
    dims = list(dims)
    if name not in dims:
        raise PlotError(f"unknown {what} {name!r}{nearest(name, dims)}; dimensions: {', '.join(dims) or '(none)'}")
    return name


def check_not_fixed(dims: Iterable[str], sel, options) -> None:
    """A one-line PlotError for an axis of the figure that ``sel`` fixed to one value (``options``: (option,
    dimension) pairs, e.g. ``(("--x", "num_nodes"), ("--y", "plan"))``): it is no longer there to draw along."""
    for option, dim in options:
        if dim is not None and dim not in dims and dim in (sel or {}):
            raise PlotError(f"{option} {dim}: {dim} is fixed by --sel {dim}=...; keep two or more values (repeat "
                            f"--sel {dim}=VALUE) or draw along another dimension")


def units_of(obj: xr.DataArray) -> str:
    """Units of a variable or coordinate: its attrs (a sweep gives its coordinates the units of the field they
    set), else the registry's."""
    if obj.attrs.get("units"):
        return str(obj.attrs["units"])
    found = variable(str(obj.name))
    return found.units if found is not None else ""


def long_name_of(obj: xr.DataArray) -> str:
    if obj.attrs.get("long_name"):
        return str(obj.attrs["long_name"])
    found = variable(str(obj.name))
    if found is not None:
        return found.attrs()["long_name"]
    return str(obj.name).replace("_", " ")


# --- --sel ---------------------------------------------------------------------------------


def parse_sel(items: Iterable[str]) -> dict[str, list[str]]:
    """``['num_nodes=256', 'plan=tp,ddp/mp', 'plan=fsdp/ddp']`` -> ``{dim: [texts]}`` (repeats add values)."""
    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise PlotError(f"cannot parse --sel {item!r}; write DIM=VALUE, e.g. num_nodes=256 or plan=tp,ddp/mp")
        out.setdefault(name.strip(), []).append(text.strip())
    return out


def _coord_value(coord: xr.DataArray, value):
    """The coordinate value equal to ``value`` (text or number); one-line error with the valid values."""
    values = coord.values
    dim = coord.name
    shown = ", ".join(map(str, values[:12])) + (" ..." if values.size > 12 else "")
    if values.dtype.kind in "USO":
        text = str(value).strip("'\"")
        if text not in set(map(str, values)):
            raise PlotError(f"{dim}={text!r} is not in the data{nearest(text, map(str, values))}; values: {shown}")
        return text
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlotError(f"{dim} is numeric, cannot select {value!r}; values: {shown}") from None
    match = np.flatnonzero(np.isclose(values.astype(float), number, rtol=1e-9, atol=0.0))
    if match.size == 0:
        raise PlotError(f"{dim}={value} is not in the data; values: {shown}")
    return values[match[0]]


def check_not_empty(obj) -> None:
    """A one-line PlotError for data with no value to draw, naming each dimension of length 0 (a result with
    no configuration along it, or a selection that left none)."""
    empty = [str(d) for d, n in obj.sizes.items() if n == 0]
    if empty:
        raise PlotError(f"the selection is empty: {', '.join(empty)} {'has' if len(empty) == 1 else 'have'} no value")


def select(obj, sel: Mapping[str, object] | None):
    """``obj.sel`` with values matched exactly (numbers within 1e-9); a list keeps the dimension."""
    if not sel:
        return obj
    if not isinstance(sel, Mapping):       # a CLI --sel text ("num_nodes=2") given to the Python API
        raise PlotError(f"sel: expected a dict of dimension -> value (e.g. sel={{'num_nodes': 256}}), got "
                        f"{type(sel).__name__} {sel!r:.60}")
    indexers = {}
    for dim, value in sel.items():
        check_dim(obj.dims, dim)
        many = isinstance(value, (list, tuple, np.ndarray))
        values = [_coord_value(obj[dim], v) for v in (value if many else [value])]
        values = [v for k, v in enumerate(values) if not any(v == u for u in values[:k])]   # a repeat: once
        indexers[dim] = values if many and len(values) > 1 else values[0]
    return obj.sel(indexers)


def sel_from_texts(texts: Mapping[str, list[str]]) -> dict[str, object]:
    """CLI ``--sel`` texts -> a selection mapping (one value stays scalar, repeats become a list)."""
    return {dim: values[0] if len(values) == 1 else values for dim, values in texts.items()}


# --- reductions and status -----------------------------------------------------------------


def parse_reduce(items: Iterable[str]) -> list[tuple[str, str]]:
    """``['max:plan', 'argmax:global_batch']`` (or ``'max over plan'``) -> [(how, dim)]."""
    out = []
    for item in items:
        match = re.match(r"^\s*(\w+)\s*(?::|\s+over\s+)\s*(\S+)\s*$", item)
        if not match:
            raise PlotError(f"cannot parse --reduce {item!r}; write HOW:DIM, e.g. max:plan (HOW: {'|'.join(REDUCTIONS)})")
        how, dim = match.groups()
        if how not in REDUCTIONS:
            raise PlotError(f"unknown reduction {how!r}{nearest(how, REDUCTIONS)}; one of {', '.join(REDUCTIONS)}")
        out.append((how, dim))
    return out


def reduce_status(status: xr.DataArray, dim: str) -> xr.DataArray:
    """Status of a reduced cell: ok if any point is ok, else does-not-fit if any, else the first reason."""
    names = status_names(status)
    does_not_fit = names.index("does_not_fit") if "does_not_fit" in names else -3  # engines without the code
    rank = xr.where(status == 0, -2, xr.where(status == does_not_fit, -1, status))
    best = rank.min(dim)
    return xr.where(best == -2, 0, xr.where(best == -1, does_not_fit, best)).astype(np.int8)


def over_memory(status: xr.DataArray, fits: xr.DataArray | None, add_code: bool = False) -> xr.DataArray:
    """``status`` with the legal points that do not fit in memory (``fits_memory`` 0: a real-world sweep without
    ``only_fitting`` keeps them ``ok``) coded ``does_not_fit``, as ``only_fitting`` codes them; unchanged for a
    result without ``fits_memory`` or that code. A heatmap marked a plan over HBM best, and ``--reduce max:plan``
    took the fastest plan whether it fit or not (``best`` ranks only plans that fit). With ``add_code`` (a result
    whose engine ranks only what fits but has no such code: serving, whose points over HBM are ``ok`` with
    ``fits_memory`` 0) the code is appended to the figure's copy of the status names, so a heatmap of a 70B
    model on one H100 no longer boxed a point that does not fit as the best one."""
    names = status_names(status)
    if fits is None or status.attrs.get("include_oom") or ("does_not_fit" not in names and not add_code):
        return status                                                              # --include-oom: drawn
    return _folded(status, fits <= 0, "does_not_fit")


def over_budget(status: xr.DataArray, within: xr.DataArray | None) -> xr.DataArray:
    """``status`` with the legal points over an SLO search's GPU budget (``within``:
    ``fastmodel.analysis.best.within_budget``, the rule ``best`` ranks and ``plot pareto`` draws by; None for a
    result of no search: unchanged) coded ``over_gpu_budget``, the name ``plot pareto``'s legend gives them, in the
    figure's copy of the status names: a heatmap of a 2-GPU search boxed a 4-GPU point as the best cell."""
    return status if within is None else _folded(status, ~within, "over_gpu_budget")


def _folded(status: xr.DataArray, out: xr.DataArray, name: str) -> xr.DataArray:
    """``status`` with its ``ok`` points where ``out`` holds coded ``name`` (appended to a copy of its names)."""
    names, attrs = status_names(status), dict(status.attrs)
    if name not in names:
        names = [*names, name]
        attrs.update(flag_meanings=" ".join(names), flag_values=np.arange(len(names), dtype=np.int32))
    folded = xr.where((status == 0) & out, names.index(name), status).astype(status.dtype)
    folded.attrs = attrs
    return folded


def is_bytes(da: xr.DataArray) -> bool:
    """Whether ``da`` is a size in bytes (its ``units``): the variables whose value a plan that does not fit still
    answers (memory by kind, allocated, reserved, offloaded bytes); not ``time_memory_bound`` (s) nor
    ``memory_peak_stage`` (a rank), which a name test took for memory."""
    return da.attrs.get("units") == "bytes"


def visible(da: xr.DataArray, status: xr.DataArray) -> xr.DataArray:
    """Where a point of ``da`` is drawn and reduced: legal and feasible, and for a size in bytes
    (:func:`is_bytes`) also where it does not fit (its memory is the answer)."""
    names = status_names(status)
    keep = status == 0
    if "does_not_fit" in names and is_bytes(da):
        keep = keep | (status == names.index("does_not_fit"))
    return keep


def shown(da: xr.DataArray, status: xr.DataArray | None) -> xr.DataArray:
    """``da`` where its point is :func:`visible` (NaN elsewhere), before a reduction, as the heatmap shows it;
    numbers only."""
    if status is None or da.dtype.kind not in "fc":
        return da
    out = da.where(visible(da, status).broadcast_like(da))
    out.attrs, out.name = dict(da.attrs), da.name
    return out


def reduce_one(da: xr.DataArray, how: str, dim: str) -> xr.DataArray:
    """max/min over ``dim`` (NaN where all NaN), or argmax/argmin: the ``dim`` coordinate of the extreme."""
    check_dim(da.dims, dim)
    if how in ("max", "min"):
        out = getattr(da, how)(dim, skipna=True, keep_attrs=True)
        out.attrs["long_name"] = f"{how} {long_name_of(da)} over {dim}"
        out.attrs.setdefault("units", units_of(da))
        return out
    values = da.astype(float)
    empty = values.isnull().all(dim)
    fill = -np.inf if how == "argmax" else np.inf
    index = getattr(values.fillna(fill), how)(dim)
    coord = da[dim]
    picked = coord.values[index.values]
    if coord.dtype.kind in "USO":
        picked = np.where(empty.values, "", picked.astype(str)).astype(object)
    else:
        picked = np.where(empty.values, np.nan, picked.astype(float))
    kind = "max" if how == "argmax" else "min"
    return xr.DataArray(picked, dims=index.dims, coords={d: index[d] for d in index.dims},
                        attrs={"long_name": f"{dim} of {kind} {long_name_of(da)}", "units": units_of(coord)},
                        name=f"{how}_{da.name}_{dim}")


def relative(da: xr.DataArray, baseline, dim: str = "plan", maximize: bool | None = None) -> xr.DataArray:
    """Gain over the ``baseline`` value of ``dim``: ``da / base`` if larger is better, else ``base / da``."""
    check_dim(da.dims, dim)
    try:
        value = _coord_value(da[dim], baseline)
    except PlotError as error:   # was "plan='tp8.pp3' is not in the data ...": which option gave it?
        raise PlotError(f"--relative-to {baseline}: {error}") from None
    base = da.sel({dim: value}, drop=True)
    if base.dtype.kind in "fc" and not np.isfinite(base.values).any():   # was "... is an input it needs missing?"
        raise PlotError(f"--relative-to {value}: {dim}={value} has no finite {da.name} in this selection (illegal "
                        f"or infeasible at every point shown); compare with a {dim} that is legal here")
    maximize = direction(str(da.name), da.attrs) == "max" if maximize is None else maximize
    out = (da / base) if maximize else (base / da)
    out.attrs = {"long_name": f"{long_name_of(da)}: gain over {value}", "units": "×", "ratio": 1,
                 "description": f">1: better than {dim}={value}"}
    out.name = f"{da.name}_gain"
    return out


def prepare(data, var: str | None = None, sel=None, reduce=(), relative_to=None, relative_dim: str = "plan",
            status=None, keep=()) -> tuple[xr.DataArray, xr.DataArray | None]:
    """(values, status) of one variable after selection, gain over a baseline and reductions.

    ``data`` is a Dataset (``var`` names the variable; its ``status`` is used)
    or a DataArray (``status`` may be passed). ``reduce`` is a list of
    ``(how, dim)`` with how in max|min|argmax|argmin. Dimensions of size 1 not
    in ``keep`` are dropped (a one-value axis needs no ``--sel``). A variable
    with no finite value where every status is ok (e.g. cost on a system
    without a price) is an error rather than an empty figure.
    """
    if isinstance(data, xr.Dataset):
        if var is None:
            raise PlotError("name the variable to plot (var=...)")
        da = get_var(data, var)
        if da.name in data.dims:   # a grid axis: its values, not a quantity over the grid
            raise PlotError(f"{da.name!r} is a dimension of the result (an axis of the figure, or --sel), not a "
                            f"variable to plot; variables: {', '.join(data.data_vars)}")
        if status is None and "status" in data:
            from fastmodel.analysis.best import fits_filter_applies, within_budget

            status = over_memory(data["status"], data.get("fits_memory"), fits_filter_applies(data))
            status = over_budget(status, within_budget(data))
    elif isinstance(data, xr.DataArray):
        da = data
    else:
        raise not_data(data)
    da = select(da, sel)
    status_attrs = dict(status.attrs) if status is not None else {}  # its code names, kept through reductions
    if status is not None:
        status = select(status, {k: v for k, v in (sel or {}).items() if k in status.dims})
    if relative_to is not None:
        check_quantity(da, "--relative-to")
        da = relative(da, relative_to, relative_dim)
    for how, dim in reduce or ():
        if dim in keep:   # the axis the figure is drawn along cannot be reduced away
            raise PlotError(f"--reduce {how}:{dim} removes {dim!r}, which the figure is drawn along; reduce "
                            "another dimension, or draw along another")
        if dim in (sel or {}) and dim not in da.dims:    # a dimension --sel fixed is no longer there to reduce
            raise PlotError(f"--reduce {how}:{dim}: {dim} is fixed by --sel {dim}=...; reduce it or select it, "
                            "not both")
        check_dim(da.dims, dim)
        da = reduce_one(shown(da, status), how, dim)
        if status is not None:
            status = reduce_status(status, dim)
    da = da.load() if hasattr(da, "load") else da
    if status is not None:
        status = status.broadcast_like(da).transpose(*da.dims).load()
    check_not_empty(da)
    single = [d for d in da.dims if da.sizes[d] == 1 and d not in keep]
    if single:
        da = da.isel({d: 0 for d in single}, drop=True)
        status = status.isel({d: 0 for d in single}, drop=True) if status is not None else None
    if status is not None:
        status.attrs.update(status_attrs)
    if da.dtype.kind in "fc" and not np.isfinite(da.values).any():
        bad = int((status.values != 0).sum()) if status is not None else 0
        if bad == da.size:   # every point has its own reason: name those, not a missing price
            from fastmodel.plot.masked import status_reasons

            reasons = status_reasons(status)     # a NaN (masked) status by name, not int(nan)
            raise PlotError(f"{da.name}: every point of this selection is illegal or infeasible ({reasons}); "
                            "nothing to draw")
        why = f" ({bad:,} of {da.size:,} points illegal or infeasible, the rest NaN)" if bad else ""
        raise PlotError(f"{da.name} has no finite value in this selection{why}; is an input it needs missing, "
                        "e.g. a price, TDP or train_samples for cost and energy?")
    return da, status


def status_legend(codes: Iterable[int], names: list[str] | None = None) -> str:
    """Reasons for a legend entry: ``'product_ne_devices, first_degree'`` (``names``: the status names)."""
    names = names or []
    return ", ".join(names[int(c)] if 0 <= int(c) < len(names) else str(int(c)) for c in sorted({int(c) for c in codes}))


def left_out_line(reasons, total: int) -> str:
    """What a figure left out and why, for its legend and the command's line: ``"left out 5 of 24 points: 3
    no_kv_room, 2 does_not_fit"`` (``reasons``: one reason name per point left out, most common first); '' when
    none was."""
    reasons = [str(r) for r in reasons]
    if not reasons:
        return ""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    parts = ", ".join(f"{n:,} {r}" for r, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"left out {len(reasons):,} of {total:,} points: {parts}"


def reasons_of(status: xr.DataArray, left: np.ndarray, extra: Mapping[str, np.ndarray] | None = None) -> list[str]:
    """The reason of each point ``left`` out (a boolean grid in ``status``'s shape): its status name where it is
    not ``ok``, else the first name of ``extra`` (``{reason: grid of points it rules out}``) that rules it out."""
    from fastmodel.plot.masked import code_name, status_codes

    codes, names, out = status_codes(status), status_names(status), []   # a NaN status: masked (plot/masked.py)
    for index in zip(*np.nonzero(np.atleast_1d(left))):
        code = int(codes[index])
        if code != 0:
            out.append(code_name(code, names))
            continue
        out.append(next((name for name, grid in (extra or {}).items() if np.atleast_1d(grid)[index]), "no result"))
    return out


def subject(data) -> str:
    """What a result is of, for a default title: ``LLaMA2-70B on dc-a, llm-pretrain, madmax semantics`` from its
    ``model``, ``system``, ``task`` and ``semantics`` attributes (a name, or a spec as JSON with a ``name``; the
    task's name else ``fastmodel_task``; the semantics only when not ``default``), the one ``device`` of a serving
    result standing in for a system; '' when it says none of them."""
    attrs = getattr(data, "attrs", {}) or {}

    def name(key: str) -> str:
        text = attrs.get(key)
        if not text:
            return ""
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            return str(text)
        return str(value.get("name", "")) if isinstance(value, dict) else str(value)

    model, system = name("model"), name("system")
    coords = getattr(data, "coords", {})
    if not system and "device" in coords and coords["device"].size == 1:
        system = str(np.asarray(coords["device"].values).ravel()[0])
    text = f"{model} on {system}" if model and system else model or system
    task, semantics = name("task") or str(attrs.get("fastmodel_task", "") or ""), name("semantics")
    setting = [task] + ([f"{semantics} semantics"] if semantics and semantics != "default" else [])
    return ", ".join(t for t in (text, *setting) if t)


def fixed_title(da: xr.DataArray, subject: str = "") -> str:
    """``Llama 3 70B on dgx-h100: global_batch=2048 samples``: what the result is of (:func:`subject`), then the
    coordinates ``--sel`` fixed (the 0-d coordinates of ``da``), each with its units."""
    from fastmodel.plot import style as S

    fixed = {k: v for k, v in da.coords.items() if k not in da.dims and v.ndim == 0}
    text = ", ".join(f"{k}={S.fmt_quantity(v.values.item(), units_of(v))}" for k, v in fixed.items())
    return f"{subject}: {text}" if subject and text else subject or text
