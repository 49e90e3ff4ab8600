"""Megatron-Core, Megatron-LM and what is built on them (NeMo, Megatron-Bridge): stack ``megatron-core``.

Defaults: the registry's -- FlashAttention through Transformer Engine, fused element-wise kernels (bias-GeLU,
bias-dropout-add, RMSNorm/LayerNorm, rotary), Megatron's selective recompute (the attention core), and the
distributed optimizer's gradient reduce-scatter and parameter all-gather overlapped with the backward and
forward passes.

The overlap switches differ by launcher. NeMo's recipes, Megatron-Bridge and the MLPerf submissions pass
``overlap_grad_reduce`` / ``overlap_param_gather`` on (the registry defaults). A run launched through
Megatron-LM's own ``pretrain_gpt.py`` takes Megatron-LM's argument defaults: ``--overlap-grad-reduce`` and
``--overlap-param-gather`` are ``store_true`` flags, off unless passed (``megatron/training/arguments.py``,
``_add_distributed_args``), so the distributed optimizer's gradient reduce-scatter runs after the last
backward pass and its parameter all-gather after the optimizer step, both on the critical path. A framework
text naming ``megatron-lm`` (and not NeMo or Megatron-Bridge, which launch it with their recipes) reads as
that launcher (``launcher_defaults``); a record stating the switches keeps its own. That launcher also runs
Megatron-Core's unfused vocab-parallel cross-entropy and Megatron-LM's ``train_step``, whose memory passes around
the loss and the optimizer step are counted from its source (``LOSS_BYTES_UNFUSED_CE``, ``OPTIMIZER_STEP_PASSES``).
"""

from fastmodel.lm.stacks.base import StackProfile, names_in, tokens

#: names of launchers that pass the overlap switches on (NeMo recipes, Megatron-Bridge)
RECIPE_LAUNCHERS = "nemo|nemo-megatron|megatron-bridge"


#: HBM bytes per logit element of Megatron-Core's unfused vocab-parallel cross-entropy, forward and backward
#: (Megatron-LM 23e00ed megatron/core/tensor_parallel/cross_entropy.py; docs/model.md §11.3 "LM loss"): forward
#: cast to FP32 2 + 4, max 4, subtract the max in place 4 + 4, exp 4 + 4, sum 4, divide in place 4 + 4 (38);
#: backward scale by the loss gradient in place 4 + 4, autograd's cast back to the 16-bit logits' dtype 4 + 2 (14)
LOSS_BYTES_UNFUSED_CE = 38.0 + 14.0

#: the optimizer step's passes around the optimizer kernel (Megatron-LM 23e00ed; docs/model.md §11.7 "Optimizer
#: step"): the gradient norm reads the local FP32 gradient shard once (optimizer/clip_grads.py get_grad_norm_fp32,
#: multi_tensor_l2norm), the distributed optimizer copies the FP32 master shard into the 16-bit parameters in a
#: kernel of its own (distrib_optimizer.py _copy_main_params_to_model_params), and each step zeroes the stage's
#: whole gradient buffer (training.py train_step -> distributed/param_and_grad_buffer.py reset, grad_data.zero_());
#: before the data-parallel reduction ``start_grad_sync`` reads that whole buffer for the NaN check of each bucket's
#: norm (param_and_grad_buffer.py check_grads, lines 176-204, 336-340; training.py line 927 passes
#: --check-for-nan-in-loss-and-grad, on by default, arguments.py line 1790) and scales it in place by 1/(dp cp)
#: (lines 345-346; distributed_data_parallel.py lines 364-371: dense and expert buffers, average_in_collective off)
#: (and, beside them, ``embedding_dense_grad``: the word embedding's dense gradient added into main_grad every
#: micro-batch, tensor_parallel/layers.py line 281 F.embedding, distributed_data_parallel.py line 523)
OPTIMIZER_STEP_PASSES = {"step_grad_passes": 1.0, "step_master_copy": True, "step_zero_grad": True,
                         "step_grad_check": True, "step_grad_prescale": True}


#: Megatron-LM's own launcher at the records' commit (23e00ed) runs Megatron-Core's optimizer (TE FusedAdam under the
#: distributed optimizer, --clip-grad 1.0 by default: the norm's .item() then per-tensor host loops) and, without
#: virtual stages, batched exchanges each ended by torch.cuda.synchronize() (docs/model.md §11.64)
HOST_SYNCS = {"step_host_loops": True, "p2p_host_sync": 1.0}
#: the commit HOST_SYNCS were read at (with TransformerEngine v2.11, c188b533): set only for a framework text naming
#: it (review17 F7). Megatron-LM of another version (e.g. v0.5 under Apex's FusedAdam, no TE) or no version stated:
#: not set -- its optimizer's loops and its exchanges' syncs were not read (docs/model.md §11.64 "Which stacks")
HOST_SYNCS_COMMIT = "23e00ed"


