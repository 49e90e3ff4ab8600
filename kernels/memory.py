"""Memory per device of the real-world LM model (``default`` semantics), by memory kind.

``memory_row(row, out)`` fills ``out[M_<KIND>]`` (bytes per device) for one
configuration, on the most loaded pipeline rank: the first stage (most
micro-batches in flight, the input embedding) or the last stage (LM head, its
logits workspace, MTP layers), whichever holds more in total. It allocates
nothing, so the fused pass can call it per configuration inside ``prange``.
``memory_table(params)`` evaluates a whole ``(N_COLUMNS, n)`` table.

Every term is a small function named after what it computes; its docstring
gives the equation and its public source. ``docs/model_memory.md`` collects
them. Sizes are bytes; ``T`` is the tokens of one micro-batch on one device
before sequence-parallel sharding: ``T = micro_batch * seq_len / cp``.

The functions compile with numba's ``error_model='numpy'``: a division by zero yields inf/nan instead of
raising, so no division carries a zero check (1.5x faster on ``bench/bench_memory.py``) and an illegal
point of a sweep cannot raise inside the fused pass (legality is the rule table's job).
"""

import math

import numpy as np

from fastmodel.kernels.jit import njit, prange
from fastmodel.kernels.lm_layout import (
    C_ACTIVATION_OFFLOAD, C_COLLECTIVE_BUCKET_BYTES, C_CP, C_DENSE_LAYERS, C_DP, C_DROPOUT, C_EP, C_ETP, C_FFN,
    C_FLASH_ATTENTION, C_FP8_PARAMS, C_FRAMEWORK_MEMORY_BYTES, C_FUSED_KERNELS, C_GATED_MLP, C_GLOBAL_BATCH,
    C_GRAD_REDUCE_BYTES, C_HEADS, C_HEAD_DIM, C_HIDDEN, C_KV_HEADS, C_KV_LORA_RANK, C_LAYERS, C_MICRO_BATCH, C_MLA,
    C_MOE_CAPACITY_FACTOR, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_MTP_LAYERS, C_OPTIMIZER,
    C_PIPELINE_SCHEDULE, C_PP, C_PRECISION, C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM, C_Q_LORA_RANK, C_RECOMPUTE,
    C_RECOMPUTE_FRACTION, C_RMS_NORM, C_SELECTIVE_POLICY, C_SEQUENCE_PARALLEL, C_SEQ_LEN, C_SHARDING,
    C_SHARD_DEGREE, C_TIED_EMBEDDINGS, C_TP, C_UNEVEN_STAGES, C_VOCAB, C_VP, C_V_HEAD_DIM, M_ACTIVATIONS, M_BUFFERS, M_GRADIENTS,
    M_KV_CACHE, M_OPTIMIZER, M_OVERHEAD, M_WEIGHTS, N_MEMORY_KINDS, OPT_ADAFACTOR, OPT_SGD, PRECISION_FP8,
    RECOMPUTE_FULL, RECOMPUTE_NONE, RECOMPUTE_PARTIAL_LAYERS, RECOMPUTE_SELECTIVE, SCHED_GPIPE, SCHED_INTERLEAVED,
    SHARD_FSDP, SHARD_ZERO1, SHARD_ZERO2,
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
def attention_params(row):
    """Attention weights of one layer (whole model, before TP).

    Standard/GQA: ``h*a*d (Q) + 2*h*kv*d (K, V) + a*d*h (O)`` (Ainslie et al. 2023, GQA).
    MLA (DeepSeek-V2/V3 report, Sec. 2.1): ``h*q_lora + q_lora*a*(nope+rope)`` (or ``h*a*(nope+rope)``
    without a query low rank) ``+ h*(kv_lora+rope) + kv_lora*a*(nope+v) + a*v*h`` plus the two latent norms.
    """
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    if row[C_MLA] > 0:
        qk = row[C_QK_NOPE_HEAD_DIM] + row[C_QK_ROPE_HEAD_DIM]
        q_lora = row[C_Q_LORA_RANK]
        kv_lora = row[C_KV_LORA_RANK]
        q = h * q_lora + q_lora * a * qk if q_lora > 0 else h * a * qk
        kv = h * (kv_lora + row[C_QK_ROPE_HEAD_DIM]) + kv_lora * a * (row[C_QK_NOPE_HEAD_DIM] + row[C_V_HEAD_DIM])
        return q + kv + a * row[C_V_HEAD_DIM] * h + q_lora + kv_lora
    d = row[C_HEAD_DIM]
    return 2.0 * h * a * d + 2.0 * h * row[C_KV_HEADS] * d


@njit(error_model='numpy')
def mlp_params(row, width):
    """One MLP of intermediate width ``width``: ``3*h*width`` gated (SwiGLU/GeGLU; Shazeer 2020), else ``2*h*width``."""
    return (3.0 if row[C_GATED_MLP] > 0 else 2.0) * row[C_HIDDEN] * width


@njit(error_model='numpy')
def layers_per_stage(row):
    """Layers on the busiest pipeline rank: ``L / pp``, or with ``uneven_stages`` ``ceil(L / (pp vp)) x vp``
    (the ranks that hold a layer more than the average; Llama 3 paper sec. 3.3.2, DeepSeek-V3 report sec. 3.2)."""
    pp = row[C_PP]
    if row[C_UNEVEN_STAGES] > 0.0:
        vp = max(row[C_VP], 1.0)
        return math.ceil(row[C_LAYERS] / (pp * vp) - 1e-9) * vp
    return row[C_LAYERS] / pp


@njit(error_model='numpy')
def stage_layers(row, stage):
    """(dense layers, MoE layers, MTP layers) held by pipeline rank ``stage``.

    Layers are split evenly, ``L/pp`` per rank, in order: the leading dense layers of a MoE model sit on
    the first rank(s); DeepSeek-V3's MTP modules sit after the last layer, on the last rank.
    """
    pp = row[C_PP]
    per_stage = layers_per_stage(row)
    if not is_moe(row):
        dense = per_stage
    else:
        first = stage * per_stage
        dense = min(max(row[C_DENSE_LAYERS] - first, 0.0), per_stage)
    mtp = row[C_MTP_LAYERS] if stage == pp - 1 else 0.0
    return dense, per_stage - dense, mtp


@njit(error_model='numpy')
def stage_params(row, stage):
    """(non-expert, expert) parameters on one device of pipeline rank ``stage``.

    Non-expert weights split over TP (Megatron column/row-parallel linears, Shoeybi et al. 2019), norms and
    the router replicated; the word embedding is vocab-parallel on the first rank and the LM head on the
    last (a second copy of a tied embedding when ``pp > 1``, Narayanan et al. 2021, Sec. 3). Routed experts
    split over ``ep * etp`` (Megatron-Core MoE docs). An MTP module is one MoE/dense layer plus a ``2h x h``
    projection (DeepSeek-V3 report, Sec. 2.2).
    """
    h = row[C_HIDDEN]
    tp = row[C_TP]
    dense, moe, mtp = stage_layers(row, stage)
    attn = attention_params(row) / tp + 2.0 * h
    dense_layer = attn + mlp_params(row, row[C_FFN]) / tp
    moe_layer = attn + mlp_params(row, row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]) / tp + h * row[C_MOE_EXPERTS]
    expert_layer = row[C_MOE_EXPERTS] * mlp_params(row, row[C_MOE_FFN]) / (row[C_EP] * row[C_ETP])
    non_expert = dense * dense_layer + moe * moe_layer
    expert = moe * expert_layer
    if mtp > 0:
        non_expert += mtp * ((moe_layer if is_moe(row) else dense_layer) + 2.0 * h * h / tp + 2.0 * h)
        expert += mtp * expert_layer if is_moe(row) else 0.0
    embedding = row[C_VOCAB] * h / tp
    last = stage == row[C_PP] - 1
    if stage == 0:
        non_expert += embedding
    if last:
        non_expert += h
        if row[C_TIED_EMBEDDINGS] == 0 or row[C_PP] > 1:
            non_expert += embedding
    return non_expert, expert


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
    return max(shard_group(row) * row[C_TP] / (row[C_EP] * row[C_ETP]), 1.0)


