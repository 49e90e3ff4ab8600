"""TorchTitan and PyTorch FSDP2 (per-parameter sharding): stack ``torchtitan``.

Eager element-wise ops and op-level selective recompute as every PyTorch-native stack; FSDP2 copies each
gathered layer out of the all-gather buffer into its parameter tensors, a read and a write of the layer's
parameters per gather (pytorch/pytorch RFC #114299; FSDP1's flat parameters are views of the buffer).
FSDP2 also copies each layer's gradients into the reduce-scatter buffer, cast to ``reduce_dtype``, on the compute
stream every micro-batch (``foreach_reduce``, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; charged with
``fsdp_copy_out``). Attention is ``F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)``
(torchtitan/models/llama/model.py at 785c34c; OLMo-core's ``use_flash=False`` path likewise,
src/olmo_core/nn/attention/__init__.py at 7e58d1289), whose flash backend -- FlashAttention-2 -- PyTorch tries
first on Hopper while cuDNN attention is last in its priority order (aten/src/ATen/native/transformers/cuda/
sdp_utils.cpp ``priority_order``: flash, efficient, math, cudnn, in the 2025 releases these runs used): ``attn_fa2``.
The loss is ``torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels)`` (pytorch/torchtitan
torchtitan/components/loss.py at 785c34c and 92ed8b3), eager or compiled with the model (``loss_impl``).
"""

from fastmodel.lm.stacks.base import StackProfile, names_in, tokens
from fastmodel.lm.stacks.megatron_2021 import HOST_OP_S_EAGER  # §11.7 "Host issue time" [A]
from fastmodel.registry.lm import MOE_DISPATCHERS

#: Small kernels of one MoE layer forward on TorchTitan's DeepEP path (pytorch/torchtitan 022f885f34) when its
#: blocks run eager, GEMMs, SDPA, the expert SwiGLU and DeepEP's own kernels excluded: router 14, token count 1,
#: dispatcher 3, permute 10, group offsets 1, unpermute 2, output 2 (docs/model.md §11.14.3, table
#: "moe-kernels-torchtitan-deepep")
MOE_MEM_KERNELS_TORCHTITAN_DEEPEP = 33.0

#: Operators the host issues onto an idle GPU after the four blocking syncs of one MoE layer forward on the same
#: path: 1 after DeepEP's wait for the receive counts (the dispatch kernel), 1 after the blocking host-to-device copy
#: of the counts, 8 before the first ``masked_select`` of ``permute``, 2 before the second, 1 after it (the
#: ``index_select`` that refills the GPU) (docs/model.md §11.14.6, table "moe-sync-ops-torchtitan-deepep")
MOE_SYNC_ISSUE_OPS_TORCHTITAN_DEEPEP = 13.0

