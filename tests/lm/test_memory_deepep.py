"""DeepEP's communication buffers in the overhead kind (kernels/lm/memory_deepep.py), derived by hand from
deepseek-ai/DeepEP at bfded34: csrc/config.hpp (``get_nvl_buffer_size_hint``, ``get_rdma_buffer_size_hint``),
deep_ep/buffer.py (``Buffer.num_sms = 20``, the default dispatch and combine configs, the 512 MiB NVSHMEM granule)
and csrc/kernels/configs.cuh (32 MiB workspace). docs/model_memory.md, "Overhead"."""

import numpy as np

from fastmodel.kernels.lm.layout import M_OVERHEAD, N_MEMORY_KINDS
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.kernels.lm.memory_deepep import deepep_buffer_bytes, deepep_nvl_bytes, deepep_rdma_bytes
from fastmodel.lm.table import row

MIB = 2**20
WORKSPACE = 32 * MIB
#: per received token beside its hidden bytes: SourceMeta 8 + 128 int64 top-k indices + 128 FP32 weights + 128
#: FP32 scales
META = 8 + 1024 + 512 + 512

QWEN3_30B = dict(layers=48, hidden=2048, ffn=6144, heads=32, kv_heads=4, head_dim=128, vocab=151936, seq_len=4096,
                 moe_experts=128, moe_topk=8, moe_ffn=768, micro_batch=8, global_batch=64, dp=8, ep=8)


def test_intranode_ep8_qwen3_buffer():
    """EP 8 inside a node, h = 2048, 16-bit tokens (hidden_bytes 4096): 10 channels x 8 peers x (2 x 1 + 3) int32
    counters + 10 x 8 x 256 tokens x (4096 + 2056), rounded up to 128 bytes; no RDMA buffer."""
    nvl = 10 * 8 * 5 * 4 + 10 * 8 * 256 * (4096 + META)
    assert nvl == 125994560
    nvl_aligned = 125994624                      # rounded up to 128 bytes
    assert deepep_nvl_bytes(8.0, 4096.0) == nvl_aligned
    assert deepep_rdma_bytes(8.0, 4096.0) == 0.0
    got = deepep_buffer_bytes(row(**QWEN3_30B, moe_dispatcher=2))
    assert got == nvl_aligned + WORKSPACE


def test_ep64_over_eight_nodes_deepseek_v3_buffer():
    """EP 64 (8 NVLink ranks x 8 RDMA ranks), h = 7168 (hidden_bytes 14336): NVLink 10 x 8 x (2 x 8 + 3) x 4 +
    10 x 8 x 288 x (14336 + 2056) bytes; RDMA 10 x 8 x 18 x 2 x 4 + 2 x 10 x 8 x 128 x (14336 + 2056 + 16) bytes,
    one 512 MiB NVSHMEM granule."""
    nvl = 10 * 8 * 19 * 4 + 10 * 8 * 288 * (14336 + META)
    assert nvl == 377677760
    assert deepep_nvl_bytes(64.0, 14336.0) == 377677824
    rdma = 10 * 8 * 18 * 2 * 4 + 2 * 10 * 8 * 128 * (14336 + META + 16)
    assert rdma == 336047360 < 2**29
    assert deepep_rdma_bytes(64.0, 14336.0) == 2**29


def test_only_deepep_moe_plans_carry_the_buffer():
    """All-to-all dispatch, EP 1, or a dense model: 0; with DeepEP the overhead kind grows by the buffer less the NCCL
    point-to-point buffers of the all-to-all peers it replaces."""
    assert deepep_buffer_bytes(row(**QWEN3_30B, moe_dispatcher=0)) == 0.0
    assert deepep_buffer_bytes(row(**{**QWEN3_30B, "ep": 1}, moe_dispatcher=2)) == 0.0
    assert deepep_buffer_bytes(row(**{**QWEN3_30B, "moe_experts": 0}, moe_dispatcher=2)) == 0.0
    out = {}
    for code in (0, 2):
        kinds = np.full(N_MEMORY_KINDS, np.nan)
        memory_row(row(**QWEN3_30B, moe_dispatcher=code), kinds)
        out[code] = kinds[M_OVERHEAD]
    # DeepEP's dispatch replaces NCCL's all-to-all: its 7 peers x 2 p2p channels x 4 MiB Simple buffers go
    assert out[2] - out[0] == 125994624 + WORKSPACE - 7 * 2 * 4 * MIB
