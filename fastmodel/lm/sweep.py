"""Grid sweeps of the real-world LM model: named axes -> parameter table chunks -> fused kernel -> Dataset.

Every axis is a registry column (``tp``, ``micro_batch``, ``recompute``,
``gemm_eff_16``...) or one of three named axes:

- ``num_nodes``: cluster size (``n_gpus = num_nodes x gpus_per_node``);
- ``plan``: device meshes ``"tp8.pp4"`` (degrees left out are 1; dp fills the
  cluster), or ``"all"``: every mesh of powers of two (and divisors of the layer
  count for pp) that can be legal on the largest cluster of the sweep;
- ``global_batch``.

The grid is the Cartesian product, cut into units of work (``fastmodel.lm.sweep_plan``) and evaluated by one
fused kernel (``kernels/lm/grid.py``) that builds each point from its index, checks the rule table and
evaluates it, so no parameter table is materialised. Illegal points keep their status code (``STATUSES``) and
NaN results.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from fastmodel.errors import SweepError
from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
from fastmodel.lm.lowering import Mesh, lower
from fastmodel.lm.table import CODE_TABLES, encode
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS, OFFLOAD_MODULES, RECOMPUTE_MODULES
from fastmodel.registry.validators import column_problem
from fastmodel.spec.columns import boolean_name
from fastmodel.spec.quantity import COLUMN_UNIT_KINDS, count_suffix_hint

if TYPE_CHECKING:
    import xarray as xr

DEGREES = ("tp", "pp", "cp", "ep", "etp")
#: a degree left out of a plan: 1, but etp 0 (= tp, Megatron-Core's --expert-tensor-parallel-size default)
DEGREE_DEFAULTS = {"etp": 0}
#: axes counting whole things: the mesh degrees, the virtual stages and sharding group, and every plan column
#: counted in sequences, layers, steps or batches (``micro_batch = [1.5]`` made every point batch_not_divisible;
#: ``-x micro_batch=1.5`` is refused as not an integer by ExecutionSpec)
WHOLE_AXES = (*DEGREES, "vp", "shard_degree",
              *(c.name for c in COLUMNS if c.group == "plan" and c.units in ("sequences", "layers", "steps", "batches")))
MESH_AXIS = "plan"


def mesh_label(mesh: dict[str, int]) -> str:
    return ".".join(f"{k}{mesh[k]}" for k in DEGREES
                    if mesh.get(k, DEGREE_DEFAULTS.get(k, 1)) != DEGREE_DEFAULTS.get(k, 1)) or "dp"


def parse_mesh(text: str) -> dict[str, int]:
    """``"tp8.pp4"`` -> ``{"tp": 8, "pp": 4, "cp": 1, "ep": 1, "etp": 0}``; ``"dp"``: all 1 (etp 0: = tp). Degrees
    are separated by ``.``, ``,`` or spaces, in any case (``TP8 PP4`` is ``tp8.pp4``)."""
    mesh = {k: DEGREE_DEFAULTS.get(k, 1) for k in DEGREES}
    if not text.strip():
        raise SweepError("empty plan: give a mesh like 'tp8.pp4' (degrees left out are 1) or 'dp'")
    if text.strip().lower() == "dp":
        return mesh
    seen = set()
    for part in text.replace(",", ".").lower().replace(" ", ".").split("."):
        if not part:
            continue
        key = part.rstrip("0123456789")
        digits = part[len(key):]
        if key == "dp":
            raise SweepError(f"plan {text!r}: {part!r}: dp is not given, it fills the cluster (n_gpus / (tp pp cp)); "
                             "drop it or sweep num_nodes")
        if key not in DEGREES or not digits or int(digits) < 1:
            raise SweepError(f"plan {text!r}: {part!r} is not a degree like tp8, pp4, cp2, ep8 or etp1")
        if key in seen:
            raise SweepError(f"plan {text!r}: {key} is given twice")
        seen.add(key)
        mesh[key] = int(digits)
    return mesh


def all_meshes(model, cluster, max_gpus: int) -> list[dict[str, int]]:
    """Meshes worth evaluating: tp a power of two within an NVLink domain dividing the heads (TP across domains is
    legal and priced, docs/model.md §11.18, but rarely the fastest: named plans evaluate it), pp dividing the
    layers, cp a power of two up to 16 dividing the sequence, ep dividing the experts; product <= max_gpus.
    With experts and tp > 1 each ep comes twice: etp = tp (Megatron-Core's default) and etp 1 (MoE parallel
    folding: attention over TP, experts over EP alone)."""
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
                        meshes.append({"tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": 0})
                        if model.moe_experts and tp > 1:
                            meshes.append({"tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": 1})
    return meshes


def _powers(limit: int) -> list[int]:
    return [1 << i for i in range(int(math.log2(max(limit, 1))) + 1)]


def base_columns(model, cluster, execution, global_batch: int, ep: int = 1, twice_as_status: bool = False,
                 pp: int = 1, notes: list[str] | None = None) -> np.ndarray:
    """The column vector of the specs with a trivial mesh (tp = pp = cp = 1, dp = the cluster) but ``ep``, whose
    ep > 1 the stack may read (``stacks.resolve``: TorchTitan's compiled MoE blocks under EP and activation
    checkpointing run eager, docs/model.md §11.14.1), and the stack's rules read at ``pp`` (``vp = "unknown"``:
    the stack's virtual stages at the point's pp, docs/model.md §11.8); the mesh's degrees are set point by point
    after it.
    ``twice_as_status``: an execution whose stack fuses the weight-gradient accumulation beside an accumulation pass
    keeps both columns, for the rule table's ``wgrad_accumulation_twice``, instead of the lowering's SpecError (a
    sweep's value combination, ``fastmodel.lm.sweep_stack``). The lowering's notes (the stack's rules: ``vp
    unknown: N (rule)``) are appended to ``notes``."""
    return lower(model, cluster, execution, Mesh(dp=cluster.n_gpus, ep=ep), global_batch, notes=notes,
                 source=model.name, refuse_twice=not twice_as_status, stack_pp=pp)


def _axis_values(name: str, values: Any, model, cluster, max_gpus: int) -> tuple[list, np.ndarray | None]:
    """(coordinate labels, numeric values or None for the plan axis)."""
    if name == MESH_AXIS:
        if not isinstance(values, str) and not hasattr(values, "__len__"):      # plan=5: a TypeError
            raise SweepError(f"axis {name!r}: expected 'all', a plan string or a list of them, got {values!r}")
        if not isinstance(values, str) and len(values) == 0:
            raise SweepError(f"axis {name!r}: empty list")         # it said "the grid is empty"
        meshes = all_meshes(model, cluster, max_gpus) if values == "all" else [parse_mesh(str(v)) for v in values]
        return [mesh_label(m) for m in meshes], None
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise SweepError(f"axis {name!r}: expected a list of values, got {values!r}")
    if len(values) == 0:
        raise SweepError(f"axis {name!r}: empty list")
    if name in ("model", "system", "task"):   # one spec per sweep: say so rather than "unknown axis"
        raise SweepError(f"axis {name!r}: a real-world sweep takes one {name} (MAD-Max sweeps take a {name} "
                         f"axis): sweep its fields, or call fastmodel.sweep once per {name}")
    if name not in ("num_nodes",) and name not in COLUMN_INDEX:
        from fastmodel.errors import nearest
        raise SweepError(f"unknown axis {name!r}{nearest(name, [*COLUMN_INDEX, 'num_nodes', MESH_AXIS])}")
    if name == "dp":
        raise SweepError("axis 'dp': derived for every point (dp = n_gpus / (tp pp cp) fills the cluster): sweep "
                         "num_nodes and the plan (or the degrees tp, pp, cp) instead")
    given, values = list(values), [boolean_name(name, v) for v in values]  # cuda_graphs = [true, false]: layer, none (as records)
    numeric = np.array([_axis_number(name, v) for v in values])
    _check_model_axis(name, values, model)
    if not np.all(np.isfinite(numeric)):
        raise SweepError(f"axis {name!r}: values must be finite")
    first: dict = {}    # ['80GB', 80e9], ['distopt', 'zero1']: one point twice under two spellings
    for i, number in enumerate(numeric.tolist()):
        if (j := first.setdefault(number, i)) != i:
            if isinstance(given[i], str) and isinstance(given[j], str) and given[i].lower() != given[j].lower():
                if lowered_by_name(name):    # fp16 / bf16: the stack may lower them apart (sweep_plan)
                    continue
                raise SweepError(one_point(name, given[i], given[j], number))
            raise SweepError(f"axis {name!r}: {given[i]!r} is the same value as {given[j]!r} (duplicate point)")
    if name in WHOLE_AXES and (part := next((v for v, x in zip(values, numeric) if not x.is_integer()), None)) is not None:
        raise SweepError(f"axis {name!r}: every value must be a whole number (got {part!r})")
    if name in COLUMN_INDEX:
        column = COLUMNS[COLUMN_INDEX[name]]
        if bad := next(((v, p) for v, x in zip(values, numeric) if (p := column_problem(column, x))), None):
            typed = "" if isinstance(bad[0], (int, float)) else f" (given as {bad[0]!r})"
            raise SweepError(f"axis {name!r}: {bad[1]}{typed}")
        if column.option == "flag" and (odd := [v for v, x in zip(values, numeric) if x not in (0.0, 1.0)]):
            raise SweepError(f"axis {name!r}: {odd[0]!r} is not a switch (0 or 1, false or true)")
    return [int(x) if isinstance(v, (list, tuple)) else v for v, x in zip(values, numeric)], numeric


def one_point(name: str, later: str, first: str, number: float) -> str:
    """The refusal of two names of one code that the model cannot tell apart."""
    return f"axis {name!r}: {later!r} and {first!r} are one point to the model, code {number:g}: an alias or " \
        "modelled alike (duplicate point)"


def lowered_by_name(name: str) -> bool:
    """A code axis of an execution field, which the sweep lowers value by value by name (``sweep_stack.field_value``):
    two names of one code there (``precision = ["fp16", "bf16"]``) are one point only when the lowering gives them
    the same columns at every value of the other axes (``sweep_plan.check_one_point``)."""
    from fastmodel.lm.execution import ExecutionSpec

    return name in CODE_TABLES and name in ExecutionSpec.model_fields and name in COLUMN_INDEX


def check_degree_axes(names) -> None:
    """A plan axis sets tp, pp, cp and ep together: an axis over one of them beside it would override the
    plan's degree point by point."""
    clash = [name for name in names if name in DEGREES]
    if MESH_AXIS in names and clash:
        raise SweepError(f"axis {clash[0]!r}: the plan axis sets {', '.join(DEGREES)}; sweep the degree in the "
                         f"plans (plan = ['tp2', 'tp8', ...]) or drop the plan axis")


#: execution fields whose axis values the execution spec's rules can refuse at every point of a grid:
#: moe_dispatcher 'deepep_ll', moe_a2a_overlap 'dualpipe' without DualPipe
RULED_EXECUTION_AXES = ("moe_dispatcher", "moe_a2a_overlap")
#: axis values the rule table marks point by point instead (kernels/lm/rules.py): moe_a2a_overlap 'dualpipe' under
#: another schedule, fixed or of a ``pipeline_schedule`` axis, is ``schedule_not_runnable`` (``overlap_needs_dualpipe``)
STATUS_MARKED_VALUES = {("moe_a2a_overlap", "dualpipe")}


def check_execution_axes(axes: dict, execution) -> None:
    """An axis value of ``RULED_EXECUTION_AXES`` that the execution spec refuses (fastmodel/lm/execution.py)
    under every pipeline schedule of the grid (the execution's, or each of a ``pipeline_schedule`` axis) is one
    line, with the spec's reason, as the same value in the ``[execution]`` table, unless the rule table marks its
    points (``STATUS_MARKED_VALUES``): ``dualpipe`` overlap under another schedule, the execution's or the axis's,
    is ``schedule_not_runnable`` (kernels/lm/rules.py ``overlap_needs_dualpipe``), never batch-level overlap, the
    illegal points staying in the grid (a grid of only such points is the all-illegal grid of any sweep). A
    ``pipeline_schedule`` axis without a ``vp`` axis: 'interleaved', where the spec refuses it (vp unset), is one
    line too; with a ``vp`` axis, the combinations the spec refuses are ``schedule_not_runnable`` points (the
    lowering's ``schedule_stated`` column, read by kernels/lm/rules.py ``stated_schedule_refused``)."""
    from fastmodel.errors import SpecError
    from fastmodel.lm.loader import load_execution

    base = execution.model_dump()
    schedules = [_code_name("pipeline_schedule", v) for v in axes.get("pipeline_schedule", [])] or \
        [base["pipeline_schedule"]]
    if "interleaved" in schedules and "pipeline_schedule" in axes and "vp" not in axes:
        try:                # with vp unset (1): refused as run refuses it (review 5 F6)
            load_execution({**base, "pipeline_schedule": "interleaved"})
        except SpecError as error:
            raise SweepError(f"axis 'pipeline_schedule': {error.reason}") from None
    for name in RULED_EXECUTION_AXES:
        for value in axes.get(name, ()):
            reasons = []
            for schedule in schedules:
                try:
                    load_execution({**base, name: _code_name(name, value), "pipeline_schedule": schedule})
                except SpecError as error:
                    reasons.append(str(error).split(": ", 1)[-1])
            if len(reasons) == len(schedules) and (name, _code_name(name, value)) not in STATUS_MARKED_VALUES:
                raise SweepError(f"axis {name!r}: {reasons[0]}")


def _code_name(name: str, value: Any) -> Any:
    """A coded axis value by its name (an axis may give the code's number; a boolean of ``BOOLEAN_CODE_NAMES`` is
    its code 0 or 1 here, the name ``boolean_name`` gives it); other values as they are."""
    if isinstance(value, str):
        return value
    return next((key for key, code in CODE_TABLES.get(name, {}).items() if code == value), value)


def _check_model_axis(name: str, values: Any, model) -> None:
    """An axis over a field of the model spec: each value must make a model the spec accepts (kv_heads
    dividing heads, moe_topk with moe_experts, ...), as the same model in a spec file must."""
    from pydantic import ValidationError

    from fastmodel.lm.spec import LMSpec
    from fastmodel.lm.sweep_stack import model_error

    if not isinstance(model, LMSpec) or name not in LMSpec.model_fields:
        return
    data = model.model_dump()
    for value in values:
        try:
            LMSpec.model_validate({**data, name: value})
        except ValidationError as error:
            raise SweepError(f"axis {name!r}: {value!r} does not make a valid {model.name}: "
                             f"{model_error(error)}") from None


#: module-set columns -> their bits: an axis value may be a list of module names, the execution field's form
#: (``recompute_modules``; ``offload_modules``, the column of ``activation_offload_modules``)
MODULE_BITS = {"recompute_modules": RECOMPUTE_MODULES, "offload_modules": OFFLOAD_MODULES}
#: column units -> the kind of quantity a unit string of it is read as (fastmodel/spec/quantity.py)
QUANTITY_KINDS = COLUMN_UNIT_KINDS


def module_bits(name: str, modules) -> int:
    """A list of module names on a module-set axis as its column's sum of bits (:data:`MODULE_BITS`), as the
    lowering sums the execution field's list; a name outside the table is a one-line SweepError."""
    from fastmodel.errors import nearest

    table = MODULE_BITS[name]
    for module in modules:
        if module not in table:
            raise SweepError(f"axis {name!r}: unknown module {module!r}{nearest(str(module), list(table))}; choose "
                             f"from {', '.join(table)}")
    return sum(table[module] for module in set(modules))


def _axis_number(name: str, value: Any) -> float:
    """One axis value as a number: a code name by its table, a unit string ('80 GB', '450 GB/s') of a
    quantity column in SI units, a number as it is; anything else a one-line SweepError."""
    from fastmodel.spec.quantity import parse_quantity

    if isinstance(value, str) and name in CODE_TABLES:
        return float(encode(name, value))
    if name in CODE_TABLES:     # recompute = ["full", 1]: a code number, which --set and the records refuse
        raise SweepError(f"axis {name!r}: {value!r} is not a name; choose one of {', '.join(CODE_TABLES[name])}")
    units = COLUMNS[COLUMN_INDEX[name]].units if name in COLUMN_INDEX else "1"
    if isinstance(value, str) and units in QUANTITY_KINDS:
        try:
            return parse_quantity(value, QUANTITY_KINDS[units])
        except ValueError as error:
            raise SweepError(f"axis {name!r}: {error}") from None
    if name in MODULE_BITS and isinstance(value, (list, tuple)):   # the execution field's form: module names
        return float(module_bits(name, value))
    column = COLUMNS[COLUMN_INDEX[name]] if name in COLUMN_INDEX else None
    if isinstance(value, bool) and column is not None and (column.lo, column.hi) == (0, 1):
        return float(value)                   # a switch (sequence_parallel = [true, false])
    if name == "vp" and value == "unknown":   # was "'unknown' is not a number", though [execution] takes it
        raise SweepError("axis 'vp': \"unknown\" (the stack's rule) is one value for the whole sweep: set vp = "
                         "\"unknown\" in [execution] (execution={\"vp\": \"unknown\"}); an axis over vp takes whole "
                         "numbers")
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SweepError(f"axis {name!r}: {value!r} is not a number" + (f" of {units}" if units != "1" else "")
                         + count_suffix_hint(value))
    return float(value)


def lm_sweep(model: Any, system: Any, task: Any = None, axes: dict | None = None, execution: Any = None,
             global_batch: int | None = None, num_nodes: int | None = None, only_fitting: bool = False,
             calibration: Any = None, unit_configs: int | None = None) -> "xr.Dataset":
    """Evaluate the Cartesian product of ``axes`` under the real-world model (see module docstring), in memory.

    ``only_fitting``: legal points whose memory per device exceeds usable HBM get status ``does_not_fit``
    (``fits_memory`` says the same for every point either way). ``calibration``: a calibration overlay
    (``fastmodel calibrate``'s TOML path or a ``Calibration``) applied to the base table after the cluster's
    own ``efficiency`` overrides (an axis over a fitted column still sets it per point); the dataset's attrs
    record it; a device or tier it does not cover is a ``CalibrationWarning``. The plan
    (``fastmodel.lm.sweep_plan``) runs on the shared machinery (``fastmodel.sweeps``), as ``fastmodel.sweep``
    runs it into a zarr store or on Dask workers.
    """
    from fastmodel.sweeps.run import run_in_memory

    plan = sweep_plan(model, system, task, axes, execution, global_batch, num_nodes, only_fitting, calibration,
                      unit_configs)
    return run_in_memory(plan, require_ok=False)


def sweep_plan(model: Any, system: Any, task: Any = None, axes: dict | None = None, execution: Any = None,
               global_batch: int | None = None, num_nodes: int | None = None, only_fitting: bool = False,
               calibration: Any = None, unit_configs: int | None = None):
    """The sweep plan of :func:`lm_sweep`'s arguments (``fastmodel.lm.sweep_plan.LMSweepPlan``)."""
    from fastmodel.lm.sweep_plan import LMSweepPlan

    model = load_lm_model(model)
    cluster = load_cluster(system, num_nodes)
    execution = load_execution(execution)
    if global_batch is None:
        global_batch = _task_global_batch(task)
    plan = LMSweepPlan(model, cluster, execution, global_batch, axes, only_fitting, calibration, unit_configs)
    plan.task_name = task_name(task)
    return plan


def task_name(task: Any) -> str | None:
    """The name of a pretraining task given as a name, path, dict or spec (a Dataset's ``task`` attr); None."""
    from fastmodel.lm.task import load_train_task

    return None if task is None else load_train_task(task).name


def point_columns(model: Any, system: Any, task: Any = None, plan: str | None = None, execution: Any = None,
                  num_nodes: int | None = None, global_batch: int | None = None,
                  notes: list[str] | None = None) -> np.ndarray:
    """The column vector of one configuration, built as the grid kernel builds a sweep point (mesh degrees,
    ``dp = n_gpus / (tp pp cp)``, the FSDP shard group = dp unless the execution spec sets it); a PlanError
    for an illegal plan. The lowering's notes (what the stack decided, e.g. ``vp unknown: 2 (rule)``) are
    appended to ``notes``."""
    from fastmodel.errors import PlanError
    from fastmodel.lm.rules import check_plan, locate_plan_error

    given, model = model, load_lm_model(model)
    cluster = load_cluster(system, num_nodes)
    execution = load_execution(execution)
    mesh = parse_mesh("dp" if plan is None else plan)
    columns = base_columns(model, cluster, execution, global_batch or _task_global_batch(task), ep=mesh["ep"],
                           pp=mesh["pp"], notes=notes)
    columns = mesh_columns(columns, plan, execution.shard_degree is None)
    try:
        check_plan(columns, f"plan {plan or 'dp'!r}")
    except PlanError as error:     # a model file whose experts the plan's ep does not divide: name it
        raise locate_plan_error(error, given) from None
    return columns


def spec_point(model: Any, system: Any, task: Any, plan: str | None = None, execution: Any = None,
               num_nodes: int | None = None) -> tuple[Any, str | None, np.ndarray]:
    """(model spec, mesh, column vector) of one configuration given as specs: the task's mesh plan applies when
    ``plan`` is None (``TrainTask.mesh``), then :func:`point_columns` (a PlanError for an illegal plan)."""
    from fastmodel.errors import PlanError
    from fastmodel.lm.rules import locate_plan_error
    from fastmodel.lm.task import load_train_task

    spec = load_lm_model(model)
    train = load_train_task(task)
    plan = train.mesh(plan)
    try:
        return spec, plan, point_columns(spec, system, train, plan=plan, execution=execution, num_nodes=num_nodes)
    except PlanError as error:
        raise locate_plan_error(error, model) from None


def mesh_columns(base: np.ndarray, plan: str | None, shard_is_dp: bool) -> np.ndarray:
    """A copy of ``base`` (a trivial-mesh column vector, ``base_columns``) with the mesh of ``plan`` applied as
    the grid kernel applies it: the degrees, ``dp = n_gpus / (tp pp cp)``, and ``shard_degree = dp`` when
    ``shard_is_dp`` (the execution spec leaves it unset)."""
    columns = np.array(base, dtype=np.float64)
    for key, value in parse_mesh("dp" if plan is None else plan).items():
        columns[COLUMN_INDEX[key]] = value
    columns[COLUMN_INDEX["dp"]] = columns[COLUMN_INDEX["n_gpus"]] / (
        columns[COLUMN_INDEX["tp"]] * columns[COLUMN_INDEX["pp"]] * columns[COLUMN_INDEX["cp"]])
    if shard_is_dp:
        columns[COLUMN_INDEX["shard_degree"]] = columns[COLUMN_INDEX["dp"]]
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


__all__ = ["lm_sweep", "sweep_plan", "all_meshes", "parse_mesh", "mesh_label"]
