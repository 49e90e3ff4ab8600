"""The real-world training model's sweep plan: named axes over one base configuration, evaluated unit by unit.

Axes are registry columns, ``num_nodes``, ``global_batch`` and ``plan`` meshes (``fastmodel.lm.sweep``). Axes
over fields the lowering reads along which the lowered columns change (``fastmodel.lm.sweep_stack``) are
structural: each combination of their values has a base of its own (one per distinct column vector). A unit of
work is a box of the grid
(one structural combination; the numeric axes: trailing axes whole, the first one split); the fused kernel
``kernels/lm/grid.py`` builds each point of the box from its index, checks the rule table, evaluates it and
writes it straight into its place in the result matrix. The shared machinery (``fastmodel.sweeps``) runs the
plan in memory, into a zarr store with resume, or on Dask workers, which rebuild it from
:meth:`LMSweepPlan.definition`.
"""

from __future__ import annotations

import itertools
import json
import re
from contextlib import contextmanager
from typing import Any

import numpy as np

from fastmodel.analysis.margin import usable_attrs
from fastmodel.errors import SpecError, SweepError
from fastmodel.lm.sweep import (
    MESH_AXIS,
    _axis_arrays,
    _axis_values,
    base_columns,
    check_degree_axes,
    check_execution_axes,
    lowered_by_name,
    one_point,
    parse_mesh,
)
from fastmodel.lm.sweep_stack import lowering_partition
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.sweeps.plan import Axis, SweepPlan, grid_lanes


