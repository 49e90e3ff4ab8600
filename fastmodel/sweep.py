"""Sweeps: a Cartesian grid of spec fields and plans, evaluated into a labeled Dataset.

The grid has one dimension per axis, in the order given. Axes that change
the op graph (plan, layer count, precision, task kind, freezing) are
*structural*; each combination of them is one Program. The remaining
(numeric) axes are cut into hyper-rectangular *units* of at most
``unit_configs`` points; a unit is evaluated as one parameter table through
the kernels and written into its region of the grid. Units are the unit of
work everywhere: in memory, streamed into a zarr store (one zarr chunk per
unit, a ``unit_done`` flag written after the data, so an interrupted sweep
resumes exactly where it stopped), and as Dask distributed tasks.

Illegal and infeasible points stay in the grid: their result variables are
NaN and ``status`` says why (``params.STATUS_NAMES``); memory variables are
kept for ``does_not_fit`` points so one can see by how much they miss.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import xarray as xr

from fastmodel import __version__
from fastmodel.config import check_task_fits_family, structure_key_for
from fastmodel.engine import evaluate_into
from fastmodel.errors import FastmodelError, SpecError, SweepError, nearest
from fastmodel.kernels.layout import N_RESULTS, RESULTS
from fastmodel.loader import load_model, load_system, load_task, validate
from fastmodel.params import STATUS, STATUS_NAMES, param_table
from fastmodel.results import NAMES
from fastmodel.results import attrs as variable_attrs
from fastmodel.semantics import get_semantics
from fastmodel.spec_model import MODEL_FAMILIES
from fastmodel.spec_task import TaskSpec
from fastmodel.sweep_axes import NUM_DEVICES, SPEC_AXES, STRUCTURAL, axis_dim, axis_path, axis_values, plan_values

#: default size of a unit of work, in configurations
UNIT_CONFIGS = 1 << 18
#: most combinations of structural axes (plans x models x layer counts ...), each checked and lowered up front
MAX_STRUCTURAL_COMBINATIONS = 1_000_000
#: result variables stored as float64 (fits_memory and status are stored as bool / int8)
FLOAT_VARIABLES = tuple(n for n in NAMES if n != "fits_memory")


@dataclass(frozen=True)
class Axis:
    name: str            # dataset dimension
    path: str            # spec field path, or "plan", "model", "system"
    values: np.ndarray   # coordinate values (plan labels for the plan axis)
    structural: bool


@dataclass(frozen=True)
class Unit:
    """One rectangle of the grid: fixed structural indices, a block of each numeric axis."""

    index: int
    structural: tuple[int, ...]        # index into each structural axis
    blocks: tuple[slice, ...]          # slice of each numeric axis

    @property
    def size(self) -> int:
        return math.prod(b.stop - b.start for b in self.blocks)


def _set_path(data: dict, path: str, value) -> None:
    """Set a dotted spec path (``system.device.flops_util``) in a spec's dict."""
    parts = path.split(".")[1:]
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


