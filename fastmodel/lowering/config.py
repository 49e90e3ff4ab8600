"""One fully resolved configuration: specs + a legal plan + derived batches.

:func:`resolve` applies every legality rule (plan, batch divisibility, batch
consistency across components) and raises :class:`PlanError` naming the rule;
:func:`structure_key` and :func:`param_row` lower a configuration to the
Program key and the numeric parameter row the kernels consume.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.errors import PlanError, SpecError
from fastmodel.families import ModelSpec, family_of
from fastmodel.lowering.graph import StructureKey
from fastmodel.lowering.params import param_table
from fastmodel.parallel.plans import Plan, check_degree_limits, check_plan, check_plan_for_model, plan_factors
from fastmodel.semantics import Semantics
from fastmodel.spec.system import SystemSpec
from fastmodel.spec.task import TaskSpec


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


def check_task_fits_family(model: ModelSpec, task: TaskSpec) -> None:
    """Finetune flags and batches that the model's family has no use for are errors, not silently ignored
    (which apply: ``Family.freeze_fields``; a transformer local batch: ``Family.components``)."""
    where = task.source
    family = family_of(model)
    for name in ("freeze_top_mlp", "freeze_bottom_mlp", "freeze_dense", "min_frozen_layer"):
        value = getattr(task, name)
        if name not in family.freeze_fields and value not in (None, False):
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
    from fastmodel.spec.lm import ClusterSpec, LMSpec

    if isinstance(model, LMSpec) or isinstance(system, ClusterSpec):
        which = f"model {model.name!r}" if isinstance(model, LMSpec) else f"system {system.name!r}"
        raise SpecError(None, "semantics", f"{which} is a real-world spec: evaluate it under semantics 'default', "
                        "not the MAD-Max model")
    check_task_fits_family(model, task)
    where = "plan"
    if plan is None:
        plan = task.parsed_plan
        where = f"{task.source}: task.plan"
        if plan is None:
            example = family_of(model).plan_example
            raise SpecError(None, "task.plan", f"task {task.name!r} leaves the plan open; give one with --plan, e.g. {example}")
    elif not isinstance(plan, Plan):
        plan = Plan.parse(plan)
    n, per_node = system.num_devices, system.devices_per_node
    try:
        given = plan
        check_plan_for_model(plan, model)  # before degrees are implied: its rules do not depend on them
        plan = plan.resolve(n, per_node)
        check_plan(plan, n, per_node)
        if semantics.degree_limits:
            check_degree_limits(plan, model)
    except PlanError as error:
        implied = any(level.degree is None for level in given.levels)
        if implied and error.rule in ("degree_le_1", "first_degree", "product_ne_devices") and "implied" not in error.reason:
            error = PlanError(error.rule, f"{error.reason} (degrees implied for {n} devices, {per_node} per node)")
        raise error.located(where) from None
    duplicates = {name: plan_factors(levels).duplicate for name, levels in plan.components}
    if task.global_batch is not None:
        global_batch = task.global_batch
        for name, dup in duplicates.items():
            if global_batch % dup:
                raise PlanError(
                    "batch_not_divisible",
                    f"global batch {global_batch} does not divide over the {dup} {name} replicas of plan {plan.label}",
                    f"{task.source}: task.global_batch",
                )
        local = {name: global_batch // dup for name, dup in duplicates.items()}
    else:
        local = {name: getattr(task.local_batch, name) for name in duplicates}
        globals_ = {name: local[name] * dup for name, dup in duplicates.items()}
        global_batch = globals_["emb"]
        for name, value in globals_.items():
            if value != global_batch:
                raise PlanError(
                    "global_batch_mismatch",
                    f"{name} part gives a global batch of {value} ({local[name]} x {duplicates[name]}) but "
                    f"embeddings give {global_batch} ({local['emb']} x {duplicates['emb']})",
                )
    return Config(model, system, task, plan, semantics, local["dense"], local["emb"], global_batch,
                  local.get("transformer"))


def structure_key_for(model: ModelSpec, task: TaskSpec, plan: Plan, semantics: Semantics) -> StructureKey:
    """The Program key of a model/task/plan/semantics combination."""
    family = family_of(model)
    layers = family.structure_fields(model)["num_layers"]
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
        num_bottom_layers=family.structure_fields(model)["num_bottom_layers"],
        num_top_layers=family.structure_fields(model)["num_top_layers"],
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