class LMSweepPlan(SweepPlan):
    """A grid of real-world training configurations (see the module docstring)."""

    engine = "lm"
    #: the pretraining task's name, set by whoever read the task (the Dataset's ``task`` attr; not in the definition)
    task_name: str | None = None
    #: bench/bench_lm_sweep.py: about 2.5 M configurations/s in memory (memory included)
    ESTIMATE_CONFIGS_PER_S = 2e6
    #: in memory, 16 M points per kernel call (the kernel builds each point from its index: no table to hold)
    MEMORY_UNIT_CONFIGS = 1 << 24

    def __init__(self, model: Any, cluster: Any, execution: Any, global_batch: int, axes: dict | None = None,
                 only_fitting: bool = False, calibration: Any = None, unit_configs: int | None = None):
        from fastmodel.lm.calibrate.overlay import as_calibration

        self.model, self.cluster, self.execution = model, cluster, execution
        self.global_batch, self.only_fitting = int(global_batch), bool(only_fitting)
        self.calibration = as_calibration(calibration)
        with axes_field_paths(axes or {}):
            axes = {name: _one_or_many(name, values) for name, values in (axes or {}).items()}
            nodes = _node_counts(axes["num_nodes"]) if "num_nodes" in axes else [cluster.num_nodes]
            max_gpus = int(max(nodes) * cluster.gpus_per_node) if len(nodes) else cluster.n_gpus
            check_degree_axes(list(axes))
            check_execution_axes(axes, execution)
            names, labels, numeric = [], [], []
            for name, values in axes.items():
                coords, values_num = _axis_values(name, values, model, cluster, max_gpus)
                names.append(name)
                labels.append(coords)
                numeric.append(values_num)
        meshes = [parse_mesh(label) for label in labels[names.index(MESH_AXIS)]] if MESH_AXIS in names else None
        if any(len(c) == 0 for c in labels):
            raise SweepError("the grid is empty")
        columns, values = _axis_arrays(names, numeric, meshes, cluster.gpus_per_node)
        partition = lowering_partition(model, execution, names, labels, numeric, columns.ravel().tolist(),
                                       execution.shard_degree is None, self._lower)
        structural = partition.structural if partition is not None else ()
        with axes_field_paths(axes):
            check_one_point(names, labels, numeric, partition)
        bases = [self._base(max_gpus)] if partition is None else \
            [self._base(max_gpus, group) for group in partition.groups]   # one base per distinct column vector
        kept = [i for i in range(len(names)) if i not in structural]
        self.axis_columns = columns[kept] if kept else np.full((1, columns.shape[1]), -1, dtype=np.int64)
        self.axis_values = values[kept] if kept else np.zeros((1, values.shape[1], 1))
        self.set_axes([Axis(name, name, np.array(coord, dtype=object if name == MESH_AXIS else None),
                            structural=i in structural, attrs=_coordinate_attrs(name))
                       for i, (name, coord) in enumerate(zip(names, labels))],
                      unit_configs or self.UNIT_CONFIGS)
        self._combo_bases = None if partition is None else _combo_bases(partition, self._combos, columns, values,
                                                                         bases)
        self.base = bases[0] if partition is None else self._combo_bases[self._combos[0]]

    @property
    def run_notes(self) -> tuple[str, ...]:
        """The notes ``fastmodel sweep`` prints once on stderr: a framework text that names no stack profile (or no
        framework and no stack) gets the note records and ``fastmodel run`` print (``stacks.profile_for``); a GPU
        with no device file, ``run``'s note (``report.device_notes``: a misspelt ``gpu`` swept on generic
        efficiencies without a word)."""
        from fastmodel.lm.stacks import profile_for
        from fastmodel.spec.devices import gpu_notes

        note = profile_for(self.execution.framework, self.execution.stack)[1]
        return ((note,) if note else ()) + tuple(gpu_notes(self.cluster.gpu))

    def _software(self) -> tuple:
        """The sweep's software as the calibration keys it (``overlay.stack_key``): (framework text, stack)."""
        return self.execution.framework, self.execution.stack

    def _lower(self, model: Any, execution: Any, ep: int, pp: int = 1) -> np.ndarray:
        """The base columns of ``model`` and ``execution`` at ``ep`` (trivial mesh; the stack's rules read at
        ``pp``), a fused weight-gradient accumulation beside a pass as the rule table's status, not a refusal: a
        value combination of a sweep (``sweep_stack``)."""
        return base_columns(model, self.cluster, execution, self.global_batch, ep, twice_as_status=True, pp=pp)

    def _base(self, max_gpus: int, lowered: np.ndarray | None = None) -> np.ndarray:
        """The base column vector (trivial mesh), with the calibration's values overlaid and checked: of the
        execution spec, or ``lowered`` (a group of a partition by lowered columns, ``sweep_stack``)."""
        base = base_columns(self.model, self.cluster, self.execution, self.global_batch) if lowered is None \
            else lowered.copy()
        if self.calibration is not None:
            from fastmodel.lm.calibrate import use

            base = use.overlay(base, self.calibration, self.cluster.gpu, *self._software())
            widest = base.copy()
            widest[COLUMN_INDEX["n_gpus"]] = max_gpus
            use.check(self.calibration, {self.cluster.gpu: use.tiers_used(widest)},
                      software=[self._software()])
        return base

    def evaluate_unit(self, unit, out: np.ndarray, status: np.ndarray, offset: int) -> None:
        """The box of ``unit`` into ``out[:, offset:offset + unit.size]`` (its points in C order)."""
        from fastmodel.kernels.lm.grid import evaluate_grid
        from fastmodel.spec.columns import check_base

        base = self.base if self._combo_bases is None else self._combo_bases[unit.structural]
        check_base(base)
        shape = np.array([b.stop - b.start for b in unit.blocks] or [1], dtype=np.int64)
        values = np.zeros_like(self.axis_values[:, :, :max(1, int(shape.max()))])
        for axis, block in enumerate(unit.blocks):
            values[axis, :, :block.stop - block.start] = self.axis_values[axis, :, block]
        evaluate_grid(base, self.axis_columns, values, shape, self.execution.shard_degree is None,
                      self.only_fitting, status, out, offset, grid_lanes())  # it marks not_finite points itself

    def definition(self) -> dict:
        """JSON that rebuilds this plan (a zarr store's ``sweep`` attr; resume and Dask workers)."""
        definition = {"model": self.model.model_dump(), "system": self.cluster.model_dump(),
                      "execution": self.execution.model_dump(), "global_batch": self.global_batch,
                      "only_fitting": self.only_fitting,
                      "axes": {a.name: a.values.tolist() for a in self.axes}, "unit_configs": self.unit_configs}
        if self.calibration is not None:
            from fastmodel.lm.calibrate.overlay import to_toml

            definition["calibration"] = to_toml(self.calibration)
        return definition

    @classmethod
    def from_definition(cls, definition: dict) -> "LMSweepPlan":
        from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model

        calibration = definition.get("calibration")
        if calibration is not None:
            from fastmodel.lm.calibrate.overlay import parse_calibration, tomllib

            calibration = parse_calibration(tomllib.loads(calibration), "<sweep store>")
        return cls(load_lm_model(definition["model"]), load_cluster(definition["system"]),
                   load_execution(definition["execution"]), definition["global_batch"], definition["axes"],
                   definition["only_fitting"], calibration, definition["unit_configs"])

    def dataset_attrs(self) -> dict:
        from fastmodel import __version__
        from fastmodel.lm.table import CODE_TABLES

        attrs = {
            "model": json.dumps(self.model.model_dump()), "system": json.dumps(self.cluster.model_dump()),
            "execution": json.dumps(self.execution.model_dump()), "global_batch": self.global_batch,
            "semantics": "default", "fastmodel_version": __version__, "codes": json.dumps(CODE_TABLES),
            **usable_attrs(self.base),
            "hbm_bytes": float(self.base[COLUMN_INDEX["hbm_bytes"]]),
            "fastmodel_task": "llm-pretrain", "sweep": json.dumps(self.definition()),
        }
        if self.task_name is not None:      # the task's own name (a figure's title), fastmodel_task its kind
            attrs["task"] = self.task_name
        if any(a.name == "global_batch" for a in self.axes):     # the coordinate holds it; the task's would mislead
            del attrs["global_batch"]
        if notes := self.run_notes:   # what the CLI prints once, kept with the result as the serving sweep's
            attrs["notes"] = "; ".join(notes)
        if self.calibration is not None:
            from fastmodel.lm.calibrate import use

            attrs.update(use.attrs(self.calibration, [self.cluster.gpu],
                                   [self._software()]))
        return attrs


