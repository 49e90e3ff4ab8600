"""Memory of the real-world LM model, part 1: what a device holds of the parameters.

The model's shape per pipeline rank (layers and parameters of each stage, dense and expert), the groups that
shard them (ZeRO/FSDP), and the bytes of weights, gradients and optimizer states (kernels/lm/memory.py assembles
them with activations and buffers; docs/model_memory.md collects the equations). Compiled with
``error_model='numpy'`` (see kernels/lm/memory.py).
"""

import math

from fastmodel.kernels.lm.fp4 import lowp_weight_copy_bytes, low_precision_gemms
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.parallel import param_bytes
from fastmodel.kernels.lm.pipeline import mirror_stage
from fastmodel.kernels.lm.shape import (  # noqa: F401 - attention_params, mlp_params, stored_grad_bytes re-exported
    attention_params, attention_params_per_device, expert_tp, expert_weight_params, mlp_params, mtp_layer_is_moe, mtp_stage_layers, norm_params,
    stored_grad_bytes,
)
from fastmodel.kernels.lm.layout import (
    C_CP, C_DDP_BUCKET_COPY, C_DENSE_LAYERS, C_DP, C_EP, C_FFN, C_FP8_PARAMS, C_GRAD_REDUCE_BYTES, C_HIDDEN, C_LAYERS,
    C_MOE_EXPERTS, C_MOE_FFN, C_MOE_LAYER_FREQ, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_MASTER_WEIGHTS, C_MTP_LAYERS,
    C_OVERLAP_GRAD_REDUCE, C_PP, C_SHARDING, C_SHARD_DEGREE, C_TIED_EMBEDDINGS, C_EMBEDDING_LOSS_IN_SPLIT,
    C_LEARNED_POSITIONS, C_SEQ_LEN, C_TP, C_UNEVEN_STAGES, C_VOCAB, C_VP, C_LAST_STAGE_LAYERS,
    C_REDUCE_EVERY_MICROBATCH, C_FSDP_STAGE_GATHERED, SHARD_DDP, SHARD_FSDP, SHARD_ZERO2,
)

#: bytes of a 16-bit activation / weight element (BF16 or FP16)
B16 = 2.0
#: bytes of an FP32 element (master weights, optimizer moments, softmax statistics, fp32 logits)
B32 = 4.0


# --- model shape -------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def is_moe(row):
    """1 when the model has routed experts (``moe_experts > 0``)."""
    return row[C_MOE_EXPERTS] > 0 and row[C_MOE_TOPK] > 0


@njit(error_model='numpy')
def layers_per_stage(row):
    """Layers on the busiest pipeline rank: ``L / pp``, or with ``uneven_stages`` ``ceil(L / (pp vp)) x vp``
    (the ranks that hold a layer more than the average; Llama 3 paper sec. 3.3.2, DeepSeek-V3 report sec. 3.2)."""
    pp = row[C_PP]
    layers = row[C_LAYERS] + split_slots(row)
    if row[C_UNEVEN_STAGES] > 0.0:
        vp = max(row[C_VP], 1.0)
        return math.ceil(layers / (pp * vp) - 1e-9) * vp
    return layers / pp


@njit(error_model='numpy')
def split_slots(row):
    """Slots the embedding and the loss take in the pipeline split: 2 with ``embedding_loss_in_split`` and a
    pipeline, else 0. Megatron-Core ``get_num_layers_to_build`` (megatron/core/transformer/transformer_block.py,
    NVIDIA/Megatron-LM@d98e8a6): with ``account_for_embedding_in_pipeline_split`` and
    ``account_for_loss_in_pipeline_split`` the split is of ``L + 2`` layers and the first chunk of the first
    rank and the last chunk of the last rank build one layer fewer; Llama 3 (Dubey et al. 2024, sec. 3.3.2)
    balances its pipeline the same way ("the first model chunk on the first stage has only the embedding")."""
    return 2.0 if (row[C_EMBEDDING_LOSS_IN_SPLIT] > 0.0 and row[C_PP] > 1.0) else 0.0


@njit(error_model='numpy')
def explicit_layout(row):
    """True when an explicit pipeline layout states the last rank's decoder layers (``last_stage_layers`` >= 0,
    pp > 1; Megatron-Core ``pipeline_model_parallel_layout``, docs/model.md §11.22)."""
    return row[C_LAST_STAGE_LAYERS] >= 0.0 and row[C_PP] > 1.0