@njit(error_model='numpy')
def sharded_params(row, non_expert, expert):
    """Parameters per device divided by their shard groups (what ZeRO/FSDP keeps of them)."""
    return non_expert / shard_group(row) + expert / expert_shard_group(row)


# --- weights, gradients, optimizer ---------------------------------------------------------------------------------

@njit(error_model='numpy')
def weight_bytes_per_param(row):
    """Bytes per resident (unsharded) weight.

    BF16/FP16 weights: 2. FP8 GEMMs with BF16 weights (Transformer Engine without FP8 parameters): 2 + 1,
    the FP8 cast is cached across micro-batches (TE ``is_first_microbatch``). FP8 parameters
    (``fp8_params``, TE ``fp8_model_init``): 1, the high-precision master stays in the optimizer.
    """
    if row[C_FP8_PARAMS] > 0:
        return 1.0
    if int(row[C_PRECISION]) == PRECISION_FP8:
        return B16 + 1.0
    return B16


@njit(error_model='numpy')
def weights_bytes(row, non_expert, expert):
    """Weights held on the device.

    DDP, ZeRO-1/2, distributed optimizer: every local parameter (after TP/PP/EP) at ``weight_bytes_per_param``
    (Rajbhandari et al. 2020, ZeRO, Sec. 5: 2 bytes/param of fp16 weights). FSDP/HSDP (ZeRO-3): the sharded
    parameters, kept in FP32 between forward and backward (PyTorch FSDP ``MixedPrecision``: "the sharded
    parameters are kept in full precision"; Zhao et al. 2023), i.e. ``4 * params / shard_group``; the
    gathered BF16 copies are buffers (``fsdp_gather_buffer_bytes``).
    """
    if int(row[C_SHARDING]) == SHARD_FSDP:
        return B32 * sharded_params(row, non_expert, expert)
    return weight_bytes_per_param(row) * (non_expert + expert)


