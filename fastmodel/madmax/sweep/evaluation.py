"""Evaluation of one unit of a sweep: the specs of its structural combination, its parameter table, the kernels."""

from __future__ import annotations

import numpy as np

from fastmodel.errors import SpecError, SweepError
from fastmodel.madmax.engine import evaluate_into
from fastmodel.madmax.families import MODEL_FAMILIES
from fastmodel.madmax.lowering.config import check_task_fits_family, structure_key_for
from fastmodel.madmax.lowering.params import param_table
from fastmodel.madmax.spec.task import TaskSpec
from fastmodel.spec.loader import validate
from fastmodel.sweeps.grid import Unit


def set_path(data: dict, path: str, value) -> None:
    """Set a dotted spec path (``system.device.flops_util``) in a spec's dict."""
    parts = path.split(".")[1:]
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


class UnitEvaluation:
    """Evaluation of units for a :class:`~fastmodel.madmax.sweep.definition.Sweep` (a base class of it): needs its
    base specs, ``plans``, ``models``, ``systems``, ``semantics`` and axes."""

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
                set_path(task_data, axis.path, value)
        model = base_model
        if model_data is not None:
            data = base_model.model_dump()
            for path, value in model_data.items():
                set_path(data, path, value)
            model = _validate_combo(MODEL_FAMILIES[base_model.family], data, "model")
        task = self.task if task_data is None else _validate_combo(TaskSpec, task_data, "task")
        try:
            check_task_fits_family(model, task)
        except SpecError as error:
            raise SweepError(f"structural axes give an invalid task for {model.name}: {error}") from None
        return model, system, task, plan

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


def _validate_combo(cls, data: dict, kind: str):
    try:
        return validate(cls, data, None, kind)
    except SpecError as error:
        raise SweepError(f"structural axes give an invalid {kind}: {error}") from None
