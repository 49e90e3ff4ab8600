"""One transformer layer's shape, for training and serving alike (docs/model.md §11.4; docs/model_serving.md).

The terms both the training step (``kernels/lm/layer.py``, ``memory_states.py``) and serving
(``kernels/serve/``, the one allowed crossing of the wings) read, written once:

- the layer mix and the attention widths (MLA's nope + rope and value widths, or head_dim);
- one attention-parameter count (:func:`attention_params`: the projections, GQA or MLA) and one count of the
  norm weights beside it (:func:`norm_params`: the layer's two RMSNorms and MLA's two latent norms);
- one expert-sharding rule (:func:`expert_tp`, :func:`expert_weight_params`): a device holds ``E / ep``
  routed experts, each split over ``etp`` devices;
- one GEMM list (:func:`layer_gemm_time`: the projections, the dense MLP or the router, grouped routed experts
  and shared experts) on one GEMM model (``roofline.gemm_roofline``);
- one memory-bound model (:func:`elementwise_bytes`: bytes per element of the norms, residual adds, MLP
  activation and rotary embedding, fused or eager);
- training only, kept in this leaf module so that ``layer.py`` and ``memory_states.py`` (which imports
  ``layer.py`` through ``pipeline.py``) read one definition: a stored gradient element's bytes
  (:func:`stored_grad_bytes`).

Each engine passes what differs by workload: the tokens a device runs, how routed tokens spread over the
local experts (training: balanced over all E/ep; serving decode: the experts a step touches), the weight bytes
(training: the GEMM precision's; serving: the checkpoint's) and whether kernels pay a launch (serving's decode
replays CUDA graphs).
"""

from fastmodel.kernels.columns import (
    C_DENSE_LAYERS, C_EP, C_ETP, C_EXPERT_FFN_ALIGN, C_EXPERT_HIDDEN_ALIGN, C_FFN, C_FUSED_KERNELS, C_GATED_MLP,
    C_EMBEDDING_DENSE_GRAD, C_FSDP_VERSION, C_GRAD_REDUCE_BYTES, C_HEAD_DIM, C_HEADS, C_HIDDEN, C_KV_HEADS, C_KV_LORA_RANK,
    C_LAYERS, C_MASTER_WEIGHTS, C_MLA, C_MOE_EXPERTS, C_MOE_LAYER_FREQ, C_MOE_FFN, C_MOE_SHARED_EXPERTS, C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM,
    C_ATTENTION_CHUNK, C_ATTENTION_CHUNK_LAYERS, C_Q_LORA_RANK, C_SLIDING_WINDOW, C_SLIDING_WINDOW_LAYERS, C_STACK_COMPUTE_EFF, C_TP, C_VOCAB,
    C_SHARDING, C_WGRAD_FUSED_ACCUMULATION, SHARD_FSDP,
)
import math

from fastmodel.kernels.jit import njit
from fastmodel.registry.lm_fsdp1 import FSDP1
from fastmodel.kernels.roofline import accumulate_source_time, expert_gemm_roofline, gemm_roofline, memory_bound_time
from fastmodel.kernels.softmax_rate import attention_dims  # defined beside the exponentials' rate, re-exported

#: bytes per element of activations and 16-bit weights (the LM head, embedding and router stay 16-bit)
ACT_BYTES = 2.0


#: bytes of an FP32 element: the parameter dtype of a mixed-precision FSDP1 flat parameter
FP32_BYTES = 4.0


@njit
def fsdp1_fp32_shards(row):
    """True when FSDP1 shards FP32 flat parameters and computes in 16 bits (``MixedPrecision(param_dtype=bf16)``):
    an FSDP1 stack (``fsdp_version`` 1) under FSDP sharding with master weights (``master_weights`` > 0:
    the sharded flat parameter is the FP32 master). Then each gather casts the FP32 shard to 16 bits first and each
    reduced gradient shard is cast back to FP32 (docs/model.md §11.63, second note)."""
    return row[C_FSDP_VERSION] == FSDP1 and int(row[C_SHARDING]) == SHARD_FSDP and row[C_MASTER_WEIGHTS] > 0