@njit(error_model='numpy')
def gradients_bytes(row, non_expert, expert):
    """Gradients at ``grad_reduce_bytes`` per parameter.

    Replicated under DDP, ZeRO-1 and the Megatron distributed optimizer: Megatron accumulates into a
    contiguous FP32 ``main_grad`` buffer for BF16 training and reduce-scatters it in place (Megatron-LM
    ``docs/distrib_optimizer.md``: bf16 params with fp32 grads take ``6 + 12/d`` bytes per parameter, i.e.
    the 4-byte gradient is not divided by d). Sharded by the shard group under ZeRO-2 and FSDP/HSDP
    (ZeRO paper, Sec. 5.2).
    """
    gb = row[C_GRAD_REDUCE_BYTES]
    if int(row[C_SHARDING]) >= SHARD_ZERO2:
        return gb * sharded_params(row, non_expert, expert)
    return gb * (non_expert + expert)


@njit(error_model='numpy')
def optimizer_bytes_per_param(row):
    """Optimizer bytes per parameter, FP32 master copy included.

    Adam(W): 4 (master) + 4 (m) + 4 (v) = 12 (ZeRO paper, Sec. 3.1, K = 12). SGD with momentum: 4 + 4 = 8.
    Adafactor without momentum (Shazeer & Stern 2018; beta1 = 0 default): 4 (master) plus the factored
    second moment (``adafactor_factored_bytes``). Under FSDP the sharded FP32 parameters are the master
    copy, so 4 bytes less.
    """
    opt = int(row[C_OPTIMIZER])
    per = 12.0
    if opt == OPT_SGD:
        per = 8.0
    elif opt == OPT_ADAFACTOR:
        per = 4.0
    if int(row[C_SHARDING]) == SHARD_FSDP:
        per -= B32
    return per


@njit(error_model='numpy')
def adafactor_factored_bytes(row, stage):
    """Adafactor's factored second moment: one FP32 row and one column vector per weight matrix.

    ``4 * (rows + cols)`` per matrix (Shazeer & Stern 2018, Sec. 3); per layer the attention's four
    ``h x a*d`` matrices and the MLP's two or three ``h x ffn`` matrices, on the local TP shard.
    """
    if int(row[C_OPTIMIZER]) != OPT_ADAFACTOR:
        return 0.0
    h = row[C_HIDDEN]
    tp = row[C_TP]
    dense, moe, mtp = stage_layers(row, stage)
    n_mlp = 3.0 if row[C_GATED_MLP] > 0 else 2.0
    attn = 4.0 * (h + row[C_HEADS] * row[C_HEAD_DIM] / tp)
    dense_mlp = n_mlp * (h + row[C_FFN] / tp)
    expert_mlp = row[C_MOE_EXPERTS] / row[C_EP] * n_mlp * (h + row[C_MOE_FFN] / row[C_ETP])
    return B32 * ((dense + moe + mtp) * attn + dense * dense_mlp + (moe + mtp) * expert_mlp)


@njit(error_model='numpy')
def optimizer_bytes(row, stage, non_expert, expert):
    """Optimizer states: ``optimizer_bytes_per_param`` per parameter (+ Adafactor's factors).

    Replicated under DDP; sharded by the shard group under ZeRO-1 / distributed optimizer, ZeRO-2 and
    FSDP/HSDP (ZeRO paper, Sec. 5.1; Megatron-LM ``docs/distrib_optimizer.md``: ``12/d`` bytes per parameter).
    """
    per = optimizer_bytes_per_param(row)
    factored = adafactor_factored_bytes(row, stage)
    if int(row[C_SHARDING]) >= SHARD_ZERO1:
        return per * sharded_params(row, non_expert, expert) + factored / shard_group(row)
    return per * (non_expert + expert) + factored


# --- activations ---------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def micro_batch_tokens(row):
    """``T = b * s / cp``: tokens of one micro-batch on one device's context-parallel shard (Liu et al. 2023)."""
    return row[C_MICRO_BATCH] * row[C_SEQ_LEN] / row[C_CP]


@njit(error_model='numpy')
def replicated_divisor(row):
    """Divisor of the tensors TP replicates (norms, dropout masks, linear inputs): ``tp`` with sequence
    parallelism (Korthikanti et al. 2022, Sec. 4.2.2), else 1."""
    return row[C_TP] if row[C_SEQUENCE_PARALLEL] > 0 else 1.0


@njit(error_model='numpy')
def gemm_input_bytes(row):
    """Bytes per stored GEMM input: 1 under FP8 GEMMs (Transformer Engine saves the FP8-cast input for the
    weight-gradient GEMM), else 2."""
    return 1.0 if int(row[C_PRECISION]) == PRECISION_FP8 else B16


@njit(error_model='numpy')
def local_kv_width(row):
    """Per-device K (or V) width ``max(kv_heads / tp, 1) * head_dim``: KV heads split over TP, replicated
    once tp exceeds them (Megatron-Core ``num_query_groups``)."""
    return max(row[C_KV_HEADS] / row[C_TP], 1.0) * row[C_HEAD_DIM]


