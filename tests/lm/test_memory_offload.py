"""Megatron-Core fine-grained activation offloading in the activation memory (kernels/lm/memory_offload.py).

Hand-derived from Megatron-LM@0823c73 (the submodule of Megatron-Bridge b7b4e11): each module listed in
``offload_modules`` moves the tensors autograd saves inside it, of at least 1024 x 1024 elements each, to host
memory; ``attn_proj`` releases the core attention's output, ``core_attn`` Q, K, V and the log-sum-exp; the last
layer of the micro-batch whose backward comes next stays, and a layer's backward reloads the next one. The setting:
T = 2 x 4,096 = 8,192 tokens, h = 1,024, 16 heads of 64, BF16, flash attention, tp = 1, no dropout.
"""

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import M_ACTIVATIONS, N_MEMORY_KINDS
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.kernels.lm.memory_offload import offloaded_layer_bytes
from fastmodel.kernels.lm.rules import plan_status_row
from fastmodel.lm.memory_timeline import memory_timeline
from fastmodel.lm.table import row
from fastmodel.registry.lm import OFFLOAD_MODULES, STATUS_CODES

T, H, A, D = 8192, 1024, 16, 64
DENSE = dict(layers=8, hidden=H, ffn=4 * H, heads=A, kv_heads=A, head_dim=D, vocab=8, seq_len=4096, gated_mlp=0,
             micro_batch=2, global_batch=2, dp=1, sharding="ddp", flash_attention=1, dropout=0, recompute="none",
             cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0, nccl_p2p_channels_per_peer=0,
             allocator_cache_fraction=0)
E, K, FE = 8, 2, 512
MOE = dict(DENSE, gated_mlp=1, moe_experts=E, moe_topk=K, moe_ffn=FE, dense_layers=0, ep=1)


def bits(*names):
    return sum(OFFLOAD_MODULES[n] for n in names)


def offloaded(moe=False, **values):
    return offloaded_layer_bytes(row(**{**(MOE if moe else DENSE), **values}), moe)


def test_core_attention_offloads_q_k_v_and_a_log_sum_exp_of_a_million_elements():
    # Q, K, V: 2 B x T x a d each; the FP32 log-sum-exp T a = 131,072 elements stays (under 1024 x 1024)
    assert offloaded(offload_modules=bits("core_attn")) == 3 * 2 * T * A * D
    # 8 x the tokens: T a = 1,048,576 elements, offloaded too (4 B each)
    assert offloaded(offload_modules=bits("core_attn"), micro_batch=16, global_batch=16) == \
        3 * 2 * 8 * T * A * D + 4 * 8 * T * A
    # the output O (2 T a d) is released by attn_proj, whose input it is
    assert offloaded(offload_modules=bits("core_attn", "attn_proj")) == 4 * 2 * T * A * D


def test_a_recomputed_core_offloads_nothing_of_its_own():
    # selective recompute of core_attn runs the checkpointed core outside the offload group
    assert offloaded(offload_modules=bits("core_attn"), recompute="selective") == 0.0
    assert offloaded(offload_modules=bits("core_attn", "attn_proj"), recompute="selective") == 2 * T * A * D


def test_norms_fused_into_the_linear_offload_with_it():
    # a dense GPT layer's norms are fused (TELayerNormColumnParallelLinear): attn_norm / mlp_norm are IdentityOp
    assert offloaded(offload_modules=bits("attn_norm", "mlp_norm")) == 0.0
    # qkv_linear saves the norm's input 2 T h and its output, the GEMM input, 2 T h
    assert offloaded(offload_modules=bits("qkv_linear")) == 4 * T * H


def test_mla_norm_and_latents():
    mla = dict(mla=1, q_lora_rank=384, kv_lora_rank=128, qk_nope_head_dim=48, qk_rope_head_dim=16, v_head_dim=64)
    # MLA's input norm is a TENorm of its own: its input 2 T h
    assert offloaded(offload_modules=bits("attn_norm"), **mla) == 2 * T * H
    # qkv_linear: the down-projections' input 2 T h and the latents 2 T (384 + 128 + 16) kept for the up-projections
    assert offloaded(offload_modules=bits("qkv_linear"), **mla) == 2 * T * H + 2 * T * (384 + 128 + 16)
    # core_attn: Q and K 2 T a (48 + 16), V 2 T a 64; with mla_up_proj recompute they are discarded already
    assert offloaded(offload_modules=bits("core_attn"), **mla) == 2 * T * A * (2 * 64 + 64)
    assert offloaded(offload_modules=bits("core_attn"), recompute="selective",
                     recompute_modules=1 + 4, **mla) == 0.0


def test_moe_modules():
    rows = K * T                                                     # balanced top-2 routing, ep = 1
    assert offloaded(True, offload_modules=bits("mlp_norm")) == 2 * T * H
    assert offloaded(True, offload_modules=bits("expert_fc1")) == 2 * rows * H
    assert offloaded(True, offload_modules=bits("moe_act")) == 2 * rows * 2 * FE      # SwiGLU input: gate and up
    # a checkpointed MoE layer (recompute_modules moe) keeps nothing inside it to offload
    assert offloaded(True, offload_modules=bits("expert_fc1"), recompute="selective", recompute_modules=32) == 0.0


def test_recompute_modes():
    core = bits("core_attn")
    assert offloaded(offload_modules=core, recompute="full") == 0.0
    assert offloaded(offload_modules=core, recompute="partial_layers", recompute_fraction=0.25) == \
        0.75 * 3 * 2 * T * A * D


def _activations(**values):
    out = np.full(N_MEMORY_KINDS, np.nan)
    memory_row(row(**{**DENSE, **values}), out)
    return out[M_ACTIVATIONS]


def test_peak_holds_every_layer_in_host_memory_but_the_layer_in_backward_and_the_next():
    """pp = 1, 8 layers, one micro-batch in flight: the peak is the backward of the last layer, which the offload
    margin kept on the GPU, while the layer below reloads: 8 - 2 layers' offloaded tensors are in host memory."""
    core = bits("core_attn", "attn_proj")
    assert _activations() - _activations(offload_modules=core) == pytest.approx((8 - 2) * 4 * 2 * T * A * D,
                                                                                rel=1e-12)


def test_timeline_peak_is_the_kernel_peak_with_offloading():
    columns = row(**{**DENSE, "pp": 2, "global_batch": 8, "offload_modules": bits("core_attn", "attn_proj")})
    timeline = memory_timeline(columns)
    out = np.full(N_MEMORY_KINDS, np.nan)
    memory_row(columns, out)
    peak = max(stage.values.sum(axis=1).max() for stage in timeline.stages)
    assert peak == pytest.approx(out.sum(), rel=1e-12)


def test_a_sweep_point_megatron_refuses_is_offload_conflict():
    conflict = STATUS_CODES["offload_conflict"]

    def status(moe=False, **values):
        return plan_status_row(row(**{**(MOE if moe else DENSE), "n_gpus": 1, **values}))

    assert status(offload_modules=bits("core_attn", "attn_proj")) == 0
    assert status(offload_modules=bits("attn_proj")) == conflict
    assert status(offload_modules=bits("core_attn"), activation_offload=0.5) == conflict
    assert status(True, offload_modules=bits("moe_act"), recompute="selective", recompute_modules=32) == conflict
    assert status(True, offload_modules=bits("moe_act"), recompute="selective", recompute_modules=8) == 0
