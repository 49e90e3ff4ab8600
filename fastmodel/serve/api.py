"""LLM serving from Python: one configuration, or a labeled grid sweep (docs/model_serving.md).

    >>> from fastmodel.serve.api import evaluate, sweep
    >>> evaluate("llama3.1-70b", "H100", tp=4, input_len=128, output_len=128, batch_size=1)["tpot"]
    >>> ds = sweep("llama3.1-8b", device=["H100", "H200"], tp=[1, 2], precision=["bf16", "fp8"],
    ...            batch_size=[1, 8, 64], input_len=[128, 2048], output_len=[128])

A configuration is a column vector of the real-world model (``fastmodel.registry.lm``):
model columns (a built-in name of ``fastmodel.serve.models`` or of a family-"lm" spec, or a dict of columns), a
device's datasheet and efficiencies (``specs/devices/*.toml``), the instance's plan and
the serving columns. ``precision`` sets the compute and weight format (bf16/fp16,
fp8; int8/int4 are weight-only with 16-bit compute); ``kv_precision`` the KV cache.
One load mode: ``batch_size`` (static batch), ``concurrency`` (continuous batching) or
``max_throughput=True``.

The engine's other doors live beside it and are re-exported here: one serving record (``api_records.py``:
``evaluate_record``, ``evaluate_any_record``) and ``fastmodel.sweep``'s plans (``api_plans.py``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from fastmodel.errors import SpecError, nearest
from fastmodel.registry import coordinate_attrs, status_attrs
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.registry.lm_engine import COLUMN_ALIASES, column_name
from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUS_NAMES
from fastmodel.registry.validators import column_problem
from fastmodel.serve import precisions as serve_precisions
from fastmodel.serve.api_plans import sweep_plan, sweep_plan_from_definition, sweep_plan_from_file  # noqa: F401
from fastmodel.serve.api_records import evaluate_any_record, evaluate_record  # noqa: F401  (the engine's door)
from fastmodel.serve.one_value import no_number, one_value_arguments
from fastmodel.serve.precisions import FP4_PRECISIONS, FP8_KV_DEFAULT, KV_PRECISIONS, PRECISIONS  # noqa: F401
from fastmodel.serve.spec import TRAINING_COLUMNS, given_loads, not_one_load
from fastmodel.serve.sweep_plan import dataset_attrs  # noqa: F401  (the SLO search's too)
from fastmodel.spec.columns import check_base, check_table, encode

#: sweep axes other than columns, in the order of the Dataset's dimensions
SPECIAL_AXES = ("device", "precision", "kv_precision")
#: below this many rows the single-threaded kernel is used
PARALLEL_MIN_ROWS = 256


def device_columns(name: str) -> dict[str, float]:
    """Datasheet and efficiency columns of a built-in device (``specs/devices``), by any of its names."""
    from fastmodel.spec.devices import device_table

    table = device_table()
    found = table.get(str(name).lower())
    if found is None:
        raise SpecError(None, "device", f"unknown device {name!r}{_cluster_gpu(name) or nearest(str(name).lower(), table)}")
    missing = [k for k in ("peak_flops_16", "hbm_bytes", "hbm_bw") if k not in found]
    if missing:
        raise SpecError(None, "device", f"{name!r} has no datasheet values ({', '.join(missing)})")
    return dict(found)


def _cluster_gpu(name: str) -> str:
    """The hint for a cluster spec given as a device (``-d dgx-h100``): its GPU; "" for anything else."""
    from fastmodel.spec.detect import is_cluster
    from fastmodel.spec.loader import resolve_source

    if any(c in str(name) for c in "/\\") or str(name).endswith((".toml", ".json")):
        return ""                                   # built-in names only: never read a path given as a device
    try:
        data = resolve_source(str(name), "system")[0]
    except (SpecError, OSError):
        return ""
    gpu = data.get("gpu") if isinstance(data, dict) and is_cluster(data) else None
    return f" ({name!r} is a cluster; give its GPU, {gpu!r})" if isinstance(gpu, str) else ""


def model_columns(model: str | Mapping[str, float]) -> dict[str, float]:
    """Model columns from a built-in name or a mapping of column names."""
    if isinstance(model, str):
        from fastmodel.serve.models import serving_model

        return serving_model(model)[1]
    values = dict(model)
    for key in values:
        if key not in COLUMN_INDEX:
            raise SpecError(None, f"model.{key}", f"unknown column{nearest(key, COLUMN_INDEX)}")
    return values


def model_notes(model: str | Mapping[str, float]) -> list[str]:
    """``serving_model``'s notes on a model given by name (a column of a family-"lm" spec that serving does not
    price, ``fastmodel.serve.models.UNSERVED``); none for a mapping of columns. ``fastmodel serve --model`` prints
    them; :func:`evaluate` returns them as ``notes`` and :func:`sweep` in its attrs."""
    if isinstance(model, str):
        from fastmodel.serve.models import serving_model

        return serving_model(model)[2]
    return []


def precision_columns(precision: str, kv_precision: str | None = None) -> dict[str, float]:
    """``precision``, ``weight_bytes`` and ``kv_bytes`` columns of a weight/compute and a KV format
    (the KV cache follows the weights' format when ``kv_precision`` is None: fp8 -> fp8, else 16-bit)."""
    if precision not in PRECISIONS:
        raise SpecError(None, "precision", f"unknown value {precision!r}; choose one of {', '.join(PRECISIONS)}"
                        f"{nearest(str(precision), PRECISIONS)}")
    kv = kv_precision or ("fp8" if precision in FP8_KV_DEFAULT else "bf16")
    if kv not in KV_PRECISIONS:
        raise SpecError(None, "kv_precision", f"unknown value {kv!r}; choose one of {', '.join(KV_PRECISIONS)}"
                        f"{nearest(str(kv), KV_PRECISIONS)}")
    code, wbytes = PRECISIONS[precision]
    return {"precision": code, "weight_bytes": wbytes, "kv_bytes": KV_PRECISIONS[kv],
            "fp4_gemm": 1.0 if precision in FP4_PRECISIONS else 0.0}


def by_column_name(given: Mapping[str, Any], source: str | None = None, prefix: str = "") -> dict[str, Any]:
    """``given`` (columns or axes by name) with an older column name (``registry.lm_engine.COLUMN_ALIASES``:
    ``host_step_s``) under the column's own name (``serve_step_overhead_s``); a SpecError when both are given."""
    out: dict[str, Any] = {}
    for name, value in given.items():
        if name in COLUMN_ALIASES and column_name(name) in given:
            raise SpecError(source, prefix + name, f"an older name of {column_name(name)}, which is given too")
        out[column_name(name)] = value
    return out


def load_columns(batch_size=None, concurrency=None, max_throughput: bool = False) -> dict[str, float]:
    """``load_mode`` and ``batch_size`` of exactly one load mode."""
    problem = not_one_load(given_loads(batch_size, concurrency, max_throughput))
    if problem:
        raise SpecError(None, "load", problem)
    if max_throughput:
        return {"load_mode": encode("load_mode", "max_throughput")}
    value = batch_size if batch_size is not None else concurrency
    return {"load_mode": encode("load_mode", "batch" if batch_size is not None else "concurrency"),
            "batch_size": value}


def columns(model, device: str, *, precision: str = "bf16", kv_precision: str | None = None, batch_size=None,
            concurrency=None, max_throughput: bool = False, model_name: str | None = None, **values) -> np.ndarray:
    """One configuration's column vector. ``values``: any column by name (tp, pp, ep, input_len, ...), a number
    (a code name for a coded column); a misspelt name or a value that is no number is one line naming it.
    ``model_name``: a ``model`` given as columns by name (a sweep plan's), for its published checkpoint."""
    values = {key: _number(key, encode(key, value)) for key, value in by_column_name(values).items()}
    merged: dict[str, Any] = {}
    merged.update(device_columns(device))
    merged.update(model_columns(model))
    merged["seq_len"] = values.get("input_len", COLUMNS[COLUMN_INDEX["input_len"]].default) \
        + values.get("output_len", COLUMNS[COLUMN_INDEX["output_len"]].default)
    merged.update(serve_precisions.published_precision_columns(model_name or model, precision, kv_precision))
    load = load_columns(batch_size, concurrency, max_throughput)
    if "batch_size" in load:       # bounds and whole numbers, named as the user gave them
        load["batch_size"] = _number("batch_size", load["batch_size"], "concurrency" if batch_size is None else None)
    merged.update(load)
    merged["n_gpus"] = values.get("tp", 1) * values.get("attention_dp", 1) * values.get("pp", 1)
    merged.update(values)
    vector = np.array([float(c.default) for c in COLUMNS])
    for key, value in merged.items():
        vector[COLUMN_INDEX[key]] = float(value)
    return vector


def _number(key: str, value, field: str | None = None) -> float:
    """A column's value as a float: a SpecError naming an unknown or a training-only column (the nearest name;
    ``serve.spec.TRAINING_COLUMNS``), a value that is no number (a string such as ``input_len="1k"`` or
    ``tp="4"``), a value outside the column's bounds (``tp=0``, ``tp=-1``) or a fraction on a column counting whole
    things (:data:`WHOLE_AXES`, the sweeps' rule of :func:`_check_whole`). ``field``: the name the user gave."""
    if key not in COLUMN_INDEX:     # concurency=: 'concurrency' (a keyword of columns()), not 'intra_latency'
        words = [*COLUMN_INDEX, "concurrency", "max_throughput", "kv_precision"]
        raise SpecError(None, key, f"unknown column{nearest(key, words)}")
    if key in TRAINING_COLUMNS:     # moe_grouped_gemm=0 changed TPOT silently (review12 #4)
        raise SpecError(None, field or key, TRAINING_COLUMNS[key])
    if isinstance(value, (str, bytes)) or not np.isscalar(value) or not np.isreal(value):
        raise SpecError(None, field or key, no_number(value))     # input_len="8k": 8000 or 8192
    if problem := column_problem(COLUMNS[COLUMN_INDEX[key]], float(value)):    # tp=0 would divide by zero
        raise SpecError(None, field or key, problem)
    if _not_whole(key, value):
        raise SpecError(None, field or key, f"{WHOLE_MESSAGE} (got {value!r})")
    return float(value)


def evaluate_table(params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(results ``N_SERVE_RESULTS`` x n, status int8 n) of a ``(N_COLUMNS, n)`` table; a configuration whose
    results are not all finite gets status ``not_finite`` and NaN results (``kernels/finite.py``)."""
    from fastmodel.kernels.serve.fused import serve_parallel, serve_serial

    params = np.ascontiguousarray(params, dtype=np.float64)
    check_table(params)
    n = params.shape[1]
    out = np.empty((len(SERVE_RESULTS), n))
    status = np.zeros(n, dtype=np.int8)
    with np.errstate(all="ignore"):  # interpreted kernels (FASTMODEL_JIT=0) overflow in numpy scalars
        (serve_parallel if n >= PARALLEL_MIN_ROWS else serve_serial)(params, status, out)   # marks not_finite
    return out, status


def engine_columns(engine: str | None, device: str, given: Mapping[str, Any] = (), field: str = "engine",
                   refuse: bool = False) -> tuple[dict[str, float], list[str]]:
    """(columns, notes) of a serving engine's profile on ``device`` (``profiles.engine_profile``: ``"vllm"``,
    ``"vLLM 0.18.0"``; None: the device vendor's default engine, TensorRT-LLM's newest profile on NVIDIA and
    vLLM's on AMD, with a note), less the columns ``given`` names (a column the caller sets replaces the
    profile's). ``refuse``: an engine that does not run on the device is a SpecError (one evaluation); else its
    points are ``engine_not_on_device`` (a sweep, docs/model_serving.md S56)."""
    from fastmodel.serve.profiles import engine_profile
    from fastmodel.serve.profiles_device import reported_name
    from fastmodel.spec.devices import device_vendor

    profile, notes = engine_profile(engine, device_columns(device)["hbm_bytes"], field, vendor=device_vendor(device),
                                    device=device if refuse else None, device_name=reported_name(device))
    named = {column_name(key) for key in given}
    return {k: v for k, v in profile.items() if k not in named}, notes


def device_profiles(engine: str | None, first: str, devices: Sequence[str], given: Mapping[str, Any] = (),
                    field: str = "engine") -> tuple[dict[str, tuple[dict[str, float], list[str]]], list[str]]:
    """:func:`engine_columns` of the base vector's device ``first`` and of every device of a device axis, each
    once, and the notes of them all, once each (each vendor's default engine says so, S56)."""
    profiles = {d: engine_columns(engine, d, given, field) for d in dict.fromkeys([first, *devices])}
    return profiles, list(dict.fromkeys(note for d in [first, *devices] for note in profiles[d][1]))


def evaluate(model, device: str, engine: str | None = None, **kwargs) -> dict[str, float | str]:
    """Every serving result of one configuration (:func:`columns`; one value per argument, ``serve.one_value``) under
    ``engine``'s profile (:func:`engine_columns`; None: the default), its ``status`` name and ``notes`` (:func:`model_notes`
    and the engine's, joined by "; "). Floats in ``SERVE_RESULTS``'s units (:func:`sweep` keeps them in attrs)."""
    model, device, engine, kwargs = one_value_arguments(model, device, engine, kwargs)    # tp=[1, 2]: sweep()
    profile, notes = engine_columns(engine, device, kwargs, refuse=True)
    out, status = evaluate_table(columns(model, device, **profile, **kwargs)[:, None])
    result: dict[str, float | str] = {r.name: float(out[i, 0]) for i, r in enumerate(SERVE_RESULTS)}
    result["status"] = SERVE_STATUS_NAMES[int(status[0])]
    result["notes"] = "; ".join([*model_notes(model), *notes])
    return result


def _axis_values(name: str, values) -> list:
    values = list(values) if isinstance(values, (list, tuple, np.ndarray, range)) else [values]
    if not values:
        raise SpecError(None, name, "empty sweep axis")
    return values


def sweep(model, device: str | Sequence[str] = "H100", precision: str | Sequence[str] = "bf16",
          kv_precision: str | Sequence[str] | None = None, load_mode: str = "batch", engine: str | None = None,
          **axes):
    """A labeled grid of serving configurations: an ``xarray.Dataset`` with one dimension per axis given as a
    list (device, precision, kv_precision and any column: tp, batch_size, input_len, ...), every
    ``SERVE_RESULTS`` variable with its units, and ``status`` (``SERVE_STATUS_NAMES``). Scalars are fixed
    values. ``load_mode``: batch | concurrency (``batch_size`` is the concurrency) | max_throughput. ``engine``:
    the engine profile (:func:`engine_columns`, per device; None: the default engine). Its attrs carry the
    model's ``notes`` (:func:`model_notes`) and the engine's, joined by "; ", the fastmodel version and ``call``:
    the arguments as JSON (``sweep(**json.loads(ds.attrs["call"]))`` remakes it)."""
    import xarray as xr

    call = dict(model=model, device=device, precision=precision, kv_precision=kv_precision, load_mode=load_mode,
                engine=engine, **axes)       # recorded: the same call remakes the Dataset
    _check_grid_size([v for v in (device, precision, kv_precision, *axes.values()) if v is not None])
    profiles, engine_notes = device_profiles(engine, _first(device), _axis_values("device", device), axes)
    profile = profiles[_first(device)][0]
    base = columns(model, _first(device), precision=_first(precision), kv_precision=_first(kv_precision),
                   max_throughput=True, **profile)
    base[COLUMN_INDEX["load_mode"]] = encode("load_mode", load_mode)
    special = {"device": _axis_values("device", device), "precision": _axis_values("precision", precision)}
    if kv_precision is not None:
        special["kv_precision"] = _axis_values("kv_precision", kv_precision)
    dims: list[str] = []
    coords: dict[str, list] = {}
    fixed: dict[str, float] = {}
    for name, value in {**special, **by_column_name(axes)}.items():
        if name not in special and name not in COLUMN_INDEX:
            raise SpecError(None, name, f"unknown sweep axis{nearest(name, [*COLUMN_INDEX, *SPECIAL_AXES])}")
        if name not in special:
            _check_whole(name, _axis_values(name, value))
        if name in special or isinstance(value, (list, tuple, np.ndarray, range)):
            dims.append(name)
            coords[name] = _axis_values(name, value)
        else:
            fixed[name] = _number(name, encode(name, value))    # a str, tp=0: one line, as evaluate's
    for name, value in fixed.items():
        base[COLUMN_INDEX[name]] = value
    # per-axis column blocks: for each axis value, the columns it sets
    named = serve_precisions.checkpoint_model_name(model, {*dims, *fixed})
    blocks = [axis_block(name, coords[name], kv_precision is not None, lambda d: profiles[d][0], named)
              for name in dims]
    shape = tuple(len(coords[d]) for d in dims)
    total = int(np.prod(shape))
    out = np.empty((len(SERVE_RESULTS), total))
    status = np.zeros(total, dtype=np.int8)
    if total:
        from fastmodel.kernels.serve import fused
        from fastmodel.sweeps.plan import grid_lanes

        check_base(base)
        sizes = np.array([len(block[0]) for block in blocks], dtype=np.int64)
        col_start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        axis_cols = np.concatenate([block[0] for block in blocks]).astype(np.int64)
        flat = [block[1].ravel() for block in blocks]             # (columns x values), column-major by value
        val_start = np.concatenate([[0], np.cumsum([f.size for f in flat])]).astype(np.int64)
        derive = np.array(["n_gpus" not in dims and "n_gpus" not in fixed,
                           "seq_len" not in dims and "seq_len" not in fixed], dtype=np.bool_)
        fused.serve_grid(base, axis_cols, col_start, np.concatenate(flat).astype(np.float64), val_start,
                         np.array(shape, dtype=np.int64), derive, status, out, 0, fused.GRID_CHUNK_ROWS, grid_lanes())
    # a result named like a swept column (batch_size under a fixed-batch sweep) is stored as effective_<name>;
    # flags (fits_memory) as booleans, as in every engine's datasets
    data = {(f"effective_{r.name}" if r.name in dims else r.name):
            (dims, out[i].reshape(shape) > 0.5 if r.dtype == "bool" else out[i].reshape(shape), r.attrs())
            for i, r in enumerate(SERVE_RESULTS)}
    data["status"] = (dims, status.reshape(shape), status_attrs("serve"))
    coords = {d: (d, coords[d], coordinate_attrs(d, {"field": d}, np.asarray(coords[d]).dtype.kind in "iuf")) for d in dims}
    return xr.Dataset(data, coords=coords, attrs=dataset_attrs(model, load_mode, engine_notes, call=call))


def _check_grid_size(values) -> None:
    """A SweepError (one line) when the grid of these axis values (a list, tuple, array or range is an axis; ``len``
    of a range is free) would take over half the available memory: before any axis is built as a list."""
    from fastmodel.sweeps.size import axes_points, check_grid_memory

    total = axes_points(values)
    check_grid_memory(total, total * (8 * len(SERVE_RESULTS) + 1), "sweep fewer values")


#: serving axes counting whole things: mesh degrees, attention-DP groups, serving counts (``sweep_file._COUNTS``)
#: and plan columns counted in sequences, layers, steps or batches (as the training sweeps' WHOLE_AXES)
WHOLE_AXES = ("tp", "pp", "cp", "ep", "etp", "attention_dp", "instances", "concurrency", "batch_size", "input_len",
              "output_len", *(c.name for c in COLUMNS if c.group == "plan" and c.units in ("sequences", "layers",
                                                                                             "steps", "batches")))
WHOLE_MESSAGE = "every value must be a whole number"


def _not_whole(name: str, number) -> bool:
    """Whether ``number`` (an encoded value) is a finite fraction on an axis counting whole things."""
    return (name in WHOLE_AXES and isinstance(number, (int, float, np.number)) and bool(np.isfinite(number))
            and not float(number).is_integer())


def _check_whole(name: str, values: list) -> None:
    """The training sweeps' rule (``fastmodel.lm.sweep.WHOLE_AXES``, its message word for word) on a serving axis
    counting whole things (:data:`WHOLE_AXES`): a SweepError naming the first value that is not a whole number
    (``tp=[1.5]`` would be a mesh of 1.5 GPUs). :func:`_number` applies the same rule to one value."""
    from fastmodel.errors import SweepError

    for value in values:
        if _not_whole(name, encode(name, value)):
            raise SweepError(f"axis {name!r}: {WHOLE_MESSAGE} (got {value!r})")


def _first(value):
    return (value[0] if len(value) else None) if isinstance(value, (list, tuple, np.ndarray, range)) else value


def axis_block(name: str, values: list, own_kv: bool, profile=None, model_name=None) -> tuple[np.ndarray, np.ndarray]:
    """(column indices, table columns x len(values)) an axis sets for each of its values; a device axis sets the
    engine ``profile(device)`` columns that differ between its devices too (vLLM's and SGLang's budgets follow the
    GPU's memory, S13; the others are the base vector's, set from the first device). A precision axis of a named
    model sets its published checkpoint's columns at each value, as :func:`columns` (gpt-oss fp4: MXFP4 experts)."""
    if name == "device":
        extra = [profile(v) if profile else {} for v in values]
        varying = {k for k in set().union(*extra) if len({e.get(k) for e in extra}) > 1}
        # the vendors' default engines differ (S56): a column one device's profile sets and another's does not
        # keeps the registry default there
        rows = [{**device_columns(v), **{k: e.get(k, COLUMNS[COLUMN_INDEX[k]].default) for k in varying}}
                for v, e in zip(values, extra)]
        keys = sorted(set().union(*rows))
        # a device without a column keeps the registry default
        table = np.array([[r.get(k, COLUMNS[COLUMN_INDEX[k]].default) for r in rows] for k in keys], dtype=float)
        return np.array([COLUMN_INDEX[k] for k in keys]), table
    if name == "precision":
        rows = [serve_precisions.published_precision_columns(model_name, v) for v in values]
        keys = ["precision", "weight_bytes", "fp4_gemm", *([] if own_kv else ["kv_bytes"]),
                *(["quant_experts_only"] if model_name is not None else [])]
    elif name == "kv_precision":
        rows = [precision_columns("bf16", v) for v in values]
        keys = ["kv_bytes"]
    else:
        column = column_name(name)
        return np.array([COLUMN_INDEX[column]]), np.array([[_number(column, encode(column, v)) for v in values]])
    return np.array([COLUMN_INDEX[k] for k in keys]), np.array([[r[k] for r in rows] for k in keys], dtype=float)
