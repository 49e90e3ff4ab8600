"""Memory of the real-world LM model, part 2: the activations a pipeline rank holds for backward.

Per layer and micro-batch (attention, dense and MoE MLPs, unfused element-wise ops, op-level checkpointing),
what recompute keeps of them, and how many micro-batches are in flight on a rank under each pipeline
schedule. ``T`` is the tokens of one micro-batch on one device before sequence-parallel sharding:
``T = micro_batch * seq_len / cp``. Compiled with ``error_model='numpy'`` (see kernels/lm/memory.py).
"""

from fastmodel.kernels.lm.fp4 import lowp_saved_input_bytes, low_precision_gemms
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.moe import expert_rows, expert_tp
from fastmodel.kernels.lm.layout import (
    C_CP, C_DROPOUT, C_FFN, C_FLASH_ATTENTION, C_FUSED_KERNELS, C_GATED_MLP,
    C_HEADS, C_HEAD_DIM, C_HIDDEN, C_KV_HEADS, C_KV_LORA_RANK, C_MICRO_BATCH, C_MLA, C_MTP_LAYERS,
    C_ATTN_OUT_E5M6, C_MOE_ACT_INPUT_FP8, C_MOE_COMBINE_SAVED_BYTES, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_PROBS_IN_EXPERTS,
    C_MOE_SHARED_EXPERTS, C_NORM_RECOMPUTE_FP8, C_PP,
    C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM, C_Q_LORA_RANK, C_RMS_NORM, RECOMPUTE_MODULE_CORE_ATTN, RECOMPUTE_MODULE_LAYERNORM,
    RECOMPUTE_MODULE_MLA_UP_PROJ, RECOMPUTE_MODULE_MLP, RECOMPUTE_MODULE_MOE, RECOMPUTE_MODULE_MOE_ACT,
    RECOMPUTE_MODULE_SHARED_EXPERTS,
    C_SELECTIVE_POLICY, C_SEQUENCE_PARALLEL, C_SEQ_LEN, C_TP, C_V_HEAD_DIM, RECOMPUTE_NONE, RECOMPUTE_SELECTIVE,
)
from fastmodel.kernels.lm.memory_states import B16, B32, is_moe, stage_layers
from fastmodel.kernels.lm.pipeline import dualpipe_direction_in_flight, mirror_stage
from fastmodel.kernels.lm.shape import mtp_stage_layers
from fastmodel.kernels.lm.recompute import module_recomputed  # noqa: F401 - the one rule, re-exported


#: bytes per element of an FP8 cached activation, and of DeepSeek-V3's 12-bit E5M6 format (1 sign, 5 exponent,
#: 6 mantissa bits; report sec. 3.3.3), taken as packed
FP8_BYTES = 1.0
E5M6_BYTES = 12.0 / 8.0


