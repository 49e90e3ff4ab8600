"""The serving engine's sweep plan: a serving task over devices, precisions, load and any column, unit by unit.

A configuration is the real-world column vector (``registry.lm`` columns, its serving columns included): the
base vector holds the model, the fixed device and precisions and the task's fields; each axis sets its
columns per value (a ``device`` axis a device file's datasheet and efficiencies, a ``precision`` axis the
compute, weight and KV formats, ``concurrency`` the ``batch_size`` column under continuous batching). A unit of
work is a box of the grid; the fused kernel ``kernels/serve/fused.py:serve_grid`` builds each point of the
box from its index and writes it straight into its place in the result matrix. The shared machinery
(``fastmodel.sweeps``) runs the plan in memory, into a zarr store with resume, or on Dask workers.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from fastmodel.errors import SpecError
from fastmodel.sweeps.plan import Axis, SweepPlan, grid_lanes

#: serving task fields fixed in every configuration unless an axis of the same name sweeps them
SERVE_FIXED = ("input_len", "output_len", "tp", "pp", "ep", "instances", "kv_cache_mem_fraction", "spec_tokens",
               "spec_acceptance")
#: axes that set several columns, or a column by another name
SPECIAL_AXES = ("device", "precision", "kv_precision", "concurrency")


class ServeSweepPlan(SweepPlan):
    """A grid of serving configurations of one model and serving task (see the module docstring)."""

    engine = "serve"
    #: bench/bench_serve.py: about 1.5 M configurations/s in each load mode
    ESTIMATE_CONFIGS_PER_S = 1.4e6
    #: in memory, 16 M points per kernel call (the kernel builds each point from its index: no table to hold)
    MEMORY_UNIT_CONFIGS = 1 << 24

    def __init__(self, model_name: str, model_columns: dict, device: str, task: Any, axes: dict[str, list],
                 unit_configs: int | None = None, notes: Sequence[str] = ()):
        from fastmodel.serve.api import axis_block, columns, device_profiles
        from fastmodel.serve.precisions import checkpoint_model_name
        from fastmodel.spec.columns import encode

        self.model_name, self.model_columns, self.device, self.task = model_name, dict(model_columns), device, task
        self.axis_lists = {name: list(values) for name, values in axes.items()}
        # the engine's profile (task.engine; None: the default engine, noted), less the columns an axis sets
        # (each vendor's default engine says so, S56: the notes of every device of a device axis, once each)
        profiles, self.run_notes = device_profiles(task.engine, self._fixed("device", device),
                                                   axes.get("device", [device]), axes, "task.engine")
        profile = profiles[self._fixed("device", device)][0]
        self.run_notes = [*self.run_notes, *_weight_only_notes(axes.get("device", [device]),
                                                               axes.get("precision", [task.precision]))]
        # the model's notes (serving_model) and the engine's: in the Dataset's attrs, not the definition
        self.notes = (*notes, *self.run_notes)
        self.load_mode = "concurrency" if "concurrency" in axes else "batch" if "batch_size" in axes else \
            task.load_mode
        if self.load_mode is None:
            raise SpecError(None, "task", f"serving task {task.name!r} has no load mode: give batch_size, "
                            "concurrency or max_throughput in the task, or a batch_size/concurrency axis")
        fixed = {k: getattr(task, k) for k in SERVE_FIXED if k not in axes}
        own_kv = "kv_precision" in axes or task.kv_precision is not None
        named = checkpoint_model_name(model_name, axes)     # a published checkpoint (gpt-oss fp4)
        self.base = columns(self.model_columns, self._fixed("device", device), max_throughput=True, model_name=named,
                            precision=self._fixed("precision", task.precision),
                            kv_precision=self._fixed("kv_precision", task.kv_precision), **fixed, **profile)
        self.base[_column("load_mode")] = encode("load_mode", self.load_mode)
        if self.load_mode != "max_throughput" and "batch_size" not in axes and "concurrency" not in axes:
            self.base[_column("batch_size")] = task.batch_size if task.batch_size is not None else task.concurrency
        blocks = [axis_block("batch_size" if name == "concurrency" else name, values, own_kv,
                             lambda d: profiles[d][0], named)
                  for name, values in self.axis_lists.items()]
        self.axis_cols = np.concatenate([b[0] for b in blocks] or [np.zeros(0)]).astype(np.int64)
        self.col_start = np.concatenate([[0], np.cumsum([len(b[0]) for b in blocks])]).astype(np.int64)
        self.tables = [np.asarray(b[1], dtype=np.float64) for b in blocks]
        self.derive = np.array(["n_gpus" not in axes, "seq_len" not in axes], dtype=np.bool_)
        self.set_axes([Axis(name, name, np.array(values, dtype=object if name in SPECIAL_AXES[:3] else None),
                            attrs={"field": name}) for name, values in self.axis_lists.items()],
                      unit_configs or self.UNIT_CONFIGS)

    def _fixed(self, name: str, value):
        """The value of a special axis in the base vector: the first of its axis values, else ``value``."""
        return self.axis_lists[name][0] if name in self.axis_lists else value

    def evaluate_unit(self, unit, out: np.ndarray, status: np.ndarray, offset: int) -> None:
        """The box of ``unit`` into ``out[:, offset:offset + unit.size]`` (its points in C order)."""
        from fastmodel.kernels.serve import fused
        from fastmodel.spec.columns import check_base

        check_base(self.base)
        sizes = [b.stop - b.start for b in unit.blocks]
        flat = [table[:, block].ravel() for table, block in zip(self.tables, unit.blocks)]
        val_start = np.concatenate([[0], np.cumsum([f.size for f in flat])]).astype(np.int64)
        values = np.concatenate(flat).astype(np.float64) if flat else np.zeros(0)
        with np.errstate(all="ignore"):  # interpreted kernels (FASTMODEL_JIT=0) overflow in numpy scalars
            fused.serve_grid(self.base, self.axis_cols, self.col_start, values, val_start,
                             np.array(sizes, dtype=np.int64), self.derive, status, out, offset, fused.GRID_CHUNK_ROWS,
                             grid_lanes())   # the kernel marks not_finite points itself

    def scalar_coords(self) -> dict[str, Any]:
        """The device and precisions the grid does not sweep, as 0-d coordinates."""
        fixed = {"device": self.device, "precision": self.task.precision, "kv_precision": self.task.kv_precision}
        return {k: v for k, v in fixed.items() if k not in self.axis_lists and v is not None}

    def definition(self) -> dict:
        return {"model": self.model_name, "model_columns": self.model_columns, "device": self.device,
                "task": self.task.model_dump(), "axes": self.axis_lists, "unit_configs": self.unit_configs}

    @classmethod
    def from_definition(cls, definition: dict) -> "ServeSweepPlan":
        from fastmodel.serve.spec import load_serve_task

        return cls(definition["model"], definition["model_columns"], definition["device"],
                   load_serve_task(definition["task"]), definition["axes"], definition["unit_configs"])

    def dataset_attrs(self) -> dict:
        from fastmodel import __version__

        return {"model": self.model_name, "fastmodel_task": "serve", "task": json.dumps(self.task.model_dump()),
                "semantics": "default", "load_mode": self.load_mode, "sweep": json.dumps(self.definition()),
                "fastmodel_version": __version__, "notes": "; ".join(self.notes)}


def dataset_attrs(model, load_mode: str, notes: Sequence[str] = (), **made) -> dict:
    """The attrs of a serving Dataset of ``model`` (``fastmodel.serve.api.sweep``, the SLO search): its name
    ("custom" for a mapping of columns), the load mode, the task kind, what made it (fastmodel version, engine,
    semantics), the model's notes (``serve.api.model_notes``) and ``notes``, "; "-joined, and ``made``: ``call``
    (the arguments of the call) as JSON, any other value as it is."""
    from fastmodel import __version__
    from fastmodel.serve.api import model_notes

    return {"model": model if isinstance(model, str) else "custom", "load_mode": load_mode,
            "fastmodel_task": "serve", "fastmodel_engine": "serve", "semantics": "default",
            "fastmodel_version": __version__, "notes": "; ".join([*model_notes(model), *notes]),
            **{k: json.dumps(v, default=_plain) if k == "call" else v for k, v in made.items()}}


def _plain(value):
    """A value of a call's arguments as JSON holds it: numpy numbers and arrays as Python's, a range as a list."""
    return value.tolist() if hasattr(value, "tolist") else list(value) if isinstance(value, range) else str(value)


def _column(name: str) -> int:
    from fastmodel.registry.lm import COLUMN_INDEX

    return COLUMN_INDEX[name]


def _weight_only_notes(devices, precisions) -> tuple[str, ...]:
    """FP4 weights on a device without FP4 tensor cores run weight-only, dequantised into 16-bit GEMMs
    (docs/model_serving.md S12): one note per such device and precision, as ``fastmodel serve`` and ``serve
    --search`` print it; a device x precision sweep said nothing."""
    from fastmodel.serve.api import device_columns
    from fastmodel.serve.precisions import FP4_PRECISIONS, weight_only_note

    return tuple(weight_only_note(str(p), str(d)) for d in devices for p in precisions
                 if p in FP4_PRECISIONS and device_columns(str(d)).get("peak_flops_4", 0.0) <= 0)
