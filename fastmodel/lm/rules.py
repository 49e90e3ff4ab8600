"""Legality of real-world plans: the rule table of ``kernels/lm/rules.py`` applied to tables and to
single configurations (the first broken rule becomes a PlanError naming it)."""

from __future__ import annotations

import numpy as np

from fastmodel.errors import PlanError
from fastmodel.registry.lm import COLUMN_INDEX, PIPELINE_SCHEDULES, STATUSES

C_GRAPHS = COLUMN_INDEX["cuda_graph_microbatch_buffers"]
C_GRAPH_SCOPE = COLUMN_INDEX["cuda_graphs"]
C_SCHEDULE = COLUMN_INDEX["pipeline_schedule"]
SCHED_DUALPIPE = PIPELINE_SCHEDULES["dualpipe"]
PIPELINE_NAMES = {code: name for name, code in PIPELINE_SCHEDULES.items()}


def plan_status(params: np.ndarray) -> np.ndarray:
    """int8 status code of every configuration (column) of ``params``: the first broken rule, 0 if none."""
    from fastmodel.kernels.lm.evaluate import table_memory
    from fastmodel.kernels.lm.rules import plan_status_table

    status = np.empty(params.shape[1], dtype=np.int8)
    plan_status_table(*table_memory(params), status)
    return status


def check_plan(column: np.ndarray, label: str = "plan") -> None:
    """Raise a PlanError for the first rule one configuration (a column vector) breaks."""
    code = int(plan_status(np.asarray(column, dtype=np.float64).reshape(-1, 1))[0])
    if code:
        raise PlanError(STATUSES[code].name, status_reason(code, column), label)


def status_reason(code: int, column: np.ndarray) -> str:
    """Why one configuration (a column vector) has status ``code``: the status's message, or for
    ``node_limit_below_topk`` the refusal with its numbers (``node_limit_reason``)."""
    row = np.ascontiguousarray(column, dtype=np.float64).ravel()
    name = STATUSES[code].name
    if name == "node_limit_below_topk":
        return node_limit_reason(row)
    if name == "experts_not_divisible":
        return experts_reason(row)
    if name == "devices_not_divisible":
        return devices_reason(row)
    if name == "layers_not_divisible":
        return layers_reason(row)
    if name == "layout_not_runnable":
        return layout_reason(row)
    if name == "bf16_layers_above_stage":
        return bf16_above_reason(row)
    if name == "bf16_layers_dualpipe":
        C = COLUMN_INDEX
        return (f"plan.bf16_layers_start = {row[C['bf16_layers_start']]:g}, bf16_layers_end = "
                f"{row[C['bf16_layers_end']]:g} with pipeline_schedule dualpipe: DualPipe puts stages s and pp - 1 - s "
                "on rank s, so the first and last layers sit on both end ranks, which the model does not place; "
                "Megatron-LM, whose flags these are, runs no DualPipe (use 1f1b or interleaved; docs/model.md §11.39)")
    if name == "schedule_not_runnable" and _stated_schedule_refused(row):
        return stated_schedule_reason(row)
    if name == "schedule_not_runnable" and _overlap_needs_dualpipe(row):
        return ("plan.moe_a2a_overlap = dualpipe with pipeline_schedule "
                f"{PIPELINE_NAMES.get(int(row[C_SCHEDULE]), int(row[C_SCHEDULE]))}: the all-to-all is hidden inside "
                "DualPipe's forward-backward chunk pairs, which no other schedule runs; use moe_a2a_overlap batch "
                "(Megatron-Core's batch-level overlap) or pipeline_schedule dualpipe")
    if name == "schedule_not_runnable" and _interleaved_remainder(row):
        return interleaved_reason(row)
    if name == "schedule_not_runnable" and row[C_SCHEDULE] == SCHED_DUALPIPE and row[C_GRAPHS] > 0.0:
        return ("plan.cuda_graph_microbatch_buffers = 1 with pipeline_schedule dualpipe: DualPipe runs its modules "
                "eagerly and defers weight gradients (WeightGradStore, deepseek-ai/DualPipe dualpipe.py@3da1bbe), "
                "which per-layer graphs of a Transformer Engine _order cannot split; set 0 (docs/model.md §11.27)")
    if name == "schedule_not_runnable" and row[C_SCHEDULE] == SCHED_DUALPIPE and row[C_GRAPH_SCOPE] == 1.0:
        return ("plan.cuda_graphs = layer with pipeline_schedule dualpipe: DualPipe runs its modules eagerly and "
                "defers weight gradients (WeightGradStore, deepseek-ai/DualPipe dualpipe.py@3da1bbe), which one "
                "captured backward graph per layer cannot split; use none or full_iteration (docs/model.md §11.37)")
    return STATUSES[code].message