def launcher_defaults(framework: str | None) -> dict:
    """The switches of the launcher the framework text names: Megatron-LM's own arguments and training loop when
    it names ``megatron-lm`` and no recipe launcher -- overlap switches off, the unfused cross-entropy
    (``--cross-entropy-loss-fusion`` is a ``store_true`` flag, off unless passed) and the optimizer step's passes
    of its ``train_step`` and Megatron-Core optimizer (``OPTIMIZER_STEP_PASSES``), and, at the commit they were
    read at (``HOST_SYNCS_COMMIT``), its host syncs (``HOST_SYNCS``) -- else nothing (the registry's:
    overlap on, the generic loss count, no passes counted: recipe launchers run their own training loop and may
    configure another optimizer, e.g. NeMo 1.x's ``distributed_fused_adam`` from Apex, not counted here)."""
    text = tokens(framework or "")
    if names_in(text, "megatron-lm") and not names_in(text, RECIPE_LAUNCHERS):
        return {"overlap_grad_reduce": False, "overlap_param_gather": False,
                "loss_traffic_bytes_per_logit": LOSS_BYTES_UNFUSED_CE, **OPTIMIZER_STEP_PASSES,
                "embedding_dense_grad": True, **(HOST_SYNCS if names_in(text, HOST_SYNCS_COMMIT) else {})}
    return {}


#: BRIDGE_ALLOCATOR: Megatron-Bridge's performance launcher runs every recipe with
#: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (NVIDIA-NeMo/Megatron-Bridge@b7b4e11b
#: scripts/performance/utils/executors.py line 48, PERF_ENV_VARS, since 6f24c71f3 of 2026-05-12) and drops it for
#: user-buffer NCCL and for Llama under Megatron-FSDP (perf_plugins.py lines 314-319): the profile sets
#: ``allocator_expandable_segments`` for a text naming megatron-bridge unless ``sharding = "fsdp"`` (it cannot see
#: the model family, so DeepSeek-V3's FSDP plans, which keep the option, take the default allocator's cache)

#: small memory-bound CUDA kernels one MoE layer forward launches besides its GEMMs, flash attention and NCCL
#: collectives: Megatron-LM 23e00ed (megatron/core/transformer/moe/router.py, moe_utils.py, token_dispatcher.py,
#: moe_layer.py) with TransformerEngine 2.11 fused permutation (transformer_engine/pytorch/triton/permutation.py),
#: counted op by op in docs/model.md §11.14 "Router and dispatcher kernels" for the options of the B200 runs
#: (pre-softmax top-k with group-limited routing, sequence auxiliary loss, capacity padding, alltoall dispatcher):
#: router 19, capacity padding 5, auxiliary-loss scores 6, sequence auxiliary loss 8, dispatcher 10
MOE_MEM_KERNELS_MEGATRON_CORE = 48.0

#: Transformer Engine's Userbuffers communicators under ``tp_comm_overlap``: 12 from TE 2.7 on (ring exchange 4,
#: pipeline 2, bulk 4, external 2: TE@d64bc14d, Megatron-Bridge's, transformer_engine/pytorch/module/base.py lines
#: 288-298; the external wgrad overlaps came with 077e26c31 of TE 2.7); a record of an older TE states its own
#: (``ub_communicators`` 10: TE 09ba842 and v1.6rc1, the MLPerf v3.1 and v4.0 submissions)
UB_COMMUNICATORS_TE = 12.0


