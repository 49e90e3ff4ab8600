"""The generic list scheduler over N streams and repeated phases (docs/model.md §6).

A Program is a list of ops in emission order. Each op runs on one stream
(0 compute; 1.. communication: one per process group, point-to-point) and
starts at max(its stream's cursor, the end of each dependency); ops flagged
``barrier`` first move every cursor to their maximum (the reference's
forward/backward barrier). Ops are grouped in phases that cover them in order;
a phase runs ``phase_repeat`` times in a row (a per-micro-batch body of
gradient accumulation; 1 for every Program the MAD-Max lowering emits, which
therefore schedules exactly as the reference's two streams do). The iteration
time is the end of the last op on any stream. Busy time is summed per category.

Steady-state extrapolation. Layers are identical, so inside a periodic segment
(``Program.seg_*``: runs of layers that are equal op by op up to a shift) the
schedule state -- the stream cursors and the end times of the ops in the last
``window`` layers -- is a max-plus function of the previous state, monotone
and non-expansive in the sup norm. Once, at some layer j past the window, every
op started exactly as late as the largest advance among its candidates (stream
cursor, dependency ends) and that candidate won the max, and the state advanced
by the same per-component amounts as one layer earlier, every later layer of
the segment repeats those advances (each max keeps its winner); the scheduler
then jumps to the last layer, with an error of at most ``tol`` per skipped
layer. ``tol`` is
``EXTRAPOLATION_RTOL`` times the largest state value, so with at most ~100
skipped layers the result agrees with the full schedule to about 1e-12
relative (tests/test_schedule.py checks this on the reference cases and on
random programs). Runs that never settle are scheduled op by op.
"""

import numpy as np
from fastmodel.kernels.jit import njit, prange

from fastmodel.kernels.streams import (
    N_CATEGORIES, N_SCHEDULE_OUTPUTS, N_WORK, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME,
    W_CURSORS, W_INC_CURSOR, W_LAYER_BUSY, W_PREV_CURSORS, W_PREV_INC_CURSOR,
)

EXTRAPOLATION_RTOL = 4e-15


@njit(cache=True, inline="always")
def _run_op(i, op_stream, op_slot, op_category, dep_ptr, dep_idx, slots, op_start, op_end, cursor_before,
            cursors, out):
    # the Program's arrays come one by one (not the bundle): this body is inlined into the per-op loop, where
    # reading a bundle field would add reference-count updates for every op
    stream = op_stream[i]
    start = cursors[stream]
    cursor_before[i] = start
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
def _layer_is_stable(base, period, window, n_streams, dep_ptr, dep_idx, op_start, op_end, cursor_before, inc_cursor,
                     prev_inc_cursor, tol):
    """True if layer ``base`` (with the ``window`` layers before it) is in an affine steady state.

    Every op's start advances (vs the previous layer) by the largest advance
    among its candidates (stream cursor, dependency ends), achieved by a
    candidate that wins the max; the window ops and the cursors advance as in
    the layer after them. Then all later layers repeat these advances exactly.
    """
    for c in range(n_streams):
        if abs(inc_cursor[c] - prev_inc_cursor[c]) > tol:
            return False
    for i in range(base, base + period):
        prev = i - period
        inc_op = op_start[i] - op_start[prev]
        inc = cursor_before[i] - cursor_before[prev]
        if inc > inc_op + tol:
            return False
        winner = inc >= inc_op - tol and cursor_before[i] >= op_start[i] - tol
        for k in range(dep_ptr[i], dep_ptr[i + 1]):
            d = dep_idx[k]
            inc = op_end[d] - op_end[d - period]
            if inc > inc_op + tol:
                return False
            if inc >= inc_op - tol and op_end[d] >= op_start[i] - tol:
                winner = True
        if not winner:
            return False
    for i in range(base - (window - 1) * period, base):
        if abs((op_end[i] - op_end[i - period]) - (op_end[i + period] - op_end[i])) > tol:
            return False
    return True


@njit(cache=True, inline="always")
def _latest(cursors, n_streams):
    """The latest cursor of the streams (where a barrier moves them all)."""
    latest = cursors[0]
    for c in range(1, n_streams):
        if cursors[c] > latest:
            latest = cursors[c]
    return latest


