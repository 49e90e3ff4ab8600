"""Megatron-LM of 2021-22 and Megatron-DeepSpeed: stack ``megatron-2021``.

The Megatron papers' runs (Narayanan et al. 2021; Korthikanti et al. 2022) and Microsoft's Megatron-DeepSpeed
fork predate FlashAttention (2022) and Megatron's overlapped gradient reduction (2023): attention is unfused
(the s x s scores go through HBM), GPT-3-style dropout is on, and gradients are reduced (and distributed-
optimizer parameters gathered) after the backward pass, not overlapped with it. ZeRO-3 (``sharding = "fsdp"``)
in these codebases is DeepSpeed's, with DeepSpeed's communication defaults (``stacks.deepspeed``).

Named by ``megatron-deepspeed``, or explicitly (a record's top-level ``stack``): a ``framework`` text of
"Megatron-LM" alone reads as today's Megatron-Core, so the 2021-22 papers' records name this stack.
"""

from fastmodel.lm.stacks import deepspeed
from fastmodel.lm.stacks.base import StackProfile, names_in, tokens
from fastmodel.lm.stacks.megatron_core import LOSS_BYTES_UNFUSED_CE
from fastmodel.registry.lm import MOE_DISPATCHERS
from fastmodel.registry.lm_pipeline import EXCHANGE_BLOCKING, EXCHANGE_SCATTER_GATHER

#: PyTorch dispatcher calls per transformer layer forward pass of Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed
#: f01c9e6e, 2023-06-30: megatron/model/transformer.py ParallelTransformerLayer.forward, ParallelAttention.forward,
#: ParallelMLP.forward; megatron/mpu/layers.py; megatron/mpu/random.py CheckpointFunction and the RNG tracker's
#: fork), counted op by op in docs/model.md "Host issue time": 60, of which 4 are the two scalar tensors
#: ``torch.tensor(0.0, device=...)`` its MoE support creates in every layer; Megatron-LM of 2021-22 has no such
#: lines: 56
HOST_OPS_LAYER_MEGATRON_DEEPSPEED = 60.0
HOST_OPS_LAYER_MEGATRON_2021 = 56.0
#: host seconds per eager PyTorch operator (Python, pybind11, autograd recording, dispatcher, cuBLAS/launch):
#: 20 us, within the 5-25 us CPU-side cost per op of the PyTorch dispatch chain (docs/model.md "Host issue time"
#: gives the source and the sensitivity) [A]
HOST_OP_S_EAGER = 20e-6


def host_defaults(framework: str | None) -> dict:
    """Host issue time of the stack: operators per layer forward and seconds per operator (eager PyTorch); and the
    pipeline exchanges of that code (``pp_exchange_2021``, docs/model.md §11.52): blocking with a device
    synchronize in Megatron-LM 2021-22 and in Megatron-DeepSpeed alike; the TP scatter-gather of the sent tensors
    for Megatron-LM (de7dc40f88 ``arguments.py`` lines 585-587, on by default), not for a Megatron-DeepSpeed text,
    whose fork ran it in its 2021-22 ``megatron/p2p_communication.py`` but not in the Megatron-Core schedules it
    later calls (71e8407c ``megatron/core/pipeline_parallel/p2p_communication.py``), the commit unstated [A].
    A pipeline DeepSpeed's engine runs keeps DeepSpeed's sends (``pp_engine_deepspeed`` comes first)."""
    deepspeed_fork = framework is not None and names_in(tokens(framework), "megatron-deepspeed") is not None
    ops = HOST_OPS_LAYER_MEGATRON_DEEPSPEED if deepspeed_fork else HOST_OPS_LAYER_MEGATRON_2021
    return {"host_ops_layer": ops, "host_op_s": HOST_OP_S_EAGER,
            "pp_exchange_2021": EXCHANGE_BLOCKING if deepspeed_fork else EXCHANGE_SCATTER_GATHER}