@njit(error_model='numpy')
def stored_grad_bytes(row):
    """Bytes of a stored gradient element: ``grad_reduce_bytes``, or at most 2 for a 16-bit model
    (``master_weights = 0``): autograd gives a gradient its parameter's dtype, and PyTorch FSDP2 casts a gradient
    reduced in FP32 (``MixedPrecisionPolicy.reduce_dtype``) back to the sharded parameter's dtype. FSDP1 with FP32
    flat parameters (:func:`fsdp1_fp32_shards`) stores 4 whatever it reduces in: ``_accumulate_sharded_grad``
    casts the reduced shard to the parameter's dtype (``_cast_grad_to_param_dtype``; PyTorch v2.3.0 =
    pytorch/pytorch@97ff6cfd torch/distributed/fsdp/_runtime_utils.py lines 900, 1013-1040; docs/model.md §11.63, second note). Training
    only; here, a leaf module, so that the memory model (``memory_states``) and the head's costs
    (``layer.head_costs``) read one definition."""
    if fsdp1_fp32_shards(row):
        return FP32_BYTES
    return min(row[C_GRAD_REDUCE_BYTES], ACT_BYTES) if row[C_MASTER_WEIGHTS] <= 0 else row[C_GRAD_REDUCE_BYTES]


@njit(inline="always")
def wgrad_source_bytes(row):
    """Bytes per element a weight-gradient GEMM reads back from the gradient it accumulates into (beta = 1):
    ``grad_reduce_bytes``, the main gradient's dtype, where the stack fuses the accumulation into the GEMM
    (``wgrad_fused_accumulation``: Megatron-LM ``gradient_accumulation_fusion``, TE ``fuse_wgrad_accumulation``);
    0 where the GEMM writes a fresh gradient (beta = 0; a separate accumulation, if any, is ``grad_accum_bytes``).
    docs/model.md §11.3 and §11.46; the routed experts (``moe.expert_wgrad_extra``) and the dense linears
    (:func:`wgrad_source_s`) read this one definition."""
    return row[C_GRAD_REDUCE_BYTES] if row[C_WGRAD_FUSED_ACCUMULATION] > 0.0 else 0.0


@njit
def wgrad_source_s(row, elements):
    """Seconds one micro-batch's dense weight-gradient GEMMs spend reading back the ``elements`` main-gradient
    elements they accumulate into (the layer's or the head's fused linears on one device), over
    ``stack_compute_eff``: ``roofline.accumulate_source_time`` at :func:`wgrad_source_bytes`; 0 without fusion.
    Part of the GEMM (its epilogue), charged in the weight-gradient pass (docs/model.md §11.3, §11.46)."""
    source = wgrad_source_bytes(row)
    if source <= 0.0 or elements <= 0.0:
        return 0.0
    return accumulate_source_time(row, elements, source) / row[C_STACK_COMPUTE_EFF]


@njit
def embedding_dense_grad_s(row):
    """Seconds of the word embedding's dense gradient one micro-batch on the rank that holds the embedding
    (docs/model.md §11.43, the DeepSeek-V2 note): the backward of ``F.embedding`` zero-fills a 16-bit gradient of
    the whole ``V x h / t`` weight and scatters the tokens' rows into it (pytorch 01b9dc56
    EmbeddingBackwardKernel.cu ``at::zeros``; Megatron-LM 23e00ed tensor_parallel/layers.py 281), and the DDP
    hook on the weight's gradient accumulator adds it into the main gradient (distributed_data_parallel.py 427,
    523): ``V h / t x (2 + 2 + 2 b_g)`` bytes, ``b_g`` the stored gradient's (:func:`stored_grad_bytes`),
    memory-bound; 0 without ``embedding_dense_grad``. Training only; here, a leaf module, so that the head's costs
    at pp 1 (``layer.head_costs``) and the first rank's at pp > 1 (``first_rank.embedding_stage``) read one
    definition."""
    if row[C_EMBEDDING_DENSE_GRAD] <= 0.0:
        return 0.0
    return memory_bound_time(row, row[C_VOCAB] / row[C_TP] * row[C_HIDDEN] * (4.0 + 2.0 * stored_grad_bytes(row)))


