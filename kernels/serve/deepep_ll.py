"""DeepEP's low-latency dispatch and combine for expert-parallel decode (``moe_dispatcher`` ``deepep_ll``;
docs/model_serving.md S39).

DeepEP V1's low-latency kernels (deepseek-ai/DeepEP @dd758caf, ``csrc/kernels/legacy/internode_ll.cu``; the
benchmark ``tests/test_low_latency.py`` at 567632dd) send one message per (token, top-k expert): ``k`` copies of
every token, each to the rank that holds the expert, over RDMA (IBGDA) to other nodes and, with
``allow_nvlink_for_low_latency_mode``, over NVLink to the peers of the sender's NVLink domain. A dispatch message
is the FP8 token, one FP32 scale per 128 elements and a 16-byte header (``hidden + hidden / 128 * 4 + 16``
bytes, the benchmark's ``num_fp8_bytes``); a combine message is the expert's BF16 output row (``2 hidden``).

Time of one direction for ``m`` tokens on a rank (every rank sends and receives the same under uniform routing):

    t = t_fixed + max(B (ep - g) / ep / inter_bw,  B (g - 1) / ep / (intra_bw intra_eff)),   B = m k b

with g the EP ranks in the sender's NVLink domain. ``t_fixed`` (launch, the per-expert count exchange and the
receiver's wait) and the NIC's achieved rate are read off DeepEP's published table (docs/legacy.md "Low-latency
kernels with pure RDMA": H800, CX7 400 Gb/s ~50 GB/s, 128 tokens, hidden 7168, top-8): with the NIC at its
~50 GB/s line rate, the EP 16 rows leave 42.2 us (dispatch) and 48.2 us (combine) of fixed time
(``LL_DISPATCH_FIXED_S``, ``LL_COMBINE_FIXED_S``); the EP 32-256 rows are the check (docs S39).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_EP, C_HIDDEN, C_MOE_TOPK
from fastmodel.kernels.columns import C_INTER_BW, C_INTRA_BW, C_INTRA_EFF
from fastmodel.kernels.nccl import members_per_domain

#: bytes of one FP8 dispatch message per hidden element, plus its fixed part (FP32 scale per 128, 16-byte header)
LL_SCALE_BYTES_PER_ELEMENT = 4.0 / 128.0
LL_HEADER_BYTES = 16.0
#: bytes of one BF16 combine message per hidden element
LL_COMBINE_BYTES_PER_ELEMENT = 2.0
#: DeepEP README (docs/legacy.md @dd758caf) EP 16 rows: 118 us dispatch, 195 us combine at 128 tokens, hidden
#: 7168, top-8, less their NIC bytes at 50 GB/s: 118 - 128*8*7408*(8/16)/50e9 and 195 - 128*8*14336*(8/16)/50e9
LL_DISPATCH_FIXED_S = 118e-6 - 128 * 8 * 7408 * 0.5 / 50e9
LL_COMBINE_FIXED_S = 195e-6 - 128 * 8 * 14336 * 0.5 / 50e9


@njit(inline="always")
def dispatch_message_bytes(hidden):
    """Bytes of one low-latency dispatch message: FP8 token, FP32 scale per 128 elements, 16-byte header."""
    return hidden * (1.0 + LL_SCALE_BYTES_PER_ELEMENT) + LL_HEADER_BYTES


@njit(inline="always")
def ll_direction_time(row, m, message_bytes, fixed_s):
    """Seconds of one low-latency direction: ``m`` tokens x top_k messages of ``message_bytes``, the share to other
    NVLink domains over the NIC at its line rate and the share to the domain's peers over NVLink, in parallel."""
    ep = row[C_EP]
    if ep <= 1.0 or m <= 0.0:
        return 0.0
    logical = m * row[C_MOE_TOPK] * message_bytes
    g = members_per_domain(row, ep, 1.0)
    nic = logical * (ep - g) / ep / row[C_INTER_BW]
    nvl = logical * (g - 1.0) / ep / (row[C_INTRA_BW] * row[C_INTRA_EFF])
    return fixed_s + max(nic, nvl)


@njit
def deepep_ll_time(row, m):
    """Seconds of one MoE layer's low-latency dispatch plus combine for ``m`` tokens on the rank (docs S39)."""
    h = row[C_HIDDEN]
    return ll_direction_time(row, m, dispatch_message_bytes(h), LL_DISPATCH_FIXED_S) \
        + ll_direction_time(row, m, LL_COMBINE_BYTES_PER_ELEMENT * h, LL_COMBINE_FIXED_S)
