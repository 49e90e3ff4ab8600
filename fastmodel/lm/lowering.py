"""Specs -> the column vector of the real-world model (docs/model.md §11.1): the one lowering.

``lower(model, cluster, execution, mesh, global_batch)`` builds one configuration's columns from an
``LMSpec``, a ``ClusterSpec``, an ``ExecutionSpec`` and the mesh degrees. Sweeps lower their specs with a
trivial mesh (``dp`` = the cluster) and overwrite axes per point; run records (``fastmodel.lm.records``)
lower to the same four objects and then through this function.

Order (later wins): registry defaults; the model; the device file of ``cluster.gpu``
(``fastmodel.spec.devices``); the cluster's datasheet numbers; the mesh and the execution with its stack
applied (``fastmodel.lm.stacks``); the cluster's ``efficiency`` overrides; the network tiers
(``ClusterSpec.tiers``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.errors import SpecError, nearest
from fastmodel.lm.execution import GRAD_REDUCE_BYTES, accumulated_twice, with_uneven_stages
from fastmodel.lm.fp8_recipe import ignored_note
from fastmodel.lm.router_balance import expert_maxvio
from fastmodel.lm.table import encode
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS, OFFLOAD_MODULES, RECOMPUTE_MODULES
from fastmodel.registry.validators import column_problem
from fastmodel.spec.devices import device_table

#: the kernels' columns of tier 0 and tier 1 (domain size, bandwidth, efficiency, latency); tier 1's domain
#: is the whole job (``n_gpus``)
TIER_COLUMNS = (("domain_size", "intra_bw", "intra_eff", "intra_latency"),
                (None, "inter_bw", "inter_eff", "inter_latency"))
#: execution fields that are no column or need more than their value (lowered by ``execution_values``)
SPECIAL_FIELDS = frozenset(("stack", "framework", "vp", "pipeline_schedule", "grad_reduce_dtype",
                            "recompute_fraction", "recompute_num_layers", "shard_degree",
                            "recompute_modules"))
DEFAULT_RECOMPUTE_FRACTION = 0.5     # partial_layers without a fraction: every other block (TorchTitan)


@dataclass(frozen=True)
class Mesh:
    """Degrees of one configuration; ``n_gpus = tp x pp x cp x dp`` (experts: ``etp x ep x edp = tp x cp x dp``;
    ``etp`` 0 = tp, Megatron-Core's default)."""
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 0
    dp: int = 1

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp


#: the position-embedding kinds a model names (first word of ``position_embedding``): (rotary share, learned table,
#: ALiBi bias)
POSITION_KINDS = {"rotary": (1.0, 0.0, 0.0), "rope": (1.0, 0.0, 0.0), "learned": (0.0, 1.0, 0.0),
                  "absolute": (0.0, 1.0, 0.0), "alibi": (0.0, 0.0, 1.0), "none": (0.0, 0.0, 0.0),
                  "nope": (0.0, 0.0, 0.0)}


def position_values(text: str | None) -> dict[str, float]:
    """``rotary_fraction``, ``learned_positions`` and ``alibi_bias`` of a ``position_embedding`` text: its first word names the
    kind (``POSITION_KINDS``); a rotary text may state the share of the head dimension it rotates as a
    percentage (``"rotary (25% of head dim)"``: GPT-NeoX ``rotary_pct``). None: rotary on every dimension."""
    import re

    from fastmodel.errors import FieldValueError, nearest

    if text is None:
        return {"rotary_fraction": 1.0, "learned_positions": 0.0, "alibi_bias": 0.0}
    words = re.findall(r"[a-z]+", text.lower())
    kind = words[0] if words else ""
    if kind not in POSITION_KINDS:
        raise FieldValueError(("position_embedding",), f"{text!r} names no position embedding (one of "
                              f"{', '.join(POSITION_KINDS)}){nearest(kind, POSITION_KINDS)}",
                              unsupported=True)
    rotary, learned, alibi = POSITION_KINDS[kind]
    share = re.search(r"(\d+(?:\.\d+)?)\s*%", text)
    if rotary and share:
        rotary = float(share.group(1)) / 100.0
        if not 0.0 < rotary <= 1.0:
            raise FieldValueError(("position_embedding",), f"rotary share {share.group(0)} must be in (0, 100]%")
    return {"rotary_fraction": rotary, "learned_positions": learned, "alibi_bias": alibi}


#: the numeric MoE model fields, lowered as float columns when the model has experts
MOE_COLUMNS = ("moe_ffn", "moe_shared_experts", "dense_layers", "moe_capacity_factor", "moe_pad_to_capacity",
               "moe_layer_freq", "moe_max_nodes")
#: model fields read only when the model has experts (moe_experts > 0); a dense model stating one gets a note
MOE_ONLY = MOE_COLUMNS + ("moe_routing",)


def dense_moe_note(model, notes: list[str] | None) -> None:
    """Note the MoE-only fields (``MOE_ONLY``) a dense model states away from their defaults: they are ignored,
    as ``recompute_modules`` is outside selective recompute (``recompute_module_bits``)."""
    if model.moe_experts or notes is None:
        return
    stated = [f"model.{key} = {getattr(model, key)!r}" for key in MOE_ONLY
              if getattr(model, key) != type(model).model_fields[key].default]
    if stated:
        notes.append(f"{', '.join(stated)} ignored: a dense model (moe_experts = 0) has no experts")


def model_values(model) -> dict[str, float]:
    """The model columns of an ``LMSpec`` (MoE, MLA and sliding-window columns only where they apply)."""
    values = {key: float(getattr(model, key)) for key in ("layers", "hidden", "ffn", "heads", "vocab", "seq_len")}
    values["kv_heads"] = float(model.kv_heads if model.kv_heads is not None else model.heads)
    values["head_dim"] = float(model.head_dim) if model.head_dim is not None else values["hidden"] / values["heads"]
    values["gated_mlp"] = 1.0 if model.ffn_kind == "swiglu3" else 0.0
    values["tied_embeddings"] = 1.0 if model.tied_embeddings else 0.0
    values["moe_experts"] = float(model.moe_experts)
    values["moe_topk"] = float(model.moe_topk)
    if model.moe_experts > 0:
        for key in MOE_COLUMNS:
            values[key] = float(getattr(model, key))
        values["moe_round_robin"] = 1.0 if model.moe_routing == "round_robin" else 0.0
    if model.attention == "mla":
        values["mla"] = 1.0
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank"):
            values[key] = float(getattr(model, key))
    if model.sliding_window:
        values["sliding_window"] = float(model.sliding_window)
    # the layers a window applies to (default all), also without a window: a sliding_window axis then applies
    layers = model.sliding_window_layers
    values["sliding_window_layers"] = float(layers if layers is not None else model.layers)
    values["attention_chunk"] = float(model.attention_chunk)               # chunked local attention (§11.55)
    values["attention_chunk_layers"] = float(model.attention_chunk_layers)
    values["mtp_layers"] = float(model.mtp_layers)
    # Llama-style gated models use RMSNorm, GPT-style LayerNorm, unless the model says which
    norm = model.normalization
    values["rms_norm"] = values["gated_mlp"] if norm is None else (1.0 if "rms" in norm.lower() else 0.0)
    values.update(position_values(model.position_embedding))
    return values


def cluster_values(cluster) -> dict[str, float]:
    """The device file of ``cluster.gpu`` overridden by the cluster's datasheet numbers, its HBM capacity as stated
    (a spec file's what-if stays; run records read the device file's total, ``records.record_specs``)."""
    values = dict(device_table().get(cluster.gpu.lower(), {}))
    values.update({
        "peak_flops_16": cluster.peak_flops_bf16, "peak_flops_8": cluster.peak_flops_fp8 or 0.0,
        "hbm_bytes": cluster.hbm_bytes, "hbm_bw": cluster.hbm_bw_bytes_s,
        "intra_bw": cluster.intra_node_bw_bytes_s_per_gpu, "inter_bw": cluster.inter_node_bw_bytes_s_per_gpu,
        "gpus_per_node": float(cluster.gpus_per_node),
        "domain_size": float(cluster.nvlink_domain_size or cluster.gpus_per_node),
    })
    return values


def execution_values(execution, model, mesh: Mesh, notes: list[str] | None = None,
                     vp_from_stack: bool = False) -> dict[str, float]:
    """The plan columns of a resolved execution (its stack applied, ``vp`` a number) on ``mesh``;
    ``vp_from_stack``: its vp was ``"unknown"``, the stack's rule (:func:`lower`)."""
    values = {key: float(getattr(mesh, key)) for key in ("tp", "pp", "cp", "ep", "etp", "dp")}
    values["n_gpus"] = float(mesh.n_gpus)
    for name in type(execution).model_fields:
        value = getattr(execution, name)
        if name not in SPECIAL_FIELDS and value is not None and name in COLUMN_INDEX:
            values[name] = float(encode(name, value))
    values["vp"] = float(execution.vp)
    schedule = execution.pipeline_schedule or ("interleaved" if execution.vp > 1 else "1f1b")
    values["pipeline_schedule"] = float(encode("pipeline_schedule", schedule))
    # a stated schedule must agree with vp, as ExecutionSpec._consistent requires: the rule table refuses a pair
    # that disagrees (a sweep's axes; kernels/lm/rules.py stated_schedule_refused). The spec reads vp "unknown" as
    # interleaved, so a stack's rule that gives vp 1 (meta-internal at pp = layers + 2) leaves 'interleaved' held
    # to nothing (docs/model.md §11.9)
    values["schedule_stated"] = float(execution.pipeline_schedule is not None
                                      and not (vp_from_stack and execution.vp <= 1))
    # unset by the plan and its stack: FP32 (mixed precision, FP32 main gradients), or the parameters' own
    # 16 bits when the model is 16-bit (master_weights false: autograd gives a gradient its parameter's dtype)
    values["grad_reduce_bytes"] = GRAD_REDUCE_BYTES[
        execution.grad_reduce_dtype or ("fp16" if execution.master_weights is False else "fp32")]
    if execution.sharding in ("fsdp", "hsdp"):
        values["shard_degree"] = float(execution.shard_degree or mesh.dp)
    if execution.recompute == "partial_layers":
        values["recompute_fraction"] = recompute_fraction(execution, model.layers, notes)
    values["recompute_modules"] = recompute_module_bits(execution, notes)
    values["offload_modules"] = float(sum(OFFLOAD_MODULES[name] for name in set(execution.activation_offload_modules or ())))
    maxvio = balance_column(execution, model, notes)
    if maxvio is not None:
        values["moe_expert_maxvio"] = maxvio
    if execution.fp8_recipe not in (None, "unstated") and execution.precision != "fp8" and notes is not None:
        notes.append(ignored_note(execution.fp8_recipe, execution.precision))   # fastmodel/lm/fp8_recipe.py
    return values


def balance_column(execution, model, notes: list[str] | None = None) -> float | None:
    """``moe_expert_maxvio`` of the plan's ``moe_balance`` (``router_balance.expert_maxvio``) when the plan and its
    stack leave ``moe_imbalance`` unset and the model has experts; the kernel's ``rank_imbalance`` turns it into
    the busiest rank's factor at each mesh's ep. A dense model has no experts: a method stated on it is ignored
    with a note, as the MoE-only model fields are (``dense_moe_note``); so is one beside a stated ``moe_imbalance``,
    which wins (docs/model.md §11.14.5)."""
    method = getattr(execution, "moe_balance", None)
    if method is not None and not model.moe_experts and notes is not None:
        notes.append(f"moe_balance = {method!r} ignored: a dense model (moe_experts = 0) has no experts")
    if method is not None and model.moe_experts and execution.moe_imbalance is not None and notes is not None:
        notes.append(f"moe_balance = {method!r} ignored: moe_imbalance = {execution.moe_imbalance:g} is stated (by the "
                     "plan or its stack) and wins (docs/model.md §11.14.5)")
    if not model.moe_experts or execution.moe_imbalance is not None or method is None:
        return None
    return expert_maxvio(method, notes)


def recompute_module_bits(execution, notes: list[str] | None = None) -> float:
    """The ``recompute_modules`` column: the sum of the listed modules' bits (``RECOMPUTE_MODULES``) under
    selective recompute (Megatron-Core reads the list only with ``recompute_granularity = "selective"``,
    megatron/core/transformer/transformer_config.py), else 0 (with a note when a list was given)."""
    modules = execution.recompute_modules
    if not modules:
        return 0.0
    if execution.recompute != "selective":
        if notes is not None:
            notes.append(f"recompute_modules {modules} ignored: only read under selective recompute")
        return 0.0
    return float(sum(RECOMPUTE_MODULES[name] for name in set(modules)))


def recompute_fraction(execution, layers: int, notes: list[str] | None = None) -> float:
    """Share of layers fully recomputed under ``partial_layers``: the fraction given, else
    ``recompute_num_layers / layers``, else 0.5 (with a note)."""
    if execution.recompute_fraction is not None:
        return float(execution.recompute_fraction)
    if execution.recompute_num_layers is not None:
        return execution.recompute_num_layers / float(layers)
    if notes is not None:
        notes.append(f"recompute_fraction unknown: {DEFAULT_RECOMPUTE_FRACTION} assumed")
    return DEFAULT_RECOMPUTE_FRACTION


def lower(model, cluster, execution, mesh: Mesh, global_batch: int, notes: list[str] | None = None,
          source: str | None = None, refuse_twice: bool = True, vp_from_stack: bool = False,
          stack_pp: int | None = None) -> np.ndarray:
    """The column vector of ``model`` on ``cluster`` executed as ``execution`` on ``mesh`` with ``global_batch``
    sequences per step. Notes of the stack and fill-in rules are appended to ``notes``; a SpecError (naming
    ``source``) for what cannot run: an execution its stack cannot run (FP8 without an FP8 peak is the rule
    table's ``no_fp8``). ``refuse_twice`` false: a weight-gradient accumulation fused beside a pass is lowered
    (both columns set: the rule table's ``wgrad_accumulation_twice``), for a sweep's axis values.
    ``vp_from_stack``: ``execution`` was resolved from ``vp = "unknown"`` already (a run record's,
    ``records.record_specs``; ``schedule_stated`` in :func:`execution_values`). ``stack_pp``: the pp at which the
    stack's rules read the plan (``vp = "unknown"``), ``mesh.pp`` unless given: a sweep lowers each point's pp on
    the trivial mesh (``sweep.base_columns``, docs/model.md §11.8)."""
    from fastmodel.lm.stacks import resolve

    unknown = execution.vp == "unknown"
    vp_from_stack = vp_from_stack or unknown
    pp = mesh.pp if stack_pp is None else stack_pp
    try:
        execution = resolve(execution, pp, model.layers, notes, expert_parallel=mesh.ep > 1)
    except ValueError as error:
        raise SpecError(source, "execution.vp", str(error)) from None
    if unknown:
        # the stack's own split runs, as a run record stating vp "unknown" reads it (records.record_specs): Meta's
        # rule splits layers + 2 slots, one a chunk, the embedding and the loss in two of them (§11.8)
        execution = with_uneven_stages(execution, model.layers, pp)
    if refuse_twice and (twice := accumulated_twice(execution)):         # docs/model.md §11.46: a stack's fusion and a plan's pass
        raise SpecError(source, "execution.grad_accum_bytes", twice)
    if execution.recompute_num_layers is not None and execution.recompute_num_layers > model.layers:
        raise SpecError(source, "execution.recompute_num_layers",
                        f"{execution.recompute_num_layers} exceeds the model's {model.layers} layers")
    values = model_values(model)
    dense_moe_note(model, notes)
    values.update(cluster_values(cluster))
    values.update(execution_values(execution, model, mesh, notes, vp_from_stack))
    values["global_batch"] = float(global_batch)
    # FP8 on a device without an FP8 peak is the rule table's no_fp8 (kernels/lm/rules.py): a sweep marks the
    # point, a single run or record raises the PlanError, the same rule either way
    columns = np.array([c.default for c in COLUMNS], dtype=np.float64)
    for key, value in values.items():
        columns[COLUMN_INDEX[key]] = value
    for name, value in cluster.efficiency.items():
        if name not in COLUMN_INDEX:
            raise SpecError(cluster.name, f"efficiency.{name}", f"unknown column{nearest(name, COLUMN_INDEX)}")
        if problem := column_problem(COLUMNS[COLUMN_INDEX[name]], value):
            raise SpecError(cluster.name, f"efficiency.{name}", problem)
        columns[COLUMN_INDEX[name]] = value
    for tier, names in zip(cluster.tiers, TIER_COLUMNS):  # the network columns come from the tier list
        for name, value in zip(names, (tier.domain_size, tier.bandwidth_per_device_bytes_per_s, tier.efficiency,
                                       tier.latency_s)):
            if name is not None:
                columns[COLUMN_INDEX[name]] = value
    return columns