#: Small kernels of one MoE layer forward of MegaBlocks' expert-parallel path (stanford-futuredata/megablocks
#: 1647a0e, megablocks/layers/moe.py ``MoE.forward`` and ``parallel_forward_once``, megablocks/layers/dmoe.py
#: ``permute_and_compute`` and ``topology``; top-1, no jitter), GEMMs (router, SDD, DSD), the expert GeLU and NCCL
#: excluded: router 2, token sort and bins 5, first padded gather 3, counts to the host 2, second permutation's
#: set-up 8, padding and second padded gather 7, block-sparse topology 12, two padded scatters 2, combine weight 1
#: (docs/model.md §11.14.8, table "moe-kernels-megablocks")
MOE_MEM_KERNELS_MEGABLOCKS = 42.0

#: Operators the host issues onto an idle GPU after the four blocking syncs of one MoE layer forward on the same
#: path: 3 after the first ``padded_gather``'s copy of its row count to pageable host memory, 2 after
#: ``tokens_per_expert.cpu()``, 12 after ``parallel_tokens_per_expert.cpu()`` up to the token all-to-all, 14 after
#: the second ``padded_gather``'s copy up to the SDD product (docs/model.md §11.14.8, table "moe-sync-ops-megablocks")
MOE_SYNC_ISSUE_OPS_MEGABLOCKS = 31.0


def megablocks_defaults(framework: str | None) -> dict:
    """MegaBlocks' MoE layer (its framework text names ``megablocks``): its counted small kernels and host-sync
    issue operators per MoE layer forward (docs/model.md §11.14.8); else nothing. The counts are those of the
    expert-parallel path (``--expert-model-parallelism``, every MegaBlocks script and record); a plan with ep = 1
    runs ``dMoE.forward_once``, which has fewer, and still gets these [A] (``defaults`` is not given the mesh)."""
    if framework is None or names_in(tokens(framework), "megablocks") is None:
        return {}
    return {"moe_mem_kernels": MOE_MEM_KERNELS_MEGABLOCKS, "moe_sync_issue_ops": MOE_SYNC_ISSUE_OPS_MEGABLOCKS}


#: Operators the host issues onto an idle GPU after DeepSpeed-MoE's one blocking sync per MoE layer forward
#: (v0.5.8 deepspeed/moe/sharded_moe.py ``top1gating`` line 182, ``exp_counts ... .to('cpu')``), up to the
#: ``se,sc->sec`` einsum that writes the S x E x C combine weights: auxiliary loss 6, random token selection 5,
#: capacity top-k 1, mask 3, locations 4, gates 2, one-hot 2, the einsum 1 (Megatron-DeepSpeed 3c666e85 passes
#: neither ``noisy_gate_policy`` nor ``use_rts``: DeepSpeed's defaults None and True; docs/model.md §11.14.8)
MOE_SYNC_ISSUE_OPS_DEEPSPEED_MOE = 24.0


def deepspeed_moe_defaults(execution) -> dict:
    """DeepSpeed-MoE's GShard dispatch (``moe_dispatcher = "einsum"``, the v0.5.8 path): the operators issued
    after its gating's host sync (docs/model.md §11.14.8); else nothing."""
    if MOE_DISPATCHERS.get(execution.moe_dispatcher) != MOE_DISPATCHERS["einsum"]:
        return {}
    return {"moe_sync_issue_ops": MOE_SYNC_ISSUE_OPS_DEEPSPEED_MOE}


#: Optimizer-step passes of the fork's ``Float16OptimizerWithFloat16Params.step`` under fp16 (stanford-futuredata/
#: Megatron-LM 0bdc8181 megatron/optimizer/optimizer.py lines 424-467, 616-651), in bytes per parameter beyond the
#: Adam kernel's own traffic (``step.optimizer_bytes_per_param``, which reads a 2-B gradient here):
#: ``main_grad.float()`` reads 2 and writes 4, ``_amp_foreach_non_finite_check_and_unscale_`` reads and writes the
#: FP32 copy (8), the clip's L2 norm reads it (4), Adam reads it at 4 B, not 2 (+2): 20 B = 10 passes of the 2-B
#: gradient; ``_copy_main_params_to_model_params`` rereads the FP32 master (``step_master_copy``); the step zeroes
#: the fp16 gradient buffer (``zero_grad_buffer``) (docs/model.md §11.14.9)
FORK_FP16_STEP_PASSES = {"step_grad_passes": 10.0, "step_master_copy": True, "step_zero_grad": True}