@njit(error_model='numpy')
def layout_busiest_layers(row):
    """Layers on the busiest rank other than the last, ``n_mid``: ``layers_per_stage`` without an explicit layout;
    with one (:func:`explicit_layout`), the ``L - n_last`` layers the other ``p - 1`` ranks hold, split as evenly
    as whole layers allow, ``ceil((L - n_last) / (p - 1))`` (``L - n_last`` at pp = 2), fewer than the default
    split's when the last rank holds more, 0 when it holds them all. Megatron-Core runs any layout that builds
    every decoder layer once, short and empty stages included (``PipelineParallelLayerLayout
    .validate_layer_layout``, megatron/core/transformer/pipeline_parallel_layer_layout.py, NVIDIA/Megatron-LM@0823c73
    lines 85-150; docs/model.md §11.25)."""
    if not explicit_layout(row):
        return layers_per_stage(row)
    rest = row[C_LAYERS] - row[C_LAST_STAGE_LAYERS]
    return math.ceil(rest / (row[C_PP] - 1.0) - 1e-9)


@njit(error_model='numpy')
def stage_layers(row, stage):
    """(dense layers, MoE layers, MTP layers) held by pipeline rank ``stage``.

    Layers are split evenly, ``L/pp`` per rank (``layers_per_stage``; with ``embedding_loss_in_split`` the first
    and last rank one fewer, ``split_slots``), in order: the leading dense layers of a MoE model sit on
    the first rank(s); DeepSeek-V3's MTP modules sit after the last layer, on the last rank. An explicit layout
    (:func:`explicit_layout`) gives the last rank its ``last_stage_layers``, the model's last ones; every other
    rank holds the busiest other rank's count (:func:`layout_busiest_layers`), the even split of the other
    ``L - n_last`` layers (docs/model_memory.md "Explicit pipeline layouts").
    """
    pp = row[C_PP]
    explicit = explicit_layout(row)
    if explicit and stage == pp - 1:
        per_stage = row[C_LAST_STAGE_LAYERS]
        first = row[C_LAYERS] - per_stage
    else:
        # layout_busiest_layers is layers_per_stage without an explicit layout: called directly, as this runs for
        # every rank of every point (docs/performance.md, "The dense sweep after the layout rules")
        per_stage = layout_busiest_layers(row) if explicit else layers_per_stage(row)
        if split_slots(row) > 0.0 and (stage == 0 or stage == pp - 1):
            per_stage -= 1.0                        # the embedding or the loss holds this rank's extra slot
        first = stage * per_stage
    if not is_moe(row):
        dense = per_stage
    else:
        dense = min(max(row[C_DENSE_LAYERS] - first, 0.0), per_stage)
        dense += (per_stage - dense) * (1.0 - 1.0 / max(1.0, row[C_MOE_LAYER_FREQ]))   # --moe-layer-freq N
    mtp = row[C_MTP_LAYERS] if stage == pp - 1 else 0.0
    return dense, per_stage - dense, mtp


@njit(error_model='numpy')
def stage_params(row, stage):
    """(non-expert, expert) parameters on one device of pipeline rank ``stage``: its model stage's
    (:func:`model_stage_params`), and under DualPipe also the mirror stage ``pp - 1 - stage``'s
    (``kernels/lm/pipeline.mirror_stage``: 2x parameters, DeepSeek-V3 report Table 2)."""
    non_expert, expert = model_stage_params(row, stage)
    mirror = mirror_stage(row, stage)
    if mirror >= 0.0:
        other_non_expert, other_expert = model_stage_params(row, mirror)
        non_expert += other_non_expert
        expert += other_expert
    return non_expert, expert


