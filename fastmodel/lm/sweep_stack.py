"""Sweep axes over fields the lowering reads: the grid partitioned by the lowered columns, one base each.

A sweep lowers its specs once (``fastmodel.lm.lowering.lower``) and the fused kernel sets an axis's column point
by point. That is the plan of each value only where the value changes nothing but its own column. The lowering
derives columns from execution fields: the stack profile (``fastmodel/lm/stacks``) fills unset fields from
``precision``, ``sharding``, ``recompute``, ... (docs/model.md §11.49), ``grad_reduce_bytes`` follows
``master_weights``, the ``recompute_modules`` bits count only under selective recompute, a stated
``shard_degree`` is set only under FSDP/HSDP, a compiled TorchTitan MoE model's ``fused_kernels`` follows the
plan's ep (§11.14.1). It derives columns from model fields too: ``head_dim = hidden / heads`` and
``kv_heads = heads`` where the model spec leaves them unset, ``sliding_window_layers = layers`` (the default),
``recompute_fraction = recompute_num_layers / layers`` (:data:`MODEL_READ_FIELDS`).

:func:`lowering_partition` compares the columns themselves, with no list of which field derives which column: for
every combination of the values of the sweep's execution-field axes (:func:`compared`: the codes, switches and
fields the lowering reads beyond their value; a plain number such as ``micro_batch`` sets only its own column),
of its model-field axes in :data:`MODEL_READ_FIELDS` (the model re-validated with those values, as the loader
validates a spec file: a spec that states ``head_dim`` keeps it, one that does not derives it), of ep = 1 or
> 1 of the ``plan`` (or ``ep``) axis, and, where the execution leaves ``vp = "unknown"`` to its stack's rule, of
the pp values of the ``plan`` (or ``pp``) axis (the rule reads each point's pp, docs/model.md §11.8), it lowers
the specs with those values (a Python loop, at most
:data:`MAX_LOWERED_COMBINATIONS` combinations, about 0.2 ms each) and compares the column vector, less the
columns the kernel sets at every point (every axis's own, ``dp``, and ``shard_degree`` where it follows dp), with
the spec's own. Where every combination gives the spec's columns nothing changes (one base, the spec's).
Otherwise the axes along which the columns change become *structural* (``fastmodel/sweeps/grid.py``): each
combination of their values is evaluated by the fused kernel over the product of the other axes on a base of its
own, one per distinct column vector (``fastmodel.lm.sweep_plan.LMSweepPlan``); the result keeps the axes' order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from fastmodel.errors import SpecError, SweepError

#: axes whose values set the mesh's ep, which ``stacks.resolve`` reads (``expert_parallel``)
EP_AXES = ("plan", "ep")
#: numeric execution fields (neither a code, nor a 0/1 switch, nor ``lowering.SPECIAL_FIELDS``) from which the
#: lowering derives another column: a stated ``moe_imbalance`` leaves ``moe_expert_maxvio`` unset
#: (``lowering.balance_column``). Every other such field (``micro_batch``, ``collective_bucket_bytes``, ...) sets
#: only its own column, so its axis is not lowered value by value (a ``micro_batch`` range of 10^5 values costs
#: nothing); tests/lm/test_sweep_stack_axes.py lowers each under every stack and fails on one not listed here
NUMERIC_READ_FIELDS = ("moe_imbalance",)
#: model fields from which the lowering derives another column (``lowering.model_values``, ``recompute_fraction``):
#: ``hidden`` and ``heads`` the unset ``head_dim`` (and ``heads`` the unset ``kv_heads``), ``layers`` the unset
#: ``sliding_window_layers`` and the ``recompute_fraction`` of ``recompute_num_layers``. Every other model column
#: (``ffn``, ``vocab``, ``moe_experts``, ...) sets only its own, so its axis is not lowered value by value;
#: tests/lm/test_sweep_model_axes.py lowers each on dense, MoE, MLA and sliding-window models and fails on one not
#: listed here
MODEL_READ_FIELDS = ("hidden", "heads", "layers")
#: the most lowerings a sweep makes to compare columns: one per value combination of its compared execution-field
#: and MODEL_READ_FIELDS axes, times each mesh axis's kinds (ep = 1 / ep > 1; under vp "unknown" each pp value the
#: stack's vp rule reads). About 0.2 ms a lowering, under a second (docs/model.md §11.49 "Sweeps"); a grid over
#: more is refused in one line
MAX_LOWERED_COMBINATIONS = 4096


@dataclass(frozen=True)
class StackPartition:
    """Axes (indices into the sweep's axes) evaluated one value combination at a time, and for each combination
    of theirs (in ``itertools.product`` order) the index of its group; each group's lowered base columns."""

    structural: tuple[int, ...]
    combo_groups: tuple[int, ...]
    groups: tuple[np.ndarray, ...]


def field_value(name: str, label, number):
    """The execution-field value of an axis point: a code's name (its label), a switch as a boolean, the
    ``recompute_modules`` bits as the module names, any other field its number."""
    from fastmodel.lm.table import CODE_TABLES
    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS, RECOMPUTE_MODULES

    if name in CODE_TABLES:
        return label
    if COLUMNS[COLUMN_INDEX[name]].option == "flag":
        return bool(number)
    if name == "recompute_modules":
        return [module for module, bit in RECOMPUTE_MODULES.items() if int(number) & bit]
    return int(number) if float(number).is_integer() else float(number)


def compared(name: str) -> bool:
    """True for an execution-field column whose axis is lowered value by value: a code, a 0/1 switch or fraction, a
    field the lowering reads beyond its value (``lowering.SPECIAL_FIELDS``: ``vp``, ``shard_degree``, ...) or one
    of :data:`NUMERIC_READ_FIELDS`."""
    from fastmodel.lm.lowering import SPECIAL_FIELDS
    from fastmodel.lm.table import CODE_TABLES
    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS

    if name not in COLUMN_INDEX:
        return False
    column = COLUMNS[COLUMN_INDEX[name]]
    return name in CODE_TABLES or name in SPECIAL_FIELDS or name in NUMERIC_READ_FIELDS or \
        (column.lo, column.hi) == (0, 1)


def _lowered(lower, model, execution, update: dict, mesh: tuple[int, int], mask: np.ndarray):
    """(the lowered columns of ``model`` and ``execution`` with ``update`` at ``mesh`` (ep, the pp the stack reads),
    their comparison key: the columns outside ``mask`` as bytes); a SpecError (an execution its stack cannot run)
    or a SweepError (model values that together make no valid model, :func:`updated_model`) as its text, which the
    plan raises."""
    fields = type(execution).model_fields
    try:
        columns = lower(updated_model(model, {k: v for k, v in update.items() if k not in fields}),
                        execution.model_copy(update={k: v for k, v in update.items() if k in fields}), *mesh)
    except (SpecError, SweepError) as error:
        return error, f"error: {error}"
    return columns, np.where(mask, 0.0, columns).tobytes()


def updated_model(model, update: dict):
    """``model`` with ``update``, re-validated as the loader validates a spec file (``LMSpec``: ``head_dim`` and
    ``kv_heads`` stay unset where the spec leaves them, so the lowering derives them from the new values); values
    that together make no valid model (hidden not a multiple of heads, ...) a one-line SweepError."""
    if not update:
        return model
    from pydantic import ValidationError

    try:
        return type(model).model_validate({**model.model_dump(), **update})
    except ValidationError as error:
        given = ", ".join(f"{k} = {v!r}" for k, v in update.items())
        raise SweepError(f"axes {', '.join(update)}: {given} do not make a valid {model.name}: "
                         f"{model_error(error)}") from None


def model_error(error) -> str:
    """A pydantic ValidationError of a model spec in one line: its first error's field path and message (a model
    validator's FieldValueError extends the path, as ``spec.loader.validation_to_spec_error`` reads it)."""
    from fastmodel.errors import FieldValueError

    first = error.errors()[0]
    blamed = first.get("ctx", {}).get("error")
    loc = (*first["loc"], *(blamed.path if isinstance(blamed, FieldValueError) else ()))
    where = ".".join(str(part) for part in loc)
    return f"{where + ': ' if where else ''}{first['msg'].removeprefix('Value error, ')}"


def check_model_combinations(model, names: list[str], labels: list[list], numeric: list) -> None:
    """Every combination of the values of the sweep's model-field axes must make a model the spec accepts, as each
    value alone must (``sweep._check_model_axis``) and as the loader checks a spec file: the first that does not
    is a one-line SweepError (:func:`updated_model`; review6 F1: heads 16 with kv_heads 32 was evaluated as a
    model). A combination the kernel's plan rules mark with a status is left to them: moe_topk above moe_experts
    is ``topk_above_experts`` (``kernels/lm/rules.py``), so moe_topk is checked at most moe_experts here.
    Validation alone, no lowering; at most :data:`MAX_LOWERED_COMBINATIONS` combinations."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.registry.lm import COLUMN_INDEX

    axes = [i for i, name in enumerate(names) if name in type(model).model_fields and
            name not in ExecutionSpec.model_fields and name in COLUMN_INDEX]
    if len(axes) < 2:
        return                      # one axis: each value checked alone against the spec
    count = int(np.prod([len(labels[i]) for i in axes]))
    if count > MAX_LOWERED_COMBINATIONS:
        raise SweepError(f"axes {', '.join(names[i] for i in axes)}: {count} value combinations of model fields, over "
                         f"the {MAX_LOWERED_COMBINATIONS} a sweep validates (docs/model.md §11.49): split the sweep")
    for combo in itertools.product(*(range(len(labels[i])) for i in axes)):
        update = {names[i]: field_value(names[i], labels[i][k], numeric[i][k]) for i, k in zip(axes, combo)}
        checked = dict(update)
        if "moe_topk" in checked:
            checked["moe_topk"] = min(checked["moe_topk"], checked.get("moe_experts", model.moe_experts))
        try:
            updated_model(model, checked)
        except SweepError:
            updated_model(model, update)    # the message names the values given
            raise


def lowering_partition(model, execution, names: list[str], labels: list[list], numeric: list, set_columns,
                       auto_shard: bool, lower) -> StackPartition | None:
    """The partition of a sweep by its lowered columns (module docstring); None when every combination gives the
    spec's columns (one base, as before). ``labels`` / ``numeric``: each axis's coordinate labels (meshes as text)
    and numbers (None for the plan axis); ``set_columns``: the column indices the axes set (``_axis_arrays``);
    ``lower(model, execution, ep, pp)``: the base columns (``sweep.base_columns``, a fusion beside a pass as a
    status; the stack's rules read at ``pp``)."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.registry.lm import COLUMN_INDEX

    check_model_combinations(model, names, labels, numeric)
    read = [i for i, name in enumerate(names) if (name in ExecutionSpec.model_fields and compared(name)) or
            (name in MODEL_READ_FIELDS and name in type(model).model_fields)]
    mesh_axes, kinds, kind_of = _mesh_kinds(execution, names, labels)
    if not read and all(kinds[i] == [(1, 1)] for i in mesh_axes):
        return None                 # no field the lowering reads is swept: base_columns's one lowering
    positions = read + mesh_axes
    sizes = [len(labels[i]) for i in read] + [len(kinds[i]) for i in mesh_axes]
    if int(np.prod(sizes)) > MAX_LOWERED_COMBINATIONS:
        raise SweepError(_too_many(names, read, mesh_axes, labels, kinds))
    mask = np.zeros(len(COLUMN_INDEX), dtype=bool)
    mask[[c for c in set_columns if c >= 0] + [COLUMN_INDEX["dp"]] + ([COLUMN_INDEX["shard_degree"]] if auto_shard
                                                                      else [])] = True
    lowered, keys = {}, {}
    for combo in itertools.product(*(range(size) for size in sizes)):
        update = {names[i]: field_value(names[i], labels[i][k], numeric[i][k]) for i, k in zip(read, combo)}
        at = [kinds[i][k] for i, k in zip(mesh_axes, combo[len(read):])]
        mesh = (max([ep for ep, _ in at], default=1), max([pp for _, pp in at], default=1))
        lowered[combo], keys[combo] = _lowered(lower, model, execution, update, mesh, mask)
    if set(keys.values()) == {_lowered(lower, model, execution, {}, (1, 1), mask)[1]}:
        return None                 # the spec's columns at every value: base_columns's one lowering
    varies = tuple(sorted(i for n, i in enumerate(positions) if _varies(keys, n)))
    return _groups(varies, positions, kind_of, labels, keys, lowered)


def _mesh_kinds(execution, names: list[str], labels: list[list]) -> tuple[list[int], dict, dict]:
    """The axes that set mesh degrees the lowering reads (:data:`EP_AXES`: ep > 1, ``stacks.resolve``'s
    ``expert_parallel``; with ``vp = "unknown"`` and no ``vp`` axis, the ``plan`` or ``pp`` axis: the pp at which
    the stack's rule gives the virtual stages, docs/model.md §11.8), each value's kind (ep: 1, or the axis's first
    ep > 1; pp: the value, or 1 where no rule reads it): (their indices, axis -> its sorted kinds, axis -> each
    value's index into them)."""
    from fastmodel.lm.sweep import parse_mesh

    stack_pp = execution.vp == "unknown" and "vp" not in names
    mesh_axes, kinds, kind_of = [], {}, {}
    for i, name in enumerate(names):
        if name not in EP_AXES and not (stack_pp and name == "pp"):
            continue
        meshes = [parse_mesh(str(v)) if name == "plan" else {name: int(v)} for v in labels[i]]
        eps = [mesh.get("ep", 1) for mesh in meshes]
        wide = next((ep for ep in eps if ep > 1), 2)
        each = [(wide if ep > 1 else 1, mesh.get("pp", 1) if stack_pp else 1) for ep, mesh in zip(eps, meshes)]
        mesh_axes.append(i)
        kinds[i] = sorted(set(each))
        kind_of[i] = [kinds[i].index(kind) for kind in each]
    return mesh_axes, kinds, kind_of


def _too_many(names: list[str], read: list[int], mesh_axes: list[int], labels: list, kinds: dict) -> str:
    """The one line refusing more than :data:`MAX_LOWERED_COMBINATIONS` lowerings."""
    axes = read or mesh_axes
    said = f"axes.{names[axes[0]]}" if len(axes) == 1 else f"axes {', '.join(names[i] for i in axes)}"
    combinations = int(np.prod([len(labels[i]) for i in read]))
    factors = [f"{combinations} value combinations of fields the lowering reads"] if read else []
    for i in mesh_axes:
        if len(kinds[i]) > 1:
            eps, pps = len({ep for ep, _ in kinds[i]}) > 1, len({pp for _, pp in kinds[i]}) > 1
            what = " and ".join((["ep = 1 and ep > 1"] if eps else []) +
                                (["the pp values the stack's vp rule reads"] if pps else []))
            # alone (no field axis, review9 #4): "4 pp values the stack's vp rule reads of the pp axis"
            alone = "pp values the stack's vp rule reads" if pps and not eps else f"kinds ({what})"
            factors.append(f"{len(kinds[i])} ({what} of the {names[i]} axis)" if read else
                           f"{len(kinds[i])} {alone} of the {names[i]} axis")
    total = combinations * int(np.prod([len(kinds[i]) for i in mesh_axes]))
    return (f"{said}: {' x '.join(factors)}: {total} lowerings, over the {MAX_LOWERED_COMBINATIONS} a sweep makes to "
            f"compare (docs/model.md §11.49): split the sweep")


def _groups(structural: tuple, positions: list, kind_of: dict, labels: list, keys: dict,
            lowered: dict) -> StackPartition:
    """Each combination of the ``structural`` axes' values -> its group, one per distinct key (a lowering's
    SpecError raised here, as the spec's lowering raises it). ``positions``: the axes of a key's combination, a
    mesh axis's by its kind (``kind_of``, :func:`_mesh_kinds`)."""
    groups, combo_groups, seen = [], [], {}
    for combo in itertools.product(*(range(len(labels[i])) for i in structural)):
        at = dict(zip(structural, combo))
        key_combo = tuple(kind_of[i][at[i]] if i in kind_of and i in at else at.get(i, 0) for i in positions)
        key = keys[key_combo]
        if key not in seen:
            if isinstance(lowered[key_combo], (SpecError, SweepError)):
                raise lowered[key_combo]
            seen[key] = len(groups)
            groups.append(lowered[key_combo])
        combo_groups.append(seen[key])
    return StackPartition(structural, tuple(combo_groups), tuple(groups))


def _varies(keys: dict, n: int) -> bool:
    """True when the key changes along the ``n``-th position (an axis the lowering reads, or a mesh axis's kinds)
    with every other value held."""
    rest: dict = {}
    for combo, key in keys.items():
        rest.setdefault(combo[:n] + combo[n + 1:], set()).add(key)
    return any(len(found) > 1 for found in rest.values())


__all__ = ["EP_AXES", "MAX_LOWERED_COMBINATIONS", "MODEL_READ_FIELDS", "NUMERIC_READ_FIELDS", "StackPartition",
           "check_model_combinations", "compared", "field_value", "lowering_partition", "model_error", "updated_model"]
