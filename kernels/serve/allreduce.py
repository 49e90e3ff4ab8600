"""The serving engines' own allreduce for small messages inside one NVLink domain (docs/model_serving.md S19).

vLLM, SGLang and TensorRT-LLM do not call NCCL for a tensor-parallel allreduce that fits their registered IPC
buffer: each GPU reads its peers' buffers directly over NVLink (CUDA IPC, peer-to-peer loads) inside one kernel
that CUDA graphs capture.

- one-shot (vLLM ``cross_device_reduce_1stage``, TensorRT-LLM ``ONESHOT``): a start barrier, every GPU reads the
  n - 1 peer buffers whole and sums, an end barrier: ``overhead + 2 hop + (n - 1) B / bw``;
- two-shot (``cross_device_reduce_2stage``, ``TWOSHOT``): reduce-scatter then all-gather through the same
  buffers, three barriers: ``overhead + 3 hop + sync + 2 (n - 1) / n B / bw`` (``sync``: ``TWO_SHOT_SYNC_S``, the
  measured fixed time the model's barriers do not account for, docs/model_serving.md S28);

with ``overhead`` the device's per-kernel overhead (``kernel_overhead_s``), ``hop`` one NVLink flag store seen by
the peer (NCCL's LL NVLink hop: ``intra_latency x 0.47 / 3.4``, ``kernels/nccl.py``) and ``bw`` the NVLink bus
bandwidth (``intra_bw x intra_eff``). vLLM runs one-shot for 2 GPUs, and for 4 GPUs under 512 KiB or 6-8 GPUs
under 256 KiB, else two-shot (``csrc/custom_all_reduce.cuh`` ``allreduce``); the engine's buffer size
(``custom_allreduce_bytes``, 0 = none) bounds it: NCCL above it, across NVLink domains, or for other group sizes.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import (
    C_CUSTOM_ALLREDUCE_BYTES, C_INTRA_BW, C_INTRA_EFF, C_INTRA_LATENCY, C_KERNEL_OVERHEAD_S,
)
from fastmodel.kernels.nccl import LL, PROTO_INTRA_HOP, allreduce_time, members_per_domain

KIB = 1024.0
# Fixed time of the two-shot kernel beyond its launch and three flag hops: the least-squares intercept of vLLM's
# ca_2stage on 6 H100s (vLLM PR #24111 table, 0.5-4 MiB: 11.4 us) less the model's 4 + 3 x 0.47 us
# (docs/model_serving.md S28). The one-shot's intercept there (5.15 us) is the model's 4.94 us: nothing added.
TWO_SHOT_SYNC_S = 6.0e-6


@njit
def one_shot(row, nbytes, size):
    """Seconds of a one-shot P2P allreduce of ``nbytes`` over ``size`` GPUs of one NVLink domain."""
    hop = row[C_INTRA_LATENCY] * PROTO_INTRA_HOP[LL]
    return row[C_KERNEL_OVERHEAD_S] + 2.0 * hop + (size - 1.0) * nbytes / (row[C_INTRA_BW] * row[C_INTRA_EFF])


@njit
def two_shot(row, nbytes, size):
    """Seconds of a two-shot (reduce-scatter + all-gather) P2P allreduce of ``nbytes`` over ``size`` GPUs."""
    hop = row[C_INTRA_LATENCY] * PROTO_INTRA_HOP[LL]
    return row[C_KERNEL_OVERHEAD_S] + 3.0 * hop + TWO_SHOT_SYNC_S \
        + 2.0 * (size - 1.0) / size * nbytes / (row[C_INTRA_BW] * row[C_INTRA_EFF])


@njit
def is_custom(row, nbytes, size, stride):
    """True when the engine runs an allreduce of ``nbytes`` over ``size`` GPUs with its own P2P kernel: a group of
    2, 4, 6 or 8 GPUs of one NVLink domain whose message fits the engine's buffer (``custom_allreduce_bytes``)."""
    return size > 1.0 and nbytes > 0.0 and nbytes < row[C_CUSTOM_ALLREDUCE_BYTES] \
        and members_per_domain(row, size, stride) >= size and size <= 8.0 and size % 2.0 == 0.0


@njit
def serve_allreduce(row, nbytes, size, stride):
    """Allreduce of ``nbytes`` over ``size`` GPUs as a serving engine runs it: its P2P kernel when the group is
    2, 4, 6 or 8 GPUs of one NVLink domain and the buffer fits (:func:`is_custom`), else NCCL
    (``nccl.allreduce_time``)."""
    if size <= 1.0 or nbytes <= 0.0:
        return 0.0
    if not is_custom(row, nbytes, size, stride):
        return allreduce_time(row, nbytes, size, stride)
    if size <= 2.0 or (size <= 4.0 and nbytes < 512.0 * KIB) or nbytes < 256.0 * KIB:
        return one_shot(row, nbytes, size)
    return two_shot(row, nbytes, size)
