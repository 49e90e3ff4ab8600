"""Memory of the real-world LM model: the FSDP units a rank gathers and the gradients it builds for them.

What FSDP holds beside the states while a unit's backward runs (``buffers``): the unit gathered, the one
prefetched, the unsharded gradient before its reduce-scatter (``fsdp_gather_buffer_bytes``), and, under FSDP1's
flat parameters, the per-parameter gradients autograd concatenates into the flat gradient
(``fsdp_flat_grad_copy_bytes``). Moved out of ``memory.py`` (which re-exports them) when the flat-gradient copy
was added (issue 23, docs/model_memory.md "PyTorch FSDP1 on A100 40 GB: measured peaks"). Compiled with
``error_model='numpy'`` (see kernels/lm/memory.py).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.moe import expert_tp
from fastmodel.kernels.lm.layout import (
    BWD_PREFETCH_PRE, C_COLLECTIVE_BUCKET_BYTES, C_DENSE_LAYERS, C_EP, C_FFN, C_FSDP_VERSION,
    C_FSDP_BACKWARD_PREFETCH, C_FSDP_COPY_OUT, C_FSDP_LIMIT_ALL_GATHERS, C_FSDP_MODULE_WRAP, C_GRAD_REDUCE_BYTES,
    C_HIDDEN, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_OVERLAP_PARAM_GATHER, C_SHARDING, C_TP, SHARD_FSDP,
)
from fastmodel.kernels.lm.memory_states import (
    accumulates_unsharded, holds_stage_gathered, is_moe, mlp_params, stage_params,
)
from fastmodel.kernels.lm.parallel import param_bytes
from fastmodel.kernels.lm.pipeline import microbatches
from fastmodel.kernels.lm.shape import attention_params_per_device, largest_attention_matrix, norm_params
from fastmodel.registry.lm_fsdp1 import FSDP1

@njit(error_model='numpy')
def gathered_expert_split(row):
    """Devices the routed experts of a layer are split over when FSDP gathers them, beside the shard group:
    ``ep * etp``; without expert parallelism (``ep = 1``) the routed experts are tensor-parallel over the TP
    group, ``max(tp, etp)`` (TorchTitan ``apply_moe_ep_tp``, torchtitan/models/llama4/infra/parallelize.py:
    no EP mesh -> ``TensorParallel`` on the experts over the TP mesh), so the gathered layer shrinks with TP
    like its dense part."""
    if row[C_EP] <= 1.0:
        return max(row[C_TP], expert_tp(row))
    return row[C_EP] * expert_tp(row)


@njit(error_model='numpy')
def max_layer_params(row):
    """Parameters of the largest layer on one device as FSDP gathers it (before sharding by the shard group):
    attention and dense MLP split over TP, the routed experts over ``gathered_expert_split``."""
    attn = attention_params_per_device(row, row[C_TP]) + norm_params(row)
    dense = attn + mlp_params(row, row[C_FFN]) / row[C_TP]
    if not is_moe(row):
        return dense
    experts = row[C_MOE_EXPERTS] * mlp_params(row, row[C_MOE_FFN]) / gathered_expert_split(row)
    shared = mlp_params(row, row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]) / row[C_TP]
    moe = attn + experts + shared + row[C_HIDDEN] * row[C_MOE_EXPERTS]
    if row[C_DENSE_LAYERS] > 0:
        return max(dense, moe)
    return moe


@njit(error_model='numpy')
def largest_module_params(row):
    """Parameters of the largest single weight matrix on one device: the MLP's ``h x ffn / t``, the attention's
    largest (``shape.largest_attention_matrix``: the fused QKV ``h x (a + 2 kv) d / t``; MLA, which has none, its
    down-, up- or output projection), or one expert's ``h x moe_ffn / etp``."""
    h = row[C_HIDDEN]
    tp = row[C_TP]
    largest = max(h * row[C_FFN] / tp, largest_attention_matrix(row, tp))
    if is_moe(row):
        largest = max(largest, h * row[C_MOE_FFN] / expert_tp(row))
    return largest


@njit(error_model='numpy')
def wrapped_module_params(row):
    """Parameters of the largest FSDP unit on one device when each weight-bearing module of a layer is its own
    unit (``fsdp_module_wrap``): the attention block with all its projections, per TP rank
    (``attention_params_per_device``: MLA's down-projections replicated, docs/model.md §11.44, as in
    :func:`max_layer_params`), one dense MLP matrix ``h f / t``, or one expert's matrix (``largest_module_params``).
    minGPT as the PyTorch FSDP GPT-175B/1T benchmark wraps it (mrshenli/ptd_benchmark@62f8c89 models.py
    ``ShardedGPT``/``Block``: ``wrap`` around the attention module and around each ``nn.Linear`` of the MLP)."""
    return max(attention_params_per_device(row, row[C_TP]), largest_module_params(row))


