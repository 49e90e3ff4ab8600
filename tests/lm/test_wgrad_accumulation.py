"""The beta = 1 read of the main gradient by the dense weight-gradient GEMMs (docs/model.md §11.3, §11.46): where
the stack fuses the gradient accumulation into the GEMM (``wgrad_fused_accumulation``), each fused linear's
weight gradient loads the main-gradient tile it adds to, ``grad_reduce_bytes`` per weight, once per micro-batch,
in the weight-gradient pass. Derived by hand on GPT-3 175B at TP 4 on H100 (MLPerf's shape)."""

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_GEMM, W_WGRAD, head_costs, layer_costs
from fastmodel.kernels.lm.passes import (
    A_BACKWARD_INPUT,
    A_BACKWARD_WEIGHT,
    A_FORWARD,
    A_GEMM,
    A_MEM,
    A_RECOMPUTE,
    head_passes,
    layer_passes,
)
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.lm.table import row

#: GPT-3 175B (Brown et al. 2020), one micro-batch of one 2,048-token sequence, TP 4; H100 SXM HBM3
#: 3.35 TB/s at hbm_eff 0.8 (specs/devices/h100-sxm.toml)
GPT3 = dict(layers=96, hidden=12288, ffn=49152, heads=96, kv_heads=96, head_dim=128, vocab=51200, seq_len=2048,
            gated_mlp=0, micro_batch=1, tp=4, hbm_bw=3.35e12, hbm_eff=0.8)
#: the main gradient Megatron-Core accumulates into: FP32 (grad_reduce_bytes 4)
FUSED = dict(wgrad_fused_accumulation=1, grad_reduce_bytes=4.0)


def _layer(moe=False, **values):
    work = np.zeros(N_WORK)
    layer_costs(row(**values), moe, False, work)
    return work


def test_one_dense_layer_reads_its_fp32_main_gradient_by_hand():
    """A dense GPT-3 layer holds 12 h^2 / t = 12 x 12288^2 / 4 = 452,984,832 weights per TP rank (QKV 3 h^2,
    out-projection h^2, FC1 and FC2 4 h^2 each); each weight gradient loads its 4-B FP32 source: 1.812 GB, at
    3.35e12 x 0.8 B/s 0.6761 ms per layer and micro-batch -- the issue's 0.7 ms against ~5 ms of layer compute."""
    fused, plain = _layer(**GPT3, **FUSED), _layer(**GPT3)
    weights = 12 * 12288 ** 2 / 4
    assert weights == 452_984_832
    read = weights * 4.0 / (3.35e12 * 0.8)
    assert read == pytest.approx(0.6761e-3, rel=1e-4)
    assert fused[W_WGRAD] == pytest.approx(read, rel=1e-12)
    assert plain[W_WGRAD] == 0.0
    assert fused[W_GEMM] == plain[W_GEMM]       # the forward is untouched


def test_the_read_is_per_main_gradient_byte_and_over_the_stack_share():
    """A BF16 main gradient (grad_reduce_bytes 2) halves it; stack_compute_eff 0.5 doubles it (a GEMM's time)."""
    base = _layer(**GPT3, **FUSED)[W_WGRAD]
    assert _layer(**GPT3, wgrad_fused_accumulation=1, grad_reduce_bytes=2.0)[W_WGRAD] == pytest.approx(base / 2)
    assert _layer(**GPT3, **FUSED, stack_compute_eff=0.5)[W_WGRAD] == pytest.approx(2 * base)


def test_the_weight_gradient_pass_carries_it_and_no_other_pass():
    """In the average layer's passes the read adds to W and to the GEMM seconds only: the forward, the input
    gradient, the recomputed forward (full recompute runs no weight gradient) and the memory-bound seconds keep
    theirs."""
    read = _layer(**GPT3, **FUSED)[W_WGRAD]
    fused, plain = np.zeros(N_PASS_WORK), np.zeros(N_PASS_WORK)
    layer_passes(row(**GPT3, **FUSED, recompute="full"), fused)
    layer_passes(row(**GPT3, recompute="full"), plain)
    for slot in (A_FORWARD, A_BACKWARD_INPUT, A_RECOMPUTE, A_MEM):
        assert fused[slot] == plain[slot]
    for slot in (A_BACKWARD_WEIGHT, A_GEMM):
        assert fused[slot] - plain[slot] == pytest.approx(read, rel=1e-9)


def test_a_moe_layer_reads_its_dense_weights_but_not_the_router():
    """Mixtral-8x7B's MoE layer at TP 1, EP 1: the dense read is the attention's 4096 (32 + 2 x 8) 128 + 32 x 128 x
    4096 = 41,943,040 weights (the router's 4096 x 8 gradient goes through .grad, unfused); the routed experts keep
    their own read (``moe.expert_wgrad_extra``, tested in test_moe.py)."""
    mixtral = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=32000, seq_len=4096,
                   moe_experts=8, moe_topk=2, moe_ffn=14336, hbm_bw=8e12, hbm_eff=0.8)
    fused, plain = _layer(True, **mixtral, **FUSED), _layer(True, **mixtral)
    dense = (4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096) * 4.0
    experts = 8 * 3 * 4096 * 14336 * 4.0
    assert fused[W_WGRAD] - plain[W_WGRAD] == pytest.approx((dense + experts) / (8e12 * 0.8), rel=1e-6)


def test_the_head_reads_once_per_application_and_mtp_adds_its_projection():
    """The output layer (ColumnParallelLinear, fused) reads V h / t = 51200 x 12288 / 4 FP32 elements per
    micro-batch; with d MTP depths the shared head runs d + 1 times and each eh_proj (2h x h / t) reads its own:
    d = 1 adds 51200 x 12288 / 4 + 2 x 12288^2 / 4 elements."""
    def head(**values):
        work = np.zeros(N_WORK)
        head_costs(row(**GPT3, **values), work)
        return work[W_WGRAD]
    bandwidth = 3.35e12 * 0.8
    assert head(**FUSED) == pytest.approx(51200 * 12288 / 4 * 4.0 / bandwidth, rel=1e-12)
    assert head() == 0.0
    assert head(**FUSED, mtp_layers=1) == pytest.approx((2 * 51200 * 12288 / 4 + 2 * 12288 ** 2 / 4) * 4.0 / bandwidth,
                                                        rel=1e-12)
    work = np.zeros(N_PASS_WORK)
    _, _, weight = head_passes(row(**GPT3, **FUSED), work)
    assert weight == pytest.approx(work[W_GEMM] + head(**FUSED), rel=1e-12)
