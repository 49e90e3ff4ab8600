"""Memory of the real-world LM model, part 4: Megatron-Core's fine-grained activation offloading.

``offload_modules`` (a sum of ``OFFLOAD_*`` bits, ``fastmodel.registry.lm_offload``) names the modules whose
saved tensors leave the GPU: each module's forward runs inside an offload group whose ``saved_tensors_hooks``
collect what autograd saves; at the group's end the tensors of at least ``min_offloaded_tensor_size`` elements
(default 1024 x 1024) are copied to pinned host memory on a D2H stream and their GPU storage released, and before
the module's backward they are copied back on an H2D stream (Megatron-LM@0823c73
megatron/core/pipeline_parallel/fine_grained_activation_offload.py ``bulk_offload_group``, ``bulk_reload_group``,
``tensor_need_offloading_checker``). After the warm-up step the last group of each module name of the first
backward chunk stays on the GPU (``post_warmup_callback``: the offload margin), a micro-batch whose backward comes
next keeps its last group (``should_bulk_offload``), and each backward group reloads the next one while it runs
(``bulk_reload``). docs/model_memory.md "Fine-grained activation offloading" gives the equations.
Compiled with ``error_model='numpy'`` (see kernels/lm/memory.py).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_ACTIVATION_OFFLOAD, C_ATTN_OUT_E5M6, C_GPUS_PER_NODE, C_PP, C_FLASH_ATTENTION, C_GATED_MLP, C_HEADS, C_HEAD_DIM, C_HIDDEN, C_MLA, C_MOE_ACT_INPUT_FP8,
    C_MOE_FFN, C_OFFLOAD_MODULES, C_QK_NOPE_HEAD_DIM, C_Q_LORA_RANK, C_KV_LORA_RANK, C_QK_ROPE_HEAD_DIM, C_RECOMPUTE, C_RECOMPUTE_FRACTION,
    C_SELECTIVE_POLICY, C_TP, C_V_HEAD_DIM, OFFLOAD_ATTN_NORM, OFFLOAD_ATTN_PROJ, OFFLOAD_CORE_ATTN,
    OFFLOAD_EXPERT_FC1, OFFLOAD_MLP_NORM, OFFLOAD_MOE_ACT, OFFLOAD_QKV_LINEAR, RECOMPUTE_FULL, RECOMPUTE_MODULE_CORE_ATTN,
    RECOMPUTE_MODULE_MLA_UP_PROJ, RECOMPUTE_MODULE_MOE, RECOMPUTE_NONE, RECOMPUTE_PARTIAL_LAYERS, RECOMPUTE_SELECTIVE,
)
from fastmodel.kernels.lm.memory_activations import (
    E5M6_BYTES, FP8_BYTES, attention_scores_bytes, discarded_norm_output_bytes, gemm_input_bytes,
    local_kv_width, micro_batch_tokens, mla_latent_bytes, module_recomputed, replicated_divisor, routed_tokens,
)
from fastmodel.kernels.lm.memory_recompute import kept_mode
from fastmodel.kernels.lm.memory_states import B16, B32, is_moe, stage_layers
from fastmodel.kernels.lm.pipeline import microbatches_in_flight
from fastmodel.kernels.lm.shape import mtp_stage_layers
from fastmodel.kernels.lm.moe import expert_tp

#: Megatron-Core ``TransformerConfig.min_offloaded_tensor_size`` default: smaller tensors stay on the GPU
MIN_OFFLOADED_ELEMENTS = 1024.0 * 1024.0


@njit(error_model='numpy')
def offloads(row, bit):
    """True when ``offload_modules`` lists the module ``bit``."""
    return (int(row[C_OFFLOAD_MODULES]) // bit) % 2 == 1


@njit(error_model='numpy')
def sized(elements, bytes_per_element):
    """The bytes of a saved tensor of ``elements`` that offloading moves: all of them from
    ``MIN_OFFLOADED_ELEMENTS`` on, else none (``tensor_need_offloading_checker``: ``numel() <
    min_offloaded_tensor_size`` stays)."""
    return elements * bytes_per_element if elements >= MIN_OFFLOADED_ELEMENTS else 0.0


@njit(error_model='numpy')
def attention_output_bytes(row):
    """The attention output as ``attention_activation_bytes`` keeps it: the output projection's input (= flash
    output O, 2 B) ``T a d_v / t``, plus its FP8 cast under FP8 GEMMs with flash; once at 12 bits under
    ``attn_out_e5m6``."""
    t_tok = micro_batch_tokens(row)
    heads = row[C_HEADS] / row[C_TP]
    width = heads * (row[C_V_HEAD_DIM] if row[C_MLA] > 0 else row[C_HEAD_DIM])
    if row[C_ATTN_OUT_E5M6] > 0:
        return sized(t_tok * width, E5M6_BYTES)
    g = gemm_input_bytes(row)
    flash = row[C_FLASH_ATTENTION] > 0
    out = sized(t_tok * width, B16 if (flash or g == B16) else g)
    return out + (sized(t_tok * width, g) if (flash and g < B16) else 0.0)


@njit(error_model='numpy')
def core_attention_saved_bytes(row, mode):
    """What the core attention saves and ``core_attn`` offloads, when the core is not recomputed (a recomputed core
    runs ``_checkpointed_attention_forward`` outside the offload group, multi_latent_attention.py@0823c73 lines
    382-391): Q, K, V (MLA: ``2 T a (2 d_qk + d_v) / t``, 0 when ``mla_up_proj`` discards them), the FP32
    log-sum-exp ``4 T a / t`` when it has at least ``MIN_OFFLOADED_ELEMENTS`` elements, and unfused scores. The
    output O, saved by the core too, is the output projection's input: its storage is released only by
    ``attn_proj`` (``forced_released_tensors=[core_attn_out]``, line 464), so it counts there."""
    if mode != RECOMPUTE_NONE and module_recomputed(row, RECOMPUTE_MODULE_CORE_ATTN):
        return 0.0
    t_tok = micro_batch_tokens(row)
    heads = row[C_HEADS] / row[C_TP]
    if row[C_MLA] > 0:
        up = 0.0 if module_recomputed(row, RECOMPUTE_MODULE_MLA_UP_PROJ) else 1.0
        qk = sized(t_tok * heads * (row[C_QK_NOPE_HEAD_DIM] + row[C_QK_ROPE_HEAD_DIM]), B16)
        qkv = up * (2.0 * qk + sized(t_tok * heads * row[C_V_HEAD_DIM], B16))
    else:
        qkv = sized(t_tok * heads * row[C_HEAD_DIM], B16) + 2.0 * sized(t_tok * local_kv_width(row), B16)
    stats = sized(t_tok * heads, B32) if row[C_FLASH_ATTENTION] > 0 else 0.0
    return qkv + stats + attention_scores_bytes(row, mode)


@njit(error_model='numpy')
def attention_offload_bytes(row, mode):
    """Bytes one attention block moves to the host per micro-batch: ``attn_norm`` the norm input ``2 T h / t_sp``
    where the norm is a module of its own (MLA's ``TENorm``; a fused ``TELayerNormColumnParallelLinear`` makes it
    ``IdentityOp``, which offloads nothing); ``qkv_linear`` the QKV GEMM's saved input ``g T h / t_sp`` (less a
    norm output ``layernorm`` recompute discards), MLA's latents, and the fused norm's input where fused;
    ``core_attn`` :func:`core_attention_saved_bytes`; ``attn_proj`` :func:`attention_output_bytes`."""
    t_tok = micro_batch_tokens(row)
    tokens_h = t_tok * row[C_HIDDEN] / replicated_divisor(row)
    norm_input = sized(tokens_h, B16)
    mla = row[C_MLA] > 0
    total = 0.0
    if offloads(row, OFFLOAD_ATTN_NORM) and mla:
        total += norm_input
    if offloads(row, OFFLOAD_QKV_LINEAR):
        total += sized(tokens_h, gemm_input_bytes(row) - discarded_norm_output_bytes(row) * t_tok / tokens_h)
        width = row[C_Q_LORA_RANK] + row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]
        total += sized(t_tok * width, mla_latent_bytes(row) / width) if mla else norm_input
    if offloads(row, OFFLOAD_CORE_ATTN):
        total += core_attention_saved_bytes(row, mode)
    if offloads(row, OFFLOAD_ATTN_PROJ):
        total += attention_output_bytes(row)
    return total


@njit(error_model='numpy')
def moe_offload_bytes(row):
    """Bytes one MoE MLP moves to the host per micro-batch (experts.py@0823c73 lines 701-810): ``mlp_norm`` the
    pre-MLP norm's input ``2 T h / t_sp`` (a ``TENorm`` in MoE layers; dense layers fuse it into fc1,
    ``IdentityOp``); ``expert_fc1`` the grouped fc1's saved input ``g R h``; ``moe_act`` the activation's input,
    the fc1 output ``2 x 2 R f / etp`` gated (``R f / etp`` not; FP8 ``2 R f / etp`` under
    ``moe_act_input_fp8``). 0 when ``moe`` recompute checkpoints the layer (Megatron-Core refuses the pair,
    transformer_config.py@0823c73 lines 1769-1780)."""
    if module_recomputed(row, RECOMPUTE_MODULE_MOE):
        return 0.0
    rows = routed_tokens(row)
    total = 0.0
    if offloads(row, OFFLOAD_MLP_NORM):
        total += sized(micro_batch_tokens(row) * row[C_HIDDEN] / replicated_divisor(row), B16)
    if offloads(row, OFFLOAD_EXPERT_FC1):
        total += sized(rows * row[C_HIDDEN], gemm_input_bytes(row))
    if offloads(row, OFFLOAD_MOE_ACT):
        width = (2.0 if row[C_GATED_MLP] > 0 else 1.0) * row[C_MOE_FFN] / expert_tp(row)
        fp8 = row[C_MOE_ACT_INPUT_FP8] > 0 and row[C_GATED_MLP] > 0
        total += sized(rows * width, FP8_BYTES if fp8 else B16)
    return total


@njit(error_model='numpy')
def offload_conflict(row):
    """True for an ``offload_modules`` Megatron-Core refuses (transformer_config.py@0823c73 lines 1743-1780): with
    layer-level CPU offloading (``activation_offload``), ``attn_proj`` without ``core_attn``, or ``expert_fc1`` /
    ``moe_act`` while ``recompute_modules`` lists ``moe``. The rule table's ``offload_conflict``."""
    if int(row[C_OFFLOAD_MODULES]) == 0:
        return False
    if row[C_ACTIVATION_OFFLOAD] > 0.0:
        return True
    if offloads(row, OFFLOAD_ATTN_PROJ) and not offloads(row, OFFLOAD_CORE_ATTN):
        return True
    inside_moe = offloads(row, OFFLOAD_EXPERT_FC1) or offloads(row, OFFLOAD_MOE_ACT)
    return inside_moe and module_recomputed(row, RECOMPUTE_MODULE_MOE)