#: The FP32 gradient copy that step allocates (same commit, optimizer.py line 622 ``main_param.grad =
#: model_param.main_grad.float()``; line 625 ``model_param.grad.float()`` for the experts, whose fp16 ``.grad`` line
#: 630 then frees): 4 B per local parameter, held until ``zero_grad(set_to_none=True)`` (lines 574-585) at the start
#: of the next ``train_step`` (megatron/training.py line 412), an optimizer transient (docs/model_memory.md)
FORK_FP16_GRAD_COPY_BYTES = 4.0


def fork_fp16_defaults(execution, framework: str | None) -> dict:
    """The gradient path of MegaBlocks' Megatron-LM fork (a framework text naming ``stanford-futuredata``, read at
    0bdc8181) under fp16 with local DDP: fp16 does not force ``--accumulate-allreduce-grads-in-fp32`` (bf16 does,
    megatron/arguments.py lines 164-170), so gradient-accumulation fusion is switched off (lines 179-191), the
    contiguous gradient buffer takes the parameters' fp16 dtype (megatron/model/distributed.py
    ``_get_buffer_type``) and is all-reduced in fp16 (``allreduce_gradients``); each micro-batch's hook adds the
    fp16 ``.grad`` into it (``param_hook``, ``main_grad.add_``), and expert-parallel weights, kept out of the
    buffer (``param_is_expert_model_parallel``), are accumulated in place by autograd: 6 B per parameter and
    micro-batch either way (``deepspeed.INPLACE_16BIT_ACCUM_BYTES``); the optimizer step's passes are
    ``FORK_FP16_STEP_PASSES``, its FP32 gradient copy ``FORK_FP16_GRAD_COPY_BYTES`` (docs/model.md §11.14.9).
    Else nothing."""
    if framework is None or names_in(tokens(framework), "stanford-futuredata") is None:
        return {}
    if execution.precision != "fp16" or execution.sharding != "ddp":
        return {}
    return {"grad_reduce_dtype": "fp16", "grad_accum_bytes": deepspeed.INPLACE_16BIT_ACCUM_BYTES,
            "step_grad_copy_bytes": FORK_FP16_GRAD_COPY_BYTES, **FORK_FP16_STEP_PASSES}


#: Optimizer-step passes of Megatron-LM's ``Float16OptimizerWithFloat16Params.step`` under fp16 without contiguous
#: gradient buffers (NVIDIA/Megatron-LM de7dc40f88, the SC21 scripts' commit; the scripts pass no
#: ``--use-contiguous-buffers-in-ddp``, arguments.py line 582 ``store_true``), in bytes per parameter beyond the Adam
#: kernel's own count (which reads a 2-B gradient here): the fork's 20 B (``FORK_FP16_STEP_PASSES``, the same
#: optimizer.py lines 303-336 and 377-420: ``main_grad.float()`` 2 + 4, unscale 4 + 4, the clip's norm 4, Adam at
#: 4 B not 2, +2) and the bucketed all-reduce's ``_flatten_dense_tensors`` 2 + 2, ``coalesced /=`` 2 + 2 and copy
#: back 2 + 2 (distributed.py lines 197-218): 32 B = 16 passes of the 2-B gradient; the FP32 master is reread
#: (``_copy_main_params_to_model_params``); ``zero_grad(set_to_none=True)`` writes nothing (training.py lines 353-358)
LOCAL_DDP_FP16_STEP_PASSES = {"step_grad_passes": 16.0, "step_master_copy": True}