def _stated_schedule_refused(row: np.ndarray) -> bool:
    """The rule table's own test (kernels/lm/rules.py ``stated_schedule_refused``)."""
    from fastmodel.kernels.lm.rules import stated_schedule_refused

    return bool(stated_schedule_refused(row))


def stated_schedule_reason(row: np.ndarray) -> str:
    """schedule_not_runnable for a stated schedule its vp refuses, in the execution spec's words
    (``ExecutionSpec._consistent``)."""
    schedule = int(row[C_SCHEDULE])
    if PIPELINE_NAMES.get(schedule) == "interleaved":
        return f"pipeline_schedule 'interleaved' needs vp > 1 (vp = {row[COLUMN_INDEX['vp']]:g})"
    return (f"{PIPELINE_NAMES.get(schedule, schedule)} runs one stage per rank; vp = {row[COLUMN_INDEX['vp']]:g} > 1 "
            "needs an interleaved schedule")


def _interleaved_remainder(row: np.ndarray) -> bool:
    """The rule table's own test (kernels/lm/rules.py ``interleaved_remainder``)."""
    from fastmodel.kernels.lm.rules import interleaved_remainder

    C = COLUMN_INDEX
    return bool(interleaved_remainder(row, row[C["global_batch"]] / (row[C["micro_batch"]] * row[C["dp"]])))