@njit
def attention_params(row):
    """Matmul parameters of one attention block (projections, before TP).

    GQA: ``h a d (Q) + 2 h kv d (K, V) + a d h (O)`` (Ainslie et al. 2023). MLA (DeepSeek-V2 report sec. 2.1):
    ``h q_lora + q_lora a (nope + rope)`` (``h a (nope + rope)`` without a query low rank)
    ``+ h (kv_lora + rope) + kv_lora a (nope + v) + a v h``."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    if row[C_MLA] > 0.0:
        dqk, dv = attention_dims(row)
        q_rank = row[C_Q_LORA_RANK]
        q = h * q_rank + q_rank * a * dqk if q_rank > 0.0 else h * a * dqk
        kv = h * (row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]) + row[C_KV_LORA_RANK] * a * (row[C_QK_NOPE_HEAD_DIM] + dv)
        return q + kv + a * dv * h
    dh = row[C_HEAD_DIM]
    return h * (a + 2.0 * row[C_KV_HEADS]) * dh + a * dh * h


@njit
def mla_duplicated_params(row):
    """Parameters of an MLA layer's down-projections, which Megatron-Core's Transformer Engine spec replicates over
    TP (docs/model.md §11.44): ``linear_q_down_proj`` (h q_lora; absent without a query low rank, where
    ``linear_q_proj`` is column-parallel) and ``linear_kv_down_proj`` (h (kv_lora + rope)), both ``TELinear``
    with ``parallel_mode='duplicated'`` (NVIDIA/Megatron-LM d98e8a6 ``multi_latent_attention.py`` 525-527,
    572-574; ``transformer_engine.py`` 1313-1318 marks them not tensor-parallel). 0 for other attention."""
    if row[C_MLA] <= 0.0:
        return 0.0
    h = row[C_HIDDEN]
    return h * row[C_Q_LORA_RANK] + h * (row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM])


@njit
def attention_params_per_device(row, t):
    """Attention parameters one of ``t`` TP ranks holds: :func:`attention_params` over t, but MLA's replicated
    down-projections whole (:func:`mla_duplicated_params`, §11.44)."""
    if t <= 1.0:
        return attention_params(row)
    duplicated = mla_duplicated_params(row)
    return (attention_params(row) - duplicated) / t + duplicated


@njit
def largest_attention_matrix(row, t):
    """Parameters of the attention block's largest single weight matrix on one of ``t`` TP ranks. GQA: the fused
    QKV ``h (a + 2 kv) d / t`` (the output projection ``a d h / t`` is no larger). MLA (DeepSeek-V2 report sec. 2.1;
    Megatron-Core ``MLASelfAttention``, NVIDIA/Megatron-LM d98e8a6 ``multi_latent_attention.py``) has no fused QKV:
    the largest of ``linear_q_down_proj`` ``h q_lora`` and ``linear_kv_down_proj`` ``h (kv_lora + rope)``, replicated
    (:func:`mla_duplicated_params`), ``linear_q_up_proj`` ``q_lora a (nope + rope) / t`` (``linear_q_proj``
    ``h a (nope + rope) / t`` without a query low rank), ``linear_kv_up_proj`` ``kv_lora a (nope + v) / t`` and
    ``linear_proj`` ``a v h / t``."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    dqk, dv = attention_dims(row)
    out = a * dv * h / t
    if row[C_MLA] <= 0.0:
        return max(h * (a + 2.0 * row[C_KV_HEADS]) * row[C_HEAD_DIM] / t, out)
    q_rank = row[C_Q_LORA_RANK]
    q = max(h * q_rank, q_rank * a * dqk / t) if q_rank > 0.0 else h * a * dqk / t
    kv_rank = row[C_KV_LORA_RANK]
    kv = max(h * (kv_rank + row[C_QK_ROPE_HEAD_DIM]), kv_rank * a * (row[C_QK_NOPE_HEAD_DIM] + dv) / t)
    return max(q, kv, out)


@njit
def norm_params(row):
    """Norm weights of one layer, replicated over TP: the two RMSNorms (``2 h``) and, under MLA, the query and
    key-value latent norms (``q_lora + kv_lora``; DeepSeek-V2 report sec. 2.1)."""
    norms = 2.0 * row[C_HIDDEN]
    if row[C_MLA] > 0.0:
        norms += row[C_Q_LORA_RANK] + row[C_KV_LORA_RANK]
    return norms


@njit(inline="always")
def mlp_matrices(row):
    """Weight matrices of an MLP: 3 gated (SwiGLU/GeGLU; Shazeer 2020), else 2."""
    return 3.0 if row[C_GATED_MLP] > 0.0 else 2.0