# --- activations ---------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def discarded_norm_output_bytes(row):
    """Bytes per token per norm that ``layernorm`` recompute frees: the norm output the next GEMM saved, ``2 h``
    (``/t`` with SP) when GEMMs run in 16 bits; under FP8 GEMMs the GEMM keeps its own FP8 cast (Transformer
    Engine), which discarding the 16-bit output does not free, so 0 -- unless ``norm_recompute_fp8`` (DeepSeek-V3
    report sec. 3.2.3: the recompute of every RMSNorm removes storing its output): then that cast,
    ``g h``. Megatron-Core recomputes
    ``input_layernorm`` and ``pre_mlp_layernorm`` with output-discarding checkpointing
    (``CheckpointWithoutOutput``; ``TransformerConfig.recompute_modules``)."""
    if not module_recomputed(row, RECOMPUTE_MODULE_LAYERNORM):
        return 0.0
    if gemm_input_bytes(row) < B16:
        # ``norm_recompute_fp8``: the recompute re-derives the FP8 cast as well, so that cast goes (DeepSeek-V3
        # report sec. 3.2.3); else Transformer Engine's FP8 cast stays and nothing is freed
        return gemm_input_bytes(row) * row[C_HIDDEN] / replicated_divisor(row) if row[C_NORM_RECOMPUTE_FP8] > 0 else 0.0
    return B16 * row[C_HIDDEN] / replicated_divisor(row)


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
    """Bytes per stored GEMM input: under FP8 GEMMs the FP8-cast input Transformer Engine saves for the
    weight-gradient GEMM, 1 + the recipe's scale bytes (``fastmodel.kernels.lm.fp8.fp8_saved_input_bytes``: 1/32
    MXFP8, 4/128 blockwise, else 0), else 2."""
    if low_precision_gemms(row):
        return lowp_saved_input_bytes(row)      # NVFP4: the columnwise copy, 0.5625 (docs/model.md §11.38)
    return B16


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
def mla_latent_bytes(row):
    """Bytes per token MLA keeps of its down-projections (latents ``d_c' + d_c`` and the RoPE key ``d_h^R``).
    Up-projections kept: the latents as the up-projection GEMM's input, ``g`` each. ``mla_up_proj`` recomputed: the
    recompute region's 16-bit inputs, ``2 (d_c' + d_c + d_h^R)``: Megatron-Core ``CheckpointWithoutOutput`` over
    ``qkv_up_proj_and_rope_apply`` (multi_latent_attention.py@d98e8a6 lines 983-988), whose up-projections carry the
    latent RMSNorms fused (``TELayerNormColumnParallelLinear``, ``q_layernorm = kv_layernorm = IdentityOp``,
    gpt_layer_specs.py lines 105-130); nothing keeps the FP8 cast of a recomputed GEMM's input. DeepSeek-V3 alike:
    norms and up-projections recomputed (report sec. 3.2.3), norms in BF16 (sec. 3.3.1)."""
    width = row[C_Q_LORA_RANK] + row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]
    if module_recomputed(row, RECOMPUTE_MODULE_MLA_UP_PROJ):
        return B16 * width
    return gemm_input_bytes(row) * width


@njit(error_model='numpy')
def attention_activation_bytes(row, mode):
    """Activations one attention block stores for backward, one micro-batch, one device.

    Korthikanti et al. 2022, Sec. 4.1 (``11 s b h + 5 a s^2 b``), generalised to GQA/MLA widths:
    norm input ``2T h`` and QKV input ``g T h`` (replicated, ``/t`` with SP; ``g`` = ``gemm_input_bytes``);
    Q ``2T a d/t``, K and V ``2T kv d/t`` each; the output-projection input (= flash output O) ``2T a d/t``
    (+ an FP8 copy ``T a d/t`` under FP8); the ``s^2`` scores (``attention_scores_bytes``); flash's FP32
    log-sum-exp ``4 T a/t`` (Dao et al. 2022), dropped by selective recompute; the dropout mask ``T h``
    (replicated) when dropout is on. Megatron-Core ``recompute_modules``: ``mla_up_proj`` discards the MLA
    up-projected and rotated Q, K, V (``2 T a (2 d_qk + d_v)/t``; the latents stay, ``mla_latent_bytes``), ``layernorm`` the norm
    output (``discarded_norm_output_bytes``); a list without ``core_attn`` keeps the log-sum-exp.
    ``attn_out_e5m6``: the attention output is kept once at 12 bits (``E5M6_BYTES``), for the attention backward
    and the output projection's weight gradient alike (DeepSeek-V3 report sec. 3.3.3 (1)).
    """
    tp = row[C_TP]
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    g = gemm_input_bytes(row)
    heads = row[C_HEADS] / tp
    inputs = (B16 + g) * t_tok * h / rep - t_tok * discarded_norm_output_bytes(row)
    if row[C_MLA] > 0:
        qk = row[C_QK_NOPE_HEAD_DIM] + row[C_QK_ROPE_HEAD_DIM]
        latent = mla_latent_bytes(row) * t_tok
        up = 0.0 if module_recomputed(row, RECOMPUTE_MODULE_MLA_UP_PROJ) else 1.0
        qkv = up * B16 * t_tok * heads * (2.0 * qk + row[C_V_HEAD_DIM]) + latent
        out_width = heads * row[C_V_HEAD_DIM]
    else:
        qkv = B16 * t_tok * (heads * row[C_HEAD_DIM] + 2.0 * local_kv_width(row))
        out_width = heads * row[C_HEAD_DIM]
    flash = row[C_FLASH_ATTENTION] > 0
    out = (B16 if (flash or g == B16) else g) * t_tok * out_width
    if flash and g < B16:
        out += g * t_tok * out_width
    if row[C_ATTN_OUT_E5M6] > 0:
        out = E5M6_BYTES * t_tok * out_width
    core_kept = mode == RECOMPUTE_NONE or not module_recomputed(row, RECOMPUTE_MODULE_CORE_ATTN)
    stats = B32 * t_tok * heads if (flash and core_kept) else 0.0
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
def expert_mlp_activation_bytes(row, width, tokens_factor):
    """Stored activations of an MoE expert MLP (routed or shared): :func:`mlp_activation_bytes`, or under
    ``moe_act_input_fp8`` with a gated MLP the SwiGLU input alone in FP8, ``1 * 2 f`` per row, its output (the
    down-projection input) recomputed in backward (DeepSeek-V3 report sec. 3.3.3 (2): "we cache the inputs of the
    SwiGLU operator and recompute its output in the backward pass ... stored in FP8")."""
    if row[C_MOE_ACT_INPUT_FP8] > 0 and row[C_GATED_MLP] > 0:
        return FP8_BYTES * 2.0 * tokens_factor * micro_batch_tokens(row) * width
    return mlp_activation_bytes(row, width, tokens_factor)