class Sweep:
    """A sweep definition: base specs, semantics and axes, with its grid layout."""

    def __init__(self, model: Any, system: Any, task: Any, axes: dict[str, Any],
                 semantics: Any = "default", unit_configs: int = UNIT_CONFIGS,
                 axis_specs: dict[str, list[dict]] | None = None):
        self.model = load_model(model)
        self.system = load_system(system)
        self.task = load_task(task)
        self.models = [self.model]      # one per value of a model axis
        self.systems = [self.system]    # one per value of a system axis
        self.semantics = get_semantics(semantics)
        self.unit_configs = int(unit_configs)
        self._axis_specs = axis_specs or {}  # model/system axes: the specs themselves (from a stored definition)
        if not isinstance(axes, dict) or not axes:
            raise SweepError("a sweep needs at least one axis (e.g. plan = 'all')")
        self.axes = self._resolve_axes(axes)
        self.shape = tuple(len(a.values) for a in self.axes)
        self.dims = tuple(a.name for a in self.axes)
        self.num_configs = math.prod(self.shape)
        self.structural_axes = [i for i, a in enumerate(self.axes) if a.structural]
        self.numeric_axes = [i for i, a in enumerate(self.axes) if not a.structural]
        programs = math.prod(self.shape[i] for i in self.structural_axes)
        if programs > MAX_STRUCTURAL_COMBINATIONS:
            raise SweepError(f"the structural axes ({', '.join(self.axes[i].name for i in self.structural_axes)}) "
                             f"make {programs:,} combinations, each its own program; at most "
                             f"{MAX_STRUCTURAL_COMBINATIONS:,}")
        self.block = self._block_shape()
        # a result variable that is also an axis (global_batch) is the coordinate itself
        self.float_variables = tuple(n for n in FLOAT_VARIABLES if n not in self.dims)
        self._combos = self._structural_combinations()
        for combo in self._combos:  # every structural combination must make valid specs, before any work
            self._combo_specs(combo)

    # --- definition -----------------------------------------------------------

    def _resolve_axes(self, axes: dict[str, Any]) -> list[Axis]:
        resolved: list[Axis] = []
        seen: dict[str, str] = {}
        plan_spec = None
        for name, spec in axes.items():
            path = axis_path(str(name))
            if path in seen:
                raise SweepError(f"axes {seen[path]!r} and {name!r} are the same field {path}")
            seen[path] = str(name)
            if path == "plan":
                plan_spec = spec
                resolved.append(Axis("plan", "plan", np.array([], dtype=object), True))
                continue
            if path in SPEC_AXES:
                resolved.append(Axis(path, path, self._load_spec_axis(path, spec), True))
                continue
            if {NUM_DEVICES, "system.num_nodes"} <= set(seen):
                raise SweepError("give either a num_devices or a num_nodes axis, not both")
            values = axis_values(path, spec)
            self._validate_values(path, values)
            resolved.append(Axis(axis_dim(path), path, values, path in STRUCTURAL))
        clusters = self._clusters(resolved)
        families = {m.family for m in self.models}
        if "dlrm-transformer" in families and len(families) > 1:
            raise SweepError("a model axis cannot mix dlrm-transformer (three plan components) with other families")
        if plan_spec is not None:
            plans = plan_values(plan_spec, clusters, transformer="dlrm-transformer" in families)
            self.plans = plans
            labels = np.array([p.shape if all(lv.degree is None for lv in p.levels) else p.label
                               for p in plans], dtype=object)
            resolved = [Axis("plan", "plan", labels, True) if a.path == "plan" else a for a in resolved]
        else:
            if self.task.plan is None:
                raise SweepError(f"task {self.task.name!r} leaves the plan open: add a 'plan' axis (e.g. plan = 'all')")
            self.plans = [self.task.parsed_plan]
            try:
                from fastmodel.plans import check_plan_static
                check_plan_static(self.plans[0])
            except FastmodelError as error:
                raise SweepError(f"task plan: {error}") from None
        want_three = "dlrm-transformer" in families
        for plan in self.plans:
            if bool(plan.transformer) != want_three:
                raise SweepError(f"plan {plan.label!r}: a {'/'.join(sorted(families))} plan has "
                                 f"{'three components MLP/EMB/TRANSFORMER' if want_three else 'two components DENSE/EMB'}")
        return resolved

    def _load_spec_axis(self, path: str, spec: Any) -> np.ndarray:
        """Names of a model or system axis, each loaded (and checked) now."""
        names = spec if isinstance(spec, (list, tuple)) else [spec]
        if not names:
            raise SweepError(f"axis {path} is empty")
        if len(set(map(str, names))) != len(names):
            raise SweepError(f"axis {path}: duplicate name")
        loader = load_model if path == "model" else load_system
        stored = self._axis_specs.get(path)
        if stored is not None and len(stored) != len(names):
            raise SweepError(f"axis {path}: {len(names)} names but {len(stored)} stored specs")
        try:
            specs = [loader(spec) for spec in (stored if stored is not None else names)]
        except FastmodelError as error:
            raise SweepError(f"axis {path}: {error}") from None
        if path == "model":
            self.models = specs
            self.model = specs[0]
        else:
            self.systems = specs
            self.system = specs[0]
        return np.array([str(name) for name in names], dtype=object)

    def _validate_values(self, path: str, values: np.ndarray) -> None:
        """Every axis value must make a valid spec on its own (ranges, units, rules)."""
        if path == NUM_DEVICES:
            if any(v < 1 for v in values):
                raise SweepError(f"axis num_devices: every value must be a positive integer (got {values.tolist()})")
            return
        root = path.split(".")[0]
        bases = {"model": self.models, "system": self.systems, "task": [self.task]}[root]
        for base in bases:
            cls = type(base)
            if root == "model" and path.split(".")[1] not in cls.model_fields:
                raise SweepError(f"axis {axis_dim(path)}: {base.family} model {base.name!r} has no field "
                                 f"{path.split('.', 1)[1]!r}{nearest(path.split('.')[1], cls.model_fields)}")
            for value in values:
                data = base.model_dump()
                value = value.item() if isinstance(value, np.generic) else value
                if path == "task.global_batch":
                    data["local_batch"] = None
                _set_path(data, path, value)
                try:
                    validate(cls, data, None, root)
                except SpecError as error:
                    raise SweepError(f"axis {axis_dim(path)} = {value!r}: {error}") from None

    def _clusters(self, axes: list[Axis]) -> list[tuple[int, int]]:
        by_path = {a.path: a.values for a in axes}
        clusters = []
        for system in self.systems:
            per_node = by_path.get("system.devices_per_node", [system.devices_per_node])
            for d in per_node:
                if NUM_DEVICES in by_path:
                    nodes = [n // d for n in by_path[NUM_DEVICES] if n % d == 0 and n >= d]
                else:
                    nodes = by_path.get("system.num_nodes", [system.num_nodes])
                clusters += [(int(n), int(d)) for n in nodes]
        return clusters

    def _block_shape(self) -> tuple[int, ...]:
        """Block size along each numeric axis: trailing axes whole, the first split."""
        sizes = [self.shape[i] for i in self.numeric_axes]
        block = [1] * len(sizes)
        room = max(1, self.unit_configs)
        for k in range(len(sizes) - 1, -1, -1):
            take = min(sizes[k], max(1, room))
            block[k] = take
            room //= max(1, take)
            if take < sizes[k]:
                break
        return tuple(block)

    def _structural_combinations(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*(range(self.shape[i]) for i in self.structural_axes)))

    def units(self) -> Iterator[Unit]:
        """Every unit of work, in a fixed order (unit.index counts from 0)."""
        numeric_sizes = [self.shape[i] for i in self.numeric_axes]
        starts = [range(0, size, b) for size, b in zip(numeric_sizes, self.block)]
        index = 0
        for combo in self._combos:
            for corner in itertools.product(*starts):
                blocks = tuple(slice(c, min(c + b, size)) for c, b, size in zip(corner, self.block, numeric_sizes))
                yield Unit(index, combo, blocks)
                index += 1

    @property
    def num_units(self) -> int:
        per_combo = math.prod(math.ceil(self.shape[i] / b) for i, b in zip(self.numeric_axes, self.block))
        return len(self._combos) * per_combo

    def region(self, unit: Unit) -> tuple:
        """Index of the unit's region in the full grid (ints for structural dims)."""
        index: list[Any] = [None] * len(self.axes)
        for axis, value in zip(self.structural_axes, unit.structural):
            index[axis] = value
        for axis, block in zip(self.numeric_axes, unit.blocks):
            index[axis] = block
        return tuple(index)

    def definition(self) -> dict:
        """JSON-able definition that recreates this sweep (stored in the dataset attrs)."""
        axes = {}
        for axis in self.axes:
            values = axis.values.tolist()
            axes[axis.name if axis.path == "plan" or axis_path(axis.name) == axis.path else axis.path] = values
        definition = {
            "model": self.model.model_dump(),
            "system": self.system.model_dump(),
            "task": self.task.model_dump(),
            "semantics": self.semantics.model_dump(),
            "axes": axes,
            "unit_configs": self.unit_configs,
        }
        # model/system axes keep their names as coordinates and the specs themselves here, so a worker
        # or a resume rebuilds the same sweep wherever it runs, and an edited spec file is noticed
        specs = {axis.path: [spec.model_dump() for spec in (self.models if axis.path == "model" else self.systems)]
                 for axis in self.axes if axis.path in SPEC_AXES}
        if specs:
            definition["axis_specs"] = specs
        return definition

    @classmethod
    def from_definition(cls, definition: dict) -> "Sweep":
        semantics = dict(definition["semantics"])
        semantics.pop("name", None)
        return cls(definition["model"], definition["system"], definition["task"], definition["axes"],
                   {"base": "madmax", **semantics}, definition.get("unit_configs", UNIT_CONFIGS),
                   definition.get("axis_specs"))

    # --- evaluation -------------------------------------------------------------

    def _combo_specs(self, combo: tuple[int, ...]):
        model_data, task_data = None, None
        plan = self.plans[0]
        base_model, system = self.model, self.system
        for axis_index, value_index in zip(self.structural_axes, combo):
            axis = self.axes[axis_index]
            if axis.path == "plan":
                plan = self.plans[value_index]
                continue
            if axis.path == "model":
                base_model = self.models[value_index]
                continue
            if axis.path == "system":
                system = self.systems[value_index]
                continue
            value = axis.values[value_index]
            value = value.item() if isinstance(value, np.generic) else value
            if axis.path.startswith("model."):
                model_data = model_data if model_data is not None else {}
                model_data[axis.path] = value
            else:
                task_data = task_data or self.task.model_dump()
                _set_path(task_data, axis.path, value)
        model = base_model
        if model_data is not None:
            data = base_model.model_dump()
            for path, value in model_data.items():
                _set_path(data, path, value)
            model = _validate_combo(MODEL_FAMILIES[base_model.family], data, "model")
        task = self.task if task_data is None else _validate_combo(TaskSpec, task_data, "task")
        try:
            check_task_fits_family(model, task)
        except SpecError as error:
            raise SweepError(f"structural axes give an invalid task for {model.name}: {error}") from None
        return model, system, task, plan

    def unit_offset(self, unit: Unit) -> int:
        """Flat offset of the unit in the internal layout (structural axes first, then numeric)."""
        numeric_sizes = [self.shape[i] for i in self.numeric_axes]
        numeric_size = math.prod(numeric_sizes)
        combo_flat = int(np.ravel_multi_index(unit.structural, [self.shape[i] for i in self.structural_axes])) \
            if self.structural_axes else 0
        corner = [b.start for b in unit.blocks]
        corner_flat = int(np.ravel_multi_index(corner, numeric_sizes)) if numeric_sizes else 0
        return combo_flat * numeric_size + corner_flat

    def evaluate_unit(self, unit: Unit, out: np.ndarray, status: np.ndarray, offset: int) -> None:
        """Evaluate one unit into ``out[:, offset:offset + size]`` and ``status[offset:offset + size]``.

        Rows come in C order over the unit's numeric block, which is a
        contiguous range of the internal layout.
        """
        model, system, task, plan = self._combo_specs(unit.structural)
        block_values = [self.axes[i].values[b] for i, b in zip(self.numeric_axes, unit.blocks)]
        shape = tuple(len(v) for v in block_values) or (1,)
        n = unit.size
        values = {}
        for k, (axis, block) in enumerate(zip(self.numeric_axes, block_values)):
            values[self.axes[axis].path] = block.reshape([-1 if j == k else 1 for j in range(len(shape))])
        if "task.global_batch" in values and task.local_batch is not None:
            task = task.model_copy(update={"local_batch": None, "global_batch": 1})
        table, unit_status = param_table(model, system, task, plan, values, shape, self.semantics)
        status[offset:offset + n] = unit_status
        key = structure_key_for(model, task, plan, self.semantics)
        evaluate_into(key, self.semantics, table, status[offset:offset + n], out, offset, mask_infeasible=True)

    @property
    def internal_dims(self) -> tuple[str, ...]:
        return tuple(self.axes[i].name for i in (*self.structural_axes, *self.numeric_axes))

    @property
    def internal_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[i] for i in (*self.structural_axes, *self.numeric_axes))

    # --- datasets -----------------------------------------------------------------

    def coords(self) -> dict[str, Any]:
        coords = {}
        for axis in self.axes:
            attrs = {"field": axis.path}
            values = axis.values.astype(str) if axis.values.dtype == object else axis.values
            coords[axis.name] = xr.Variable(axis.name, values, attrs=attrs)
        return coords

    def variable_attrs(self, name: str) -> dict:
        if name == "status":
            return {
                "long_name": "status",
                "units": "1",
                "description": "Why a point has no result: " + ", ".join(
                    f"{code}={label}" for code, label in enumerate(STATUS_NAMES)),
                "flag_values": list(range(len(STATUS_NAMES))),
                "flag_meanings": " ".join(STATUS_NAMES),
            }
        return variable_attrs(name)

    def dataset_attrs(self) -> dict:
        return {
            "model": json.dumps(self.model.model_dump()),
            "system": json.dumps(self.system.model_dump()),
            "task": json.dumps(self.task.model_dump()),
            "semantics": json.dumps(self.semantics.model_dump()),
            "sweep": json.dumps(self.definition()),
            "fastmodel_version": __version__,
        }

    def result_bytes(self) -> int:
        """Bytes of the result matrix (every result variable) and status in memory."""
        return self.num_configs * (8 * N_RESULTS + 1)