#: Small kernels of one MoE layer forward on TorchTitan's default expert-parallel path (``ExpertParallel``, the
#: NCCL all-to-all; pytorch/torchtitan 022f885f34) when its blocks run eager, GEMMs, the expert SwiGLU and NCCL's
#: kernels excluded: router 14, token count 1, reorderer 5, routed gather 1, split sizes 4, ``_permute`` 16 (13 of
#: them ``generate_permute_indices``), group offsets 1, ``_unpermute`` 1, scoring and combine 5 (docs/model.md
#: §11.61, table "moe-kernels-torchtitan-a2a")
MOE_MEM_KERNELS_TORCHTITAN_A2A = 48.0
#: Operators the host issues onto an idle GPU after that path's one blocking sync per MoE layer forward (the
#: device-to-host copy of the receive counts, ``non_blocking=False``, distributed/expert_parallel.py lines 101-105):
#: two ``tolist`` and the all-to-all's launch (lines 106-114) (docs/model.md §11.61)
MOE_SYNC_ISSUE_OPS_TORCHTITAN_A2A = 3.0
#: HBM bytes per routed row and hidden element that path moves in one MoE layer forward, token-sized (T x h) tensors
#: left out: ``torch.gather`` of the routed input 2 + 2 (models/moe/moe.py line 520), ``_permute``'s ``vstack``
#: copy 2 + 2 and row gather 2 + 2, ``_unpermute``'s ``index_put_`` 2 + 2 (models/moe/utils.py lines 55-64), the
#: routing-score product in FP32 -- cast 2 + 4, multiply 4 + 4, cast back 4 + 2 (moe.py lines 539-543) -- and the
#: ``scatter_add`` source read 2 (line 545) (docs/model.md §11.61, table "permute-bytes-torchtitan-a2a")
PERMUTE_FWD_BYTES_TORCHTITAN_A2A = 4.0 + 4.0 + 4.0 + 4.0 + 6.0 + 8.0 + 6.0 + 2.0
#: ... and in its backward (autograd of the same ops): ``scatter_add``'s gather 2 + 2, the casts' 2 + 4 and 4 + 2,
#: the product's two gradients (by the score 4 + 4; for the score, product 4 + 4 + 4 and its row sum 4), the slice's
#: zero-padded copy 2 + 2 + 2 and ``index_put_``'s gather 2 + 2, ``index``'s ``index_put_(accumulate=True)`` into
#: zeros 2 + 2 + 2 + 2, ``gather``'s ``scatter_add_`` read 2
PERMUTE_BWD_BYTES_TORCHTITAN_A2A = 4.0 + 6.0 + 6.0 + 8.0 + 16.0 + 6.0 + 4.0 + 8.0 + 2.0
#: bytes per routed element that path saves for the score gradient: ``routed_output.to(float32) * top_scores``
#: (models/moe/moe.py lines 539-543) keeps its FP32 operand, 4 B, where the generic count keeps the BF16 output, 2 B
COMBINE_SAVED_BYTES_TORCHTITAN_A2A = 4.0

#: PyTorch dispatcher calls of one eager Llama decoder block's forward in plain PyTorch (pytorch/torchtitan
#: torchtitan/models/llama/model.py as read at 0199cbc1, 2024: ``TransformerBlock.forward``, ``Attention.forward`` with
#: ``apply_rotary_emb``, ``reshape_for_broadcast`` and ``repeat_kv``, ``FeedForward.forward``; models/norms.py
#: ``RMSNorm``), at the granularity of the Megatron-DeepSpeed count (``F.linear`` is ``t`` + ``mm``): two RMSNorms
#: 2 x 8, Q/K/V projections 6, head views 3, rotary 16, ``repeat_kv`` under GQA 6, transposes 3, SDPA 2, output
#: transpose-contiguous-view 3, output projection 2, SwiGLU MLP 8, residual adds 2: 67 (docs/model.md §11.59,
#: table "host-ops-llama-block")
HOST_OPS_LLAMA_BLOCK_EAGER = 67.0
#: FSDP2's calls per ``fully_shard``-ed block and forward (pytorch/pytorch 01d66d21, mid-2024,
#: torch/distributed/_composable/fsdp/_fsdp_collectives.py ``foreach_all_gather`` and
#: ``foreach_all_gather_copy_out``; _fsdp_param.py ``all_gather_inputs``, ``alloc_all_gather_outputs``,
#: ``free_unsharded_param``), for the block's 9 parameters: casts to ``param_dtype`` 9, copy-in 5, all-gather
#: and its stream events 3, copy-out 21, the post-forward free 9, post-backward hook 1: 48 (§11.59,
#: table "host-ops-fsdp2")
HOST_OPS_FSDP2_BLOCK = 48.0