@njit(error_model='numpy')
def model_stage_params(row, stage):
    """(non-expert, expert) parameters on one device of model stage ``stage`` (one of ``pp``).

    Non-expert weights split over TP (Megatron column/row-parallel linears, Shoeybi et al. 2019), norms and
    the router replicated; the word embedding is vocab-parallel on the first rank and the LM head on the
    last (a second copy of a tied embedding when ``pp > 1``, Narayanan et al. 2021, Sec. 3), with a learned
    position table (``learned_positions``) of ``s x h`` beside the word embedding, whole on every TP rank
    (Megatron-Core ``LanguageModelEmbedding.position_embeddings`` is a plain ``torch.nn.Embedding``). Routed experts
    split over ``ep * etp`` (Megatron-Core MoE docs). An MTP module is one MoE/dense layer plus a ``2h x h``
    projection and three norms (DeepSeek-V3 report, Sec. 2.2), and with ``pp > 1`` (not DualPipe) its stage holds
    a copy of the word embedding (docs/model_memory.md "MTP module").
    """
    h = row[C_HIDDEN]
    tp = row[C_TP]
    dense, moe, mtp = stage_layers(row, stage)
    attn = attention_params_per_device(row, tp) + norm_params(row)    # MLA down-projections replicated (§11.44)
    dense_layer = attn + mlp_params(row, row[C_FFN]) / tp
    moe_layer = attn + mlp_params(row, row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]) / tp + h * row[C_MOE_EXPERTS]
    expert_layer = expert_weight_params(row, expert_tp(row, 0.0))
    non_expert = dense * dense_layer + moe * moe_layer
    expert = moe * expert_layer
    if mtp > 0:
        # the layer, eh_proj 2h x h/t and three norms (enorm, hnorm, final_layernorm: Megatron-Core
        # MultiTokenPredictionLayer); with pp > 1 a copy of the word embedding unless DualPipe puts the MTP stage on
        # the embedding's rank or a tied head's copy is already counted below (step.mtp_module_params)
        moe_mtp = mtp_layer_is_moe(row) and is_moe(row)        # the decoder's last layer's kind
        non_expert += mtp * ((moe_layer if moe_mtp else dense_layer) + 2.0 * h * h / tp + 3.0 * h)
        expert += mtp * expert_layer if moe_mtp else 0.0
    return _add_vocab_params(row, stage, mtp, non_expert), expert


@njit(error_model='numpy')
def _add_vocab_params(row, stage, mtp, params):
    """``params`` plus the embedding-side parameters of model stage ``stage``: the word embedding and a learned position table on the
    first, the final norm and the LM head on the last (:func:`model_stage_params`), and the MTP stage's copy of the
    word embedding with ``pp > 1`` outside DualPipe, unless a tied head's copy is already there."""
    h = row[C_HIDDEN]
    embedding = row[C_VOCAB] * h / row[C_TP]
    if mtp > 0 and row[C_PP] > 1 and mirror_stage(row, stage) < 0.0 and row[C_TIED_EMBEDDINGS] == 0:
        params += embedding
    if stage == 0:
        params += embedding + row[C_LEARNED_POSITIONS] * row[C_SEQ_LEN] * h
    if stage == row[C_PP] - 1:
        params += h
        if row[C_TIED_EMBEDDINGS] == 0 or row[C_PP] > 1:
            params += embedding
    return params


@njit(error_model='numpy')
def model_stage_uncast_params(row, stage):
    """Parameters of model stage ``stage`` that no FP8 GEMM reads, so no FP8 weight form is kept of them: the
    embedding-side ones (word embedding, learned positions, LM head, final norm, the MTP stage's embedding copy),
    every layer's norms and MoE router, and the MTP modules' three norms. Megatron-Core builds the output layer as a
    plain ``tensor_parallel.ColumnParallelLinear`` and the embedding as a lookup, neither a Transformer Engine
    module (megatron/core/models/gpt/gpt_model.py), and gates with ``router_gating_linear`` in BF16/FP32
    (megatron/core/transformer/moe/router.py ``Router.gating``); the DeepSeek-V3 report keeps "the embedding
    module, the output head, MoE gating modules, normalization operators" in BF16/FP32 (arXiv 2412.19437 sec.
    3.3.1). Subset of :func:`model_stage_params`'s non-expert parameters."""
    dense, moe, mtp = stage_layers(row, stage)
    router = row[C_HIDDEN] * row[C_MOE_EXPERTS]
    moe_mtp = mtp if mtp_layer_is_moe(row) and is_moe(row) else 0.0       # the decoder's last layer's kind
    layers = (dense + moe + mtp) * norm_params(row) + (moe + moe_mtp) * router
    return _add_vocab_params(row, stage, mtp, layers + mtp * 3.0 * row[C_HIDDEN])