@njit
def mlp_params(row, width):
    """One MLP of intermediate width ``width``: ``3 h width`` gated, else ``2 h width``."""
    return mlp_matrices(row) * row[C_HIDDEN] * width


@njit(inline="always")
def expert_tp(row, within_tp):
    """Devices one routed expert's weights are split over. Training: ``etp`` (Megatron-Core expert tensor
    parallelism; 0 = tp, its default), experts over ``ep`` ranks of the folded expert mesh (kernels/lm/moe.py). Serving (``within_tp`` 1.0): expert
    parallelism runs inside the TP group (vLLM ``--enable-expert-parallel``: EP size = TP x DP, here TP; the
    serving rule ``ep_not_dividing`` keeps ep | tp), so each expert is split over ``tp / ep``."""
    if within_tp > 0.0:
        return row[C_TP] / row[C_EP]
    return row[C_ETP] if row[C_ETP] > 0.0 else row[C_TP]     # etp 0: tp (Megatron-Core's default)


@njit(inline="always")
def padded(x, align):
    """``x`` rounded up to a multiple of ``align`` (0: ``x`` itself)."""
    return math.ceil(x / align) * align if align > 0.0 else x


@njit(inline="always")
def expert_dims(row, etp):
    """(width, hidden) of one routed expert's GEMMs on a device as the engine lays its weights out: ``moe_ffn / etp``
    and ``hidden``, each rounded up to ``expert_ffn_align`` / ``expert_hidden_align`` (0: none; serving only,
    docs/model_serving.md S46)."""
    return padded(row[C_MOE_FFN] / etp, row[C_EXPERT_FFN_ALIGN]), padded(row[C_HIDDEN], row[C_EXPERT_HIDDEN_ALIGN])


@njit
def expert_weight_params(row, etp):
    """Routed-expert weights one device holds: ``E / ep`` experts of ``mlp_params(moe_ffn) / etp`` each, at the
    engine's padded dims where it pads (:func:`expert_dims`)."""
    if row[C_EXPERT_FFN_ALIGN] > 0.0 or row[C_EXPERT_HIDDEN_ALIGN] > 0.0:
        width, h = expert_dims(row, etp)
        return row[C_MOE_EXPERTS] / row[C_EP] * mlp_matrices(row) * h * width
    return row[C_MOE_EXPERTS] / row[C_EP] * mlp_params(row, row[C_MOE_FFN]) / etp


@njit
def moe_layers(row):
    """Layers with routed experts (0 for a dense model): one every ``moe_layer_freq`` after the leading dense
    layers (Megatron-Core ``--moe-layer-freq``, DeepSpeed-MoE's expert interval)."""
    if row[C_MOE_EXPERTS] <= 0.0:
        return 0.0
    return math.floor((row[C_LAYERS] - row[C_DENSE_LAYERS]) / max(1.0, row[C_MOE_LAYER_FREQ]))


@njit
def mtp_layer_is_moe(row):
    """True when the MTP module's transformer layer is a MoE layer: Megatron-Core builds it from the spec of the
    decoder's last layer (megatron/core/models/gpt/gpt_layer_specs.py ``get_gpt_mtp_block_spec_for_backend``:
    ``spec.layer_specs[-1]``), and DeepSeek-V3's MTP layer (``num_nextn_predict_layers``, report sec. 2.2) sits
    after ``first_k_dense_replace``: a MoE layer. The last layer is MoE when the model has MoE layers and, one
    every ``moe_layer_freq`` after the leading dense ones (``moe_layers``), the pattern lands on it."""
    if moe_layers(row) <= 0.0:
        return False
    freq = max(1.0, row[C_MOE_LAYER_FREQ])
    return (row[C_LAYERS] - 1.0 - row[C_DENSE_LAYERS]) % freq == 0.0


@njit
def mtp_stage_layers(row, dense, moe, mtp):
    """(dense, MoE) layers of a stage holding ``dense`` and ``moe`` decoder layers and ``mtp`` MTP modules, each
    module's transformer layer counted as its kind (:func:`mtp_layer_is_moe`)."""
    if mtp_layer_is_moe(row):
        return dense, moe + mtp
    return dense + mtp, moe


