"""Megatron-LM 2021-22's pipeline exchanges (docs/model.md §11.52, ``pp_exchange_2021``).

NVIDIA/Megatron-LM de7dc40f88 (the SC21 scripts' commit) ``megatron/p2p_communication.py`` ``_communicate``
(lines 24-143) posts each exchange as one ``torch.distributed.batch_isend_irecv``, waits on every request and then
calls ``torch.cuda.synchronize()`` (line 130): the compute stream drains and the host blocks, so no exchange
overlaps a pass and the neighbours meet at every one. ``megatron/schedules.py`` (lines 141-456) issues them in
its fixed order: 1F1B ``send_forward_recv_backward`` after a forward and ``send_backward_recv_forward`` after a
backward; the interleaved schedule one ``send_forward_recv_forward`` per warm-up chunk, one
``send_forward_backward_recv_forward_backward`` per steady-state forward-and-backward pair (both tensors out of the
same GPU: its NIC's egress carries two sends [A]) and one ``send_backward_recv_backward`` per cool-down chunk.
Unchanged at 9c5a830f25 (2022-02) and cfd2e21607 (2022-04, which skips the scatter-gather under sequence
parallelism, lines 63-65); Megatron-DeepSpeed's ``_communicate`` synchronizes too (71e8407c
``megatron/p2p_communication.py`` line 112, ``megatron/core/pipeline_parallel/p2p_communication.py`` line 327,
``batch_p2p_sync`` default True).

With ``--scatter-gather-tensors-in-pipeline`` (default on: de7dc40f88 ``arguments.py`` lines 585-587) the sender
sends its 1/t slice (``mpu.split_tensor_into_1d_equal_chunks``, a view: ``mpu/random.py`` lines 104-110) and the
receiver rebuilds the tensor after the synchronize by ``mpu.gather_split_1d_tensor`` (lines 113-124):
``torch.distributed.all_gather`` into t views of a new buffer, which PyTorch's NCCL group runs into a flat buffer
and copies out (``ProcessGroupNCCL::allgather``: ``flatten_for_scatter_gather``, then ``copy_`` per output
tensor), a read and a write of the tensor through HBM beside the gather.
"""

from __future__ import annotations

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_COLLECTIVE_OVERHEAD_S, C_CP, C_DP, C_PIPELINE_SCHEDULE, C_PP, C_PP_EXCHANGE_2021, C_SEQUENCE_PARALLEL, C_TP,
    C_VP, SCHED_1F1B, SCHED_INTERLEAVED,
)
from fastmodel.kernels.nccl import allgather_time, p2p_time
from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.registry.lm_pipeline import EXCHANGE_BLOCKING, EXCHANGE_SCATTER_GATHER


@njit
def sync_exchanges(row):
    """Megatron-LM 2021-22's blocking exchanges run this pipeline (``pp_exchange_2021`` set, 1F1B or interleaved:
    the two schedules that code has)."""
    schedule = int(row[C_PIPELINE_SCHEDULE])
    return row[C_PP_EXCHANGE_2021] >= EXCHANGE_BLOCKING and (schedule == SCHED_1F1B or schedule == SCHED_INTERLEAVED)


@njit
def sync_exchange_counts(m, p, v):
    """(sends, gathers) on the critical path of de7dc40f88 ``schedules.py`` with blocking exchanges, uniform
    stages, in units of one send (one gather) of one tensor; a steady interleaved exchange's two outgoing sends
    count two. Counted by an event simulation of the call order (tests/lm/test_pipeline_2021.py repeats it for
    every shape below; independent of the forward : backward ratio and of the send's length):

        1F1B          m = 1: 2 (p - 1);  p = 2: m + 1;  else 2 (m + p) - 5
        interleaved   p = 2: 4 v (m = p), m (4 v - 1) / 2 (m > p);  else 2 (m v + p - 2)

    Each received tensor is gathered once: as many gathers as sends, one fewer in an interleaved step with
    m > p, p > 2."""
    if v > 1.0:
        if p <= 2.0:
            sends = 4.0 * v if m <= p else m * (4.0 * v - 1.0) / 2.0
            return sends, sends
        sends = 2.0 * (m * v + p - 2.0)
        return sends, sends - (1.0 if m > p else 0.0)
    if m <= 1.0:
        sends = 2.0 * (p - 1.0)
    elif p <= 2.0:
        sends = m + 1.0
    else:
        sends = 2.0 * (m + p) - 5.0
    return sends, sends


@njit
def sync_p2p(row, micro_batches, nbytes):
    """(seconds, exposed seconds) of the step's pipeline exchanges under Megatron-LM 2021-22 (module docstring):
    all blocking, so both are ``sends x send + gathers x gather``. ``nbytes``: one activation or gradient as the
    model sends it (already 1/t under sequence parallelism, which sends it whole). With the scatter-gather
    (``pp_exchange_2021`` 2) and t > 1 without sequence parallelism, a send carries ``nbytes / t`` and a gather
    is ``allgather(nbytes, t)`` plus its launch and the copy-out (read and write ``nbytes``)."""
    t = row[C_TP]
    part = nbytes
    gather = 0.0
    if row[C_PP_EXCHANGE_2021] >= EXCHANGE_SCATTER_GATHER and t > 1.0 and row[C_SEQUENCE_PARALLEL] <= 0.0:
        part = nbytes / t
        gather = allgather_time(row, nbytes, t, 1.0) + row[C_COLLECTIVE_OVERHEAD_S] \
            + memory_bound_time(row, 2.0 * nbytes)
    send = p2p_time(row, part, t * row[C_CP] * row[C_DP])
    sends, gathers = sync_exchange_counts(micro_batches, row[C_PP], max(row[C_VP], 1.0))
    exposed = sends * send + gathers * gather
    return exposed, exposed