@njit(cache=True)
def schedule_row(program, extrapolate, slots, op_start, op_end, cursor_before, work, out):
    """Schedule one configuration of ``program`` (an ``args.ProgramArrays``); fill per-op start/end and ``out``.

    Streams: ``program.n_streams`` cursors (0 compute, the others communication). Phases run in order, each
    ``phase_repeat`` times in a row, every stream's cursor carrying over; an op of a repeated phase keeps the
    start/end of its last run. ``out`` receives iteration time, time at the first barrier (the forward
    pass; the iteration time if there is none) and busy time per category (every run counted).
    ``cursor_before`` (n_ops) and ``work`` (N_WORK) are scratch space. With
    ``extrapolate``, ops of skipped layers keep no start/end times.
    """
    # unpacked once: fields read inside the loops would cost reference-count updates per op
    (op_stream, op_slot, op_category, op_barrier, dep_ptr, dep_idx, seg_start, seg_period, seg_layers, seg_window,
     phase_start, phase_end, phase_repeat, n_streams) = program
    cursors = work[W_CURSORS:W_CURSORS + n_streams]
    prev_cursors = work[W_PREV_CURSORS:W_PREV_CURSORS + n_streams]
    inc_cursor = work[W_INC_CURSOR:W_INC_CURSOR + n_streams]
    prev_inc_cursor = work[W_PREV_INC_CURSOR:W_PREV_INC_CURSOR + n_streams]
    layer_busy = work[W_LAYER_BUSY:W_LAYER_BUSY + N_CATEGORIES]
    for c in range(n_streams):
        cursors[c] = 0.0
    forward_time = -1.0
    for c in range(N_CATEGORIES):
        out[O_CATEGORY0 + c] = 0.0
    n_seg = seg_start.shape[0] if extrapolate else 0
    seg = 0
    for phase in range(phase_start.shape[0]):
        phase_seg = seg                          # the phase's first segment (segments lie inside one phase)
        for _ in range(phase_repeat[phase]):
            seg = phase_seg
            i = phase_start[phase]
            while i < phase_end[phase]:
                if op_barrier[i]:
                    latest = _latest(cursors, n_streams)
                    if forward_time < 0.0:
                        forward_time = latest
                    for c in range(n_streams):
                        cursors[c] = latest
                if seg < n_seg and i == seg_start[seg]:
                    first = seg_start[seg]
                    period = seg_period[seg]
                    layers = seg_layers[seg]
                    window = seg_window[seg]
                    for c in range(n_streams):
                        prev_cursors[c] = cursors[c]
                        inc_cursor[c] = 0.0
                    j = 0
                    while j < layers:
                        base = first + j * period
                        for c in range(N_CATEGORIES):
                            layer_busy[c] = out[O_CATEGORY0 + c]
                        for k in range(period):
                            _run_op(base + k, op_stream, op_slot, op_category, dep_ptr, dep_idx, slots,
                                    op_start, op_end, cursor_before, cursors, out)
                        for c in range(n_streams):
                            prev_inc_cursor[c] = inc_cursor[c]
                            inc_cursor[c] = cursors[c] - prev_cursors[c]
                            prev_cursors[c] = cursors[c]
                        # j > window: every dependency and its one-layer-earlier twin lie inside the segment
                        if j > window and j < layers - 1:
                            tol = EXTRAPOLATION_RTOL * _latest(cursors, n_streams)
                            if _layer_is_stable(base, period, window, n_streams, dep_ptr, dep_idx, op_start, op_end,
                                                cursor_before, inc_cursor, prev_inc_cursor, tol):
                                skip = layers - 1 - j
                                last_end = first + layers * period
                                # the last `window` layers (those after layer j) get layer j-k's times + skip x advance
                                lowest = max(last_end - window * period, base + period)
                                for op in range(last_end - 1, lowest - 1, -1):
                                    src = op - skip * period
                                    twin = base + (op - first) % period
                                    inc = op_end[twin] - op_end[twin - period]
                                    op_start[op] = op_start[src] + skip * inc
                                    op_end[op] = op_end[src] + skip * inc
                                for c in range(n_streams):
                                    cursors[c] += skip * inc_cursor[c]
                                for c in range(N_CATEGORIES):
                                    out[O_CATEGORY0 + c] += skip * (out[O_CATEGORY0 + c] - layer_busy[c])
                                break
                        j += 1
                    i = first + layers * period
                    seg += 1
                    continue
                _run_op(i, op_stream, op_slot, op_category, dep_ptr, dep_idx, slots, op_start, op_end, cursor_before,
                        cursors, out)
                i += 1
    total = _latest(cursors, n_streams)
    out[O_ITERATION_TIME] = total
    out[O_FORWARD_TIME] = total if forward_time < 0.0 else forward_time


@njit(cache=True)
def schedule_trace(program, slots_row):
    """Per-op start and end times (seconds) of one configuration, for timelines (no extrapolation)."""
    n_ops = program.op_stream.shape[0]
    op_start = np.empty(n_ops)
    op_end = np.empty(n_ops)
    out = np.empty(N_SCHEDULE_OUTPUTS)
    schedule_row(program, False, slots_row, op_start, op_end, np.empty(n_ops), np.empty(N_WORK), out)
    return op_start, op_end, out


@njit(cache=True, parallel=True)
def schedule_many(program, extrapolate, slots):
    """Schedule every row of ``slots`` (n_configs x n_slots) through one Program (for tests and tools)."""
    n = slots.shape[0]
    n_ops = program.op_stream.shape[0]
    out = np.empty((n, N_SCHEDULE_OUTPUTS))
    n_chunks = min(n, 64)
    for chunk in prange(n_chunks):
        op_start = np.empty(n_ops)
        op_end = np.empty(n_ops)
        cursor_before = np.empty(n_ops)
        work = np.empty(N_WORK)
        for i in range(chunk * n // n_chunks, (chunk + 1) * n // n_chunks):
            schedule_row(program, extrapolate, slots[i], op_start, op_end, cursor_before, work, out[i])
    return out