@njit(error_model='numpy')
def offloaded_layer_bytes(row, moe):
    """Bytes of one layer and micro-batch held in host memory instead of the GPU: attention plus (MoE layers) MoE
    offload, for the layers that are not fully recomputed (a share ``1 - recompute_fraction`` under partial
    recompute, none under full; op-level checkpointing is not Megatron-Core's and offloads nothing)."""
    mode = int(row[C_RECOMPUTE])
    if int(row[C_OFFLOAD_MODULES]) == 0 or mode == RECOMPUTE_FULL:
        return 0.0
    if mode == RECOMPUTE_SELECTIVE and row[C_SELECTIVE_POLICY] > 0:
        return 0.0
    total = attention_offload_bytes(row, kept_mode(row)) + (moe_offload_bytes(row) if moe else 0.0)
    return total * (1.0 - row[C_RECOMPUTE_FRACTION]) if mode == RECOMPUTE_PARTIAL_LAYERS else total


@njit(error_model='numpy')
def host_offload_bytes(row):
    """Pinned host memory per node that fine-grained offloading holds at its peak: ``gpus_per_node`` x the largest
    over pipeline ranks of ``in_flight x (dense o_d + MoE o_m) - max(o_d, o_m)``, the rank's offloaded layers of
    every micro-batch in flight less the one layer that stays on the GPU (``resident``, memory_peak.py); an MTP
    module's layer as its kind (``shape.mtp_stage_layers``: a ``TransformerLayer`` offloads as the decoder's do,
    ``transformer_layer.py`` ``_set_offload_modules``, Megatron-LM d98e8a6).
    ``OffloadTensorPool`` (fine_grained_activation_offload.py@0823c73 lines 115-230, ``pin_memory=True``, line 437)
    keeps freed buffers by (shape, dtype) for reuse, so the pool holds that peak for the run. Every GPU of the node
    is taken at the largest rank: exact when a node holds one pipeline stage (Megatron-Core's rank order puts pp
    outermost), an upper bound otherwise. DualPipe's second stage per rank is not counted."""
    if int(row[C_OFFLOAD_MODULES]) == 0:
        return 0.0
    off_dense = offloaded_layer_bytes(row, False)
    off_moe = offloaded_layer_bytes(row, True) if is_moe(row) else off_dense
    best = 0.0
    for k in range(int(row[C_PP])):
        dense, moe, mtp = stage_layers(row, float(k))
        dense, moe = mtp_stage_layers(row, dense, moe, mtp)
        held = microbatches_in_flight(row, float(k)) * (dense * off_dense + moe * off_moe)
        best = max(best, held - max(off_dense, off_moe))
    return row[C_GPUS_PER_NODE] * best