@njit(error_model='numpy')
def attention_scores_bytes(row, mode):
    """The ``s^2`` terms of unfused attention: ``5 a s^2 b / t`` with dropout (softmax output 2, dropout mask
    1, dropout output 2 bytes per score; Korthikanti et al. 2022, Sec. 4.1), ``2 a s^2 b / t`` without
    dropout (softmax output only). Zero under flash attention (Dao et al. 2022: scores are recomputed in
    backward) and under selective recompute (Korthikanti Sec. 5). With CP each device holds ``s/cp`` query rows
    against all ``s`` keys.
    """
    if row[C_FLASH_ATTENTION] > 0 or mode != RECOMPUTE_NONE:
        return 0.0
    per_score = 5.0 if row[C_DROPOUT] > 0 else B16
    heads = row[C_HEADS] / row[C_TP]
    return per_score * heads * micro_batch_tokens(row) * row[C_SEQ_LEN]


@njit(error_model='numpy')
def attention_activation_bytes(row, mode):
    """Activations one attention block stores for backward, one micro-batch, one device.

    Korthikanti et al. 2022, Sec. 4.1 (``11 s b h + 5 a s^2 b``), generalised to GQA/MLA widths:
    norm input ``2T h`` and QKV input ``g T h`` (replicated, ``/t`` with SP; ``g`` = ``gemm_input_bytes``);
    Q ``2T a d/t``, K and V ``2T kv d/t`` each; the output-projection input (= flash output O) ``2T a d/t``
    (+ an FP8 copy ``T a d/t`` under FP8); the ``s^2`` scores (``attention_scores_bytes``); flash's FP32
    log-sum-exp ``4 T a/t`` (Dao et al. 2022), dropped by selective recompute; the dropout mask ``T h``
    (replicated) when dropout is on.
    """
    tp = row[C_TP]
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    g = gemm_input_bytes(row)
    heads = row[C_HEADS] / tp
    inputs = (B16 + g) * t_tok * h / rep
    if row[C_MLA] > 0:
        qk = row[C_QK_NOPE_HEAD_DIM] + row[C_QK_ROPE_HEAD_DIM]
        latent = g * t_tok * (row[C_Q_LORA_RANK] + row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM])
        qkv = B16 * t_tok * heads * (2.0 * qk + row[C_V_HEAD_DIM]) + latent
        out_width = heads * row[C_V_HEAD_DIM]
    else:
        qkv = B16 * t_tok * (heads * row[C_HEAD_DIM] + 2.0 * local_kv_width(row))
        out_width = heads * row[C_HEAD_DIM]
    flash = row[C_FLASH_ATTENTION] > 0
    out = (B16 if (flash or g == B16) else g) * t_tok * out_width
    if flash and g < B16:
        out += g * t_tok * out_width
    stats = B32 * t_tok * heads if (flash and mode == RECOMPUTE_NONE) else 0.0
    mask = t_tok * h / rep if row[C_DROPOUT] > 0 else 0.0
    return inputs + qkv + out + stats + mask + attention_scores_bytes(row, mode)


@njit(error_model='numpy')
def mlp_activation_bytes(row, width, tokens_factor):
    """Stored activations of one MLP of ``width`` (already per device) over ``tokens_factor * T`` tokens.

    2-matrix: the activation input ``2T f`` and its output ``g T f`` (Korthikanti Sec. 4.1: ``8sbh + 8sbh``
    for f = 4h). Gated: the fused gate+up output ``4T f`` and the product ``g T f`` (Megatron-Core SwiGLU
    saves its input for backward).
    """
    t_tok = tokens_factor * micro_batch_tokens(row)
    fc1 = (2.0 * B16 if row[C_GATED_MLP] > 0 else B16) * t_tok * width
    return fc1 + gemm_input_bytes(row) * t_tok * width


@njit(error_model='numpy')
def routed_tokens(row):
    """Routed token rows per device per micro-batch: ``k * T / t_sp * etp * capacity``.

    Tokens enter the dispatch sequence-parallel-sharded (Megatron-Core requires SP for MoE with TP), each
    goes to ``k`` experts; with expert-TP the rows are gathered over ``etp`` ranks; a capacity factor pads
    every expert to ``cf`` times its balanced share (Fedus et al. 2021); dropless (0) counts the balanced
    average.
    """
    cf = row[C_MOE_CAPACITY_FACTOR] if row[C_MOE_CAPACITY_FACTOR] > 0 else 1.0
    return row[C_MOE_TOPK] * micro_batch_tokens(row) / replicated_divisor(row) * row[C_ETP] * cf