def host_defaults(execution, hooks: float = HOST_OPS_FSDP2_BLOCK, eager: bool = False) -> dict:
    """An eager PyTorch-native model's host issue (docs/model.md §11.59): the Llama block's dispatcher calls per
    layer forward, plus the sharding's ``hooks`` (FSDP2's here) when parameters are sharded (``fsdp``/``hsdp``),
    at ``HOST_OP_S_EAGER`` each; nothing when the run compiles the model (Inductor's generated code is not this
    count) unless its blocks run ``eager`` all the same (:func:`eager_defaults`)."""
    if execution.torch_compile and not eager:
        return {}
    sharded = getattr(execution, "sharding", None) in ("fsdp", "hsdp")
    return {"host_ops_layer": HOST_OPS_LLAMA_BLOCK_EAGER + (hooks if sharded else 0.0), "host_op_s": HOST_OP_S_EAGER}



def defaults(execution, framework: str | None) -> dict:
    # the loss: torch cross_entropy on pred.float() (torchtitan/components/loss.py), compiled with the model
    # when compile is on (build_cross_entropy_loss; "loss" in compile.components from 2025), else eager
    loss = "compiled" if execution.torch_compile else "eager"
    # under PP the FSDP2 stage stays gathered between micro-batches: apply_fsdp's reshard_after_forward =
    # not pp_enabled (torchtitan/models/llama3/infra/parallelize.py, pytorch/torchtitan@81c1243) and PyTorch
    # pipelining's set_reshard_after_backward(False) (torch/distributed/pipelining/stage.py, pytorch/pytorch@0138610)
    # PyTorch's ScheduleInterleaved1F1B runs m >= pp with m a multiple of max(1, m // pp) rounds, not only of pp
    # (docs/model.md §11.45; Megatron-Core refuses m mod pp != 0)
    # DTensor TP under SP: PrepareModuleInput's all-gather output is the tensor the column-parallel mm saves for
    # backward, so the weight gradient gathers nothing again (docs/model.md §11.41)
    out = {"fsdp_version": 2, "fsdp_copy_out": True, "fused_kernels": False, "selective_policy": "op", "loss_impl": loss,
           "attn_fa2": True, "fsdp_stage_gathered": True, "sp_wgrad_regather": False,
           "interleave_any_microbatches": True}
    # TorchTitan's launcher runs torchrun under expandable segments (run_train.sh, PYTORCH_ALLOC_CONF
    # "expandable_segments:True"; added to run_llama_train.sh by a5e57e4a9, PR #643, 2024-10-22): a text that
    # names TorchTitan, not FSDP2 alone (other launchers of FSDP2 set no allocator option)
    titan = names_titan(framework)
    if titan:
        out["allocator_expandable_segments"] = True
    # DeepEP needs ep > 1: its MoE path runs eager when the model is not compiled or its blocks fall back to eager;
    # the registry's code, not the spelling ("flex" is the same dispatcher, MOE_DISPATCHERS); TorchTitan's counts,
    # so only where the framework names it (review15 #3)
    deepep = MOE_DISPATCHERS.get(execution.moe_dispatcher) == MOE_DISPATCHERS["deepep"]
    if titan and deepep and (not execution.torch_compile or eager_blocks(execution, True)):
        out["moe_mem_kernels"] = MOE_MEM_KERNELS_TORCHTITAN_DEEPEP
        out["moe_sync_issue_ops"] = MOE_SYNC_ISSUE_OPS_TORCHTITAN_DEEPEP
        out["host_op_s"] = HOST_OP_S_EAGER
    if not execution.torch_compile and titan:
        out.update(a2a_defaults(execution))
    out.update(host_defaults(execution))
    return out


def names_titan(framework: str | None) -> bool:
    """True when the framework text names TorchTitan, not FSDP2 alone: the behaviour its source fixes (the launcher's
    allocator, the default all-to-all MoE path of §11.61) is TorchTitan's, and another FSDP2 trainer (for example
    transformers' loop over experts) runs neither (review15 #3)."""
    return names_in(tokens(framework or ""), "torchtitan")


