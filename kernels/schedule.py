"""The generic two-stream list scheduler (MADMAX_MODEL.md 1.6).

A Program is a list of ops in emission order. Each op runs on one stream
(compute or communication) and starts at max(its stream's cursor, the end of
each dependency); ops flagged ``barrier`` first move both cursors to their
maximum (the reference's forward/backward barrier). The iteration time is the
end of the last op on either stream. Busy time is summed per category.

Steady-state extrapolation. Layers are identical, so inside a periodic segment
(``Program.seg_*``: runs of layers that are equal op by op up to a shift) the
schedule state -- the two cursors and the end times of the ops in the last
``window`` layers -- is a max-plus function of the previous state. That map is
monotone, homogeneous (F(S + c) = F(S) + c) and non-expansive in the sup norm.
So once the state after layer j equals the state after layer j-1 plus one
scalar delta in every component (within ``tol``), every later layer of the
segment advances it by the same delta, with an error of at most ``tol`` per
skipped layer; the scheduler then jumps to the last layer. ``tol`` is
``EXTRAPOLATION_RTOL`` times the largest state value, so with at most ~100
skipped layers the result agrees with the full schedule to about 1e-12
relative (tests/test_schedule.py checks this on the reference cases and on
random programs). Runs that never settle are scheduled op by op.
"""

import numpy as np
from numba import njit, prange

from fastmodel.kernels.layout import N_CATEGORIES, N_SCHEDULE_OUTPUTS, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME

EXTRAPOLATION_RTOL = 4e-15


@njit(cache=True, inline="always")
def _run_op(i, op_stream, op_slot, op_category, dep_ptr, dep_idx, slots, op_start, op_end, cursors, out):
    stream = op_stream[i]
    start = cursors[stream]
    for k in range(dep_ptr[i], dep_ptr[i + 1]):
        dep_end = op_end[dep_idx[k]]
        if dep_end > start:
            start = dep_end
    duration = slots[op_slot[i]]
    end = start + duration
    op_start[i] = start
    op_end[i] = end
    cursors[stream] = end
    out[O_CATEGORY0 + op_category[i]] += duration


@njit(cache=True)
def schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx,
                 seg_start, seg_period, seg_layers, seg_window, extrapolate,
                 slots, op_start, op_end, out):
    """Schedule one configuration; fill per-op start/end and ``out``.

    ``out`` receives iteration time, time at the first barrier (the forward
    pass; the iteration time if there is none) and busy time per category.
    With ``extrapolate``, ops of skipped layers keep no start/end times.
    """
    cursors = np.zeros(2)
    forward_time = -1.0
    for c in range(N_CATEGORIES):
        out[O_CATEGORY0 + c] = 0.0
    layer_busy = np.zeros(N_CATEGORIES)
    n_ops = op_stream.shape[0]
    n_seg = seg_start.shape[0] if extrapolate else 0
    seg = 0
    i = 0
    while i < n_ops:
        if op_barrier[i]:
            phase_end = max(cursors[0], cursors[1])
            if forward_time < 0.0:
                forward_time = phase_end
            cursors[0] = phase_end
            cursors[1] = phase_end
        if seg < n_seg and i == seg_start[seg]:
            first = seg_start[seg]
            period = seg_period[seg]
            layers = seg_layers[seg]
            window = seg_window[seg]
            prev0 = cursors[0]
            prev1 = cursors[1]
            j = 0
            while j < layers:
                base = first + j * period
                for c in range(N_CATEGORIES):
                    layer_busy[c] = out[O_CATEGORY0 + c]
                for k in range(period):
                    _run_op(base + k, op_stream, op_slot, op_category, dep_ptr, dep_idx, slots,
                            op_start, op_end, cursors, out)
                if j >= window and j < layers - 1:
                    delta = cursors[0] - prev0
                    scale = max(cursors[0], cursors[1])
                    tol = EXTRAPOLATION_RTOL * scale
                    uniform = abs(cursors[1] - prev1 - delta) <= tol
                    lo = base + period - window * period
                    for op in range(lo, base + period):
                        if not uniform:
                            break
                        if abs(op_end[op] - op_end[op - period] - delta) > tol:
                            uniform = False
                    if uniform:
                        skip = layers - 1 - j
                        shift = skip * delta
                        last_end = first + layers * period
                        for op in range(last_end - 1, last_end - 1 - window * period, -1):
                            op_start[op] = op_start[op - skip * period] + shift
                            op_end[op] = op_end[op - skip * period] + shift
                        cursors[0] += shift
                        cursors[1] += shift
                        for c in range(N_CATEGORIES):
                            out[O_CATEGORY0 + c] += skip * (out[O_CATEGORY0 + c] - layer_busy[c])
                        break
                prev0 = cursors[0]
                prev1 = cursors[1]
                j += 1
            i = first + layers * period
            seg += 1
            continue
        _run_op(i, op_stream, op_slot, op_category, dep_ptr, dep_idx, slots, op_start, op_end, cursors, out)
        i += 1
    total = max(cursors[0], cursors[1])
    out[O_ITERATION_TIME] = total
    out[O_FORWARD_TIME] = total if forward_time < 0.0 else forward_time


@njit(cache=True, parallel=True)
def schedule_many(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx,
                  seg_start, seg_period, seg_layers, seg_window, extrapolate, slots):
    """Schedule every row of ``slots`` (n_configs x n_slots) through one Program."""
    n = slots.shape[0]
    n_ops = op_stream.shape[0]
    out = np.empty((n, N_SCHEDULE_OUTPUTS))
    for i in prange(n):
        op_start = np.empty(n_ops)
        op_end = np.empty(n_ops)
        schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx,
                     seg_start, seg_period, seg_layers, seg_window, extrapolate,
                     slots[i], op_start, op_end, out[i])
    return out


@njit(cache=True)
def schedule_many_serial(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx,
                         seg_start, seg_period, seg_layers, seg_window, extrapolate, slots):
    """:func:`schedule_many` on one thread: for a few rows, where waking threads costs more."""
    n = slots.shape[0]
    n_ops = op_stream.shape[0]
    out = np.empty((n, N_SCHEDULE_OUTPUTS))
    op_start = np.empty(n_ops)
    op_end = np.empty(n_ops)
    for i in range(n):
        schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx,
                     seg_start, seg_period, seg_layers, seg_window, extrapolate,
                     slots[i], op_start, op_end, out[i])
    return out


@njit(cache=True)
def schedule_trace(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx,
                   seg_start, seg_period, seg_layers, seg_window, slots_row):
    """Per-op start and end times (seconds) of one configuration, for timelines (no extrapolation)."""
    n_ops = op_stream.shape[0]
    op_start = np.empty(n_ops)
    op_end = np.empty(n_ops)
    out = np.empty(N_SCHEDULE_OUTPUTS)
    schedule_row(op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx,
                 seg_start, seg_period, seg_layers, seg_window, False, slots_row, op_start, op_end, out)
    return op_start, op_end, out
