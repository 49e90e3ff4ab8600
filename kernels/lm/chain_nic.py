"""The interleaved pipeline's exposed chain sends on the NIC the per-chunk data-parallel collectives hold
(docs/model.md §11.65).

Under the interleaved schedule with per-chunk data-parallel collectives (``dp_window.per_chunk_collectives``,
§11.28) Megatron-Core launches chunk ``c + 1``'s parameter all-gather at forward index ``c p - r`` on rank ``r``
for ``1 < c + 1 < v`` and chunk ``c``'s gradient reduction after backward index ``last(c) + r``, "at the same time
across the pipeline-parallel group" (NVIDIA/Megatron-LM df72712 ``schedules.py`` lines 558-563 and 622-627, the
v3.1 MLPerf image; 3c0f3ef lines 605-615 and 674-682, v4.0). Cycle 0: chunk 1's gather is launched before the
first forward (df72712 lines 511-513, queued behind chunk 0's), approximated by the same offsets (its true
offsets, ``(1 + r) f + r s``, are smaller: a slight undercount; review17 F3). Those are the cycles in which the warm-up's and the
cool-down's chain sends (``pipeline.pipeline_p2p``: ``2 (p v - 1)`` sends on the critical path) cross the
nodes. Each device has one NIC (tier 1 of ``kernels/nccl.py``) and a data-parallel ring across domains runs
every member's NIC at its rate when ``g_in inter_bw inter_eff`` is the bus bandwidth; a chain send of
bandwidth time ``beta`` (its bytes over ``inter_bw inter_eff``) that starts ``o`` seconds after such a
collective of ``rho`` seconds was launched shares the NIC with it, both at half rate [A: two flows, equal
share], and ends

    min(beta, max(0, rho - o))          seconds late.

Offsets, per chunk cycle, from the schedule's call order with uniform chunks (forward ``f``, backward ``b`` of
one chunk and micro-batch, ``s`` one send; derivation in §11.65):

    forward  (all-gather of chunk c + 1, cycles c = 0 .. v - 2):  f, then (1 + r) f + p s for r = 1 .. p - 1
    backward (reduction of chunk c):   0 in v - 1 cycles, and k b + p s for k = 1 .. p - 1 in v - 2 cycles

``rho`` is a chunk's ``per_stage / v`` layers' dense parameters: the first and last chunks' embedding and head
parameters and the expert parameters (reduced over the expert-data-parallel group, on the NIC too) are left out,
so ``rho`` is low on those chunks (review17 F11). The step adds the delay after ``host_step.embedding_send_overlap``
took the sends hidden in the first rank's embedding wait off: a hidden send's delay is still charged, an overcount
of at most ``min(delay, (p - 1) e_F - p s)`` where ``(p - 1) e_F > p s``; none on the MLPerf v3.1 rows
(7 x 0.332 < 8 x 0.306 ms; review17 F12).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.dp_window import per_chunk_collectives
from fastmodel.kernels.lm.layout import (
    C_CP, C_DOMAIN_SIZE, C_DP, C_GRAD_ALLREDUCE, C_GRAD_REDUCE_BYTES, C_HIDDEN, C_INTER_BW, C_INTER_EFF,
    C_MICRO_BATCH, C_OVERLAP_GRAD_REDUCE, C_OVERLAP_PARAM_GATHER, C_PP, C_SEQUENCE_PARALLEL, C_SEQ_LEN, C_SHARDING,
    C_TP, C_VP, SHARD_DDP,
)
from fastmodel.kernels.lm.parallel import param_bytes
from fastmodel.kernels.lm.passes import A_BACKWARD_INPUT, A_BACKWARD_WEIGHT, A_EXPERT_PARAMS, A_FORWARD, A_PARAMS, \
    A_RECOMPUTE
from fastmodel.kernels.lm.pipeline import deepspeed_engine
from fastmodel.kernels.lm.pipeline_2021 import sync_exchanges
from fastmodel.kernels.lm.shape import ACT_BYTES
from fastmodel.kernels.nccl import allgather_time, allreduce_time, bus_bandwidth, members_per_domain, p2p_time


@njit
def shared_send_delay(beta, rho, offset):
    """Seconds a send of ``beta`` seconds at the NIC's rate loses when it starts ``offset`` seconds after a
    collective of ``rho`` seconds took the same NIC: both at half rate while both run (module docstring)."""
    return min(beta, max(0.0, rho - offset))


@njit
def chain_share_seconds(p, v, f, b, s, beta, rho_gather, rho_reduce):
    """Seconds the ``2 (p v - 1)`` exposed chain sends lose to the per-chunk all-gathers (``rho_gather`` each,
    0: none overlapped) and reductions (``rho_reduce``) on their NICs, for ``p`` ranks, ``v`` chunks, chunk
    passes ``f`` and ``b``, a send of ``s`` seconds of which ``beta`` is bandwidth time (module docstring)."""
    if p <= 1.0 or v <= 1.0 or beta <= 0.0:
        return 0.0
    forward = 0.0
    backward = 0.0
    if rho_gather > 0.0:
        forward = shared_send_delay(beta, rho_gather, f)
        for r in range(1, int(p)):
            forward += shared_send_delay(beta, rho_gather, (1.0 + r) * f + p * s)
    if rho_reduce > 0.0:
        backward = (v - 1.0) * shared_send_delay(beta, rho_reduce, 0.0)
        for k in range(1, int(p)):
            backward += (v - 2.0) * shared_send_delay(beta, rho_reduce, k * b + p * s)
    return (v - 1.0) * forward + backward


@njit
def chain_sends_nic_shared(row, work, per_stage):
    """Seconds the busiest rank's ``per_stage`` layers (``work``: one layer's passes, ``passes.layer_passes``) add
    to the pipeline's exposed sends through the per-chunk data-parallel collectives on the same NICs (module
    docstring): 0 unless the collectives run per chunk (§11.28) beside Megatron-Core's own sends (not DeepSpeed's
    engine, not Megatron-LM 2021's blocking exchanges), the pipeline's neighbours sit in other domains, and the
    data-parallel ring crosses domains at the NICs' rate."""
    p = row[C_PP]
    v = row[C_VP]
    t = row[C_TP]
    d = row[C_DP]
    stride = t * row[C_CP]
    if not per_chunk_collectives(row) or deepspeed_engine(row) or sync_exchanges(row) \
            or stride * d < row[C_DOMAIN_SIZE]:
        return 0.0
    nic = row[C_INTER_BW] * row[C_INTER_EFF]
    g_in = members_per_domain(row, d, stride)
    if g_in >= d or nic <= 0.0 or bus_bandwidth(row, d, stride) < g_in * nic:
        return 0.0      # inside one domain, or a ring that does not run the NICs at their rate
    nbytes = ACT_BYTES * row[C_MICRO_BATCH] * row[C_SEQ_LEN] / row[C_CP] * row[C_HIDDEN]
    if row[C_SEQUENCE_PARALLEL] > 0.0:
        nbytes = nbytes / t
    chunk_params = per_stage / v * (work[A_PARAMS] - work[A_EXPERT_PARAMS])
    ddp = row[C_SHARDING] == SHARD_DDP
    rho_reduce = 0.0
    if row[C_OVERLAP_GRAD_REDUCE] > 0.0:
        grads = chunk_params * row[C_GRAD_REDUCE_BYTES]
        rho_reduce = allreduce_time(row, grads, d, stride) if ddp or row[C_GRAD_ALLREDUCE] > 0.0 \
            else allgather_time(row, grads, d, stride)
    rho_gather = 0.0
    if not ddp and row[C_OVERLAP_PARAM_GATHER] > 0.0:
        rho_gather = allgather_time(row, chunk_params * param_bytes(row), d, stride)
    f = per_stage / v * work[A_FORWARD]
    b = per_stage / v * (work[A_BACKWARD_INPUT] + work[A_BACKWARD_WEIGHT] + work[A_RECOMPUTE])
    s = p2p_time(row, nbytes, stride * d)
    return chain_share_seconds(p, v, f, b, s, nbytes / nic, rho_gather, rho_reduce)
