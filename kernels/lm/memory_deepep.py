"""Memory of the real-world LM model, part 4: DeepEP's communication buffers (the ``overhead`` kind).

DeepEP (deepseek-ai/DeepEP at bfded34, the version of the TorchTitan DeepEP runs; DeepSeek-V3's dispatch kernels,
released as DeepEP) sizes one ``Buffer`` per expert-parallel group from its own hints and allocates it outside
PyTorch's caching allocator: the NVLink buffer with ``cudaMalloc`` (csrc/deep_ep.cpp, ``Buffer::Buffer``), the
RDMA buffer from NVSHMEM's symmetric heap, plus a 32 MiB workspace (``NUM_WORKSPACE_BYTES``). So
``torch.cuda.max_memory_reserved`` does not see them, and they count in what fits. docs/model_memory.md,
"Overhead", gives the equations.
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_EP, C_HIDDEN, C_MOE_DISPATCHER, DISPATCH_DEEPEP
from fastmodel.kernels.lm.memory_states import is_moe

#: SMs DeepEP's normal (high-throughput) kernels use: ``Buffer.num_sms = 20`` (deep_ep/buffer.py), the 20 SMs
#: the DeepSeek-V3 report (sec. 3.2.2) gives its dispatch and combine; a channel is two SMs
DEEPEP_NUM_SMS = 20
#: GPUs per NVLink group (``NUM_MAX_NVL_PEERS``, csrc/kernels/configs.cuh)
DEEPEP_NVL_PEERS = 8
#: the 32 MiB workspace every Buffer allocates (``NUM_WORKSPACE_BYTES``, csrc/kernels/configs.cuh)
DEEPEP_WORKSPACE_BYTES = 32 * 2**20
#: bytes per received token beside its hidden bytes (csrc/config.hpp, ``get_*_buffer_size_hint``): the
#: ``SourceMeta`` (2 int32, csrc/kernels/internode.cu), 128 top-k indices (int64, ``topk_idx_t``), 128 top-k
#: weights (FP32) and 128 scales (FP32)
DEEPEP_TOKEN_META_BYTES = 8 + 128 * 8 + 128 * 4 + 128 * 4
#: NVSHMEM maps its symmetric heap in granules of ``NVSHMEM_CUMEM_GRANULARITY``, which DeepEP sets to 512 MiB
#: (deep_ep/buffer.py, "NVSHMEM initialization requires at least 256 MiB")
NVSHMEM_GRANULE_BYTES = 2**29


@njit(error_model='numpy')
def deepep_recv_tokens(ranks):
    """(NVLink, RDMA) receive-buffer tokens per channel and peer of DeepEP's default configs for ``ranks`` GPUs:
    the larger of ``Buffer.get_dispatch_config`` and ``get_combine_config`` (deep_ep/buffer.py), the RDMA count
    aligned up to a multiple of its send chunk (``Config``, csrc/config.hpp): up to 8 ranks 256 (no RDMA), 16
    288 / 140, 24-64 288 / 128, 96 480 / 132, 128 560 / 132, 144 and more 720 / 132."""
    if ranks <= 8.0:
        return 256.0, 0.0
    if ranks <= 16.0:
        return 288.0, 140.0
    if ranks <= 64.0:
        return 288.0, 128.0
    if ranks <= 96.0:
        return 480.0, 132.0
    if ranks <= 128.0:
        return 560.0, 132.0
    return 720.0, 132.0


@njit(error_model='numpy')
def deepep_nvl_bytes(ranks, hidden_bytes):
    """DeepEP's NVLink buffer: ``C N (2 R + 3) 4 + C N r_nvl (hidden_bytes + meta)``, rounded up to 128 bytes, with
    ``C`` = SMs / 2 channels, ``N = min(ranks, 8)`` NVLink peers, ``R = max(ranks / 8, 1)`` RDMA ranks
    (``Config::get_nvl_buffer_size_hint``, csrc/config.hpp)."""
    channels = DEEPEP_NUM_SMS / 2.0
    nvl = min(ranks, float(DEEPEP_NVL_PEERS))
    rdma = max(ranks / DEEPEP_NVL_PEERS, 1.0)
    recv, _ = deepep_recv_tokens(ranks)
    size = channels * nvl * (2.0 * rdma + 3.0) * 4.0 + channels * nvl * recv * (hidden_bytes + DEEPEP_TOKEN_META_BYTES)
    return math.ceil(size / 128.0) * 128.0


@njit(error_model='numpy')
def deepep_rdma_bytes(ranks, hidden_bytes):
    """DeepEP's RDMA buffer, 0 within one NVLink group of 8: ``C R (2 * 8 + 2) 2 * 4 + 2 C R r_rdma (hidden_bytes
    + meta + 16)`` (send and receive halves; ``Config::get_rdma_buffer_size_hint``, csrc/config.hpp), taken from
    NVSHMEM's symmetric heap in 512 MiB granules (``NVSHMEM_GRANULE_BYTES``)."""
    if ranks <= DEEPEP_NVL_PEERS:
        return 0.0
    channels = DEEPEP_NUM_SMS / 2.0
    rdma = ranks / DEEPEP_NVL_PEERS
    _, recv = deepep_recv_tokens(ranks)
    size = channels * rdma * (DEEPEP_NVL_PEERS * 2.0 + 2.0) * 2.0 * 4.0 \
        + 2.0 * channels * rdma * recv * (hidden_bytes + DEEPEP_TOKEN_META_BYTES + 16.0)
    return math.ceil(size / NVSHMEM_GRANULE_BYTES) * NVSHMEM_GRANULE_BYTES


@njit(error_model='numpy')
def deepep_buffer_bytes(row):
    """DeepEP's buffers on one device of a MoE with ``ep > 1`` and the DeepEP dispatcher (``moe_dispatcher``
    ``deepep``/``flex``): NVLink buffer + RDMA buffer + 32 MiB workspace, for the EP group, sized for 16-bit tokens
    (``hidden_bytes = h * max(element_size, 2)``, DeepEP README ``get_hidden_bytes``; TorchTitan and Megatron-Core
    size it the same way, so FP8 dispatch does not shrink it). Else 0."""
    if not is_moe(row) or row[C_EP] <= 1.0 or int(row[C_MOE_DISPATCHER]) != DISPATCH_DEEPEP:
        return 0.0
    hidden_bytes = 2.0 * row[C_HIDDEN]
    return deepep_nvl_bytes(row[C_EP], hidden_bytes) + deepep_rdma_bytes(row[C_EP], hidden_bytes) \
        + DEEPEP_WORKSPACE_BYTES
