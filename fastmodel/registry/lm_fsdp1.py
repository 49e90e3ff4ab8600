"""Plan columns of PyTorch FSDP1's prefetch and rate-limiter arguments: ``backward_prefetch`` (which units are
gathered at the backward's peak, and whether the forward's gathers still overlap without it),
``limit_all_gathers`` (how far the CPU may issue all-gathers ahead of the GPU's frees), and whether FSDP units sit
inside the activation-checkpointed block (``fsdp_units_in_checkpoint``: the recompute gathers them again).

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays under the line cap. docs/model_memory.md "PyTorch FSDP1: prefetch and the rate limiter" gives
the equations and their sources (pytorch/pytorch@00ae0bc9 torch/distributed/fsdp/_runtime_utils.py ``_unshard``,
``_reshard``, ``_pre_backward_hook``, ``_post_backward_hook``, ``_get_handles_to_prefetch``; api.py
``BackwardPrefetch``); kernels/lm/memory_fsdp.py ``fsdp_prefetched_units`` and ``fsdp_run_ahead_bytes`` and
kernels/lm/parallel.py ``fsdp_layer_exposed`` read them.
"""

from __future__ import annotations

from fastmodel.registry.validators import Forbidden

#: FSDP1 ``BackwardPrefetch``: ``pre`` (BACKWARD_PRE, the default since PyTorch 2.0), ``post`` (BACKWARD_POST),
#: ``none`` (``backward_prefetch=None``, PyTorch 1.x's default and Accelerate's)
FSDP_BACKWARD_PREFETCH = {"pre": 0, "post": 1, "none": 2}

#: ``fsdp_version`` codes: 0 no PyTorch FSDP, 1 FSDP1 (``FullyShardedDataParallel``), 2 FSDP2 (``fully_shard``)
FSDP_NONE, FSDP1, FSDP2 = 0.0, 1.0, 2.0
#: whole codes only: a value between two codes (1.5) is refused as 3 is
FSDP_VERSION_GAPS = tuple(Forbidden(lo, lo + 1.0, "is not a code of fsdp_version: 0, 1 or 2") for lo in (0.0, 1.0))

FSDP1_PLAN_ROWS = (
    ("fsdp_version", "code", 0, "The PyTorch FSDP the stack runs under FSDP or HSDP sharding: 1, FSDP1 "
     "(torch.distributed.fsdp.FullyShardedDataParallel: flat parameters, views of the all-gather output; "
     "pytorch-fsdp, fms-fsdp, composer, accelerate); 2, FSDP2 (fully_shard: per-parameter DTensor shards, copied "
     "out of the all-gather buffer; torchtitan, kempnerforge); 0, none stated (DDP or ZeRO under DeepSpeed, "
     "Megatron's distributed optimizer, JAX; Meta's internal stack, whose paper names no FSDP version). The "
     "kernels read 1 where they price what FSDP1 alone does: the FP32 flat shard and its casts "
     "(shape.fsdp1_fp32_shards, docs/model.md §11.63), the flat-gradient copy and the run-ahead without the rate "
     "limiter (memory_fsdp), the root unit (fsdp1_root, §11.26); fsdp1_grad_passes counts the gradient passes "
     "alone. Set by the stack.", 0, 2, False, "number", FSDP_VERSION_GAPS),
    ("fsdp_backward_prefetch", "code", 0, "FSDP1 backward_prefetch (FSDP_BACKWARD_PREFETCH): pre (BACKWARD_PRE: the "
     "next unit is gathered in the current unit's pre-backward hook, so the current and the next unit are both "
     "gathered at the backward's peak, with overlap_param_gather); post (BACKWARD_POST: gathered in the current "
     "unit's post-backward hook after it is resharded, one unit gathered at a time; the all-gather is still issued "
     "before the current reduce-scatter, so the time is pre's); none (no backward prefetch: each unit gathered in its "
     "own pre-backward hook, behind the previous reduce-scatter; the forward's gathers still overlap, the CPU issuing "
     "them ahead of the GPU). docs/model_memory.md 'PyTorch FSDP1: prefetch and the rate limiter'. Set by the stack.",
     0, 2, False, "code"),
    ("fsdp_limit_all_gathers", "1", 1, "FSDP1 limit_all_gathers (the rate limiter): 1, the CPU waits for the free "
     "event of the unit before last before it issues an all-gather (_FreeEventQueue, two in flight); 0, no wait, so "
     "every all-gather and unsharded gradient of the step may be issued before the GPU frees any (their blocks, "
     "freed with record_stream, stay in reserved, not in allocated): memory_reserved rises by up to m (2 c + g) "
     "times the stage's parameters, at most to the HBM less overhead, where the caching allocator synchronizes and "
     "releases them (cudaMalloc retries, not timed). Allocated memory and what fits are the same either way. Default "
     "true since PyTorch 2.1, absent before 1.13. Set by the stack.", 0, 1, False, "flag"),
    ("fsdp_units_in_checkpoint", "1", 0, "FSDP units inside the activation-checkpointed region (the checkpoint wraps "
     "FSDP-wrapped submodules, as mrshenli/ptd_benchmark's FSDP(checkpoint_wrapper(Block)) with each module of the "
     "Block its own unit): 1, the recomputed forward runs those units' forward again, which all-gathers their "
     "resharded parameters a third time per step (forward, recompute, backward; reshard_after_forward), on the "
     "NCCL stream beside the recompute; 0, the checkpoint sits inside the FSDP unit (FSDP1 "
     "apply_activation_checkpointing on a wrapped model, FSDP2 fully_shard(checkpoint_wrapper(block))): the "
     "backward's gather serves the recompute. docs/model_memory.md 'PyTorch FSDP1: the recompute's re-gather'. "
     "0 for every stack; a record states 1.", 0, 1, False, "flag"),
)