@njit(error_model='numpy')
def moe_activation_bytes(row):
    """Stored activations of one MoE MLP block (router, routed experts, shared experts).

    Router logits and probabilities in FP32 ``2 * 4 T E / t_sp``; the permuted expert input ``g R h`` and
    expert output ``2 R h`` (kept for the combine's probability gradient); each expert's MLP over its rows
    (``mlp_activation_bytes`` at ``moe_ffn / etp``); shared experts as a dense MLP of width
    ``shared * moe_ffn / t`` (Megatron-Core MoE; DeepSeek-V3 report, Sec. 2.1).
    """
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    rows = routed_tokens(row)
    router = 2.0 * B32 * t_tok * row[C_MOE_EXPERTS] / rep
    permuted = (gemm_input_bytes(row) + B16) * rows * h
    experts = mlp_activation_bytes(row, row[C_MOE_FFN] / row[C_ETP], rows / t_tok)
    shared = mlp_activation_bytes(row, row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / row[C_TP], 1.0)
    return router + permuted + experts + shared


@njit(error_model='numpy')
def mlp_block_activation_bytes(row, moe):
    """The MLP half of a layer: norm input ``2T h`` and MLP input ``g T h`` (replicated, ``/t`` with SP), the
    dense or MoE MLP, and the dropout mask ``T h`` when dropout is on (Korthikanti Sec. 4.1: ``19 s b h``)."""
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    inputs = (B16 + gemm_input_bytes(row)) * t_tok * h / rep
    mask = t_tok * h / rep if row[C_DROPOUT] > 0 else 0.0
    if moe:
        return inputs + mask + moe_activation_bytes(row)
    return inputs + mask + mlp_activation_bytes(row, row[C_FFN] / row[C_TP], 1.0)


@njit(error_model='numpy')
def eager_elementwise_bytes(row, moe):
    """Extra tensors eager PyTorch keeps when element-wise ops are not fused (``fused_kernels = 0``).

    Each autograd node saves its own inputs: an RMSNorm (``rms_norm``) written as
    ``x.float() * rsqrt(mean(x^2))`` keeps the FP32 copy of its input where a fused norm keeps the 16-bit
    input, ``(4 - 2) T h / t_sp`` more per norm (two per layer; LayerNorm is one ATen kernel even in eager
    mode and keeps its 16-bit input), and ``silu(w1 x) * w3 x`` keeps the SiLU output for the product besides the gate
    output, ``2 T f / t`` (PyTorch autograd saved-tensor semantics; TorchTitan's Llama modules). Fused
    kernels (Megatron, Transformer Engine, torch.compile) keep neither.
    """
    if row[C_FUSED_KERNELS] > 0:
        return 0.0
    t_tok = micro_batch_tokens(row)
    norms = 0.0
    if row[C_RMS_NORM] > 0:
        norms = 2.0 * (B32 - B16) * t_tok * row[C_HIDDEN] / replicated_divisor(row)
    if row[C_GATED_MLP] <= 0:
        return norms
    if moe:
        width = routed_tokens(row) / t_tok * row[C_MOE_FFN] / row[C_ETP] + \
            row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / row[C_TP]
    else:
        width = row[C_FFN] / row[C_TP]
    return norms + B16 * t_tok * width


@njit(error_model='numpy')
def op_checkpoint_layer_bytes(row, moe):
    """What one layer keeps under op-level selective checkpointing (``selective_policy = 1``).

    TorchTitan's ``op`` mode saves the outputs of every GEMM except every second one, and of the attention
    kernel, and recomputes everything else from the block input (TorchTitan ``apply_ac``: ``_save_list`` of
    ``aten.mm`` and SDPA, "except every second mm"). In a Llama block the GEMMs run wq, wk, wv, wo, w1, w3, w2:
    kept are the block input ``2 T h / t_sp``, the wq output ``2 T a d / t``, the wv output
    ``2 T kv d / t``, the attention output ``2 T a d / t`` with its FP32 log-sum-exp ``4 T a / t``, the w1
    output ``2 T f / t`` and the w2 output ``2 T h / t_sp``. Routed experts run grouped GEMMs, which the
    policy does not save; shared experts count as a dense MLP.
    """
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    heads = row[C_HEADS] / row[C_TP]
    if row[C_MLA] > 0:
        q_width = heads * (row[C_QK_NOPE_HEAD_DIM] + row[C_QK_ROPE_HEAD_DIM])
        v_width = heads * row[C_V_HEAD_DIM]
        out_width = v_width
    else:
        q_width = heads * row[C_HEAD_DIM]
        v_width = local_kv_width(row)
        out_width = q_width
    attention = B16 * t_tok * (q_width + v_width + out_width) + B32 * t_tok * heads
    if moe:
        width = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / row[C_TP]
    else:
        width = row[C_FFN] / row[C_TP]
    return 2.0 * B16 * t_tok * h / rep + attention + B16 * t_tok * width


