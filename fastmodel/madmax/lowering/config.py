"""One fully resolved configuration: specs + a legal plan (and its device mesh) + derived batches.

:func:`resolve` applies every legality rule (plan, batch divisibility, batch
consistency across components) -- the rule table of ``parallel.rules`` on one
row, the same rows ``params.param_table`` flags in sweeps -- and raises
:class:`PlanError` naming the first broken rule;
:func:`structure_key` and :func:`param_row` lower a configuration to the
Program key and the numeric parameter row the kernels consume.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.errors import PlanError, SpecError
from fastmodel.madmax.families import ModelSpec, family_of
from fastmodel.madmax.lowering.graph import StructureKey
from fastmodel.madmax.lowering.params import param_table, rule_inputs
from fastmodel.madmax.parallel.mesh import Mesh
from fastmodel.madmax.parallel.plans import Plan
from fastmodel.madmax.parallel.rules import check_plan_shape, check_rows
from fastmodel.madmax.spec.system import SystemSpec
from fastmodel.madmax.spec.task import TaskSpec
from fastmodel.semantics import Semantics


@dataclass(frozen=True)
class Config:
    """A legal configuration with local batches derived from its plan."""

    model: ModelSpec
    system: SystemSpec
    task: TaskSpec
    plan: Plan
    semantics: Semantics
    local_dense_batch: int
    local_emb_batch: int
    global_batch: int
    local_transformer_batch: int | None = None   # dlrm-transformer only
    mesh: Mesh | None = None                      # the plan on the cluster's [device, node] axes


def check_task_fits_family(model: ModelSpec, task: TaskSpec) -> None:
    """Finetune flags and batches that the model's family has no use for are errors, not silently ignored
    (which apply: ``Family.freeze_fields``; a transformer local batch: ``Family.components``)."""
    where = task.source
    family = family_of(model)
    for name in ("freeze_top_mlp", "freeze_bottom_mlp", "freeze_dense", "min_frozen_layer"):
        value = getattr(task, name)
        if name not in family.freeze_fields and value is not None and value is not False:  # 0 is a value
            fits = " / ".join(f for f in family.freeze_fields if f != "min_frozen_layer")
            raise SpecError(where, f"task.{name}", f"does not apply to {model.family} model {model.name!r}: "
                                                   f"its family freezes {fits} (and freeze_emb)")
    parts = [getattr(task, name) for name in family.freeze_fields if name != "min_frozen_layer"]
    if task.kind == "finetune" and task.freeze_emb and all(parts):
        raise SpecError(where, "task.freeze_emb", "finetune with every component frozen trains nothing (all_frozen)")
    if task.local_batch is not None:
        has_tr = task.local_batch.transformer is not None
        if family.has_transformer_component and not has_tr:
            raise SpecError(where, "task.local_batch.transformer", f"required for {model.family} (or give global_batch)")
        if not family.has_transformer_component and has_tr:
            raise SpecError(where, "task.local_batch.transformer", f"applies to families with transformer plan "
                                                                   f"components only, not {model.family}")


def resolve(model: ModelSpec, system: SystemSpec, task: TaskSpec, semantics: Semantics, plan: Plan | str | None = None) -> Config:
    """Check legality and derive local batches; raise PlanError/SpecError if impossible."""
    real_model = getattr(model, "family", None) == "lm"     # a real-world spec (fastmodel/lm), by its content
    if real_model or getattr(system, "kind", None) == "cluster":
        which = f"model {model.name!r}" if real_model else f"system {system.name!r}"
        raise SpecError(None, "semantics", f"{which} is a real-world spec: evaluate it under semantics 'default', "
                        "not the MAD-Max model")
    check_task_fits_family(model, task)
    where = "plan"
    if plan is None:
        plan = task.parsed_plan
        where = f"{task.source}: task.plan"
        if plan is None:
            example = family_of(model).plan_example
            raise SpecError(task.source, "task.plan", f"task {task.name!r} leaves the plan open; give one with --plan, e.g. {example}")
    elif not isinstance(plan, Plan):
        plan = Plan.parse(plan)
    n, per_node = system.num_devices, system.devices_per_node
    given = plan
    try:
        check_plan_shape(plan, model.family)
        rules = rule_inputs(model, system, task, plan, semantics)
        check_rows(rules)
    except PlanError as error:
        if error.rule == "batch_not_divisible":
            raise error.located(f"{task.source}: task.global_batch") from None
        if error.rule == "global_batch_mismatch":
            raise error.located(f"{task.source}: task.local_batch") from None
        implied = any(level.degree is None for level in given.levels)
        if implied and error.rule in ("degree_le_1", "first_degree", "product_ne_devices") and "implied" not in error.reason:
            error = PlanError(error.rule, f"{error.reason} (degrees implied for {n} devices, {per_node} per node)")
        raise error.located(where) from None
    plan = plan.resolve(n, per_node)
    mesh = plan.to_mesh(n, per_node, checked=True)  # the rule table ran above
    duplicates = {name: mesh.factors(name).duplicate for name in mesh.component_names}
    if task.global_batch is not None:
        global_batch = task.global_batch
        local = {name: global_batch // dup for name, dup in duplicates.items()}
    else:
        local = {name: getattr(task.local_batch, name) for name in duplicates}
        global_batch = local["emb"] * duplicates["emb"]
    return Config(model, system, task, plan, semantics, local["dense"], local["emb"], global_batch,
                  local.get("transformer"), mesh)


def structure_key_for(model: ModelSpec, task: TaskSpec, plan: Plan, semantics: Semantics) -> StructureKey:
    """The Program key of a model/task/plan/semantics combination."""
    family = family_of(model)
    fields = family.structure_fields(model)
    layers = fields["num_layers"]
    if task.kind == "finetune":
        min_frozen = layers if task.min_frozen_layer is None else min(task.min_frozen_layer, layers)
    else:
        min_frozen = layers
    return StructureKey(
        family=model.family,
        kind=task.kind,
        dense=plan.dense_strategies,
        emb=plan.emb_strategies,
        transformer=plan.transformer_strategies,
        num_layers=layers,
        num_bottom_layers=fields["num_bottom_layers"],
        num_top_layers=fields["num_top_layers"],
        freeze_emb=task.freeze_emb,
        freeze_dense=task.freeze_dense,
        freeze_top_mlp=task.freeze_top_mlp,
        freeze_bottom_mlp=task.freeze_bottom_mlp,
        min_frozen_layer=min_frozen,
        emb_ddp_grad_any_level=semantics.emb_ddp_grad_any_level,
        fsdp_backward=getattr(semantics, family.fsdp_backward_field),
        bogus_prefetch_without_fsdp=semantics.bogus_prefetch_without_fsdp,
        dlrm_bottom_prefetch=semantics.dlrm_bottom_fsdp_prefetch,
    )


def structure_key(config: Config) -> StructureKey:
    """The Program key of ``config``."""
    return structure_key_for(config.model, config.task, config.plan, config.semantics)


def param_row(config: Config) -> np.ndarray:
    """The parameter-table row (``layout.COLUMNS``) of ``config`` (via ``params.param_table``)."""
    table, status = param_table(config.model, config.system, config.task, config.plan, semantics=config.semantics)
    assert status[0] == 0, "resolve() admitted a configuration that param_table rejects"
    return table[:, 0]