def _validate_combo(cls, data: dict, kind: str):
    try:
        return validate(cls, data, None, kind)
    except SpecError as error:
        raise SweepError(f"structural axes give an invalid {kind}: {error}") from None


@lru_cache(maxsize=8)
def _sweep_from_json(definition_json: str) -> Sweep:
    return Sweep.from_definition(json.loads(definition_json))


# --- runners ----------------------------------------------------------------------

def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (Linux), else total physical memory."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _summarise_status(counts: np.ndarray, total: int) -> str:
    parts = [f"{100 * c / total:.0f}% {STATUS_NAMES[k]}" for k, c in enumerate(counts) if c and k != 0]
    return ", ".join(parts)


#: configurations per second assumed for the up-front estimate (bench/bench_sweep.py streams ~1.1 M/s to zarr)
ESTIMATE_CONFIGS_PER_S = 1e6
#: sweeps above this many configurations need confirmation (--yes)
CONFIRM_CONFIGS = 10**10


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"


def _human_seconds(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:,.0f} days"


def check_size(sweep: Sweep, output: str, to_store: bool, confirmed: bool = False) -> str:
    """The sweep's size estimate as text; SweepError for an absurd size unless ``confirmed``.

    Disk is the uncompressed size of every stored variable (an upper bound;
    zarr compresses NaN regions of illegal points well); time assumes
    ESTIMATE_CONFIGS_PER_S.
    """
    import shutil

    per_config = 8 * len(sweep.float_variables) + 2
    need = sweep.num_configs * per_config
    seconds = sweep.num_configs / ESTIMATE_CONFIGS_PER_S
    text = (f"about {_human_bytes(need)} {'on disk' if to_store else 'of output'} uncompressed, "
            f"~{_human_seconds(seconds)} at {ESTIMATE_CONFIGS_PER_S / 1e6:g} M configs/s")
    if confirmed:
        return text
    try:
        free = shutil.disk_usage(Path(os.path.abspath(output)).parent).free
    except OSError:
        free = None
    if sweep.num_configs > CONFIRM_CONFIGS:
        raise SweepError(f"{sweep.num_configs:,} configurations: {text}; pass --yes to run it anyway")
    if to_store and free is not None and need > free:
        raise SweepError(f"{sweep.num_configs:,} configurations need up to {_human_bytes(need)} but only "
                         f"{_human_bytes(free)} is free there; pass --yes to run it anyway (zarr compresses)")
    return text