def defaults(execution, framework: str | None) -> dict:
    """The launcher's overlap switches (``launcher_defaults``), Megatron-Core's counted MoE router and
    dispatcher kernels (unfused router, ``--moe-router-fusion`` off), and its router probabilities applied in the
    expert activation (``moe_probs_in_experts``: TEGroupedMLP's weighted SwiGLU scales by ``permuted_probs`` and
    every dispatcher unpermutes without probabilities, Megatron-LM d98e8a6 megatron/core/transformer/moe/
    experts.py ``bias_act_func``, token_dispatcher.py ``unpermute`` calls), and its weight gradients accumulated
    inside the GEMM into the main gradient buffer (``wgrad_fused_accumulation``: Megatron-LM 23e00ed
    megatron/training/arguments.py ``--no-gradient-accumulation-fusion`` is ``store_false``, so fusion is on by
    default; megatron/core/extensions/transformer_engine.py passes ``fuse_wgrad_accumulation`` to TE's Linear and
    GroupedLinear), and Transformer Engine's Userbuffers under ``tp_comm_overlap`` (``ub_communicators``,
    ``UB_COMMUNICATORS_TE``: Megatron-Core's TP overlap is TE's; kernels/lm/memory.py ``userbuffer_bytes``), with
    ``ub_ring_exchange_rs`` left at 0, FP8 too: a plan that names no userbuffers config runs TE's ``initialize_ub``
    defaults, proj_fprop and fc2_fprop pipelined (TE@d64bc14d base.py lines 288-298; Megatron-Bridge's
    ``CommOverlapConfig.setup`` passes ``tp_comm_overlap_cfg = None`` when none is given, review7 F6); the ring
    exchange of Megatron-Bridge's FP8 Llama configs is the recipe plans' own statement (make_recipe_plans.py).

    Under FSDP (``sharding = "fsdp"``) the launcher's ``overlap_param_gather`` is not applied, so the gather
    stays overlapped and the prefetched unit counted (kernels/lm/memory_fsdp.py ``fsdp_prefetched_units``). Both of
    Megatron-LM's FSDP implementations do so: torch FSDP2 (``--use-torch-fsdp2``) wraps each transformer layer
    with ``fully_shard`` and sets its backward prefetch itself, reading no such switch (Megatron-LM 00caa53
    megatron/core/distributed/torch_fully_sharded_data_parallel.py ``set_modules_to_backward_prefetch``, line 141
    at d98e8a6); Megatron-FSDP (``--use-megatron-fsdp``) reads it but sets it true itself when fully sharding,
    ``optim_grads_params``, the default of ``--data-parallel-sharding-strategy`` (d98e8a6
    megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py lines 328-330, "Default to overlapped
    parameter gather when fully-sharding"; megatron/training/arguments.py line 3190). The rule reads only
    ``sharding = "fsdp"``: Megatron-FSDP's ``optim`` / ``optim_grads`` strategies (ZeRO-1/2) keep the launcher's
    switch. Under FSDP the DDP buckets' check and pre-scale (``step_grad_check``, ``step_grad_prescale``) do not
    run. fp16 turns the check off only under dynamic loss scaling (Megatron-LM 23e00ed arguments.py lines
    643-652, ``if not args.loss_scale``); no record states ``--loss-scale``, whose default (None) is dynamic, so
    every fp16 run drops it. ``--calculate-per-token-loss`` (no pre-scale) and ``--ddp-average-in-collective``
    (a pre-scale of expert buffers only) are no record fields either: their defaults, off (docs/model.md §11.7)."""
    launcher = launcher_defaults(framework)
    if getattr(execution, "precision", None) == "fp16":     # the default --loss-scale (None): dynamic scaling,
        launcher.pop("step_grad_check", None)               # which turns the check off (arguments.py 643-652)
    if getattr(execution, "sharding", None) == "fsdp":
        launcher.pop("overlap_param_gather", None)
        launcher.pop("step_grad_check", None)      # FSDP reduces no DDP bucket: neither check nor pre-scale
        launcher.pop("step_grad_prescale", None)
        launcher.pop("step_host_loops", None)      # Megatron-FSDP copies whole buffers: its loops were not read
        # the main_grad add (2 b_g B) is DDP's; the dense gradient's zeros and scatter (4 B) are PyTorch's under
        # any wrapper, but FSDP's gradient path was not read: the whole term stays out (docs/model.md §11.43)
        launcher.pop("embedding_dense_grad", None)
    elif names_in(tokens(framework or ""), "megatron-bridge"):
        launcher["allocator_expandable_segments"] = True  # BRIDGE_ALLOCATOR
    return {**launcher, "moe_mem_kernels": MOE_MEM_KERNELS_MEGATRON_CORE,
            "moe_probs_in_experts": True, "wgrad_fused_accumulation": True, "ub_communicators": UB_COMMUNICATORS_TE}


def unknown_vp(pp: int, layers: int) -> tuple[int, str]:
    """``vp = "unknown"``: 1 where Megatron-Core refuses interleaving, pp 1 (Megatron-LM 23e00ed
    megatron/training/arguments.py lines 536-545: virtual stages assert pipeline_model_parallel_size > 1 with
    p2p overlap, on by default, ``--no-overlap-p2p-communication`` store_false at line 2348, and > 2 without it),
    else the fewest virtual stages, 2."""
    if pp <= 1:
        return 1, ("Megatron-Core interleaves only at pp > 1 (Megatron-LM 23e00ed megatron/training/arguments.py "
                   "lines 536-545, the assert on pipeline_model_parallel_size with virtual stages)")
    return 2, "2 virtual stages per rank, the fewest an interleaved schedule has (an assumption: the framework sets no default)"


PROFILE = StackProfile(
    name="megatron-core",
    title="Megatron-Core / NeMo",
    names=("megatron-core", "mcore", "megatron-lm", "megatron", "nemo", "nemo-megatron", "megatron-bridge"),
    source="registry defaults (fastmodel/registry/lm.py); Megatron-LM's own launcher: overlap switches off "
           "(megatron/training/arguments.py, --overlap-grad-reduce / --overlap-param-gather store_true), unfused "
           "cross-entropy and optimizer-step passes counted from Megatron-LM 23e00ed; MoE router "
           "and dispatcher kernels counted from Megatron-LM 23e00ed; vp: 23e00ed megatron/training/arguments.py "
           "lines 536-545",
    defaults=defaults,
    unknown_vp=unknown_vp,
)