@njit(error_model='numpy')
def routed_tokens(row):
    """Routed token rows per device per micro-batch on the busiest rank: ``kernels.lm.moe.expert_rows``,
    ``T / (cp tp) x etp x k x load`` (tokens enter the dispatch sequence-parallel-sharded, Megatron-Core requires
    SP for MoE with TP; an expert-TP group gathers its ``etp`` ranks' tokens; padded to capacity the load is
    ``cf``, Fedus et al. 2021; dropless the busiest rank's ``moe_imbalance``)."""
    return expert_rows(row)


@njit(error_model='numpy')
def moe_activation_bytes(row):
    """Stored activations of one MoE MLP block (router, routed experts, shared experts).

    Router logits and probabilities in FP32 ``2 * 4 T E / t_sp``; the permuted expert input ``g R h`` and
    expert output ``c R h`` kept for the combine's probability gradient (``c`` = ``moe_combine_saved_bytes``, 2
    when unset; TorchTitan's eager all-to-all path saves its FP32 cast, 4, docs/model.md §11.61) -- or, where the probabilities scale
    the expert activation (``moe_probs_in_experts``: Megatron-Core's TEGroupedMLP applies ``permuted_probs``
    in its weighted SwiGLU and unpermutes without them, megatron/core/transformer/moe/experts.py
    ``bias_act_func`` and token_dispatcher.py ``unpermute`` at Megatron-LM d98e8a6), the FP32 probabilities
    ``4 R`` the weighted activation saves instead of the expert output; each expert's MLP over its rows
    (``mlp_activation_bytes`` at ``moe_ffn / etp``); shared experts as a dense MLP of width
    ``shared * moe_ffn / t`` (Megatron-Core MoE; DeepSeek-V3 report, Sec. 2.1). ``recompute_modules``:
    ``moe`` checkpoints the whole MoE layer (only its input, counted by the caller, stays), ``shared_experts``
    the shared experts, ``moe_act`` discards the experts' activation output (``2 R f``, the FC2 input, under
    16-bit GEMMs; under FP8 the grouped GEMM keeps its own FP8 cast, as for ``layernorm``);
    ``moe_act_input_fp8``: :func:`expert_mlp_activation_bytes`.
    """
    if module_recomputed(row, RECOMPUTE_MODULE_MOE):
        return 0.0
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    rows = routed_tokens(row)
    width = row[C_MOE_FFN] / expert_tp(row)
    router = 2.0 * B32 * t_tok * row[C_MOE_EXPERTS] / rep
    if row[C_MOE_PROBS_IN_EXPERTS] > 0:
        permuted = gemm_input_bytes(row) * rows * h + B32 * rows
    else:
        combine = row[C_MOE_COMBINE_SAVED_BYTES] if row[C_MOE_COMBINE_SAVED_BYTES] > 0 else B16
        permuted = (gemm_input_bytes(row) + combine) * rows * h
    experts = expert_mlp_activation_bytes(row, width, rows / t_tok)
    if (module_recomputed(row, RECOMPUTE_MODULE_MOE_ACT) and gemm_input_bytes(row) == B16
            and not (row[C_MOE_ACT_INPUT_FP8] > 0 and row[C_GATED_MLP] > 0)):
        experts -= B16 * rows * width
    shared = 0.0
    if not module_recomputed(row, RECOMPUTE_MODULE_SHARED_EXPERTS):
        shared = expert_mlp_activation_bytes(row, row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / row[C_TP], 1.0)
    return router + permuted + experts + shared