def run_in_memory(sweep: Sweep, progress: Callable[[int], None] | None = None) -> xr.Dataset:
    """Evaluate every unit into one result matrix; return the Dataset (views, no copies)."""
    need = sweep.result_bytes()
    have = available_memory_bytes()
    if need > have // 2:
        raise SweepError(
            f"the result grid needs about {need / 2**30:.1f} GiB ({sweep.num_configs:,} configurations) but only "
            f"{have / 2**30:.1f} GiB is available; write it to a zarr store with -o out.zarr"
        )
    out = np.empty((N_RESULTS, sweep.num_configs))
    status = np.zeros(sweep.num_configs, dtype=np.int8)
    for unit in sweep.units():
        sweep.evaluate_unit(unit, out, status, sweep.unit_offset(unit))
        if progress:
            progress(unit.size)
    counts = np.bincount(status, minlength=len(STATUS_NAMES))
    if counts[STATUS["ok"]] == 0 and sweep.num_configs:
        raise SweepError(f"every point of the sweep is illegal or infeasible: {_summarise_status(counts, sweep.num_configs)}")
    return _assemble(sweep, out, status)


def _assemble(sweep: Sweep, out: np.ndarray, status: np.ndarray) -> xr.Dataset:
    shape, dims = sweep.internal_shape, sweep.internal_dims
    data = {}
    for v, name in enumerate(RESULTS):
        if name == "fits_memory":
            values = out[v].reshape(shape) > 0.5
        elif name in sweep.float_variables:
            values = out[v].reshape(shape)
        else:
            continue
        data[name] = xr.Variable(dims, values, sweep.variable_attrs(name)).transpose(*sweep.dims)
    data["status"] = xr.Variable(dims, status.reshape(shape), sweep.variable_attrs("status")).transpose(*sweep.dims)
    return xr.Dataset(data, coords=sweep.coords(), attrs=sweep.dataset_attrs())


