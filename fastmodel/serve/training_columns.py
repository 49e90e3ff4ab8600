"""Columns of the real-world vector that a serving configuration refuses (review12 #4, h-mend15): every column no
serving kernel reads, so that a value given for one (``recompute = "full"`` on a serving sweep) is one line saying
it would change nothing, not a silent no-op, plus ``moe_grouped_gemm``, which a serving kernel reads with its
training meaning.

:data:`UNREAD_COLUMNS` is the one list. ``tests/serve/test_serve_training_columns.py`` proves it against the
source: it walks the call graph of the serving kernels from ``kernels/serve/fused.py`` and collects every
``C_<COLUMN>`` index they name, and the list must be exactly the columns never named. The serving lowering
(``fastmodel/serve``) sets columns by name only for the serving task, the device and the model; the training plan
names it uses (``micro_batch``, ``global_batch`` in ``records.py``) are keys of a record handed to the training
lowering, whose outputs serving reads through the columns the kernels name.
"""

from __future__ import annotations

#: columns no serving kernel reads, by the registry's groups (``fastmodel.registry.lm``)
UNREAD_COLUMNS = (
    # model: a model spec may carry them (``serve.models.UNSERVED`` notes the priced-differently ones)
    "flash_attention", "causal", "moe_capacity_factor", "moe_pad_to_capacity", "moe_max_nodes", "moe_round_robin",
    "mtp_layers", "dropout", "rotary_fraction", "learned_positions", "alibi_bias", "rms_norm",
    # plan
    "vp", "cp", "etp", "dp", "sharding", "shard_degree", "micro_batch", "global_batch", "recompute",
    "recompute_fraction", "selective_policy", "recompute_modules", "sequence_parallel", "tp_comm_overlap",
    "grad_reduce_bytes", "optimizer", "master_weights", "fsdp_module_wrap", "fp8_params", "pipeline_schedule",
    "overlap_grad_reduce", "overlap_param_gather", "activation_offload", "loss_impl", "cp_algorithm",
    "collective_bucket_bytes", "uneven_stages", "embedding_loss_in_split", "moe_a2a_overlap", "moe_fp8_dispatch",
    "moe_shared_expert_overlap", "moe_probs_in_experts", "optimizer_moments", "moe_act_input_fp8", "attn_out_e5m6",
    "norm_recompute_fp8", "fp8_weight_transpose_per_use", "bf16_layers_start", "bf16_layers_end",
    "step_grad_copy_bytes", "ddp_bucket_copy", "muon_ns_steps", "muon_ns_gram_square", "muon_distributed",
    "offload_modules", "cuda_graphs", "cuda_graph_microbatch_buffers", "last_stage_layers",
    "reduce_every_microbatch", "fsdp_stage_gathered", "pp_engine_deepspeed", "pp_exchange_2021", "schedule_stated",
    "eval_interval", "eval_iters", "tp_per_projection", "sp_wgrad_regather", "interleave_any_microbatches",
    "fsdp1_grad_passes", "fsdp_version", "allocator_expandable_segments", "ub_communicators", "ub_ring_exchange_rs",
    "fsdp_backward_prefetch", "fsdp_limit_all_gathers", "fsdp_units_in_checkpoint", "moe_imbalance",
    "moe_expert_maxvio", "moe_mem_kernels", "moe_sync_issue_ops", "wgrad_fused_accumulation", "step_grad_passes",
    "step_master_copy", "step_zero_grad", "step_grad_check", "step_grad_prescale", "embedding_dense_grad",
    "embedding_fp32_grads", "loss_traffic_bytes_per_logit", "fsdp_copy_out", "param_fetch_bw", "grad_accum_bytes",
    "grad_allreduce", "fa_qkv_prepare", "moe_permute_fwd_bytes", "moe_permute_bwd_bytes",
    "moe_combine_saved_bytes", "step_host_loops", "p2p_host_sync",
    # device
    "comm_sm_share", "allocator_cache_fraction", "allocator_cache_fraction_expandable",
    "cublas_workspace_bytes", "nccl_p2p_channels_per_peer", "host_link_bw", "host_link_eff",
    "attn_tile_kv", "gpu_speed_spread",
    # network
    "gpus_per_node", "collective_overhead_s", "deepep_nvl_bw", "step_overhead_s", "host_layer_s",
)

#: the serving column that does what a user giving a training column most likely meant (each one a serving kernel
#: reads; the test checks it)
SERVING_COUNTERPART = {"micro_batch": "batch_size", "global_batch": "batch_size", "dp": "attention_dp",
                       "etp": "moe_tp", "step_overhead_s": "serve_step_overhead_s", "mtp_layers": "spec_tokens"}

_WHAT = {"model": "a model column", "plan": "a training option", "device": "a training device column",
         "network": "a training network column"}


def _reason(name: str) -> str:
    """One line: what the column is, that no serving kernel reads it, how serving prices what it stands for
    (``serve.models.UNSERVED``) or the serving column a user most likely meant."""
    from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
    from fastmodel.serve.models import UNSERVED

    why = f"; {UNSERVED[name]}" if name in UNSERVED and name not in SERVING_COUNTERPART else ""
    counterpart = f" (serving's is '{SERVING_COUNTERPART[name]}')" if name in SERVING_COUNTERPART else ""
    return (f"{_WHAT[COLUMNS[COLUMN_INDEX[name]].group]} that no serving kernel reads, so it would change "
            f"nothing{why}{counterpart}")


#: column name -> the one-line reason serving refuses it (``serve.api.columns`` / ``evaluate`` / ``sweep``, a
#: serving sweep file's axes and task, ``fastmodel serve``)
TRAINING_COLUMNS: dict[str, str] = {
    "moe_grouped_gemm": "a training option (0: Megatron-Core's SequentialMLP, docs/model.md §11.57), not a serving "
                        "one: serving engines run their own grouped MoE kernels",
    **{name: _reason(name) for name in UNREAD_COLUMNS},
}
