"""The generic two-stream list scheduler (MADMAX_MODEL.md 1.6).

A Program is a list of ops in emission order. Each op runs on one stream
(compute or communication) and starts at max(its stream's cursor, the end of
each dependency); ops flagged ``barrier`` first move both cursors to their
maximum (the reference's forward/backward barrier). The iteration time is the
end of the last op on either stream. Busy time is summed per category.
"""

import numpy as np
from numba import njit, prange

from fastmodel.kernels.layout import N_CATEGORIES, N_SCHEDULE_OUTPUTS, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME


@njit(cache=True)
def schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, slots, op_start, op_end, out):
    """Schedule one configuration; fill per-op start/end and ``out``.

    ``out`` receives iteration time, time at the first barrier (the forward
    pass; the iteration time if there is none) and busy time per category.
    """
    cursor_compute = 0.0
    cursor_comm = 0.0
    forward_time = -1.0
    for c in range(N_CATEGORIES):
        out[O_CATEGORY0 + c] = 0.0
    for i in range(op_stream.shape[0]):
        if op_barrier[i]:
            phase_end = max(cursor_compute, cursor_comm)
            if forward_time < 0.0:
                forward_time = phase_end
            cursor_compute = phase_end
            cursor_comm = phase_end
        start = cursor_compute if op_stream[i] == 0 else cursor_comm
        for k in range(dep_ptr[i], dep_ptr[i + 1]):
            dep_end = op_end[dep_idx[k]]
            if dep_end > start:
                start = dep_end
        duration = slots[op_slot[i]]
        end = start + duration
        op_start[i] = start
        op_end[i] = end
        if op_stream[i] == 0:
            cursor_compute = end
        else:
            cursor_comm = end
        out[O_CATEGORY0 + op_category[i]] += duration
    total = max(cursor_compute, cursor_comm)
    out[O_ITERATION_TIME] = total
    out[O_FORWARD_TIME] = total if forward_time < 0.0 else forward_time


@njit(cache=True, parallel=True)
def schedule_many(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, slots):
    """Schedule every row of ``slots`` (n_configs x n_slots) through one Program."""
    n = slots.shape[0]
    n_ops = op_stream.shape[0]
    out = np.empty((n, N_SCHEDULE_OUTPUTS))
    for i in prange(n):
        op_start = np.empty(n_ops)
        op_end = np.empty(n_ops)
        schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, slots[i], op_start, op_end, out[i])
    return out


@njit(cache=True)
def schedule_many_serial(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, slots):
    """:func:`schedule_many` on one thread: for a few rows, where waking threads costs more."""
    n = slots.shape[0]
    n_ops = op_stream.shape[0]
    out = np.empty((n, N_SCHEDULE_OUTPUTS))
    op_start = np.empty(n_ops)
    op_end = np.empty(n_ops)
    for i in range(n):
        schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, slots[i], op_start, op_end, out[i])
    return out


@njit(cache=True)
def schedule_trace(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, slots_row):
    """Per-op start and end times (seconds) of one configuration, for timelines."""
    n_ops = op_stream.shape[0]
    op_start = np.empty(n_ops)
    op_end = np.empty(n_ops)
    out = np.empty(N_SCHEDULE_OUTPUTS)
    schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, slots_row, op_start, op_end, out)
    return op_start, op_end, out