#: The same step with the contiguous gradient buffer, the local DDP's default in Megatron-LM from e8fb052f81
#: (2021-08-18, "made contiguous buffer in local ddp default": arguments.py line 582, distributed.py line 193) and in
#: Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed 71e8407c megatron/arguments.py lines 1121-1124, ``--no-contiguous-
#: buffers-in-local-ddp`` ``store_false``): the fork's passes and zeroing (``FORK_FP16_STEP_PASSES``; ``zero_grad_buffer``,
#: training.py line 676) and the buffer's in-place ``/= dp`` before the all-reduce (distributed.py line 207,
#: ``step_grad_prescale``)
BUFFER_DDP_FP16_STEP_PASSES = {**FORK_FP16_STEP_PASSES, "step_grad_prescale": True}


def local_ddp_gradient_path(execution, framework: str | None) -> dict:
    """The gradient path of Megatron's own data parallelism (local DDP) in Megatron-LM of 2021-22 and
    Megatron-DeepSpeed without gradient-accumulation fusion (docs/model.md §11.49). The fusion landed in
    Megatron-LM 83b1e42f30 (2022-02): a run with it states ``wgrad_fused_accumulation`` (the Korthikanti 2022
    records) and gets nothing here. Unfused, by the record's precision:

    - fp16: ``--accumulate-allreduce-grads-in-fp32`` is opt-in (de7dc40f88 megatron/arguments.py line 553; bf16
      alone forces it, lines 136-146), so the gradients keep the parameters' fp16 and are all-reduced in fp16
      (distributed.py lines 128-130 and 188-218): ``grad_reduce_dtype`` fp16. Each micro-batch adds its gradient
      to the stored one in 16 bits: by autograd in place without a buffer (``optimizer.zero_grad`` sets ``.grad``
      to None once a step, training.py lines 353-358) or by the hook into the fp16 buffer (lines 171-176): read
      2 + 2, write 2 (``deepspeed.INPLACE_16BIT_ACCUM_BYTES``). The step: with the contiguous gradient buffer,
      the default of Megatron-LM from e8fb052f81 (2021-08-18, ``--no-contiguous-buffers-in-local-ddp``
      ``store_false``) and of Megatron-DeepSpeed, ``BUFFER_DDP_FP16_STEP_PASSES``; without one,
      ``LOCAL_DDP_FP16_STEP_PASSES``, only for a plan that states ``step_zero_grad = false``: Megatron's
      ``train_step`` zeroes the buffer every step exactly when there is one (training.py lines 354-358 at
      de7dc40f88, 354-357 at e8fb052f81: ``if args.DDP_impl == 'local' and`` the buffer flag), so a run
      stating that no step zeroes it states that it has none (the SC21 scripts, which pass no
      ``--use-contiguous-buffers-in-ddp``; ``--DDP-impl torch``); no framework text selects either. Its FP32
      gradient copy ``FORK_FP16_GRAD_COPY_BYTES``;
    - bf16: nothing here. Megatron-LM of 2021 adds into an FP32 buffer (2 + 4 + 4 B, the hook above), but the
      text cannot tell 2021 from 2022, when bf16 keeps the fusion on (as in the MegaBlocks fork), and no record
      runs the 2021 code in bf16 (the SC21 scripts pass ``--fp16``).

    ZeRO-3 (``fsdp``) is DeepSpeed's and keeps DeepSpeed's path; so do the Megatron-DeepSpeed runs whose
    DeepSpeed gradient path is read (ZeRO-1, ZeRO stage 0: ``defaults`` drops this for them). {} else."""
    if getattr(execution, "sharding", None) not in ("ddp", "distopt") or getattr(
            execution, "wgrad_fused_accumulation", None) or getattr(execution, "precision", None) != "fp16":
        return {}
    buffered = getattr(execution, "step_zero_grad", None) is not False
    return {"grad_reduce_dtype": "fp16", "grad_accum_bytes": deepspeed.INPLACE_16BIT_ACCUM_BYTES,
            "step_grad_copy_bytes": FORK_FP16_GRAD_COPY_BYTES,
            **(BUFFER_DDP_FP16_STEP_PASSES if buffered else LOCAL_DDP_FP16_STEP_PASSES)}