def interleaved_reason(row: np.ndarray) -> str:
    """schedule_not_runnable for an interleaved plan whose micro-batches are no multiple of pp (under
    ``interleave_any_microbatches``, PyTorch's ScheduleInterleaved1F1B: of its rounds max(1, m // pp); §11.45),
    with its numbers."""
    C = COLUMN_INDEX
    m = row[C["global_batch"]] / (row[C["micro_batch"]] * row[C["dp"]])
    if row[C["interleave_any_microbatches"]] > 0:
        rounds = max(1, int(m // row[C["pp"]]))
        return (f"{m:g} micro-batches (global_batch / (micro_batch x dp) = {row[C['global_batch']]:g} / "
                f"({row[C['micro_batch']]:g} x {row[C['dp']]:g})) is not a multiple of the number of rounds "
                f"max(1, floor(m / pp)) = {rounds} (pp = {row[C['pp']]:g}) under the interleaved schedule (vp = "
                f"{row[C['vp']]:g}): PyTorch's ScheduleInterleaved1F1B refuses it (plan.interleave_any_microbatches "
                "= 1, docs/model.md §11.45); change global_batch, micro_batch or dp, or vp = 1")
    return (f"{m:g} micro-batches (global_batch / (micro_batch x dp) = {row[C['global_batch']]:g} / "
            f"({row[C['micro_batch']]:g} x {row[C['dp']]:g})) is not a multiple of pp = {row[C['pp']]:g} under the "
            f"interleaved schedule (vp = {row[C['vp']]:g}): Megatron-Core refuses it with its default "
            "microbatch_group_size_per_vp_stage = pp (schedules.py forward_backward_pipelining_with_interleaving; a "
            "larger group is not modelled, docs/model.md §11.45); change global_batch, micro_batch or dp, or vp = 1 "
            "(stacks on PyTorch's ScheduleInterleaved1F1B, e.g. torchtitan, run any m that its rounds divide)")


def bf16_above_reason(row: np.ndarray) -> str:
    """bf16_layers_above_stage with its numbers: each end's count against ``bf16_layers.bf16_layers_cap``."""
    from fastmodel.kernels.lm.bf16_layers import bf16_layers_cap

    C = COLUMN_INDEX
    cap, pp, vp = bf16_layers_cap(row), row[C["pp"]], max(row[C["vp"]], 1.0)
    which = f"floor(layers / (pp x vp)) = floor({row[C['layers']]:g} / ({pp:g} x {vp:g}))" if vp > 1.0 else \
        f"floor(layers / pp) = floor({row[C['layers']]:g} / {pp:g})"
    return (f"plan.bf16_layers_start = {row[C['bf16_layers_start']]:g}, bf16_layers_end = "
            f"{row[C['bf16_layers_end']]:g}: each at most {which} = {cap:g} (Megatron-LM refuses more under fp8, "
            "transformer_config.py@d98e8a6 lines 1533-1557; beyond an end chunk under interleaving the model places "
            "none, docs/model.md §11.39)")


def experts_reason(row: np.ndarray) -> str:
    """Which of the two expert-mesh rules one configuration breaks, with its fields and values: the routed
    experts split over ep, and the expert mesh etp x ep x edp refolds the attention mesh tp x cp x dp."""
    from fastmodel.kernels.lm.moe import expert_tp
    from fastmodel.registry.lm import COLUMN_INDEX as C

    experts, ep = row[C["moe_experts"]], row[C["ep"]]
    if experts % ep:
        return (f"{EXPERTS_FIELD} = {experts:g} is not divisible by plan ep = {ep:g} (each EP rank holds "
                f"moe_experts / ep experts)")
    etp, mesh = expert_tp(row), row[C["tp"]] * row[C["cp"]] * row[C["dp"]]
    which = f"plan etp = {row[C['etp']]:g}" if row[C["etp"]] > 0 else f"etp = tp = {etp:g} (plan etp unset)"
    return (f"{which} x ep = {ep:g} = {etp * ep:g} does not divide tp x cp x dp = {row[C['tp']]:g} x "
            f"{row[C['cp']]:g} x {row[C['dp']]:g} = {mesh:g} (the expert mesh etp x ep x edp refolds the "
            f"attention mesh)")


def expert_mesh_refusal(column: np.ndarray, where: str) -> PlanError | None:
    """The PlanError of a configuration (a column vector) whose expert mesh cannot exist, located at ``where``
    (``file:line: plan``), else None: routed experts that ep does not divide, or an etp x ep that does not divide
    tp x cp x dp (the rule table's ``experts_not_divisible``, kernels/lm/rules.py ``expert_mesh_broken``). No
    framework builds such a model, so ``validate`` refuses a measured record that states one, as ``run`` and
    ``batch`` do, while it still predicts the plans that break the other rules (they ran; docs/model.md §11.14,
    "Expert mesh")."""
    from fastmodel.kernels.lm.rules import expert_mesh_broken

    row = np.ascontiguousarray(column, dtype=np.float64).ravel()
    if not expert_mesh_broken(row):
        return None
    return PlanError("experts_not_divisible", experts_reason(row), where)


def locate_plan_error(error: PlanError, model, plan_where: str | None = None) -> PlanError:
    """``error`` saying where its configuration came from: ``plan_where`` (``t.toml: task.plan``) for its own
    label, and where a model file is at fault (ep not dividing its ``moe_experts``) that file and field first
    (``m.toml: model.moe_experts, plan 'ep32'``). A built-in model, a dict or a spec object has no file of the
    user's to name: the plan is what to change there."""
    from fastmodel.spec.loader import is_spec_file

    where = plan_where or error.where
    if error.rule == "experts_not_divisible" and error.reason.startswith(EXPERTS_FIELD) and \
            is_spec_file(model, "model"):
        where = f"{model}: {EXPERTS_FIELD}, {where}"
    return error if where == error.where else error.located(where)


#: the model field of the first expert-mesh rule (experts that ep does not divide): its reason starts with it
EXPERTS_FIELD = "model.moe_experts"


def devices_reason(row: np.ndarray) -> str:
    """devices_not_divisible with its numbers: n_gpus against tp x pp x cp."""
    from fastmodel.registry.lm import COLUMN_INDEX as C

    tp, pp, cp = row[C["tp"]], row[C["pp"]], row[C["cp"]]
    return (f"n_gpus = {row[C['n_gpus']]:g} is not a multiple of tp x pp x cp = {tp:g} x {pp:g} x {cp:g} = "
            f"{tp * pp * cp:g}")


def _overlap_needs_dualpipe(row: np.ndarray) -> bool:
    """The rule table's own test (kernels/lm/rules.py ``overlap_needs_dualpipe``): DualPipe's overlap under
    another schedule."""
    from fastmodel.kernels.lm.rules import overlap_needs_dualpipe

    return bool(overlap_needs_dualpipe(row))


def layers_reason(row: np.ndarray) -> str:
    """layers_not_divisible with its numbers, the degrees that divide the layers and where ``uneven_stages`` is
    set (DeepSeek-V3's 61 layers divide by no pp > 1: ``fastmodel run -x uneven_stages=true`` runs it)."""
    C = COLUMN_INDEX
    layers, pp, vp = row[C["layers"]], row[C["pp"]], row[C["vp"]]
    # with the embedding and the loss in the split Megatron-Core divides L + 2 slots (kernels/lm/rules.py)
    slots = layers + (2.0 if row[C["embedding_loss_in_split"]] > 0.0 and pp > 1.0 else 0.0)
    whole = int(slots) if float(slots).is_integer() else 0
    divisors = ", ".join(str(d) for d in range(1, min(whole, 128) + 1) if whole % d == 0) or "none"
    what = f"model.layers = {layers:g}" if slots == layers else (
        f"model.layers + 2 = {slots:g} (the embedding and the loss take a slot each, embedding_loss_in_split)")
    return (f"{what} is not divisible by pp x vp = {pp:g} x {vp:g} = {pp * vp:g} (pp x vp "
            f"dividing them: {divisors}); execution.uneven_stages = true allows it (run's -x uneven_stages=true or "
            "--execution FILE, a sweep file's [execution] table, execution= in Python, or a run record's plan block)")


def layout_reason(row: np.ndarray) -> str:
    """Which rule of ``layout_not_runnable`` (kernels/lm/rules.py ``layout_broken``) ``plan.last_stage_layers``
    breaks, with its numbers and the Megatron-Core check that refuses it (docs/model.md §11.25)."""
    from fastmodel.kernels.lm.pipeline import is_multiple
    from fastmodel.registry.lm import COLUMN_INDEX as C

    n, pp, layers = row[C["last_stage_layers"]], row[C["pp"]], row[C["layers"]]
    field = f"plan.last_stage_layers = {n:g}"
    check = "Megatron-Core validate_layer_layout: a layout's decoder layers must match num_layers"
    # the kernel's own test (layout_broken): is_multiple's 1e-9 tolerance; NaN and inf are no whole number
    if not np.isfinite(n) or n < 0.0 or not is_multiple(n, 1.0):
        return f"{field}: a whole number of decoder layers >= 0, or -1 (no explicit layout)"
    if n > layers:
        return f"{field} exceeds the model's {layers:g} layers ({check})"
    if row[C["embedding_loss_in_split"]] > 0.0:
        return (f"{field} cannot be set with embedding_loss_in_split (Megatron-Core TransformerConfig refuses "
                "pipeline_model_parallel_layout beside account_for_embedding/loss_in_pipeline_split)")
    return (f"{field} at pp = {pp:g}: the one pipeline rank builds all the model's {layers:g} layers ({check}); "
            f"set {layers:g}, or -1")


def node_limit_reason(row: np.ndarray) -> str:
    """The refusal of rule ``node_limit_below_topk`` with its numbers, naming the field to change."""
    from fastmodel.kernels.lm.moe import expert_tp
    from fastmodel.kernels.nccl import members_per_domain
    from fastmodel.registry.lm import COLUMN_INDEX as C

    ep, limit, experts = row[C["ep"]], row[C["moe_max_nodes"]], row[C["moe_experts"]]
    domains = ep / members_per_domain(row, ep, expert_tp(row))
    return (f"model.moe_max_nodes = {limit:g}: node-limited routing draws each token's moe_topk = "
            f"{row[C['moe_topk']]:g} experts from {limit:g} of the EP group's {domains:g} NVLink domains, which "
            f"hold {limit * experts / domains:g} of its {experts:g} experts; raise moe_max_nodes to at least "
            f"{np.ceil(row[C['moe_topk']] * domains / experts):g} (or 0, unlimited)")


def legal_meshes(model, cluster) -> list[tuple[dict[str, int], int]]:
    """(mesh, dp) of every mesh of ``lm.sweep.all_meshes`` that the rule table allows for ``model`` on all of
    ``cluster`` with the default execution, at a global batch where the batch rules hold (n_gpus x pp x
    micro_batch sequences: tp x pp x cp micro-batches per stage, at least pp); ``plan = "all"`` in a sweep
    gives the other meshes a status."""
    from fastmodel.lm.loader import load_execution
    from fastmodel.lm.sweep import all_meshes, base_columns
    from fastmodel.registry.lm import COLUMN_INDEX as C

    execution = load_execution(None)
    n = cluster.n_gpus
    found = []
    for mesh in all_meshes(model, cluster, n):
        ranks = mesh["tp"] * mesh["pp"] * mesh["cp"]
        if n % ranks:
            continue
        dp = n // ranks
        columns = base_columns(model, cluster, execution, n * mesh["pp"] * execution.micro_batch)
        for key, value in mesh.items():
            columns[C[key]] = value
        columns[C["dp"]] = columns[C["shard_degree"]] = dp
        if plan_status(columns.reshape(-1, 1))[0] == 0:
            found.append((mesh, dp))
    return found