# --- zarr stores --------------------------------------------------------------------

def _chunks(sweep: Sweep) -> tuple[int, ...]:
    chunks = [1] * len(sweep.axes)
    for axis, block in zip(sweep.numeric_axes, sweep.block):
        chunks[axis] = block
    return tuple(chunks)


def create_store(sweep: Sweep, path: str) -> None:
    """Create the store atomically: metadata, coordinates, every status ``not_computed``, ``unit_done`` all false.

    The store is built under a temporary name beside ``path`` and renamed onto
    it when complete, so an interruption (Ctrl-C, SIGKILL, a full disk) leaves
    either no store or a whole one, never a half-made one.
    """

    import dask.array as da

    target = Path(os.path.abspath(path))
    if target.exists():
        raise SweepError(f"{path} exists")
    chunks = _chunks(sweep)
    data = {}
    for name in sweep.float_variables:
        data[name] = (sweep.dims, da.full(sweep.shape, np.nan, chunks=chunks), sweep.variable_attrs(name))
    data["fits_memory"] = (sweep.dims, da.zeros(sweep.shape, dtype=bool, chunks=chunks), sweep.variable_attrs("fits_memory"))
    data["status"] = (sweep.dims, da.zeros(sweep.shape, dtype=np.int8, chunks=chunks), sweep.variable_attrs("status"))
    data["unit_done"] = (("sweep_unit",), da.zeros(sweep.num_units, dtype=bool, chunks=1),
                         {"long_name": "unit of work written", "units": "1"})
    ds = xr.Dataset(data, coords=sweep.coords(), attrs=sweep.dataset_attrs())

    def not_computed(status) -> None:  # every point starts as not computed; a unit's write replaces its region
        for unit in sweep.units():
            block_shape = tuple(b.stop - b.start for b in unit.blocks)
            status[sweep.region(unit)] = np.full(block_shape, STATUS["not_computed"], dtype=np.int8)

    create_store_atomically(ds, path, not_computed)