def a2a_defaults(execution) -> dict:
    """TorchTitan's default expert-parallel path (``moe_dispatcher`` all-to-all) run eager: its counted small kernels,
    the host issue after its blocking sync and its own permutation bytes (docs/model.md §11.61); nothing for
    another dispatcher (unstated: the all-to-all, the column's default). Its callers apply it only to a framework
    that names TorchTitan (:func:`names_titan`)."""
    if MOE_DISPATCHERS.get(execution.moe_dispatcher or "alltoall") != MOE_DISPATCHERS["alltoall"]:
        return {}
    return {"moe_mem_kernels": MOE_MEM_KERNELS_TORCHTITAN_A2A, "moe_sync_issue_ops": MOE_SYNC_ISSUE_OPS_TORCHTITAN_A2A,
            "moe_permute_fwd_bytes": PERMUTE_FWD_BYTES_TORCHTITAN_A2A,
            "moe_permute_bwd_bytes": PERMUTE_BWD_BYTES_TORCHTITAN_A2A,
            "moe_combine_saved_bytes": COMBINE_SAVED_BYTES_TORCHTITAN_A2A, "host_op_s": HOST_OP_S_EAGER}


def eager_defaults(execution) -> dict:
    """A compiled model whose blocks run eager (:func:`eager_blocks`: EP + AC before #1895) issues them as an eager
    model does: the block's count and FSDP2's hooks (docs/model.md §11.59; review 13 finding 5), and its default
    all-to-all MoE path's kernels, sync and bytes (§11.61)."""
    a2a = a2a_defaults(execution) if names_titan(execution.framework) else {}
    return {**a2a, **host_defaults(execution, eager=True)}


#: TorchTitan's pull request that compiles a MoE block's submodules around the graph break instead of the block
#: (pytorch/torchtitan #1895, 2a7a14841 on main, 2025-10-29)
SUBMODULE_COMPILE_PR = "pytorch/torchtitan #1895"


def eager_blocks(execution, expert_parallel: bool) -> str | None:
    """Why a compiled TorchTitan model's blocks run eager: expert parallelism + activation checkpointing.

    Before #1895 ``apply_compile`` compiled each AC-wrapped ``TransformerBlock`` (fullgraph=False for MoE
    blocks; torchtitan/models/llama4/infra/parallelize.py at 022f885f34, lines 540-549, called after ``apply_ac``
    in models/qwen3/infra/parallelize.py lines 111-123), and with ep > 1 ``apply_fsdp`` wraps
    ``block.moe.experts`` in its own FSDP unit (same llama4 file, line 349), whose hooks break the graph, as
    do the EP dispatch's host reads (``.tolist()`` in expert_parallel.py; DeepEP's ``buffer.dispatch``
    returning a Python list). "When you AC(Compile(block)) or Compile(AC(block)) and there is a graph break in
    block, we fall back the entire block to eager" (#1895's description). Code from #1895 on compiles the
    submodules instead; a record of it states ``fused_kernels``. The loss is compiled on its own (no break).
    """
    if execution.recompute == "none" or not expert_parallel:
        return None
    return (f"TorchTitan before {SUBMODULE_COMPILE_PR}: expert parallelism + activation checkpointing make "
            "torch.compile run each AC-wrapped MoE block eagerly (fused_kernels false)")


def unknown_vp(pp: int, layers: int) -> tuple[int, str]:
    return 2, ("2 virtual stages per rank: TorchTitan's default for multi-stage (interleaved) schedules when "
               "no split is given (torchtitan/distributed/pipeline.py, generate_split_points, 2025-04)")


PROFILE = StackProfile(
    name="torchtitan",
    title="TorchTitan / FSDP2",
    names=("torchtitan", "fsdp2"),
    source="pytorch/pytorch RFC #114299 (FSDP2); torchtitan/distributed/pipeline.py",
    defaults=defaults,
    unknown_vp=unknown_vp,
    eager_blocks=eager_blocks,
    eager_defaults=eager_defaults,
)
