"""Megatron-Core ``recompute_modules`` in the activation memory (kernels/lm/memory_activations.py).

Hand-derived from the module list of ``TransformerConfig.recompute_modules`` (megatron/core/transformer/
transformer_config.py): ``core_attn`` (the default), ``layernorm``, ``mla_up_proj`` and ``moe_act`` discard a
module's output and recompute it in backward (``CheckpointWithoutOutput``), ``mlp``, ``moe`` and
``shared_experts`` checkpoint the module (only its input stays). The setting is the MoE layer of
tests/lm/test_memory.py::test_moe_layer_activations_and_dispatch_buffer: T = 128 tokens, h = 256, 4 heads of
64, 8 experts of 512 (SwiGLU), top-2 (R = 256 rows), flash attention, no dropout, BF16.
"""

import pytest

from fastmodel.kernels.lm.layout import M_ACTIVATIONS
from fastmodel.registry.lm import RECOMPUTE_MODULES
from tests.lm.test_memory import memory

T, H, A, E, K, FE = 128, 256, 4, 8, 2, 512
R = K * T
MOE = dict(layers=1, hidden=H, ffn=1024, heads=A, kv_heads=A, head_dim=64, vocab=100, seq_len=T, gated_mlp=1,
           moe_experts=E, moe_topk=K, moe_ffn=FE, micro_batch=1, global_batch=2, dp=2, ep=2)


def bits(*names):
    return sum(RECOMPUTE_MODULES[n] for n in names)


def activations(**values):
    return memory(**{**MOE, **values})[M_ACTIVATIONS]


def test_moe_layer_under_each_module_list():
    attention = 4 * T * H + 8 * T * H                  # norm + QKV inputs, Q K V O (the LSE 4 T a kept or not)
    lse = 4 * T * A
    mlp_inputs = 4 * T * H
    router = 2 * 4 * T * E
    experts = 4 * R * H + 4 * R * FE + 2 * R * FE      # permuted rows + outputs, gate/up, product
    head = 0    # the final-norm and head inputs 4 T h: released by the head's backward, before the peak's layer
    base = dict(recompute="selective")
    # the default list (core_attn): the attention core's log-sum-exp is recomputed
    assert activations(**base) == pytest.approx(attention + mlp_inputs + router + experts + head, rel=1e-12)
    # moe_act alone: the core is not listed (LSE kept), the experts' product 2 R f_e discarded
    got = activations(**base, recompute_modules=bits("moe_act"))
    assert got == pytest.approx(attention + lse + mlp_inputs + router + experts - 2 * R * FE + head, rel=1e-12)
    # layernorm + core_attn: each norm's 16-bit output 2 T h discarded (two norms per layer)
    got = activations(**base, recompute_modules=bits("layernorm", "core_attn"))
    assert got == pytest.approx(attention + mlp_inputs + router + experts + head - 2 * 2 * T * H, rel=1e-12)
    # moe: the whole MoE block is checkpointed, only the MLP block's inputs stay
    got = activations(**base, recompute_modules=bits("moe", "core_attn"))
    assert got == pytest.approx(attention + mlp_inputs + head, rel=1e-12)


def test_modules_only_act_under_selective_recompute():
    assert activations(recompute="none", recompute_modules=bits("moe")) == activations(recompute="none")


def test_under_fp8_the_discarded_outputs_free_nothing_the_gemm_keeps_its_own_fp8_cast():
    fp8 = dict(recompute="selective", precision="fp8")
    core = bits("core_attn")
    assert activations(**fp8, recompute_modules=core + bits("moe_act", "layernorm")) == \
        activations(**fp8, recompute_modules=core)


def test_mla_up_projection_discards_q_k_v():
    """MLA with 4 heads, d_qk = 48 + 16, d_v = 64: ``mla_up_proj`` frees the up-projected Q, K, V,
    2 T a (2 d_qk + d_v) bytes; the latents stay, 16-bit either way under BF16 (``mla_latent_bytes``)."""
    mla = dict(mla=1, q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=48, qk_rope_head_dim=16, v_head_dim=64,
               recompute="selective")
    core = bits("core_attn")
    drop = activations(**mla, recompute_modules=core) - \
        activations(**mla, recompute_modules=core + bits("mla_up_proj"))
    assert drop == pytest.approx(2 * T * A * (2 * 64 + 64), rel=1e-12)


def test_dense_mlp_checkpoint_keeps_only_its_input():
    """Dense SwiGLU of f = 1024, tp = 1: ``mlp`` frees the gate/up output 4 T f and the product 2 T f."""
    dense = dict(MOE, moe_experts=0, moe_topk=0, moe_ffn=0, ep=1, recompute="selective")
    core = bits("core_attn")
    full = memory(**dense, recompute_modules=core)[M_ACTIVATIONS]
    kept = memory(**dense, recompute_modules=core + bits("mlp"))[M_ACTIVATIONS]
    assert full - kept == pytest.approx(6 * T * 1024, rel=1e-12)


def test_router_probabilities_in_the_expert_activation_keep_no_expert_output():
    """``moe_probs_in_experts`` (Megatron-Core's weighted SwiGLU; the combine unpermutes without probabilities):
    the expert output 2 R h is not kept; the weighted activation keeps the FP32 probabilities, 4 R."""
    kept = activations(recompute="none")
    weighted = activations(recompute="none", moe_probs_in_experts=1)
    assert kept - weighted == pytest.approx(2 * R * H - 4 * R, rel=1e-12)