@njit(error_model='numpy')
def layer_activation_bytes(row, moe, mode):
    """All activations of one layer for one micro-batch when the layer is not fully recomputed.

    Korthikanti et al. 2022, Table 2: ``s b h (34 + 5 a s / h)`` without parallelism,
    ``s b h (10 + 24/t + 5 a s/(h t))`` with TP, ``s b h/t (34 + 5 a s / h)`` with TP + SP, and the ``s^2``
    terms dropped by selective recompute (``mode``); plus ``eager_elementwise_bytes`` without fused kernels.
    Op-level selective checkpointing keeps ``op_checkpoint_layer_bytes`` instead.
    """
    if mode == RECOMPUTE_SELECTIVE and row[C_SELECTIVE_POLICY] > 0:
        return op_checkpoint_layer_bytes(row, moe)
    return (attention_activation_bytes(row, mode) + mlp_block_activation_bytes(row, moe)
            + eager_elementwise_bytes(row, moe))


@njit(error_model='numpy')
def checkpoint_bytes(row):
    """A fully recomputed layer keeps only its input: ``2 T h`` (``/t`` with SP) (Korthikanti Sec. 4.3:
    ``2 s b h L`` for full recompute)."""
    return B16 * micro_batch_tokens(row) * row[C_HIDDEN] / replicated_divisor(row)


@njit(error_model='numpy')
def kept_mode(row):
    """The recompute mode a layer that is not fully recomputed stores under: selective or none."""
    return RECOMPUTE_SELECTIVE if int(row[C_RECOMPUTE]) == RECOMPUTE_SELECTIVE else RECOMPUTE_NONE


@njit(error_model='numpy')
def stored_layer_bytes(row, layer_bytes):
    """What one layer keeps per micro-batch, given its ``layer_activation_bytes`` under ``kept_mode``.

    none / selective: all of them; full: ``checkpoint_bytes``; partial layers: a share
    ``recompute_fraction`` of layers keeps the checkpoint, the others everything (Megatron
    ``--recompute-num-layers``, the remaining layers are not recomputed).
    """
    mode = int(row[C_RECOMPUTE])
    if mode == RECOMPUTE_FULL:
        return checkpoint_bytes(row)
    if mode == RECOMPUTE_PARTIAL_LAYERS:
        r = row[C_RECOMPUTE_FRACTION]
        return r * checkpoint_bytes(row) + (1.0 - r) * layer_bytes
    return layer_bytes


@njit(error_model='numpy')
def recompute_working_bytes(row, largest_layer_bytes):
    """While a checkpointed layer is recomputed in backward, its full activations for one micro-batch are
    live again (Chen et al. 2016, Sec. 3): under full or partial recompute one layer of
    ``layer_activation_bytes`` (the larger of dense and MoE, ``largest_layer_bytes``, computed without
    recompute); under op-level selective checkpointing the same, computed here."""
    mode = int(row[C_RECOMPUTE])
    if mode == RECOMPUTE_FULL or (mode == RECOMPUTE_PARTIAL_LAYERS and row[C_RECOMPUTE_FRACTION] > 0):
        return largest_layer_bytes
    if mode == RECOMPUTE_SELECTIVE and row[C_SELECTIVE_POLICY] > 0:
        dense = layer_activation_bytes(row, False, RECOMPUTE_NONE)
        if is_moe(row):
            return max(dense, layer_activation_bytes(row, True, RECOMPUTE_NONE))
        return dense
    return 0.0


@njit(error_model='numpy')
def microbatches(row):
    """Micro-batches per step per pipeline: ``m = global_batch / (micro_batch * dp)``."""
    return max(row[C_GLOBAL_BATCH] / (row[C_MICRO_BATCH] * row[C_DP]), 1.0)


@njit(error_model='numpy')
def microbatches_in_flight(row, stage):
    """Micro-batches whose activations pipeline rank ``stage`` holds at its peak (in units of the rank's
    ``L/pp`` layers).

    1F1B: ``min(pp - stage, m)`` (Narayanan et al. 2021, Sec. 2.2.1). Interleaved with ``v`` chunks:
    Megatron warms up ``2 (pp - stage - 1) + (v - 1) pp`` chunks and holds one more, each ``1/v`` of the
    rank's layers: ``min(2 (pp - stage - 1) + (v - 1) pp + 1, m v) / v``; on the first rank this is
    ``pp (1 + (pp - 1)/(pp v))`` (Korthikanti Sec. 4.2.3). GPipe: all ``m`` (Huang et al. 2019). Without
    a pipeline, micro-batches run one after the other: 1.
    """
    pp = row[C_PP]
    m = microbatches(row)
    if pp <= 1:
        return 1.0
    schedule = int(row[C_PIPELINE_SCHEDULE])
    if schedule == SCHED_GPIPE:
        return m
    v = row[C_VP]
    if schedule == SCHED_INTERLEAVED and v > 1:
        chunks = 2.0 * (pp - stage - 1.0) + (v - 1.0) * pp + 1.0
        return min(chunks, m * v) / v
    return min(pp - stage, m)


@njit(error_model='numpy')
def embedding_activation_bytes(row):
    """The input embedding's dropout mask ``T h`` (``/t`` with SP) per micro-batch in flight on the first
    rank (Korthikanti Sec. 4.3: ``s b h p / t``); nothing without dropout."""
    if row[C_DROPOUT] <= 0:
        return 0.0
    return micro_batch_tokens(row) * row[C_HIDDEN] / replicated_divisor(row)