def create_store_atomically(ds: xr.Dataset, path: str, mark_status) -> None:
    """Write ``ds``'s metadata as a zarr store at ``path`` (no data computed), let ``mark_status(status)`` fill
    the ``status`` array, then rename it into place: an interruption (Ctrl-C, SIGKILL, a full disk) leaves no
    store or a whole one. The caller holds the writer lock, so leftovers of a killed creator are removed."""
    import shutil
    import tempfile

    import zarr

    target = Path(os.path.abspath(path))
    for stale in target.parent.glob(f".{target.name}.creating-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp = tempfile.mkdtemp(prefix=f".{target.name}.creating-", dir=target.parent)
    except OSError as error:
        raise SweepError(f"{path}: cannot create: {error.strerror}") from None
    try:
        ds.to_zarr(tmp, mode="w", compute=False, consolidated=True, zarr_format=2)
        mark_status(zarr.open_group(tmp, mode="r+")["status"])
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def stored_unit_configs(path: str) -> int | None:
    """The unit size a store was made with (so --resume needs no --unit-configs)."""
    import zarr

    try:
        return json.loads(zarr.open_group(path, mode="r").attrs["sweep"]).get("unit_configs")
    except Exception:  # noqa: BLE001 - not a store: open_store_for_resume reports it
        return None


def open_store_for_resume(sweep: Sweep, path: str) -> np.ndarray:
    """The ``unit_done`` flags of an existing store made by the same sweep."""
    import zarr

    from fastmodel.store import is_sweep_store

    if not is_sweep_store(path):
        raise SweepError(f"{path} is not a fastmodel sweep store, so there is nothing to resume; choose another "
                         "output (fastmodel never deletes it, even with --force)")
    try:
        group = zarr.open_group(path, mode="r")
        stored = json.loads(group.attrs["sweep"])
        done = np.asarray(group["unit_done"][:], dtype=bool)
        for name in ("status", *sweep.float_variables):
            group[name]
    except Exception as error:  # noqa: BLE001 - a damaged store is a user-facing error
        raise SweepError(f"{path}: the sweep store is damaged ({type(error).__name__}: {error}); "
                         "pass --force instead of --resume to replace it") from None
    if stored != json.loads(json.dumps(sweep.definition())):
        raise SweepError(f"{path}: the store was made by a different sweep definition; cannot resume it "
                         "(pass --force instead of --resume to replace it)")
    if done.shape != (sweep.num_units,):
        raise SweepError(f"{path}: the sweep store is damaged (unit_done has {done.size} units, the sweep "
                         f"{sweep.num_units}); pass --force instead of --resume to replace it")
    return done


def write_units(sweep: Sweep, path: str, units: list[Unit], progress: Callable[[int], None] | None = None) -> int:
    """Evaluate ``units`` and write each into the store; the done flag goes last."""
    import zarr

    group = zarr.open_group(path, mode="r+")
    names = [n for n in RESULTS if n in sweep.float_variables or n == "fits_memory"]
    arrays = {name: group[name] for name in (*names, "status")}
    done = group["unit_done"]
    written = 0
    for unit in units:
        n = unit.size
        out = np.empty((N_RESULTS, n))
        status = np.zeros(n, dtype=np.int8)
        sweep.evaluate_unit(unit, out, status, 0)
        region = sweep.region(unit)
        block_shape = tuple(b.stop - b.start for b in unit.blocks)
        for v, name in enumerate(RESULTS):
            if name in arrays:
                values = out[v] > 0.5 if name == "fits_memory" else out[v]
                arrays[name][region] = values.reshape(block_shape)
        arrays["status"][region] = status.reshape(block_shape)
        done[unit.index] = True
        written += n
        if progress:
            progress(n)
    return written


def _write_units_task(definition_json: str, path: str, unit_indices: list[int]) -> int:
    """Dask task: rebuild the sweep in the worker and write some units."""
    sweep = _sweep_from_json(definition_json)
    wanted = set(unit_indices)
    units = [u for u in sweep.units() if u.index in wanted]
    return write_units(sweep, path, units)


def check_scheduler_address(scheduler: str) -> None:
    import re

    if not re.match(r"^(tcp|tls|ucx|ws|wss)://[^\s:/]+(:\d+)?/?$", str(scheduler)):
        raise SweepError(f"--scheduler {scheduler!r} is not a scheduler address; write e.g. tcp://host:8786")


def connect(scheduler: str | None = None, workers: int | None = None):
    """(client, cluster) for a Dask scheduler address or a local cluster of ``workers`` processes."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        check_scheduler_address(scheduler)
        try:
            return Client(scheduler, timeout=10), None
        except (OSError, TimeoutError, ValueError) as error:
            raise SweepError(f"--scheduler {scheduler}: cannot connect ({' '.join(str(error).split()) or type(error).__name__})") \
                from None
    cluster = LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(cluster), cluster


def _check_workers_see(client, path: str) -> None:
    """Every worker must see the store (same path on a shared filesystem), or nothing is written."""
    seen = client.run(os.path.isdir, path)
    blind = sorted(worker for worker, ok in seen.items() if not ok)
    if blind:
        raise SweepError(f"{path}: {len(blind)} of {len(seen)} Dask workers cannot see the store (e.g. {blind[0]}); "
                         "write it on a filesystem every worker mounts at the same path")


def run_to_store(sweep: Sweep, path: str, resume: bool = False, progress: Callable[[int], None] | None = None,
                 client=None, overwrite: bool = False) -> xr.Dataset:
    """Stream the sweep into a zarr store (resumable); return the opened Dataset.

    Holds the store's writer lock throughout. ``overwrite`` replaces an
    existing sweep store (never anything else); ``resume`` completes one made
    by the same definition. The path is made absolute, so Dask workers with
    another working directory write the same store.
    """
    from fastmodel.store import remove_store, writer_lock

    path = os.path.abspath(path)
    with writer_lock(path):
        exists = os.path.lexists(path)
        if resume and exists:
            done = open_store_for_resume(sweep, path)
        else:
            if resume:
                raise SweepError(f"{path}: nothing to resume (no such store)")
            if exists:
                if not overwrite:
                    raise SweepError(f"{path} exists; complete it (--resume, resume=True) or replace it "
                                     "(--force, overwrite=True)")
                remove_store(path)
            create_store(sweep, path)
            done = np.zeros(sweep.num_units, dtype=bool)
        todo = [u for u in sweep.units() if not done[u.index]]
        if progress:
            progress(sum(u.size for u in sweep.units() if done[u.index]))
        if client is None:
            write_units(sweep, path, todo, progress)
        else:
            _check_workers_see(client, path)
            definition_json = json.dumps(sweep.definition())
            per_task = max(1, len(todo) // (8 * max(1, len(client.scheduler_info().get("workers", {})))))
            batches = [todo[k:k + per_task] for k in range(0, len(todo), per_task)]
            futures = [client.submit(_write_units_task, definition_json, path, [u.index for u in batch], pure=False)
                       for batch in batches]
            from distributed import as_completed

            for future in as_completed(futures):
                written = future.result()
                if progress:
                    progress(written)
        # no metadata changes after creation (its consolidated metadata was written before the rename), so there
        # is no finalization step to interrupt: the last unit's done flag completes the store
    ds = xr.open_zarr(path)
    counts = np.bincount(ds["status"].values.reshape(-1), minlength=len(STATUS_NAMES)) if sweep.num_configs <= 50_000_000 else None
    if counts is not None and counts[STATUS["ok"]] == 0 and sweep.num_configs:
        raise SweepError(f"every point of the sweep is illegal or infeasible: {_summarise_status(counts, sweep.num_configs)}")
    return ds


# --- the API --------------------------------------------------------------------------

class Progress:
    """A one-line progress bar on a terminal (configs done, configs/s, ETA); silent otherwise."""

    def __init__(self, total: int, stream=None, enabled: bool | None = None, min_interval_s: float = 0.2):
        import sys

        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.start = time.perf_counter()
        self.last = 0.0
        self.min_interval_s = min_interval_s

    def __call__(self, configs: int) -> None:
        self.done += configs
        now = time.perf_counter()
        if self.enabled and (now - self.last >= self.min_interval_s or self.done >= self.total):
            self.last = now
            elapsed = max(now - self.start, 1e-9)
            rate = self.done / elapsed
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            pct = 100 * self.done / self.total if self.total else 100
            self.stream.write(f"\r{self.done:,}/{self.total:,} configs ({pct:5.1f}%)  {rate:,.0f} configs/s  "
                              f"ETA {eta:,.0f} s   ")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line (once; later calls do nothing)."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False


def sweep(model: Any, system: Any, task: Any, axes: dict[str, Any], semantics: Any = "default",
          store: str | None = None, resume: bool = False, workers: int | None = None, scheduler: str | None = None,
          progress: bool | None = False, unit_configs: int = UNIT_CONFIGS, overwrite: bool = False,
          execution: Any = None, only_fitting: bool = False, calibration: Any = None) -> xr.Dataset:
    """Evaluate a grid of configurations; a labeled Dataset with one dimension per axis.

    ``axes`` maps field names (short or dotted) or ``plan`` to values: a list,
    a scalar, or a range ``{start, stop, num|step, scale='linear'|'log'}``;
    ``plan`` takes ``'all'``, a list of plan strings, or rules
    ``{dense=[...], emb=[...], max_levels=1|2}``. With ``store`` (a ``.zarr``
    path) results stream to disk chunk by chunk (``resume`` completes an
    interrupted store, ``overwrite`` replaces an existing sweep store and
    nothing else); ``workers`` / ``scheduler`` run the chunks on a Dask
    distributed cluster (needs ``store``).

    Under the ``default`` semantics a real-world model (``family = "lm"``) is swept by the real-world
    model instead (``fastmodel.lm_sweep``: axes are registry columns, ``num_nodes``, ``global_batch`` and
    ``plan`` meshes; ``execution``, ``only_fitting`` and ``calibration`` -- a ``fastmodel calibrate`` TOML
    path or ``Calibration`` -- apply; the result is in memory). A calibration for a MAD-Max model is a SpecError.
    """
    from fastmodel.api import real_world_model

    real = real_world_model(model, semantics) if not isinstance(model, (list, tuple)) else None
    if real is not None:
        if store is not None or workers is not None or scheduler is not None:
            raise SweepError("real-world sweeps run in memory: leave out store/workers/scheduler and save the "
                             "result with ds.to_netcdf(...)")
        from fastmodel.lm_sweep import lm_sweep

        return lm_sweep(real, system, task, axes=axes, execution=execution, only_fitting=only_fitting,
                        calibration=calibration)
    from fastmodel.calibrate.use import not_for_madmax

    not_for_madmax(calibration)
    definition = Sweep(model, system, task, axes, semantics, unit_configs)
    bar = Progress(definition.num_configs, enabled=progress) if progress is not False else None
    try:
        if workers is not None or scheduler is not None:
            if store is None:
                raise SweepError("a distributed sweep writes a zarr store: give store='out.zarr' (-o out.zarr)")
            client, cluster = connect(scheduler, workers)
            try:
                return run_to_store(definition, store, resume, bar, client, overwrite)
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()
        if store is not None:
            return run_to_store(definition, store, resume, bar, overwrite=overwrite)
        return run_in_memory(definition, bar)
    finally:
        if bar is not None:
            bar.close()


class _CallableModule(type(sys.modules[__name__])):
    """``fastmodel.sweep`` is this module (``import fastmodel.sweep`` gives it) and also calls
    :func:`sweep`, so ``fastmodel.sweep(...)`` works whichever of the two the package attribute holds."""

    def __call__(self, *args, **kwargs):
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
