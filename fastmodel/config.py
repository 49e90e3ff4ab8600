"""One fully resolved configuration: specs + a legal plan + derived batches.

:func:`resolve` applies every legality rule (plan, batch divisibility, batch
consistency across components) and raises :class:`PlanError` naming the rule;
:func:`structure_key` and :func:`llm_param_row` lower a configuration to the
Program key and the numeric parameter row the kernels consume.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.errors import PlanError, SpecError
from fastmodel.lower import StructureKey
from fastmodel.params import llm_table
from fastmodel.plans import Plan, check_plan, plan_factors
from fastmodel.semantics import Semantics
from fastmodel.spec_model import LLMSpec
from fastmodel.spec_system import SystemSpec
from fastmodel.spec_task import TaskSpec


@dataclass(frozen=True)
class Config:
    """A legal configuration with local batches derived from its plan."""

    model: LLMSpec
    system: SystemSpec
    task: TaskSpec
    plan: Plan
    semantics: Semantics
    local_dense_batch: int
    local_emb_batch: int
    global_batch: int


def resolve(model: LLMSpec, system: SystemSpec, task: TaskSpec, semantics: Semantics, plan: Plan | str | None = None) -> Config:
    """Check legality and derive local batches; raise PlanError/SpecError if impossible."""
    where = "plan"
    if plan is None:
        plan = task.parsed_plan
        where = f"{task.source}: task.plan"
        if plan is None:
            raise SpecError(None, "task.plan", f"task {task.name!r} leaves the plan open; give one with --plan, e.g. 'fsdp/ddp'")
    elif not isinstance(plan, Plan):
        plan = Plan.parse(plan)
    n, per_node = system.num_devices, system.devices_per_node
    try:
        given = plan
        plan = plan.resolve(n, per_node)
        check_plan(plan, n, per_node, model.family)
    except PlanError as error:
        implied = any(level.degree is None for level in (*given.dense, *given.emb))
        if implied and error.rule in ("degree_le_1", "first_degree", "product_ne_devices") and "implied" not in error.reason:
            error = PlanError(error.rule, f"{error.reason} (degrees implied for {n} devices, {per_node} per node)")
        raise error.located(where) from None
    dense, emb = plan_factors(plan.dense), plan_factors(plan.emb)
    if task.global_batch is not None:
        global_batch = task.global_batch
        for name, dup in (("dense", dense.duplicate), ("emb", emb.duplicate)):
            if global_batch % dup:
                raise PlanError(
                    "batch_not_divisible",
                    f"global batch {global_batch} does not divide over the {dup} {name} replicas of plan {plan.label}",
                    f"{task.source}: task.global_batch",
                )
        local_dense, local_emb = global_batch // dense.duplicate, global_batch // emb.duplicate
    else:
        local_dense, local_emb = task.local_batch.dense, task.local_batch.emb
        global_dense, global_emb = local_dense * dense.duplicate, local_emb * emb.duplicate
        if global_dense != global_emb:
            raise PlanError(
                "global_batch_mismatch",
                f"dense part gives a global batch of {global_dense} ({local_dense} x {dense.duplicate}) but "
                f"embeddings give {global_emb} ({local_emb} x {emb.duplicate})",
            )
        global_batch = global_emb
    return Config(model, system, task, plan, semantics, local_dense, local_emb, global_batch)


def structure_key_for(model: LLMSpec, task: TaskSpec, plan: Plan, semantics: Semantics) -> StructureKey:
    """The Program key of a model/task/plan/semantics combination."""
    layers = model.num_layers
    if task.kind == "finetune":
        min_frozen = layers if task.min_frozen_layer is None else min(task.min_frozen_layer, layers)
    else:
        min_frozen = layers
    return StructureKey(
        family=model.family,
        kind=task.kind,
        dense=plan.dense_strategies,
        emb=plan.emb_strategies,
        num_layers=layers,
        freeze_emb=task.freeze_emb,
        freeze_dense=task.freeze_dense,
        min_frozen_layer=min_frozen,
        emb_ddp_grad_any_level=semantics.emb_ddp_grad_any_level,
        fsdp_backward=semantics.llm_fsdp_backward,
        bogus_prefetch_without_fsdp=semantics.bogus_prefetch_without_fsdp,
    )


def structure_key(config: Config) -> StructureKey:
    """The Program key of ``config``."""
    return structure_key_for(config.model, config.task, config.plan, config.semantics)


def llm_param_row(config: Config) -> np.ndarray:
    """The parameter-table row (``layout.LLM_COLUMNS``) of ``config`` (via ``params.llm_table``)."""
    table, status = llm_table(config.model, config.system, config.task, config.plan)
    assert status[0] == 0, "resolve() admitted a configuration that llm_table rejects"
    return table[:, 0]