@njit(inline="always")
def chunk_pairs(s, chunk, diagonal):
    """Query-key pairs of one causal sequence of ``s`` tokens under chunked local attention of ``chunk`` tokens
    (key j seen by query i when floor(j / C) = floor(i / C) and j <= i; docs/model.md §11.55): q full chunks and
    a rest r = s - q C, q C (C + d) / 2 + r (r + d) / 2 with d = ``diagonal``: 1 counts the diagonal (serving's
    exact l (l + 1) / 2), 0 is the continuous limit training's s^2 / 2 full causal pairs use."""
    q = math.floor(s / chunk)
    r = s - q * chunk
    return q * chunk * (chunk + diagonal) / 2.0 + r * (r + diagonal) / 2.0


@njit
def layer_mix(row):
    """Counts of the four layer kinds: (dense full, dense sliding, MoE full, MoE sliding); the sliding kinds hold
    the chunked-attention layers of a model with ``attention_chunk`` (§11.55). The sliding share is spread over
    dense and MoE layers in proportion, not placed where the model puts it (Llama 4 Maverick's 12 global layers are
    all MoE); the totals per attention kind and per MLP kind are exact, which is what the additive costs sum."""
    layers = row[C_LAYERS]
    n_moe = moe_layers(row)
    sliding = min(row[C_SLIDING_WINDOW_LAYERS], layers) / layers if row[C_SLIDING_WINDOW] > 0.0 else 0.0
    if row[C_ATTENTION_CHUNK] > 0.0:       # chunked layers take the sliding kind's slot (a model has one, §11.55)
        sliding = min(row[C_ATTENTION_CHUNK_LAYERS], layers) / layers
    n_dense = layers - n_moe
    return n_dense * (1.0 - sliding), n_dense * sliding, n_moe * (1.0 - sliding), n_moe * sliding


@njit(inline="always")
def elementwise_bytes(row, hidden_elements, mlp_elements, rotary_elements):
    """HBM bytes of one layer's element-wise kernels in the forward pass.

    Per element of the hidden state: 2 norms and 2 residual adds; of the MLP's intermediate: the activation;
    of the query/key heads: rotary embedding. Fused kernels (Megatron/Transformer Engine, torch.compile, serving
    engines) read and write each tensor once: norm 2+2 B, residual add 2+2+2 B, SwiGLU 2+2+2 B (GELU 2+2 B),
    rotary 2+2 B. Eager PyTorch runs the reference implementations op by op in FP32: RMSNorm as float() 2+4,
    pow 4+4, mean 4, mul 4+4, type_as 4+2, weight mul 2+2 = 36 B; SwiGLU as silu 2+2 then mul 2+2+2 = 10 B;
    complex rotary as float() 2+4, complex mul 4+4+4, type_as 4+2 = 24 B.
    """
    norm, activation, rotary = elementwise_unit_bytes(row)
    residual = 6.0
    return hidden_elements * 2.0 * (norm + residual) + mlp_elements * activation + rotary_elements * rotary


@njit(inline="always")
def elementwise_unit_bytes(row):
    """(norm, MLP activation, rotary) HBM bytes per element of :func:`elementwise_bytes`, fused or eager."""
    gated = row[C_GATED_MLP] > 0.0
    if row[C_FUSED_KERNELS] > 0.0:
        return 4.0, (6.0 if gated else 4.0), 4.0
    return 36.0, (10.0 if gated else 4.0), 24.0


@njit
def attention_gemm_time(row, tokens, fp8, wbytes, launch):
    """Seconds (at the modelled speed) of the attention projections of one layer for ``tokens`` tokens on one TP rank: column-parallel
    Q, K, V (MLA: the query and key-value down and up projections), row-parallel output."""
    return attention_gemm_parts(row, tokens, fp8, wbytes, launch)[0]


