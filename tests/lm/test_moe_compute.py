"""The router GEMM and the shared experts of one MoE block (kernels/lm/moe.py ``moe_compute``, docs/model.md §11.14
"Expert compute"), derived by hand."""

import pytest

from fastmodel.kernels.lm.moe import expert_flops, moe_compute
from fastmodel.kernels.roofline import gemm_time
from fastmodel.lm.table import row

#: Mixtral-8x7B's shape (8 experts top-2, SwiGLU) with two shared experts of the routed width, TP 2, EP 4
MOE = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=32000, seq_len=4096, moe_experts=8,
           moe_topk=2, moe_ffn=14336, moe_shared_experts=2, tp=2, ep=4, dp=4, micro_batch=1, sequence_parallel=1)


def test_router_and_shared_experts_by_hand():
    """A rank brings T_r = b s / (cp tp) = 2048 tokens; the router is a T_r x h x E = 2048 x 4096 x 8 GEMM
    (16-bit). The shared experts are a dense SwiGLU MLP of width 2 x 14336 = 28672 over TP on the TP group's
    b s = 4096 tokens (Megatron-Core MoE README: they follow the dense part's parallelism): fc1 4096 x 4096 ->
    2 x 28672 / 2, fc2 4096 x 14336 -> 4096. FLOPs: the routed experts, 2 x 4096 x 3 x 4096 x 28672 / 2 for the
    shared ones and 2 x 2048 x 4096 x 8 for the router."""
    r = row(**MOE)
    gemm, _, shared, flops, _, routed = moe_compute(r, False)
    assert gemm - routed == pytest.approx(gemm_time(r, 2048.0, 8.0, 4096.0, False), rel=1e-12)
    assert shared == pytest.approx(gemm_time(r, 4096.0, 2 * 28672 / 2, 4096.0, False)
                                   + gemm_time(r, 4096.0, 4096.0, 28672 / 2, False), rel=1e-12)
    assert flops == pytest.approx(expert_flops(r) + 2 * 4096 * 3 * 4096 * 28672 / 2 + 2 * 2048 * 4096 * 8,
                                  rel=1e-12)
    # without shared experts: no shared time and no shared FLOPs
    plain = row(**{**MOE, "moe_shared_experts": 0})
    assert moe_compute(plain, False)[2] == 0.0
    assert moe_compute(plain, False)[3] == pytest.approx(expert_flops(plain) + 2 * 2048 * 4096 * 8, rel=1e-12)
