"""Grid sweeps of the real-world LM model: named axes -> parameter table chunks -> fused kernel -> Dataset.

Every axis is a registry column (``tp``, ``micro_batch``, ``recompute``,
``gemm_eff_16``...) or one of three named axes:

- ``num_nodes``: cluster size (``n_gpus = num_nodes x gpus_per_node``);
- ``plan``: device meshes ``"tp8.pp4"`` (degrees left out are 1; dp fills the
  cluster), or ``"all"``: every mesh of powers of two (and divisors of the layer
  count for pp) that can be legal on the largest cluster of the sweep;
- ``global_batch``.

The grid is the Cartesian product, evaluated by one fused kernel
(``kernels/lm/grid.py``) that builds each point from its index, checks the rule
table and evaluates it, so no parameter table is materialised. Illegal points
keep their status code (``STATUSES``) and NaN results.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from fastmodel.errors import SweepError
from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
from fastmodel.lm.lowering import Mesh, lower
from fastmodel.lm.table import CODE_TABLES, encode
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS, MEMORY_KINDS, MEMORY_RESULTS, RESULTS, STATUSES

if TYPE_CHECKING:
    import xarray as xr

#: grid size refused without ``max_points``
MAX_POINTS = 2_000_000_000
DEGREES = ("tp", "pp", "cp", "ep")
MESH_AXIS = "plan"


def mesh_label(mesh: dict[str, int]) -> str:
    return ".".join(f"{k}{mesh[k]}" for k in DEGREES if mesh.get(k, 1) != 1) or "dp"


def parse_mesh(text: str) -> dict[str, int]:
    """``"tp8.pp4"`` -> ``{"tp": 8, "pp": 4, "cp": 1, "ep": 1}``; ``"dp"``: all 1."""
    mesh = {k: 1 for k in DEGREES}
    if not text.strip():
        raise SweepError("empty plan: give a mesh like 'tp8.pp4' (degrees left out are 1) or 'dp'")
    if text.strip() == "dp":
        return mesh
    seen = set()
    for part in text.replace(",", ".").split("."):
        key = part.rstrip("0123456789")
        digits = part[len(key):]
        if key not in DEGREES or not digits or int(digits) < 1:
            raise SweepError(f"plan {text!r}: {part!r} is not a degree like tp8, pp4, cp2 or ep8")
        if key in seen:
            raise SweepError(f"plan {text!r}: {key} is given twice")
        seen.add(key)
        mesh[key] = int(digits)
    return mesh


def all_meshes(model, cluster, max_gpus: int) -> list[dict[str, int]]:
    """Meshes worth evaluating: tp a power of two within an NVLink domain dividing the heads, pp dividing the
    layers, cp a power of two up to 16 dividing the sequence, ep dividing the experts; product <= max_gpus."""
    domain = cluster.tiers[0].domain_size
    tps = [t for t in _powers(min(domain, model.heads)) if model.heads % t == 0]
    pps = [p for p in range(1, min(model.layers, 128) + 1) if model.layers % p == 0]
    cps = [c for c in _powers(16) if c == 1 or model.seq_len % (2 * c) == 0]
    eps = [1] if not model.moe_experts else [e for e in _powers(model.moe_experts) if model.moe_experts % e == 0]
    meshes = []
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if tp * pp * cp > max_gpus:
                    continue
                for ep in eps:
                    if ep <= max_gpus // (tp * pp * cp):
                        meshes.append({"tp": tp, "pp": pp, "cp": cp, "ep": ep})
    return meshes


def _powers(limit: int) -> list[int]:
    return [1 << i for i in range(int(math.log2(max(limit, 1))) + 1)]


def base_columns(model, cluster, execution, global_batch: int) -> np.ndarray:
    """The column vector of the specs with a trivial mesh (tp = pp = cp = ep = 1, dp = the cluster)."""
    return lower(model, cluster, execution, Mesh(dp=cluster.n_gpus), global_batch, source=model.name)


def _axis_values(name: str, values: Any, model, cluster, max_gpus: int) -> tuple[list, np.ndarray | None]:
    """(coordinate labels, numeric values or None for the plan axis)."""
    if name == MESH_AXIS:
        meshes = all_meshes(model, cluster, max_gpus) if values == "all" else [parse_mesh(str(v)) for v in values]
        return [mesh_label(m) for m in meshes], None
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise SweepError(f"axis {name!r}: expected a list of values, got {values!r}")
    if len(values) == 0:
        raise SweepError(f"axis {name!r}: empty list")
    if name not in ("num_nodes",) and name not in COLUMN_INDEX:
        from fastmodel.errors import nearest
        raise SweepError(f"unknown axis {name!r}{nearest(name, [*COLUMN_INDEX, 'num_nodes', MESH_AXIS])}")
    numeric = np.array([float(encode(name, v)) for v in values])
    if not np.all(np.isfinite(numeric)):
        raise SweepError(f"axis {name!r}: values must be finite")
    if name in COLUMN_INDEX:
        column = COLUMNS[COLUMN_INDEX[name]]
        outside = [v for v, x in zip(values, numeric) if not column.lo <= x <= column.hi]
        if outside:
            raise SweepError(f"axis {name!r}: {outside[0]!r} is outside [{column.lo:g}, {column.hi:g}]"
                             f"{' ' + column.units if column.units not in ('1', 'code') else ''}")
    return list(values), numeric


def lm_sweep(model: Any, system: Any, task: Any = None, axes: dict | None = None, execution: Any = None,
             global_batch: int | None = None, num_nodes: int | None = None, only_fitting: bool = False,
             calibration: Any = None) -> "xr.Dataset":
    """Evaluate the Cartesian product of ``axes`` under the real-world model (see module docstring).

    ``only_fitting``: legal points whose memory per device exceeds usable HBM get status ``does_not_fit``
    (``fits_memory`` says the same for every point either way). ``calibration``: a calibration overlay
    (``fastmodel calibrate``'s TOML path or a ``Calibration``) applied to the base table after the cluster's
    own ``efficiency`` overrides (an axis over a fitted column still sets it per point); the dataset's attrs
    record it; a device or tier it does not cover is a ``CalibrationWarning``.
    """
    from fastmodel.lm.calibrate.overlay import as_calibration

    cal = as_calibration(calibration)
    model = load_lm_model(model)
    cluster = load_cluster(system, num_nodes)
    execution = load_execution(execution)
    if global_batch is None:
        global_batch = _task_global_batch(task)
    axes = dict(axes or {})
    nodes = axes.get("num_nodes", [cluster.num_nodes])
    max_gpus = int(max(nodes) * cluster.gpus_per_node) if len(nodes) else cluster.n_gpus
    names, labels, numeric = [], [], []
    for name, values in axes.items():
        coords, values_num = _axis_values(name, values, model, cluster, max_gpus)
        names.append(name)
        labels.append(coords)
        numeric.append(values_num)
    if MESH_AXIS in names:
        meshes = [parse_mesh(label) for label in labels[names.index(MESH_AXIS)]]
    else:
        meshes = None
    shape = tuple(len(c) for c in labels)
    total = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if total > MAX_POINTS:
        raise SweepError(f"{total:,} grid points is more than {MAX_POINTS:,}; split the sweep")
    if total == 0:
        raise SweepError("the grid is empty")
    base = base_columns(model, cluster, execution, global_batch)
    if cal is not None:
        from fastmodel.lm.calibrate import use

        base = use.overlay(base, cal, cluster.gpu, execution.framework)
        widest = base.copy()
        widest[COLUMN_INDEX["n_gpus"]] = max_gpus
        use.check(cal, {cluster.gpu: use.tiers_used(widest)}, frameworks=[execution.framework])
    axis_columns, axis_values = _axis_arrays(names, numeric, meshes, cluster.gpus_per_node)
    out = np.empty((len(RESULTS), total))
    status = np.empty(total, dtype=np.int8)
    from fastmodel.kernels.lm.grid import evaluate_grid
    from fastmodel.lm.engine import EVALUATED, NOT_FINITE, mark_not_finite

    evaluate_grid(base, axis_columns, axis_values, np.array(shape or (1,), dtype=np.int64),
                  execution.shard_degree is None, bool(only_fitting), status, out)
    mark_not_finite(status, out, NOT_FINITE, EVALUATED)   # issue 25 item 2: never a result of inf
    ds = _dataset(names, labels, shape, out, status, model, cluster, execution, global_batch)
    ds.attrs["usable_hbm_bytes"] = float(base[COLUMN_INDEX["usable_hbm_fraction"]] * base[COLUMN_INDEX["hbm_bytes"]])
    if cal is not None:
        ds.attrs.update(use.attrs(cal, [cluster.gpu], [execution.framework]))
    return ds


def point_columns(model: Any, system: Any, task: Any = None, plan: str | None = None, execution: Any = None,
                  num_nodes: int | None = None, global_batch: int | None = None) -> np.ndarray:
    """The column vector of one configuration, built as the grid kernel builds a sweep point (mesh degrees,
    ``dp = n_gpus / (tp pp cp)``, the FSDP shard group = dp unless the execution spec sets it); a PlanError
    for an illegal plan."""
    from fastmodel.lm.rules import check_plan

    model = load_lm_model(model)
    cluster = load_cluster(system, num_nodes)
    execution = load_execution(execution)
    columns = base_columns(model, cluster, execution, global_batch or _task_global_batch(task))
    for key, value in parse_mesh("dp" if plan is None else plan).items():
        columns[COLUMN_INDEX[key]] = value
    columns[COLUMN_INDEX["dp"]] = columns[COLUMN_INDEX["n_gpus"]] / (
        columns[COLUMN_INDEX["tp"]] * columns[COLUMN_INDEX["pp"]] * columns[COLUMN_INDEX["cp"]])
    if execution.shard_degree is None:
        columns[COLUMN_INDEX["shard_degree"]] = columns[COLUMN_INDEX["dp"]]
    check_plan(columns, f"plan {plan or 'dp'!r}")
    return columns


def _task_global_batch(task: Any) -> int:
    if task is None:
        raise SweepError("give a task (e.g. 'llm-pretrain') or global_batch")
    from fastmodel.lm.task import load_train_task

    return int(load_train_task(task).global_batch)


def _axis_arrays(names, numeric, meshes, gpus_per_node) -> tuple[np.ndarray, np.ndarray]:
    """(axis_columns int64[axes, k], axis_values float64[axes, k, longest]) for ``kernels.lm_grid``."""
    width = max([len(DEGREES) if name == MESH_AXIS else 1 for name in names], default=1)
    longest = max([len(meshes) if name == MESH_AXIS else len(values) for name, values in zip(names, numeric)],
                  default=1)
    columns = np.full((max(len(names), 1), width), -1, dtype=np.int64)
    values = np.zeros((max(len(names), 1), width, longest))
    for axis, name in enumerate(names):
        if name == MESH_AXIS:
            for j, key in enumerate(DEGREES):
                columns[axis, j] = COLUMN_INDEX[key]
                values[axis, j, :len(meshes)] = [m[key] for m in meshes]
        elif name == "num_nodes":
            columns[axis, 0] = COLUMN_INDEX["n_gpus"]
            values[axis, 0, :len(numeric[axis])] = numeric[axis] * gpus_per_node
        else:
            columns[axis, 0] = COLUMN_INDEX[name]
            values[axis, 0, :len(numeric[axis])] = numeric[axis]
    return columns, values


def _dataset(names, labels, shape, out, status, model, cluster, execution, global_batch) -> "xr.Dataset":
    import json

    from fastmodel import __version__

    dims = tuple(names)
    coords = {name: (name, np.array(coord) if name != MESH_AXIS else np.array(coord, dtype=object))
              for name, coord in zip(names, labels)}
    data = {}
    kinds = []
    for i, result in enumerate(RESULTS):
        values = out[i].reshape(shape)
        if result.name in MEMORY_RESULTS:
            kinds.append(values)
            continue
        if result.name == "fits_memory":
            values = np.where(np.isnan(values), False, values == 1.0)
        data[result.name] = (dims, values, {"units": result.units, "description": result.doc,
                                            "better": result.better})
    data["memory"] = ((*dims, "memory_kind"), np.stack(kinds, axis=-1), {
        "units": "bytes", "better": "min",
        "description": "Bytes per device by kind on the most loaded rank; they sum to memory_per_device."})
    coords["memory_kind"] = ("memory_kind", np.array(MEMORY_KINDS))
    data["status"] = (dims, status.reshape(shape), {
        "flag_values": list(range(len(STATUSES))),
        "flag_meanings": " ".join(s.name for s in STATUSES),
        "description": "; ".join(f"{i} {s.name}: {s.message}" for i, s in enumerate(STATUSES)),
    })
    attrs = {
        "model": json.dumps(model.model_dump()), "system": json.dumps(cluster.model_dump()),
        "execution": json.dumps(execution.model_dump()), "global_batch": int(global_batch),
        "semantics": "default", "fastmodel_version": __version__,
        "codes": json.dumps({k: v for k, v in CODE_TABLES.items()}),
    }
    import xarray as xr

    return xr.Dataset(data, coords=coords, attrs=attrs)


__all__ = ["lm_sweep", "all_meshes", "parse_mesh", "mesh_label"]
