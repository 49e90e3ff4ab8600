"""Plan columns of the passes a stack makes over the gradients around the optimizer step: reads of the local
shard, the master copy, and the passes over the whole gradient buffer the rank holds (zeroing; Megatron-Core's
check and pre-scale before the data-parallel reduction), and the word embedding's dense gradient added into the
main gradient every micro-batch.

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so
the registry module stays under the line cap. docs/model.md §11.7 "Optimizer step" gives the equation,
``kernels/lm/optimizer_step.py`` ``optimizer_step_bytes`` computes it, the stack profiles set the values
(``fastmodel/lm/stacks/megatron_core.py`` ``OPTIMIZER_STEP_PASSES``).
"""

from __future__ import annotations

#: NeMo's FP32 embedding gradients under Apex's distributed Adam (``embedding_fp32_grads``, docs/model.md §11.54)
EMBEDDING_FP32_GRADS = {"none": 0, "allreduce": 1, "sharded": 2}

STEP_PLAN_ROWS = (
    ("step_grad_passes", "1", 0, "Reads of the local gradient shard per optimizer step besides the optimizer "
     "kernel's own (docs/model.md §11.7, optimizer step): 1 for the gradient norm (Megatron-Core "
     "get_grad_norm_fp32; DeepSpeed stage 0 fp16: 25, §11.32). 0: not counted. Set by the stack.", 0, 64, False, "number"),
    ("step_master_copy", "1", 0, "1: a separate kernel reads the FP32 master shard again to write the 16-bit "
     "parameters after the optimizer kernel (Megatron distributed optimizer _copy_main_params_to_model_params); "
     "the 16-bit write is in the optimizer count either way.", 0, 1, False, "flag"),
    ("step_zero_grad", "1", 0, "1: every step writes zeros over the whole gradient buffer the rank holds (Megatron "
     "DDP zero_grad_buffer: the stage's buffer, not the optimizer's shard).", 0, 1, False, "flag"),
    ("step_grad_check", "1", 0, "1: before the data-parallel reduction every step reads the whole gradient buffer "
     "the rank holds once, for the NaN / Inf check of each bucket's norm (Megatron-Core param_and_grad_buffer.py "
     "check_grads, grad_data.norm(p=2); Megatron-LM --check-for-nan-in-loss-and-grad, on unless fp16 with dynamic "
     "loss scaling, the default: no record states --loss-scale; docs/model.md §11.7). Set by the stack.", 0, 1, False, "flag"),
    ("step_grad_prescale", "1", 0, "1: with dp x cp > 1 every step scales the whole gradient buffer the rank holds "
     "by 1 / (dp cp) in place before the sum reduction, a read and a write (Megatron-Core DDP "
     "gradient_scaling_factor of dense and expert buffers alike, --ddp-average-in-collective and "
     "--calculate-per-token-loss off, their defaults; docs/model.md §11.7). Set by the stack.", 0, 1, False, "flag"),
    ("embedding_dense_grad", "1", 0, "1: each micro-batch the word embedding's backward writes a dense 16-bit "
     "gradient of the weight's shape (PyTorch embedding_backward_cuda_kernel: at::zeros, then a scatter) that the "
     "DDP hook adds into the main gradient (Megatron-Core _make_backward_post_hook, param.main_grad.add_): "
     "V h / t x (2 + 2 + 2 grad_reduce_bytes) bytes on the embedding's rank, in its backward: with PP 1 the "
     "head's rank, with PP > 1 the first rank (docs/model.md §11.43, the DeepSeek-V2 note; §11.44 item 1d); "
     "a learned position table's s h x (2 + 2 + 2 grad_reduce_bytes) likewise (§11.56). Set by the stack.",
     0, 1, False, "flag"),
    ("embedding_fp32_grads", "code", 0, "EMBEDDING_FP32_GRADS, NeMo's FP32 gradients of the word embedding (its "
     "tied copy on the last stage) and a learned position table under Apex's distributed Adam (_with_fp32_optimizer; "
     "docs/model.md §11.54): 0 none, with the stage's buffer; 1 allreduce, NeMo r1.20 (bd0b818) "
     "MegatronDistributedFusedAdam's own torch AdamW: their FP32 gradient all-reduced over dp before the gradient "
     "norm, the step unsharded on every data-parallel rank; 2 sharded, NeMo 2.0 (b2eccd27): FP32 buckets of the "
     "distributed optimizer, reduce-scattered and gathered with the first chunk's. Either way the tied all-reduce "
     "moves 4 B an element. A record fact (MLPerf GPT-3 v3.1: 1, v4.0: 2).", 0, 2, False, "code"),
    ("step_host_loops", "1", 0, "1: after the gradient norm's .item() the optimizer step walks its parameter "
     "tensors on the host while the GPU idles (Megatron-Core 23e00ed clip_grads.py 133, 159-169; TE v2.11 "
     "FusedAdam's lists, fused_adam.py 538-597; distrib_optimizer.py 2127-2147, the copy into the parameter "
     "buffer, exposed beyond the Adam kernels): kernels/lm/host_syncs.py optimizer_host_s, docs/model.md §11.64. "
     "Set by the stack (Megatron-LM's own launcher).", 0, 1, False, "flag"),
    ("p2p_host_sync", "code", 0, "Pipeline exchanges ended by torch.cuda.synchronize() (Megatron-Core 23e00ed "
     "p2p_communication.py 395-398: batch_p2p_comm, i.e. no overlap_p2p_comm, and batch_p2p_sync), after which "
     "the GPU waits for the host to issue its next kernel (kernels/lm/host_syncs.py exchange_sync_s, docs/model.md "
     "§11.64): 0 none; 1 without virtual stages only (Megatron-LM's defaults: overlap_p2p_comm forced off at vp 1, "
     "on by default otherwise, arguments.py 548, 1165, 2348-2350), set by the stack (Megatron-LM's own launcher); 2 every "
     "exchange, interleaved too (a record stating --no-overlap-p2p-communication).", 0, 2, False, "number"),
)