def check_one_point(names: list, labels: list, numeric: list, partition) -> None:
    """Two names of one code on an axis the lowering reads by name (``sweep.lowered_by_name``: fp16 and bf16) are
    one point, refused as ``_axis_values`` refuses an alias, when they land in the same group of the partition at
    every combination of the other structural axes (or the axis is not structural: the same columns throughout)."""
    structural = partition.structural if partition is not None else ()
    for axis, name in enumerate(names):
        codes = numeric[axis].tolist() if numeric[axis] is not None and lowered_by_name(name) else []
        for later, number in enumerate(codes):
            if (first := codes.index(number)) == later:
                continue
            if axis in structural:
                at = structural.index(axis)
                group = dict(zip(itertools.product(*(range(len(labels[i])) for i in structural)),
                                 partition.combo_groups))
                if any(group[c] != group[c[:at] + (first,) + c[at + 1:]] for c in group if c[at] == later):
                    continue
            raise SweepError(one_point(name, labels[axis][later], labels[axis][first], number))


def _combo_bases(partition, combos: list, columns: np.ndarray, values: np.ndarray, bases: list) -> dict:
    """Each combination of the structural axes' indices -> its group's base with the combination's columns set
    (as the kernel sets an axis's: ``axis_values[axis, j, index]`` into ``axis_columns[axis, j]``)."""
    out = {}
    for combo, group in zip(combos, partition.combo_groups):
        base = bases[group].copy()
        for axis, index in zip(partition.structural, combo):
            for j in range(columns.shape[1]):
                if columns[axis, j] < 0:
                    break
                base[columns[axis, j]] = values[axis, j, index]
        out[combo] = base
    return out


def _coordinate_attrs(name: str) -> dict:
    """A coordinate's attrs: the column it sets and its units (counts and codes have none)."""
    if name in COLUMN_INDEX:
        units = COLUMNS[COLUMN_INDEX[name]].units
        return {"field": name, **({"units": units} if units not in ("1", "code") else {})}
    return {"field": name}


def _one_or_many(name: str, values: Any) -> Any:
    """An axis's values as ``fastmodel.sweep`` documents them: a list, a scalar (a one-point axis) or a range
    table ``{start, stop, num|step, scale}`` (``fastmodel.sweeps.ranges.expand``); the plan axis takes ``'all'``,
    one plan string or a list of them."""
    if name == MESH_AXIS:
        if isinstance(values, str) and values.strip().lower() == "all":
            return "all"               # "ALL", " all": the keyword whatever its case, as a sweep file reads it
        if isinstance(values, str):
            from fastmodel.errors import nearest

            if nearest(values, ["all"]):      # 'al' said "'al' is not a degree like tp8 ...", the file's line
                raise SweepError(f"axes.plan: {values!r} is no mesh{nearest(values, ['all'])}: \"all\" or a list "
                                 "of meshes (tp8.pp4, ...)")
        return [values] if isinstance(values, (str, bytes)) else values
    from fastmodel.sweeps.ranges import expand

    return expand(name, values)


def _node_counts(values) -> list[int]:
    """The ``num_nodes`` axis as whole numbers >= 1 (numpy integers, 2.0): one line for anything else (None, a
    nested list, nan, -1, 1.5)."""
    counts = []
    for value in values:
        number = value if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
            else None
        if number is None or not np.isfinite(number) or number < 1 or number != int(number):
            raise SweepError(f"axis 'num_nodes': every value must be a whole number of nodes >= 1 (got {value!r})")
        counts.append(int(number))
    return counts


@contextmanager
def axes_field_paths(axes: dict):
    """An axis's error named by its field path ``axes.NAME``, as a sweep file's is (fastmodel/lm/sweep_file.py)
    and the serving sweep's Python API names it: ``axis 'precision': ...``, ``axis num_nodes: ...`` (a range's,
    fastmodel/sweeps/ranges.py), ``unknown axis 'x' ...`` and a SpecError of field ``precision`` (the column's own
    check) become ``axes.precision: ...``, so
    ``fastmodel.sweep(axes={"precision": ["fp9"]})`` and the file's ``[axes] precision = ["fp9"]`` say the same."""
    try:
        yield
    except SpecError as error:
        if error.source is None and error.field in axes:
            raise type(error)(None, f"axes.{error.field}", error.reason) from None
        raise
    except SweepError as error:
        # the name quoted (``axis 'precision': ...``) or bare before ': ' (sweeps/ranges.py: ``axis num_nodes: ...``)
        name_said = r"(?:'(?P<quoted>[^']+)'|(?P<bare>[^\s':]+)(?=: ))"
        said = re.fullmatch(rf"(?:unknown )?axis {name_said}(?P<colon>: )?(?P<rest>.*)", str(error), flags=re.DOTALL)
        if said is None:
            raise
        name = said["quoted"] or said["bare"]
        rest = said["rest"] if said["colon"] else f"unknown axis{said['rest']}"
        raise SweepError(f"axes.{name}: {rest}") from None