#: the DeepSpeed release a Megatron-DeepSpeed text stating none is read at: v0.6.2, the first with BF16_Optimizer,
#: written for BigScience's bf16 pipeline training (PR #1801) [A: the fork pins no version]
DEEPSPEED_ERA = (0, 6, 2)


def defaults(execution, framework: str | None) -> dict:
    # the loss: Megatron-LM of 2021-22 runs the same unfused vocab-parallel cross-entropy as Megatron-Core, on
    # output.float() (NVIDIA/Megatron-LM aed2f75 2021-04-11 and 55ba1f7 2022-05-26: megatron/model/gpt_model.py
    # post_language_model_processing, megatron/mpu/cross_entropy.py max, sub_, exp, sum, div_; backward mul_)
    # Megatron's own fp16 gradient path (the fork's or local DDP's), computed once: under DeepSpeed's engine the
    # keys of the one merged are dropped, whichever it was
    own = fork_fp16_defaults(execution, framework) or local_ddp_gradient_path(execution, framework)
    # a DDP that overlaps its reduction is --DDP-impl torch, with its bucket copies (de7dc40f88 training.py lines
    # 246-251: torchDDP(model_module, device_ids, output_device, process_group), gradient_as_bucket_view False)
    values = {"dropout": True, "flash_attention": False, "overlap_grad_reduce": False, "ddp_bucket_copy": True,
              "overlap_param_gather": False, "loss_traffic_bytes_per_logit": LOSS_BYTES_UNFUSED_CE,
              **host_defaults(framework), **megablocks_defaults(framework), **deepspeed_moe_defaults(execution),
              **own}
    if execution.sharding == "fsdp":
        # ZeRO-3 exists in these codebases only through DeepSpeed: its communication defaults are DeepSpeed's
        values.update(deepspeed.defaults(execution, framework))
    elif framework is not None and names_in(tokens(framework), "megatron-deepspeed"):
        # Megatron-DeepSpeed shards optimizer states only through DeepSpeed's engine (ZeRO-1 or BF16_Optimizer):
        # its gradient accumulation and reduction are DeepSpeed's (stacks.deepspeed.gradient_path)
        path = deepspeed.gradient_path(execution, framework, DEEPSPEED_ERA)
        # with DeepSpeed's engine in use (a path was read), pretrain_gpt.py builds GPTModelPipe, so DeepSpeed's
        # PipelineEngine runs the pipeline (docs/model.md §11.31); a text naming no ZeRO stage and no ZeRO-1
        # sharding (the vTrain runs' ddp) may be Megatron's own schedule, and keeps it
        if path:    # DeepSpeed's engine owns the gradients: Megatron's local DDP path does not run
            for key in own:
                values.pop(key, None)
        values.update(path, **({"pp_engine_deepspeed": True} if path else {}))
    return values


def unknown_vp(pp: int, layers: int) -> tuple[int, str]:
    """``vp = "unknown"``: 1 where Megatron-LM 2021 refuses interleaving, pp <= 2 (NVIDIA/Megatron-LM de7dc40f88
    megatron/arguments.py lines 118-121: ``assert args.pipeline_model_parallel_size > 2`` with
    ``num_layers_per_virtual_pipeline_stage``), else the fewest virtual stages, 2."""
    if pp <= 2:
        return 1, ("Megatron-LM 2021 interleaves only at pp > 2 (de7dc40f88 megatron/arguments.py lines 118-121, "
                   "the assert on pipeline_model_parallel_size with virtual stages)")
    return 2, "2 virtual stages per rank, the fewest an interleaved schedule has (an assumption: the framework sets no default)"


PROFILE = StackProfile(
    name="megatron-2021",
    title="Megatron 2021-22 / Megatron-DeepSpeed",
    names=("megatron-deepspeed",),
    source="Narayanan et al. SC21 and Korthikanti et al. 2022 (no FlashAttention, unoverlapped DP); "
           "ZeRO-3: the deepspeed profile's defaults; vp: de7dc40f88 megatron/arguments.py lines 118-121",
    defaults=defaults,
    unknown_vp=unknown_vp,
    parse_notes=deepspeed.stage_notes,
)