@njit(error_model='numpy')
def head_activation_bytes(row):
    """The final norm's input ``2 T h`` and the output layer's input ``g T h`` (``/t`` with SP), per
    micro-batch in flight on the last rank (Korthikanti Sec. 4.3)."""
    return (B16 + gemm_input_bytes(row)) * micro_batch_tokens(row) * row[C_HIDDEN] / replicated_divisor(row)


@njit(error_model='numpy')
def activations_bytes(row, stage, dense_layer, moe_layer, working):
    """Activations held on pipeline rank ``stage`` at its peak.

    ``in_flight * sum over the rank's layers of stored_layer_bytes`` (``dense_layer`` / ``moe_layer`` per
    layer) + one layer's recompute working set (``working``) + the embedding (first rank) or head (last rank)
    inputs per micro-batch in flight, times ``1 - activation_offload`` (the share offloaded to host memory,
    e.g. NeMo CPU activation offloading).
    """
    dense, moe, mtp = stage_layers(row, stage)
    per_mb = dense * dense_layer + (moe + mtp) * moe_layer if is_moe(row) else (dense + mtp) * dense_layer
    if stage == 0:
        per_mb += embedding_activation_bytes(row)
    if stage == row[C_PP] - 1:
        per_mb += head_activation_bytes(row)
    held = microbatches_in_flight(row, stage) * per_mb + working
    return held * (1.0 - row[C_ACTIVATION_OFFLOAD])


# --- KV cache --------------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def kv_cache_bytes_per_token(row):
    """KV-cache bytes per token on one device (serving; zero in training).

    ``2 * L/pp * max(kv_heads/tp, 1) * head_dim * bytes`` (K and V of every layer; Pope et al. 2022,
    Sec. 3.1; KV heads replicated once tp exceeds them, as vLLM does). MLA caches the compressed latent and
    the shared rotary key, ``(kv_lora_rank + qk_rope_head_dim) * L/pp * bytes``, the same on every TP rank
    (DeepSeek-V2 report, Sec. 2.1.2). ``bytes`` = 1 under FP8, else 2.
    """
    per = 1.0 if int(row[C_PRECISION]) == PRECISION_FP8 else B16
    layers = row[C_LAYERS] / row[C_PP]
    if row[C_MLA] > 0:
        return (row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]) * layers * per
    return 2.0 * layers * local_kv_width(row) * per


# --- buffers ---------------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def max_layer_params(row):
    """Parameters of the largest layer on one device (before sharding by the shard group)."""
    attn = attention_params(row) / row[C_TP] + 2.0 * row[C_HIDDEN]
    dense = attn + mlp_params(row, row[C_FFN]) / row[C_TP]
    if not is_moe(row):
        return dense
    experts = row[C_MOE_EXPERTS] * mlp_params(row, row[C_MOE_FFN]) / (row[C_EP] * row[C_ETP])
    shared = mlp_params(row, row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]) / row[C_TP]
    moe = attn + experts + shared + row[C_HIDDEN] * row[C_MOE_EXPERTS]
    if row[C_DENSE_LAYERS] > 0:
        return max(dense, moe)
    return moe


@njit(error_model='numpy')
def largest_module_params(row):
    """Parameters of the largest single weight matrix on one device: the MLP's ``h x ffn / t``, the fused
    QKV ``h x (a + 2 kv) d / t``, or one expert's ``h x moe_ffn / etp``."""
    h = row[C_HIDDEN]
    tp = row[C_TP]
    largest = max(h * row[C_FFN], h * (row[C_HEADS] + 2.0 * row[C_KV_HEADS]) * row[C_HEAD_DIM]) / tp
    if is_moe(row):
        largest = max(largest, h * row[C_MOE_FFN] / row[C_ETP])
    return largest


@njit(error_model='numpy')
def fsdp_gather_buffer_bytes(row):
    """FSDP/HSDP: the gathered weights of the unit being computed and of the prefetched one, and the unit's
    unsharded gradient before its reduce-scatter.

    Layer-wrapped FSDP (PyTorch FSDP/FSDP2, one unit per transformer block; Zhao et al. 2023, Sec. 3.3-3.4:
    at most two in-flight all-gathers, backward prefetch): ``(2 c + g) * max_layer_params`` with ``c`` the
    compute dtype (1 byte with FP8 parameters, else 2) and ``g`` = ``grad_reduce_bytes``. Bucketed ZeRO-3
    (``collective_bucket_bytes > 0``, DeepSpeed: parameters fetched per module, prefetched in buckets,
    ``stage3_prefetch_bucket_size``): the largest module gathered plus one prefetch bucket, and that
    module's gradient: ``(c + g) * largest_module_params + bucket``.
    """
    if int(row[C_SHARDING]) != SHARD_FSDP:
        return 0.0
    compute = 1.0 if row[C_FP8_PARAMS] > 0 else B16
    if row[C_COLLECTIVE_BUCKET_BYTES] > 0:
        return (compute + row[C_GRAD_REDUCE_BYTES]) * largest_module_params(row) + row[C_COLLECTIVE_BUCKET_BYTES]
    return (2.0 * compute + row[C_GRAD_REDUCE_BYTES]) * max_layer_params(row)