@njit(error_model='numpy')
def stage_uncast_params(row, stage):
    """:func:`model_stage_uncast_params` of rank ``stage``'s model stage and, under DualPipe, of its mirror stage."""
    params = model_stage_uncast_params(row, stage)
    mirror = mirror_stage(row, stage)
    if mirror >= 0.0:
        params += model_stage_uncast_params(row, mirror)
    return params


@njit(error_model='numpy')
def shard_group(row):
    """Devices one non-expert parameter/optimizer shard spans: ``shard_degree`` (HSDP), else ``dp * cp``.

    Megatron's distributed optimizer and TorchTitan's FSDP both shard over the data-parallel group
    including the context-parallel ranks (Megatron-Core ``data_parallel_group_with_cp``; TorchTitan
    ``dp_shard_cp`` mesh).
    """
    if row[C_SHARD_DEGREE] > 0:
        return row[C_SHARD_DEGREE]
    return row[C_DP] * row[C_CP]


@njit(error_model='numpy')
def expert_shard_group(row):
    """Devices one expert shard spans: the expert-data-parallel group ``group * tp / (ep * etp)``.

    Megatron-Core carves EP out of DP: expert DP size = tp * cp * dp / (ep * etp) (Megatron-Core MoE docs).
    """
    return max(shard_group(row) * row[C_TP] / (row[C_EP] * expert_tp(row, 0.0)), 1.0)


@njit(error_model='numpy')
def sharded_params(row, non_expert, expert):
    """Parameters per device divided by their shard groups (what ZeRO/FSDP keeps of them)."""
    return non_expert / shard_group(row) + expert / expert_shard_group(row)


# --- weights, gradients, optimizer ---------------------------------------------------------------------------------

@njit(error_model='numpy')
def weight_bytes_per_param(row):
    """Bytes per resident (unsharded) weight.

    BF16/FP16 weights: 2. FP8 GEMMs with BF16 weights (Transformer Engine without FP8 parameters): 2 + w,
    the FP8 forms are cached across micro-batches (TE ``is_first_microbatch``). FP8 parameters
    (``fp8_params``, TE ``fp8_model_init``): w, the high-precision master stays in the optimizer. ``w`` is the
    recipe's FP8 weight forms, ``fastmodel.kernels.lm.fp8.fp8_weight_copy_bytes`` (1 when ``fp8_recipe`` is unstated;
    docs/model_memory.md "FP8 recipe copies"); under fp4 the NVFP4 rowwise + columnwise forms, 1.125
    (``fastmodel.kernels.lm.fp4.lowp_weight_copy_bytes``, docs/model.md §11.38).
    """
    if row[C_FP8_PARAMS] > 0:
        return lowp_weight_copy_bytes(row)
    if low_precision_gemms(row):
        return B16 + lowp_weight_copy_bytes(row)
    return B16


@njit(error_model='numpy')
def weights_bytes(row, non_expert, expert, uncast):
    """Weights held on the device.

    DDP, ZeRO-1/2, distributed optimizer: every local parameter (after TP/PP/EP) at ``weight_bytes_per_param``
    (Rajbhandari et al. 2020, ZeRO, Sec. 5: 2 bytes/param of fp16 weights). FSDP/HSDP (ZeRO-3): the sharded
    parameters, kept in FP32 between forward and backward (PyTorch FSDP ``MixedPrecision``: "the sharded
    parameters are kept in full precision"; Zhao et al. 2023), i.e. ``4 * params / shard_group``; the
    gathered BF16 copies are buffers (``fsdp_gather_buffer_bytes``). A 16-bit model (``master_weights = 0``:
    built in FP16/BF16, no FP32 copy) shards its 16-bit parameters: ``2 * params / shard_group``.
    ``uncast`` of the non-expert parameters (``stage_uncast_params``: embedding, head, norms, routers) are read by
    no FP8 GEMM and stay at 2 bytes, without FP8 forms.
    Under FSDP with pipeline stages on a stack that keeps the stage gathered (:func:`holds_stage_gathered`) the
    gathered copies of the whole stage are held too, ``c * params`` (``c`` = ``param_bytes``: 1 with FP8
    parameters, else 2).
    """
    per = weight_bytes_per_param(row)
    if int(row[C_SHARDING]) == SHARD_FSDP:
        gathered = param_bytes(row) * (non_expert + expert) if holds_stage_gathered(row) else 0.0
        if row[C_MASTER_WEIGHTS] > 0:
            return B32 * sharded_params(row, non_expert, expert) + gathered
        return per * sharded_params(row, non_expert, expert) - (per - B16) * uncast / shard_group(row) + gathered
    return per * (non_expert + expert) - (per - B16) * uncast