@njit
def attention_gemm_parts(row, tokens, fp8, wbytes, launch):
    """(:func:`attention_gemm_time`, of it the fused QKV projection's seconds; 0 under MLA)."""
    h = row[C_HIDDEN]
    a = row[C_HEADS]
    t = row[C_TP]
    dqk, dv = attention_dims(row)
    total = qkv = 0.0
    if row[C_MLA] > 0.0:
        q_rank = row[C_Q_LORA_RANK]
        if q_rank > 0.0:
            total += gemm_roofline(row, 1.0, tokens, q_rank, h, fp8, wbytes, launch)
            total += gemm_roofline(row, 1.0, tokens, a * dqk / t, q_rank, fp8, wbytes, launch)
        else:
            total += gemm_roofline(row, 1.0, tokens, a * dqk / t, h, fp8, wbytes, launch)
        kv_rank = row[C_KV_LORA_RANK]
        total += gemm_roofline(row, 1.0, tokens, kv_rank + row[C_QK_ROPE_HEAD_DIM], h, fp8, wbytes, launch)
        total += gemm_roofline(row, 1.0, tokens, a * (row[C_QK_NOPE_HEAD_DIM] + dv) / t, kv_rank, fp8, wbytes, launch)
    else:
        qkv = gemm_roofline(row, 1.0, tokens, (a + 2.0 * row[C_KV_HEADS]) * row[C_HEAD_DIM] / t, h, fp8, wbytes, launch)
        total += qkv
    total += gemm_roofline(row, 1.0, tokens, h, a * dv / t, fp8, wbytes, launch)
    return total, qkv


@njit
def mlp_gemm_time(row, tokens, moe, expert_groups, expert_rows, etp, fp8, wbytes, launch):
    """Seconds (at the modelled speed) of one layer's MLP GEMMs for ``tokens`` tokens on one device: the dense MLP at TP width, or the
    router (16-bit), the routed experts as grouped GEMMs (``roofline.expert_gemm_roofline``) over ``expert_groups`` local experts of
    ``expert_rows`` rows each at width ``moe_ffn / etp`` (both dims padded as the engine pads them, :func:`expert_dims`), and the
    shared experts at TP width."""
    return mlp_gemm_parts(row, tokens, moe, expert_groups, expert_rows, etp, fp8, wbytes, launch)[0]


@njit
def mlp_gemm_parts(row, tokens, moe, expert_groups, expert_rows, etp, fp8, wbytes, launch):
    """(:func:`mlp_gemm_time`, of it the first column-parallel GEMM's seconds at TP width: the dense MLP's FC1, or
    the shared experts' (0 without shared experts))."""
    h = row[C_HIDDEN]
    t = row[C_TP]
    nm = mlp_matrices(row)
    if moe > 0.0:
        width, he = expert_dims(row, etp)
        total = gemm_roofline(row, 1.0, tokens, row[C_MOE_EXPERTS], h, 0.0, ACT_BYTES, launch)
        total += expert_gemm_roofline(row, expert_groups, expert_rows, (nm - 1.0) * width, he, fp8, wbytes, launch)
        total += expert_gemm_roofline(row, expert_groups, expert_rows, he, width, fp8, wbytes, launch)
        shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / t
        fc1 = gemm_roofline(row, 1.0, tokens, (nm - 1.0) * shared, h, fp8, wbytes, launch)
        total += fc1 + gemm_roofline(row, 1.0, tokens, h, shared, fp8, wbytes, launch)
        return total, fc1
    f = row[C_FFN] / t
    fc1 = gemm_roofline(row, 1.0, tokens, (nm - 1.0) * f, h, fp8, wbytes, launch)
    return fc1 + gemm_roofline(row, 1.0, tokens, h, f, fp8, wbytes, launch), fc1


@njit
def layer_gemm_time(row, tokens, moe, expert_groups, expert_rows, etp, fp8, wbytes, launch):
    """The GEMM list of one layer (attention projections, then the MLP), in seconds over ``stack_compute_eff``."""
    return layer_gemm_parts(row, tokens, moe, expert_groups, expert_rows, etp, fp8, wbytes, launch)[0]


@njit
def layer_gemm_parts(row, tokens, moe, expert_groups, expert_rows, etp, fp8, wbytes, launch):
    """(:func:`layer_gemm_time`, its QKV and first MLP GEMM at the modelled speed, :func:`attention_gemm_parts`,
    :func:`mlp_gemm_parts`): ``tp_layer.regather_hidden_time`` windows the wgrad re-gathers with them."""
    attention, qkv = attention_gemm_parts(row, tokens, fp8, wbytes, launch)
    mlp, fc1 = mlp_gemm_parts(row, tokens, moe, expert_groups, expert_rows, etp, fp8, wbytes, launch)
    return (attention + mlp) / row[C_STACK_COMPUTE_EFF], qkv, fc1
