"""Megatron-Core selective recompute by module (docs/model.md §11.6, "Selective recompute by module").

Under ``recompute_granularity = "selective"`` Megatron-Core re-runs, in the backward of each layer, the forward of
the modules ``TransformerConfig.recompute_modules`` lists (megatron/core/transformer/transformer_config.py,
NVIDIA/Megatron-LM@d98e8a6, ``recompute_modules`` docstring; default ``["core_attn"]``):

- ``core_attn``: the attention core (``kernels/lm/passes.py`` charges it: the attention kernel and, without flash
  attention, its softmax);
- ``layernorm``: ``input_layernorm`` and ``pre_mlp_layernorm`` (transformer_layer.py, output-discarding checkpoint);
- ``mla_up_proj``: MLA's query and key-value up projections and the RoPE applied to them
  (multi_latent_attention.py ``recompute_up_proj``);
- ``mlp``: the dense MLP, dense layers only (transformer_layer.py: ``if not self.is_moe_layer``);
- ``moe``: the whole MoE layer: router, dispatch, routed and shared experts, combine (moe_layer.py
  ``moe_layer_recompute`` checkpoints ``custom_forward``, the dispatch and combine all-to-alls included);
- ``shared_experts``: the shared experts (moe_layer.py ``shared_experts_recompute``);
- ``moe_act``: the routed experts' activation function (experts.py ``activation_recompute``).

A module inside a recomputed ``moe`` is not charged twice. The memory these modules free is
``kernels/lm/memory_activations.py``; this module is their time.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_FFN, C_GATED_MLP, C_HEADS, C_HIDDEN, C_KV_LORA_RANK, C_MLA, C_MOE_FFN, C_MOE_SHARED_EXPERTS,
    C_QK_NOPE_HEAD_DIM, C_Q_LORA_RANK, C_RECOMPUTE, C_RECOMPUTE_MODULES, C_SELECTIVE_POLICY, C_STACK_COMPUTE_EFF,
    C_TP, RECOMPUTE_MODULE_CORE_ATTN, RECOMPUTE_MODULE_LAYERNORM, RECOMPUTE_MODULE_MLA_UP_PROJ, RECOMPUTE_MODULE_MLP,
    RECOMPUTE_MODULE_MOE, RECOMPUTE_MODULE_MOE_ACT, RECOMPUTE_MODULE_SHARED_EXPERTS, RECOMPUTE_SELECTIVE,
)
from fastmodel.kernels.lm.positions import rotary_bytes
from fastmodel.kernels.lm.shape import attention_dims, elementwise_unit_bytes, mlp_gemm_time
from fastmodel.kernels.roofline import gemm_roofline, memory_bound_time


@njit(error_model='numpy')
def module_recomputed(row, bit):
    """True when Megatron-Core ``recompute_modules`` (the ``recompute_modules`` column, a sum of bits) lists the
    module ``bit`` under selective recompute; 0 (the default list, ``core_attn``) lists core_attn only."""
    if int(row[C_RECOMPUTE]) != RECOMPUTE_SELECTIVE:
        return False
    bits = int(row[C_RECOMPUTE_MODULES])
    if bits == 0:
        return bit == RECOMPUTE_MODULE_CORE_ATTN
    return (bits // bit) % 2 == 1


@njit(inline="always")
def lists_modules(row):
    """True when Megatron-Core selective recompute lists modules of its own (``recompute_modules`` not the
    default core_attn-only list 0; op-level checkpointing, ``selective_policy`` 1, lists none)."""
    return (row[C_SELECTIVE_POLICY] <= 0.0 and int(row[C_RECOMPUTE]) == RECOMPUTE_SELECTIVE
            and int(row[C_RECOMPUTE_MODULES]) != 0)


@njit
def core_attention_recomputed(row):
    """1 when selective recompute re-runs the attention core: Megatron-Core's ``core_attn`` module (listed, or
    the default list), or op-level checkpointing (``selective_policy`` 1, which keeps attention: its cheap ops
    are charged by the passes); else 0."""
    if row[C_SELECTIVE_POLICY] > 0.0:
        return 1.0
    return 1.0 if module_recomputed(row, RECOMPUTE_MODULE_CORE_ATTN) else 0.0


@njit
def module_recompute_costs(row, moe, tokens, norm_tokens, fp8, wbytes, expert_groups, rows_per_expert, etp,
                           routed_out, moe_mem, ep):
    """(seconds, GEMM seconds, EP seconds) of the forward that the listed modules other than ``core_attn`` run
    again in the backward of one layer, one micro-batch, one device (module list: this module's docstring).

    ``tokens``: the layer's tokens on the device, ``norm_tokens`` those its norms see (``/tp`` under SP);
    ``moe`` 1 for an MoE layer, with its local experts ``expert_groups`` of ``rows_per_expert`` rows at
    ``etp``, the routed experts' intermediate elements ``routed_out``, the router / permutation seconds
    ``moe_mem`` and the forward dispatch + combine seconds ``ep`` (``kernels/lm/moe.py``). GEMMs on
    ``shape.mlp_gemm_time`` / ``roofline.gemm_roofline``, element-wise bytes on ``shape.elementwise_unit_bytes``.
    0 unless Megatron-Core selective recompute lists such modules.
    """
    if not lists_modules(row):
        return 0.0, 0.0, 0.0
    h = row[C_HIDDEN]
    t = row[C_TP]
    norm, activation, _ = elementwise_unit_bytes(row)
    gemm = 0.0
    nbytes = 0.0
    again_ep = 0.0
    if module_recomputed(row, RECOMPUTE_MODULE_LAYERNORM):
        nbytes += 2.0 * norm * norm_tokens * h
    if row[C_MLA] > 0.0 and module_recomputed(row, RECOMPUTE_MODULE_MLA_UP_PROJ):
        a = row[C_HEADS]
        dqk, dv = attention_dims(row)
        if row[C_Q_LORA_RANK] > 0.0:
            gemm += gemm_roofline(row, 1.0, tokens, a * dqk / t, row[C_Q_LORA_RANK], fp8, wbytes, 1.0)
        gemm += gemm_roofline(row, 1.0, tokens, a * (row[C_QK_NOPE_HEAD_DIM] + dv) / t, row[C_KV_LORA_RANK], fp8,
                              wbytes, 1.0)
        # RoPE on the query heads' and the one shared key head's rope dims, with the query / key / value it builds
        nbytes += rotary_bytes(row, tokens)      # (§11.56)
    nm = 3.0 if row[C_GATED_MLP] > 0.0 else 2.0
    if moe <= 0.0:
        if module_recomputed(row, RECOMPUTE_MODULE_MLP):
            f = row[C_FFN] / t
            gemm += mlp_gemm_time(row, tokens, 0.0, 0.0, 0.0, 1.0, fp8, wbytes, 1.0)
            nbytes += activation * tokens * f
    elif module_recomputed(row, RECOMPUTE_MODULE_MOE):
        shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / t
        gemm += mlp_gemm_time(row, tokens, 1.0, expert_groups, rows_per_expert, etp, fp8, wbytes, 1.0)
        nbytes += activation * (routed_out + tokens * shared)
        again_ep = ep
    else:
        if module_recomputed(row, RECOMPUTE_MODULE_SHARED_EXPERTS):
            shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / t
            gemm += gemm_roofline(row, 1.0, tokens, (nm - 1.0) * shared, h, fp8, wbytes, 1.0) \
                + gemm_roofline(row, 1.0, tokens, h, shared, fp8, wbytes, 1.0)
            nbytes += activation * tokens * shared
        if module_recomputed(row, RECOMPUTE_MODULE_MOE_ACT):
            nbytes += activation * routed_out
    gemm /= row[C_STACK_COMPUTE_EFF]
    mem = memory_bound_time(row, nbytes)
    if moe > 0.0 and module_recomputed(row, RECOMPUTE_MODULE_MOE):
        mem += moe_mem
    return gemm + mem, gemm, again_ep