@njit(error_model='numpy')
def fsdp_prefetched_units(row):
    """FSDP units gathered ahead of the one being computed in the backward: 1 with backward prefetch
    (``overlap_param_gather = 1``) issued before the current unit's gradient computation (FSDP1 ``BACKWARD_PRE``,
    FSDP2's implicit prefetch), 0 without (PyTorch 1.x FSDP and Accelerate, ``backward_prefetch = None``: the next
    unit is gathered in its own pre-backward hook) and under FSDP1 ``BACKWARD_POST`` (``fsdp_backward_prefetch =
    post``: ``_post_backward_hook`` reshards the current unit before ``_prefetch_handles`` gathers the next,
    pytorch/pytorch@00ae0bc9 torch/distributed/fsdp/_runtime_utils.py; api.py ``BackwardPrefetch``: "only holding
    the next set of parameters and current set of gradients in memory at the peak"). docs/model_memory.md
    "PyTorch FSDP1: prefetch and the rate limiter"."""
    if row[C_OVERLAP_PARAM_GATHER] > 0 and int(row[C_FSDP_BACKWARD_PREFETCH]) == BWD_PREFETCH_PRE:
        return 1.0
    return 0.0


@njit(error_model='numpy')
def fsdp_run_ahead_bytes(row, stage):
    """FSDP1 without its rate limiter (``fsdp_limit_all_gathers = 0``): the most memory the caching allocator may
    hold beyond the allocated peak for blocks freed but not yet reusable, on pipeline rank ``stage``.

    FSDP1 frees a gathered unit and an unsharded gradient with ``record_stream`` (``_no_dispatch_record_stream``),
    so the allocator's ``allocated`` drops at once and the block stays reserved until the GPU passes the free.
    With the limiter the CPU waits in ``_unshard`` for the free event of the unit before last
    (``_FreeEventQueue``, ``_max_num_inflight_all_gathers = 2``); without it nothing in FSDP bounds how far the CPU
    runs ahead, so the worst case the source implies is every gathered unit and every unsharded gradient of the
    step issued before the GPU frees any: ``m (2 c + g) P`` with ``m`` the micro-batches, ``P`` the stage's
    parameters on one device (gathered once in the forward and once in the backward, ``c`` bytes each, and one
    ``g``-byte gradient). It goes to ``memory_reserved`` only (kernels/lm/evaluate.py ``reserved_bytes``), which
    the allocator caps at what the device holds: a failing ``cudaMalloc`` makes it synchronize on the pending
    events and release them (``release_cached_blocks`` -> ``synchronize_and_free_events``), counted in
    ``num_alloc_retries``. 0 with the limiter, for FSDP2 and other stacks (``fsdp_version`` not 1), bucketed
    ZeRO-3, and a stage held gathered. docs/model_memory.md "PyTorch FSDP1: prefetch and the rate limiter"."""
    if (int(row[C_SHARDING]) != SHARD_FSDP or row[C_FSDP_LIMIT_ALL_GATHERS] > 0 or row[C_FSDP_VERSION] != FSDP1
            or row[C_COLLECTIVE_BUCKET_BYTES] > 0 or holds_stage_gathered(row)):
        return 0.0
    non_expert, expert = stage_params(row, stage)
    return microbatches(row) * (2.0 * param_bytes(row) + row[C_GRAD_REDUCE_BYTES]) * (non_expert + expert)