@njit(error_model='numpy')
def accumulates_unsharded(row):
    """True under FSDP with pipeline stages when gradients are reduce-scattered once per step
    (``reduce_every_microbatch = 0``): PyTorch's pipelining runs every micro-batch's backward of an FSDP2 stage
    with ``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)`` and reduce-scatters once,
    after the stage's last backward (torch/distributed/pipelining/stage.py ``backward_maybe_with_nosync``,
    ``_post_backward``, pytorch/pytorch@0138610), so the stage's parameters stay gathered and its gradients
    accumulate unsharded in the reduce dtype (FSDP2 ``FSDPParam.to_accumulated_grad_if_needed`` /
    ``accumulate_unsharded_grad_if_needed``, torch/distributed/fsdp/_fully_shard/_fsdp_param.py). TorchTitan
    builds its pipeline stages so (docs/model_memory.md "FSDP with pipeline stages")."""
    return int(row[C_SHARDING]) == SHARD_FSDP and row[C_PP] > 1.0 and row[C_REDUCE_EVERY_MICROBATCH] <= 0.0


@njit(error_model='numpy')
def holds_stage_gathered(row):
    """True under FSDP with pipeline stages when the stack keeps the stage's weights gathered between micro-batches
    (``fsdp_stage_gathered``, set by the ``torchtitan`` stack: ``reshard_after_forward = not pp_enabled`` in
    ``apply_fsdp``, torchtitan/models/llama3/infra/parallelize.py, pytorch/torchtitan@81c1243, and PyTorch
    pipelining's ``set_reshard_after_backward(False)``). Megatron's ``no_sync`` keeps gradients unsharded but
    reshards weights; off by default."""
    return int(row[C_SHARDING]) == SHARD_FSDP and row[C_PP] > 1.0 and row[C_FSDP_STAGE_GATHERED] > 0.0


@njit(error_model='numpy')
def gradients_bytes(row, non_expert, expert):
    """Gradients at ``stored_grad_bytes`` per parameter.

    Replicated under DDP, ZeRO-1 and the Megatron distributed optimizer: Megatron accumulates into a
    contiguous FP32 ``main_grad`` buffer for BF16 training and reduce-scatters it in place (Megatron-LM
    ``docs/distrib_optimizer.md``: bf16 params with fp32 grads take ``6 + 12/d`` bytes per parameter, i.e.
    the 4-byte gradient is not divided by d). Sharded by the shard group under ZeRO-2 and FSDP/HSDP
    (ZeRO paper, Sec. 5.2). A 16-bit model stores 16-bit gradients whatever dtype they are reduced in. Under FSDP
    with pipeline stages and one reduction per step (:func:`accumulates_unsharded`): the stage's gradients
    unsharded, ``grad_reduce_bytes`` per parameter (FSDP2 accumulates them in ``reduce_dtype``).
    """
    gb = stored_grad_bytes(row)
    if accumulates_unsharded(row):              # the stage's gradients, unsharded, in the reduce dtype
        return row[C_GRAD_REDUCE_BYTES] * (non_expert + expert)
    if int(row[C_SHARDING]) >= SHARD_ZERO2:
        return gb * sharded_params(row, non_expert, expert)
    return gb * (non_expert + expert) * (2.0 if torch_ddp_buckets(row) else 1.0)


@njit(error_model='numpy')
def torch_ddp_buckets(row):
    """PyTorch's DistributedDataParallel holds a flat copy of every gradient in its buckets (``ddp_bucket_copy``, a
    DDP that overlaps its reduction: ``gradient_as_bucket_view`` False, PyTorch 1.8's default, which Megatron-LM
    de7dc40f88 ``training.py`` lines 246-251 keep; docs/model_memory.md "Gradients")."""
    return row[C_DDP_BUCKET_COPY] > 0.0 and int(row[C_SHARDING]) == SHARD_DDP and row[C_OVERLAP_GRAD_REDUCE] > 0.0
