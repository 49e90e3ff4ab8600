"""Sweep files of the real-world model: LM training (``lm_sweep``) and LLM serving (``serving.sweep``).

A sweep file whose model is a real-world spec (``family = "lm"``) under the
``default`` semantics, or whose task is a serving task (``kind = "serve"``), is
read here instead of by ``fastmodel.sweep.file``; ``fastmodel sweep`` runs it
with the same output, size guard and store machinery (``sweep.real_run``).

Training (task ``llm-pretrain``, a ``kind = "cluster"`` system)::

    model = "llama3-70b"
    system = "dgx-h100"
    task = "llm-pretrain"
    only_fitting = false                 # optional: mark points over usable HBM does_not_fit
    [execution]                          # optional: ExecutionSpec fields (precision, sharding, ...)
    sharding = "distopt"
    [axes]                               # any registry column, num_nodes, global_batch, plan
    num_nodes = [4, 8, 16]
    plan = "all"                         # or ["tp8.pp4", "tp4.pp2.cp2", ...]
    micro_batch = [1, 2]
    recompute = ["none", "selective", "full"]

Serving (a ``kind = "serve"`` task, ``fastmodel.serve.spec``)::

    model = "llama3.1-70b"               # a serving model name or a family-"lm" spec
    system = "H100"                      # a device (specs/devices) or a cluster spec (its gpu)
    task = "serve-chat"
    [axes]                               # device, precision, kv_precision, concurrency, or any column
    device = ["H100", "H200"]
    tp = [1, 2, 4, 8]
    batch_size = [1, 4, 16, 64, 256]

The grid is the Cartesian product of the axes, in the order written. Each axis
is a list, a scalar or a range table ``{start, stop, num|step, scale}``.
Illegal points keep their status code and NaN results.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from fastmodel.errors import FastmodelError, SpecError, SweepError, nearest

LM_KEYS = ("model", "system", "task", "semantics", "axes", "execution", "only_fitting", "unit_configs",
           "description")
SERVE_KEYS = ("model", "system", "task", "semantics", "axes", "unit_configs", "description")
#: serving axes that are not registry columns
SERVE_SPECIAL = ("device", "precision", "kv_precision", "concurrency")
#: serving task fields fixed in every configuration unless an axis of the same name sweeps them
SERVE_FIXED = ("input_len", "output_len", "tp", "pp", "ep", "instances", "kv_cache_mem_fraction")


def _field(source: str, field: str, error: FastmodelError) -> SpecError:
    """Re-raise an error of one part of a sweep file as ``file: field: reason``."""
    reason = error.reason if isinstance(error, SpecError) else str(error)
    for prefix in (f"axis {field.split('.')[-1]!r}: ", f"axis {field.split('.')[-1]}: "):
        if reason.startswith(prefix):
            reason = reason[len(prefix):]
    return SpecError(source, field, reason)


def _raw(spec: Any, kind: str) -> Any:
    from fastmodel.spec.loader import resolve_source

    try:
        return resolve_source(spec, kind)[0]
    except SpecError:
        return None


def is_real_sweep(data: dict, base: Path) -> bool:
    """Whether a parsed sweep file is evaluated by the real-world model (not the MAD-Max ``Sweep``)."""
    from fastmodel.serve.spec import is_serve_task
    from fastmodel.sweep.file import _spec_ref

    task = _raw(_spec_ref(data.get("task"), base), "task") if isinstance(data.get("task"), (str, dict)) else None
    if is_serve_task(task):
        return True
    model = data.get("model")
    model = _raw(_spec_ref(model, base), "model") if isinstance(model, (str, dict)) else None
    system = data.get("system")
    system = _raw(_spec_ref(system, base), "system") if isinstance(system, (str, dict)) else None
    # a real-world model or a cluster system: LMSweep evaluates it or says which spec does not fit
    return (isinstance(model, dict) and model.get("family") == "lm") or \
        (isinstance(system, dict) and system.get("kind") == "cluster")


class RealSweep:
    """A resolved real-world sweep: ``dims`` and ``coords`` of the grid, ``evaluate(slices)`` of any box of it."""

    kind: str  # "lm" or "serve"
    calibration: Any = None  # a Calibration applied to LM training sweeps (fastmodel sweep --calibration)

    def __init__(self, source: str, data: dict, base: Path):
        from fastmodel.sweep import UNIT_CONFIGS

        self.source = source
        self.unit_configs = int(data.get("unit_configs", UNIT_CONFIGS))
        axes = data.get("axes")
        if not isinstance(axes, dict) or not axes:
            raise SpecError(source, "axes", "required: a table of axis = values (e.g. plan = \"all\")")
        self.dims: list[str] = []
        self.coords: dict[str, list] = {}
        self._setup(data, base, axes)
        self.shape = tuple(len(self.coords[d]) for d in self.dims)
        self.num_configs = math.prod(self.shape)

    def _check_keys(self, data: dict, allowed, required) -> None:
        """SpecError for the first top-level key not in ``allowed`` (with the nearest one) or ``required`` missing."""
        unknown = [k for k in data if k not in allowed]
        if unknown:
            raise SpecError(self.source, unknown[0], f"unknown key{nearest(unknown[0], allowed)}")
        for key in required:
            if key not in data:
                raise SpecError(self.source, key, "required key missing")

    # --- grid -------------------------------------------------------------------

    def _expand(self, name: str, spec: Any) -> list:
        from fastmodel.sweep.axes import _expand

        try:
            values = _expand(name, spec)
        except SweepError as error:
            raise _field(self.source, f"axes.{name}", error) from None
        if not values:
            raise SpecError(self.source, f"axes.{name}", "empty list")
        keys = [json.dumps(v) if not isinstance(v, float) else repr(v) for v in values]
        if len(set(keys)) != len(keys):
            dup = next(v for v, k in zip(values, keys) if keys.count(k) > 1)
            raise SpecError(self.source, f"axes.{name}", f"duplicate value {dup!r}")
        return [v.item() if isinstance(v, np.generic) else v for v in values]

    def evaluate(self, slices: tuple[slice, ...] | None = None) -> xr.Dataset:
        """The Dataset of the box ``slices`` (one per dim; None: the whole grid)."""
        slices = slices or tuple(slice(None) for _ in self.dims)
        sub = {d: self.coords[d][s] for d, s in zip(self.dims, slices)}
        ds = self._evaluate(sub)
        ds.attrs["sweep"] = json.dumps(self.definition())
        return ds.transpose(*self.dims, ...)

    # --- store support --------------------------------------------------------------

    def definition(self) -> dict:
        return {"kind": self.kind, "specs": self._specs(),
                "axes": {d: self.coords[d] for d in self.dims}, "unit_configs": self.unit_configs}


class LMSweep(RealSweep):
    kind = "lm"

    def _setup(self, data: dict, base: Path, axes: dict) -> None:
        from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
        from fastmodel.lm.sweep import MESH_AXIS, _axis_values, all_meshes, mesh_label, parse_mesh
        from fastmodel.registry.lm import COLUMN_INDEX
        from fastmodel.semantics import get_semantics
        from fastmodel.sweep.file import _spec_ref

        source = self.source
        self._check_keys(data, LM_KEYS, ("model", "system", "task"))
        semantics = data.get("semantics", "default")
        try:
            real_world = get_semantics(semantics).real_world
        except SpecError as error:
            raise SpecError(source, "semantics", error.reason) from None
        if not real_world:
            raise SpecError(source, "semantics", f"real-world specs (family \"lm\" models, kind \"cluster\" "
                            f"systems) are evaluated under 'default', not {semantics!r} (the MAD-Max model only)")
        for key, loader in (("model", load_lm_model), ("system", load_cluster)):
            try:
                setattr(self, "model" if key == "model" else "cluster", loader(_spec_ref(data[key], base)))
            except SpecError as error:  # this file's key, then the spec's own source, field and reason
                raise SpecError(source, key, str(error)) from None
        if "execution" in data and not isinstance(data["execution"], dict):
            raise SpecError(source, "execution", "expected a table of execution fields (precision, sharding, ...)")
        try:
            self.execution = load_execution(data.get("execution"))
        except SpecError as error:
            raise SpecError(source, error.field, error.reason) from None
        self.only_fitting = data.get("only_fitting", False)
        if not isinstance(self.only_fitting, bool):
            raise SpecError(source, "only_fitting", f"expected true or false, got {self.only_fitting!r}")
        self.task_name = _spec_ref(data["task"], base)
        from fastmodel.lm.sweep import _task_global_batch

        try:
            self.global_batch = _task_global_batch(self.task_name)
        except SpecError as error:
            raise error if error.source else SpecError(source, error.field, error.reason) from None
        except SweepError as error:
            raise SpecError(source, "task", str(error)) from None
        names = [*COLUMN_INDEX, "num_nodes", MESH_AXIS]
        expanded = {}
        for name, spec in axes.items():
            if name not in names:
                raise SpecError(source, f"axes.{name}", f"unknown axis{nearest(name, names)}")
            if name == MESH_AXIS:
                expanded[name] = spec if spec == "all" else self._expand(name, spec)
            else:
                expanded[name] = self._expand(name, spec)
        nodes = expanded.get("num_nodes", [self.cluster.num_nodes])
        for value in nodes:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(source, "axes.num_nodes", f"every value must be a positive integer (got {value!r})")
        max_gpus = int(max(nodes)) * self.cluster.gpus_per_node
        for name, values in expanded.items():
            if name == MESH_AXIS:
                try:
                    meshes = (all_meshes(self.model, self.cluster, max_gpus) if values == "all"
                              else [parse_mesh(str(v)) for v in values])
                except SweepError as error:
                    raise _field(source, "axes.plan", error) from None
                if not meshes:
                    raise SpecError(source, "axes.plan", "no mesh of this model fits the cluster")
                labels = [mesh_label(m) for m in meshes]
                if len(set(labels)) != len(labels):
                    raise SpecError(source, "axes.plan", "duplicate mesh")
                self.coords[name] = labels
            else:
                try:
                    _axis_values(name, values, self.model, self.cluster, max_gpus)
                except (SweepError, SpecError) as error:
                    raise _field(source, f"axes.{name}", error) from None
                self.coords[name] = values
            self.dims.append(name)

    def _specs(self) -> dict:
        return {"model": self.model.model_dump(), "system": self.cluster.model_dump(),
                "execution": self.execution.model_dump(), "global_batch": self.global_batch,
                "only_fitting": self.only_fitting,
                **({"calibration": self.calibration.fingerprint()} if self.calibration is not None else {})}

    def _evaluate(self, sub: dict) -> xr.Dataset:
        from fastmodel.lm.sweep import lm_sweep

        ds = lm_sweep(self.model, self.cluster, axes=sub, execution=self.execution, global_batch=self.global_batch,
                      only_fitting=self.only_fitting, calibration=self.calibration)
        ds.attrs["fastmodel_task"] = "llm-pretrain"
        ds.attrs["status_names"] = ds["status"].attrs["flag_meanings"]
        return ds


class ServeSweep(RealSweep):
    kind = "serve"

    def _setup(self, data: dict, base: Path, axes: dict) -> None:
        from fastmodel.registry.lm import COLUMN_INDEX
        from fastmodel.serve.spec import load_serve_task
        from fastmodel.sweep.file import _spec_ref

        source = self.source
        self._check_keys(data, SERVE_KEYS, ("model", "task"))
        if data.get("semantics", "default") != "default":
            raise SpecError(source, "semantics", "serving sweeps run under the 'default' semantics only")
        try:
            self.task = load_serve_task(_spec_ref(data["task"], base))
        except SpecError as error:
            raise error if error.source else SpecError(source, error.field, error.reason) from None
        self.model_name, self.model_columns = self._model(data["model"], base)
        names = [*SERVE_SPECIAL, *COLUMN_INDEX]
        for name, spec in axes.items():
            if name not in names:
                raise SpecError(source, f"axes.{name}", f"unknown axis{nearest(name, names)}")
            self.coords[name] = self._expand(name, spec)
            self.dims.append(name)
        if "batch_size" in axes and "concurrency" in axes:
            raise SpecError(source, "axes.concurrency", "sweep batch_size or concurrency, not both")
        self.device = self._device(data.get("system"), base)
        self._check_values()

    def _model(self, spec, base: Path) -> tuple[str, dict]:
        from fastmodel.serve.models import SERVE_MODELS, serve_model
        from fastmodel.sweep.file import _spec_ref

        if isinstance(spec, str) and spec.lower() in SERVE_MODELS:
            return spec, serve_model(spec)
        from fastmodel.lm.loader import load_lm_model
        from fastmodel.lm.lowering import model_values
        from fastmodel.registry.lm import COLUMNS

        try:
            model = load_lm_model(_spec_ref(spec, base))
        except SpecError as error:
            if error.source:
                raise
            raise SpecError(self.source, "model", f"{error.reason}; serving models: {', '.join(SERVE_MODELS)}"
                            ) from None
        values = model_values(model)       # the model's columns (the serving task sets seq_len)
        return model.name, {c.name: float(values.get(c.name, c.default)) for c in COLUMNS
                            if c.group == "model" and c.name != "seq_len"}

    def _device(self, system, base: Path) -> str:
        from fastmodel.serve.api import device_columns

        if system is None:
            if "device" not in self.coords:
                raise SpecError(self.source, "system", "required: a device (e.g. \"H100\") or a device axis")
            return self.coords["device"][0]
        from fastmodel.spec.devices import device_table
        from fastmodel.sweep.file import _spec_ref

        name = system
        if not (isinstance(system, str) and system.lower() in device_table()):
            data = _raw(_spec_ref(system, base), "system") if isinstance(system, (str, dict)) else None
            if isinstance(data, dict) and data.get("kind") == "cluster" and isinstance(data.get("gpu"), str):
                name = data["gpu"]
        try:
            device_columns(name)
        except SpecError as error:
            raise SpecError(self.source, "system", error.reason) from None
        return name

    def _check_values(self) -> None:
        from fastmodel.lm.table import encode
        from fastmodel.serve.api import device_columns, precision_columns

        for name in self.dims:
            for value in self.coords[name]:
                try:
                    if name == "device":
                        device_columns(value)
                    elif name == "precision":
                        precision_columns(value)
                    elif name == "kv_precision":
                        precision_columns("bf16", value)
                    else:
                        number = encode(name, value)
                        if isinstance(number, bool) or not isinstance(number, (int, float)) \
                                or not math.isfinite(number) or number < 0:
                            raise SpecError(None, name, f"{value!r} is not a non-negative number")
                        if name in ("concurrency", "batch_size", "tp", "pp", "ep", "instances", "input_len",
                                    "output_len") and (number < 1 or number != int(number)):
                            raise SpecError(None, name, f"{value!r} is not a positive integer")
                except SpecError as error:
                    raise SpecError(self.source, f"axes.{name}", error.reason) from None

    def _specs(self) -> dict:
        return {"model": self.model_name, "model_columns": self.model_columns, "device": self.device,
                "task": self.task.model_dump()}

    def _evaluate(self, sub: dict) -> xr.Dataset:
        from fastmodel.serve.api import sweep

        task = self.task
        mode = "concurrency" if "concurrency" in sub else "batch" if "batch_size" in sub else task.load_mode
        if mode is None:
            raise SpecError(self.source, "task", f"serving task {task.name!r} has no load mode: give batch_size, "
                            "concurrency or max_throughput in the task, or a batch_size/concurrency axis")
        fixed: dict[str, Any] = {k: getattr(task, k) for k in SERVE_FIXED}
        if mode != "max_throughput":
            fixed["batch_size"] = task.batch_size if task.batch_size is not None else task.concurrency
        axes = {("batch_size" if k == "concurrency" else k): v for k, v in sub.items()
                if k not in ("device", "precision", "kv_precision")}
        kwargs = {**fixed, **axes}
        kv = sub.get("kv_precision", task.kv_precision)
        ds = sweep(self.model_columns, device=sub.get("device", [self.device]),
                   precision=sub.get("precision", [task.precision]),
                   kv_precision=None if kv is None else (kv if isinstance(kv, list) else [kv]),
                   load_mode=mode, **kwargs)
        if "concurrency" in sub:
            ds = ds.rename({"batch_size": "concurrency"})
        drop = [d for d in ("device", "precision", "kv_precision") if d in ds.dims and d not in sub]
        ds = ds.squeeze(drop)
        fits = ds["fits_memory"]
        ds["fits_memory"] = (fits.fillna(0) > 0.5).assign_attrs(fits.attrs)  # a flag, as in the other sweeps
        ds.attrs.update({"model": self.model_name, "fastmodel_task": "serve", "task": json.dumps(task.model_dump()),
                         "status_names": ds["status"].attrs["flag_meanings"], "semantics": "default"})
        return ds


def load_real_sweep(path: str, data: dict) -> RealSweep:
    """The real-world sweep of a parsed sweep file (``is_real_sweep(data)``); errors name the file."""
    from fastmodel.serve.spec import is_serve_task
    from fastmodel.sweep.file import _spec_ref

    base = Path(path).parent
    task = _raw(_spec_ref(data.get("task"), base), "task") if isinstance(data.get("task"), (str, dict)) else None
    cls = ServeSweep if is_serve_task(task) else LMSweep
    return cls(str(path), data, base)


__all__ = ["RealSweep", "LMSweep", "ServeSweep", "is_real_sweep", "load_real_sweep"]