@njit(error_model='numpy')
def comm_buffer_bytes(row):
    """The largest in-flight collective of each process group, summed over groups (each has its stream).

    TP with SP: the all-gathered sequence ``2 T h`` (Megatron's global all-gather buffer); EP: dispatch
    send + receive ``2 * 2 R h``; CP ring: K and V chunks being sent and received ``2 * 2 * 2 T kv d / t``
    (Liu et al. 2023); PP: one activation sent and one received ``2 * 2 T h / t_sp``. DP gradient buckets
    are views of the gradient buffer (Megatron-Core DDP) and cost nothing extra; FSDP's are in
    ``fsdp_gather_buffer_bytes``.
    """
    t_tok = micro_batch_tokens(row)
    h = row[C_HIDDEN]
    total = 0.0
    if row[C_TP] > 1 and row[C_SEQUENCE_PARALLEL] > 0:
        total += B16 * t_tok * h
    if is_moe(row) and row[C_EP] > 1:
        total += 2.0 * B16 * routed_tokens(row) * h
    if row[C_CP] > 1:
        total += 2.0 * 2.0 * B16 * t_tok * local_kv_width(row)
    if row[C_PP] > 1:
        total += 2.0 * B16 * t_tok * h / replicated_divisor(row)
    return total


@njit(error_model='numpy')
def logits_workspace_bytes(row):
    """The LM head's logits and loss workspace for one micro-batch: BF16 logits ``2 T V / t`` and their FP32
    copy for the vocab-parallel cross entropy ``4 T V / t`` (Korthikanti Sec. 4.3: ``4 s b v / t``; Megatron
    ``vocab_parallel_cross_entropy`` upcasts to FP32), live at once at the peak; one set per micro-batch,
    since the last rank runs each micro-batch's backward right after its forward."""
    return (B16 + B32) * micro_batch_tokens(row) * row[C_VOCAB] / row[C_TP]


@njit(error_model='numpy')
def buffers_bytes(row, stage, shared):
    """Gather and communication buffers (``shared`` by every rank) plus the logits workspace of the last."""
    total = shared
    if stage == row[C_PP] - 1:
        total += logits_workspace_bytes(row)
    return total


# --- per device -------------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def stage_memory(row, stage, dense_layer, moe_layer, working, shared_buffers):
    """(weights, gradients, optimizer, activations, buffers) of pipeline rank ``stage``, given the
    stage-independent per-layer activations and buffers."""
    non_expert, expert = stage_params(row, stage)
    return (weights_bytes(row, non_expert, expert), gradients_bytes(row, non_expert, expert),
            optimizer_bytes(row, stage, non_expert, expert),
            activations_bytes(row, stage, dense_layer, moe_layer, working),
            buffers_bytes(row, stage, shared_buffers))


@njit(error_model='numpy')
def memory_row(row, out):
    """Fill ``out[M_*]`` with the bytes per device of each memory kind on the most loaded pipeline rank.

    The first and the last rank are evaluated; the one with the larger total is reported. KV cache is zero
    in training; ``overhead`` is the column ``framework_memory_bytes`` (CUDA context, NCCL, allocator
    reserve).
    """
    kept = kept_mode(row)
    dense_all = layer_activation_bytes(row, False, kept)
    moe_all = layer_activation_bytes(row, True, kept) if is_moe(row) else 0.0
    dense_layer = stored_layer_bytes(row, dense_all)
    moe_layer = stored_layer_bytes(row, moe_all)
    working = recompute_working_bytes(row, max(dense_all, moe_all))
    shared = fsdp_gather_buffer_bytes(row) + comm_buffer_bytes(row)
    w, g, o, a, b = stage_memory(row, 0.0, dense_layer, moe_layer, working, shared)
    last = row[C_PP] - 1.0
    if last > 0:
        w2, g2, o2, a2, b2 = stage_memory(row, last, dense_layer, moe_layer, working, shared)
        if w2 + g2 + o2 + a2 + b2 > w + g + o + a + b:
            w, g, o, a, b = w2, g2, o2, a2, b2
    out[M_WEIGHTS] = w
    out[M_GRADIENTS] = g
    out[M_OPTIMIZER] = o
    out[M_ACTIVATIONS] = a
    out[M_KV_CACHE] = 0.0
    out[M_BUFFERS] = b
    out[M_OVERHEAD] = row[C_FRAMEWORK_MEMORY_BYTES]


@njit(parallel=True, error_model='numpy')
def memory_table(params):
    """``(N_MEMORY_KINDS, n)`` bytes per device for every configuration (column) of ``params``."""
    n = params.shape[1]
    result = np.empty((N_MEMORY_KINDS, n))
    for j in prange(n):
        out = result[:, j]
        memory_row(params[:, j], out)
    return result