@njit(error_model='numpy')
def fsdp_gather_buffer_bytes(row):
    """FSDP/HSDP: the gathered weights of the unit being computed and of the prefetched one, and the unit's
    unsharded gradient before its reduce-scatter.

    Layer-wrapped FSDP (PyTorch FSDP/FSDP2, one unit per transformer block; Zhao et al. 2023, Sec. 3.3-3.4:
    at most two in-flight all-gathers, backward prefetch): ``(2 c + g) * max_layer_params`` with ``c`` the
    compute dtype (1 byte with FP8 parameters, else 2) and ``g`` = ``grad_reduce_bytes``. Bucketed ZeRO-3
    (``collective_bucket_bytes > 0``, DeepSpeed: parameters fetched per module, prefetched in buckets,
    ``stage3_prefetch_bucket_size``): the largest module gathered plus one prefetch bucket, and that
    module's gradient: ``(c + g) * largest_module_params + bucket``. Module-wrapped FSDP
    (``fsdp_module_wrap``): the same two in-flight units and gradient, of ``wrapped_module_params`` each.

    FSDP1 against FSDP2 (``fsdp_copy_out``): FSDP1's flat parameters are views of the all-gather output, so a
    gathered layer is one buffer; FSDP2 (per-parameter sharding, pytorch/pytorch RFC #114299) copies the
    all-gather output into each parameter's own tensor, so while the prefetched layer is copied out its
    all-gather output and its parameters are live at once: one more ``c * max_layer_params``,
    ``(3 c + g) * max_layer_params``.

    Without backward prefetch (``overlap_param_gather = 0``, the time model's "gathers not overlapped"; the
    ``pytorch-fsdp`` stack sets it for PyTorch 1.x, whose FSDP had ``backward_prefetch = None``), and under FSDP1's
    ``BACKWARD_POST`` (``fsdp_backward_prefetch = post``, the next unit gathered after this one is resharded): a unit is
    all-gathered in its own pre-backward hook and freed in its post-backward hook before its gradient is
    reduce-scattered (torch/distributed/_fsdp/fully_sharded_data_parallel.py, PyTorch 1.10 era:
    ``_pre_backward_hook`` -> ``_rebuild_full_params``; ``_post_backward_hook`` -> ``_free_full_params``, then
    ``F.pad`` of the gradient and ``_reduce_scatter_base``), so no second unit is gathered:
    ``(c + g) * unit`` (``fsdp_prefetched_units``).

    FSDP with pipeline stages (docs/model_memory.md "FSDP with pipeline stages"): with one reduction per step
    (``accumulates_unsharded``) the stage's unsharded gradients are states, so ``g = 0`` here; on a stack that
    keeps the stage gathered (``holds_stage_gathered``) its gathered weights are states too, and only FSDP2's
    copy-out transient remains, ``c * unit`` (0 without ``fsdp_copy_out``).
    """
    if int(row[C_SHARDING]) != SHARD_FSDP:
        return 0.0
    compute = param_bytes(row)
    # FSDP + PP: unsharded gradients (accumulates_unsharded) and a gathered stage (holds_stage_gathered) are held
    # whole in the states (memory_states.py), so their per-unit shares here would count them twice
    grad = 0.0 if accumulates_unsharded(row) else row[C_GRAD_REDUCE_BYTES]
    copy_out = 1.0 if row[C_FSDP_COPY_OUT] > 0 else 0.0
    if row[C_COLLECTIVE_BUCKET_BYTES] > 0:
        return (compute + grad) * largest_module_params(row) + row[C_COLLECTIVE_BUCKET_BYTES]
    gathered = copy_out if holds_stage_gathered(row) else 1.0 + fsdp_prefetched_units(row) + copy_out
    return (gathered * compute + grad) * fsdp_unit_params(row)


@njit(error_model='numpy')
def fsdp_unit_params(row):
    """Parameters of the FSDP unit whose backward peaks, on one device: one module's (``fsdp_module_wrap``,
    ``wrapped_module_params``) or the largest layer's (``max_layer_params``)."""
    return wrapped_module_params(row) if row[C_FSDP_MODULE_WRAP] > 0 else max_layer_params(row)


@njit(error_model='numpy')
def fsdp_flat_grad_copy_bytes(row):
    """FSDP1's flat parameters (``fsdp_version`` 1): the unit's per-parameter gradients, live beside the
    flat gradient autograd concatenates them into, ``c * unit`` (``c`` the compute dtype: autograd gives each
    gradient its tensor's dtype, and the parameters are compute-dtype views of the gathered flat parameter).

    FSDP1 unflattens its flat parameter into views with ``split`` + ``view`` at every forward
    (torch/distributed/_fsdp/flatten_params_wrapper.py ``_unflatten_params_as_views`` -> ``_get_param_views``,
    pytorch/pytorch@05eb7533; ``FlatParamHandle`` keeps the split views in 1.12+), so in the backward the views'
    gradients reach the flat parameter through ``SplitWithSizesBackward``, whose ``split_with_sizes_backward``
    (torch/csrc/autograd/FunctionsManual.cpp) returns ``at::cat`` of them: a new flat gradient while its inputs
    are still live. With the gathered unit (``fsdp_gather_buffer_bytes``) that is three unit-sized tensors at
    once, ``(c + c + g) * unit``; the time model's ``fsdp1_grad_passes`` counts the same ``cat``. 0 for FSDP2
    (per-parameter sharding), bucketed ZeRO-3, plans without FSDP, and FSDP with one reduction per step
    (``accumulates_unsharded``: not modelled). Measured: docs/model_memory.md "PyTorch FSDP1 on A100 40 GB:
    measured peaks" (nine GPT-175B peaks of the PyTorch FSDP benchmark: the hand peak matches them within
    0.05 %, the model is 0.3 to 2.7 % below them; without recompute they peak at the LM head's ``cat``, which the
    model lacks, and it lands within 0.5 % only because a layer unit is near the head's size)."""
    if (int(row[C_SHARDING]) != SHARD_FSDP or row[C_FSDP_VERSION] != FSDP1 or row[C_COLLECTIVE_BUCKET_BYTES] > 0
            or accumulates_unsharded(row)):
        return 0.0
    return param_bytes(row) * fsdp_unit_params(row)