@njit(error_model='numpy')
def mlp_block_activation_bytes(row, moe):
    """The MLP half of a layer: norm input ``2T h`` and MLP input ``g T h`` (replicated, ``/t`` with SP), the
    dense or MoE MLP, and the dropout mask ``T h`` when dropout is on (Korthikanti Sec. 4.1: ``19 s b h``).
    ``recompute_modules``: ``mlp`` checkpoints a dense MLP (its input stays), ``layernorm`` discards the norm
    output (``discarded_norm_output_bytes``)."""
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    inputs = (B16 + gemm_input_bytes(row)) * t_tok * h / rep - t_tok * discarded_norm_output_bytes(row)
    mask = t_tok * h / rep if row[C_DROPOUT] > 0 else 0.0
    if moe:
        return inputs + mask + moe_activation_bytes(row)
    if module_recomputed(row, RECOMPUTE_MODULE_MLP):
        return inputs + mask
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
        width = routed_tokens(row) / t_tok * row[C_MOE_FFN] / expert_tp(row) + \
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
def mtp_activation_bytes(row):
    """What the ``mtp_layers`` MTP modules save per micro-batch beside their layers (DeepSeek-V3 report sec. 2.2;
    Megatron-Core ``MultiTokenPredictionLayer._concat_embeddings``): the inputs of ``enorm`` and ``hnorm`` ``2 T h``
    each, of ``eh_proj`` ``g T 2h``, and the head's (:func:`head_activation_bytes`, ``(2 + g) T h``) once more per
    module, all ``/t`` with SP: ``(6 + 3g) T h / t_sp`` per module."""
    tokens_h = micro_batch_tokens(row) * row[C_HIDDEN] / replicated_divisor(row)
    return row[C_MTP_LAYERS] * ((2.0 * B16 + 2.0 * gemm_input_bytes(row)) * tokens_h + head_activation_bytes(row))


@njit(error_model='numpy')
def stage_microbatch_bytes(row, stage, dense_layer, moe_layer):
    """What pipeline rank ``stage`` keeps for one micro-batch in flight: its layers' ``stored_layer_bytes``
    (``dense_layer`` / ``moe_layer`` per layer, an MTP module's layer as its kind, ``shape.mtp_stage_layers``) plus
    the embedding (first rank) or head (last rank) inputs."""
    dense, moe, mtp = stage_layers(row, stage)
    dense, moe = mtp_stage_layers(row, dense, moe, mtp)
    per_mb = dense * dense_layer + moe * moe_layer if is_moe(row) else dense * dense_layer
    if stage == 0:
        per_mb += embedding_activation_bytes(row)
    if stage == row[C_PP] - 1:
        per_mb += head_activation_bytes(row) + mtp_activation_bytes(row)
    return per_mb


@njit(error_model='numpy')
def rank_microbatch_bytes(row, stage, dense_layer, moe_layer):
    """What rank ``stage`` keeps per micro-batch in flight, on average over the micro-batches it holds at its
    peak: :func:`stage_microbatch_bytes` of its stage; under DualPipe, whose ranks hold two model stages
    (``mirror_stage``), the mean of the two stages' weighted by the micro-batches of each direction in flight
    (``dualpipe_direction_in_flight``: ``pp - stage`` of its own stage, ``stage + 1`` of the mirror), so that
    ``microbatches_in_flight x`` this is what the rank holds."""
    own = stage_microbatch_bytes(row, stage, dense_layer, moe_layer)
    mirror = mirror_stage(row, stage)
    if mirror < 0.0:
        return own
    forward, reverse = dualpipe_direction_in_flight(row, stage)
    other = stage_microbatch_bytes(row, mirror, dense_layer, moe_layer)
    return (forward * own + reverse * other) / (forward + reverse)
