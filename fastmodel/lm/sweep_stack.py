"""Sweep axes the stack profile reads: the grid partitioned by the stack's defaults, one lowering each.

A stack profile (``fastmodel/lm/stacks``) fills the execution fields a spec leaves ``None`` from the spec's other
fields: ``megatron-2021``'s gradient path reads ``precision``, ``sharding``, ``wgrad_fused_accumulation`` and
``step_zero_grad`` (docs/model.md §11.49), DeepSpeed's and Megatron-Core's read ``precision`` and ``sharding``,
TorchTitan's read ``moe_dispatcher`` and ``recompute``, and a compiled TorchTitan MoE model's ``fused_kernels``
follows the plan's ep (``eager_blocks``, §11.14.1). A sweep lowers its specs once and sets an axis's column point
by point, so on its own an axis over such a field would keep the defaults of the spec's value.

:func:`stack_partition` resolves the stack (``stacks.resolve``, no lowering) for every combination of the values
of the axes of :data:`STACK_READ_AXES` in the sweep, and of ep = 1 or > 1 of the ``plan`` (or ``ep``) axis;
combinations whose resolved executions differ only in the swept fields give the same defaults. Where every
combination gives the same defaults nothing changes (one lowering, the execution spec's). Otherwise the axes along
which the defaults change become *structural* (``fastmodel/sweeps/grid.py``): each combination of their values
is evaluated by the fused kernel over the product of the other axes, on the base of its defaults, one lowering
per distinct defaults (``fastmodel.lm.sweep_plan.LMSweepPlan``); the result keeps the axes' order.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

#: execution fields that are sweep axes and that a stack profile's ``defaults`` or ``eager_blocks``, or
#: ``stacks.resolve``, read (tests/lm/test_sweep_stack_axes.py finds them in fastmodel/lm/stacks/ and fails
#: when a profile reads one not listed here)
STACK_READ_AXES = ("precision", "sharding", "wgrad_fused_accumulation", "step_zero_grad", "moe_dispatcher",
                   "recompute", "fused_kernels")
#: axes whose values set the mesh's ep, which ``stacks.resolve`` reads (``expert_parallel``)
EP_AXES = ("plan", "ep")


@dataclass(frozen=True)
class StackPartition:
    """Axes (indices into the sweep's axes) evaluated one value combination at a time, and for each combination
    of theirs (in ``itertools.product`` order) the index of its group; each group's execution and ep to lower."""

    structural: tuple[int, ...]
    combo_groups: tuple[int, ...]
    groups: tuple[tuple[object, int], ...]


def field_value(name: str, label):
    """The execution-field value of an axis label (a switch given as 0 or 1 is a boolean)."""
    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS

    if COLUMNS[COLUMN_INDEX[name]].option == "flag":
        return bool(label)
    return label


def _resolved_key(execution, update: dict, expert_parallel: bool, layers: int, swept: set) -> str:
    """The stack's defaults for ``execution`` with ``update``: the resolved execution without the swept fields
    (their columns are set point by point), as text; a stack that cannot resolve (``vp = "unknown"`` on a stack
    without the rule) gives its error, which the lowering raises."""
    from fastmodel.lm.stacks import resolve

    try:
        resolved = resolve(execution.model_copy(update=update), 1, layers, None, expert_parallel=expert_parallel)
    except ValueError as error:
        return f"error: {error}"
    dump = {key: value for key, value in resolved.model_dump().items() if key not in swept}
    return json.dumps(dump, sort_keys=True, default=str)


def stack_partition(model, execution, names: list[str], labels: list[list]) -> StackPartition | None:
    """The partition of a sweep by its stack's defaults (module docstring); None when every combination gives the
    defaults of the execution spec at ep = 1 (one lowering, as before). ``labels``: each axis's coordinate labels
    (meshes as text)."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.lm.sweep import parse_mesh

    read = [i for i, name in enumerate(names) if name in STACK_READ_AXES]
    ep_axis = next((i for i, name in enumerate(names) if name in EP_AXES), None)
    eps = []
    if ep_axis is not None:
        eps = [parse_mesh(str(v))["ep"] if names[ep_axis] == "plan" else int(v) for v in labels[ep_axis]]
    flags = sorted({ep > 1 for ep in eps}) or [False]
    if not read and flags == [False]:
        return None                 # nothing the stack reads is swept: base_columns's one lowering
    swept = {name for name in names if name in ExecutionSpec.model_fields}
    keys = {}
    for combo in itertools.product(*(range(len(labels[i])) for i in read)):
        update = {names[i]: field_value(names[i], labels[i][k]) for i, k in zip(read, combo)}
        for flag in flags:
            keys[combo, flag] = _resolved_key(execution, update, flag, model.layers, swept)
    own = _resolved_key(execution, {}, False, model.layers, swept)
    if set(keys.values()) == {own}:
        return None                 # the defaults of the spec's values at ep = 1: base_columns's one lowering
    varies = [i for n, i in enumerate(read) if _varies(keys, n)]
    if ep_axis is not None and any(keys[combo, False] != keys[combo, True] for combo, _ in keys if len(flags) > 1):
        varies.append(ep_axis)
    structural = tuple(sorted(varies))
    groups, combo_groups, seen = [], [], {}
    for combo in itertools.product(*(range(len(labels[i])) for i in structural)):
        at = dict(zip(structural, combo))
        read_combo = tuple(at.get(i, 0) for i in read)
        flag = eps[at[ep_axis]] > 1 if ep_axis in at else flags[0]
        key = keys[read_combo, flag]
        if key not in seen:
            seen[key] = len(groups)
            update = {names[i]: field_value(names[i], labels[i][k]) for i, k in zip(read, read_combo)}
            ep = eps[at[ep_axis]] if ep_axis in at else (2 if flag else 1)
            groups.append((execution.model_copy(update=update), ep))
        combo_groups.append(seen[key])
    return StackPartition(structural, tuple(combo_groups), tuple(groups))


def _varies(keys: dict, n: int) -> bool:
    """True when the key changes along the ``n``-th read axis with every other value held."""
    rest: dict = {}
    for (combo, flag), key in keys.items():
        rest.setdefault((combo[:n] + combo[n + 1:], flag), set()).add(key)
    return any(len(found) > 1 for found in rest.values())


__all__ = ["EP_AXES", "STACK_READ_AXES", "StackPartition", "field_value", "stack_partition"]
