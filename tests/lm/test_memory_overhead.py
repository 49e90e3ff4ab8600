"""The overhead kind of the real-world LM memory model (kernels/lm/memory.py ``overhead_bytes``): CUDA context,
cuBLAS workspaces and NCCL communicator buffers, each derived by hand from its source's constants
(docs/model_memory.md "Overhead")."""

import numpy as np

from fastmodel.kernels.lm.layout import M_OVERHEAD, N_MEMORY_KINDS
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.lm.table import row

MIB = 2**20
#: NVIDIA/nccl src/init.cc: LL 8 x 512 x 8 x 16 B, LL128 120 x 640 x 8 x 8 B, Simple 1 << 22
LL, LL128, SIMPLE = 524288, 4915200, 4194304
#: pytorch/pytorch PR #86509: a CUDA context under lazy module loading
CONTEXT = 287047680

DENSE = dict(layers=8, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512,
             micro_batch=1, global_batch=64)


def overhead(**values) -> float:
    out = np.full(N_MEMORY_KINDS, np.nan)
    memory_row(row(**{**DENSE, **values}), out)
    return float(out[M_OVERHEAD])


def test_one_device_is_the_context_and_two_cublas_workspaces():
    """No communicator: the CUDA context plus the forward's and autograd's cuBLAS workspaces, 32 MiB each on
    sm90 (PyTorch's CUBLAS_WORKSPACE_CONFIG default :4096:8)."""
    assert overhead(dp=1, global_batch=1) == CONTEXT + 2 * 32 * MIB
    assert overhead(dp=1, global_batch=1, cublas_workspace_bytes=8519680) == CONTEXT + 2 * 8519680


def test_megatron_tp_dp_pp_communicators():
    """tp 8, pp 4, dp 16 on 16 channels: two rings (TP, DP) of 16 channels x (LL + LL128 + Simple) and the
    pipeline's two peers x 2 p2p channels x Simple."""
    rings = 2 * 16 * (LL + LL128 + SIMPLE)
    p2p = 2 * 2 * SIMPLE
    assert rings == 308281344
    got = overhead(tp=8, pp=4, dp=16, global_batch=64, layers=8)
    assert got == CONTEXT + 2 * 32 * MIB + rings + p2p


def test_pp2_has_one_peer_and_channels_scale_the_rings():
    """pp = 2: the previous and the next rank are the same one peer; 24 channels (HGX A100) scale the DP ring."""
    got = overhead(dp=4, pp=2, nccl_channels=24, cuda_context_bytes=0, cublas_workspace_bytes=0)
    assert got == 24 * (LL + LL128 + SIMPLE) + 1 * 2 * SIMPLE


def test_expert_parallel_all_to_all_peers():
    """MoE, ep 8 over dp 8 (tp 1): the DP ring, 7 all-to-all peers x 2 channels x Simple; the expert
    data-parallel group dp tp / ep = 1 has no communicator."""
    moe = dict(moe_experts=8, moe_topk=2, moe_ffn=1024, ep=8, dp=8)
    got = overhead(**moe, cuda_context_bytes=0, cublas_workspace_bytes=0)
    assert got == 16 * (LL + LL128 + SIMPLE) + 7 * 2 * SIMPLE
    # dp 16 over ep 8: a second ring for the expert gradients (expert data parallel 2)
    got16 = overhead(**{**moe, "dp": 16}, cuda_context_bytes=0, cublas_workspace_bytes=0)
    assert got16 == 2 * 16 * (LL + LL128 + SIMPLE) + 7 * 2 * SIMPLE
