"""Fused evaluation: parameter tables -> every result variable, in one pass per config.

``params`` is column-major (``COLUMNS`` x n: one contiguous row per
column), as ``params.param_table`` builds it. Everything else the pass needs
comes in three bundles (``kernels/args.py``): the plan codes, the Program's
arrays and the evaluation options.

For each legal row: the cost kernel fills the family's cost slots, the generic
scheduler runs the Program, and the derived variables (throughput, exposed
communication, memory per device, fits) are written straight into the
caller's output matrix (``out[variable, offset + row]``), so a sweep chunk
lands in its region of the grid without copies. Rows are split into chunks,
one ``prange`` iteration each, so scratch space is allocated once per chunk.
Rows whose status is not ok get NaN; legal rows that do not fit in memory get
``STATUS_DOES_NOT_FIT`` and keep only their memory variables.
"""

import numpy as np
from fastmodel.kernels.jit import njit, prange

from fastmodel.kernels.madmax.layout import (
    CAT_ALL2ALL, CAT_ALLGATHER, CAT_ALLREDUCE, CAT_EMB, CAT_GEMM, CAT_REDUCESCATTER, MEMORY_RESULTS,
    N_SLOTS, N_RESULTS, N_SCHEDULE_OUTPUTS, N_TERMS, N_WORK, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME,
    P_DEVICES_PER_NODE, P_HBM_CAPACITY, P_NODE_TDP, P_NODES, P_PRICE, P_TRAIN_SAMPLES,
    R_COST, R_ENERGY, R_GPU_HOURS, R_TRAIN_TIME, R_EFF_FLOP_PER_S, R_EXPOSED_COMM, R_FITS_MEMORY, R_FORWARD_TIME, R_GLOBAL_BATCH, R_HBM_CAPACITY,
    R_STEP_TIME, R_MEMORY_PER_DEVICE, R_NUM_COMM_OPS, R_NUM_COMPUTE_OPS, R_OVERLAPPED_COMM, R_THROUGHPUT,
    R_TIME_ALL2ALL, R_TIME_ALLGATHER, R_TIME_ALLREDUCE, R_TIME_COMM, R_TIME_COMPUTE, R_TIME_EMB, R_TIME_GEMM,
    R_TIME_REDUCESCATTER, R_WEIGHT_MEMORY, R_WEIGHT_MEMORY_DENSE, R_WEIGHT_MEMORY_EMB, STATUS_DOES_NOT_FIT, STATUS_OK,
    T_EFF_FLOPS, T_GLOBAL_BATCH, T_WMEM_DENSE, T_WMEM_EMB,
)
from fastmodel.kernels.madmax.costs import costs_row
from fastmodel.kernels.schedule import schedule_row

#: rows per prange chunk (scratch is allocated once per chunk)
CHUNK_ROWS = 512


@njit(cache=True)
def _evaluate_rows(lo, hi, params, status, plan, program, options, out, offset):
    n_ops = program.op_stream.shape[0]
    memory_factor = options.memory_factor
    slots = np.empty(N_SLOTS)
    terms = np.empty(N_TERMS)
    sched = np.empty(N_SCHEDULE_OUTPUTS)
    op_start = np.empty(n_ops)
    op_end = np.empty(n_ops)
    cursor_before = np.empty(n_ops)
    work = np.empty(N_WORK)
    for r in range(lo, hi):
        col = offset + r
        if status[r] != STATUS_OK:
            for v in range(N_RESULTS):
                out[v, col] = np.nan
            out[R_FITS_MEMORY, col] = 0.0
            continue
        row = params[:, r]
        costs_row(row, plan, slots, terms)
        schedule_row(program, options.extrapolate, slots, op_start, op_end, cursor_before, work, sched)
        t = sched[O_ITERATION_TIME]
        gemm = sched[O_CATEGORY0 + CAT_GEMM]
        emb = sched[O_CATEGORY0 + CAT_EMB]
        a2a = sched[O_CATEGORY0 + CAT_ALL2ALL]
        ar = sched[O_CATEGORY0 + CAT_ALLREDUCE]
        ag = sched[O_CATEGORY0 + CAT_ALLGATHER]
        rs = sched[O_CATEGORY0 + CAT_REDUCESCATTER]
        compute = gemm + emb
        comm = a2a + ar + ag + rs
        exposed = max(t - compute, 0.0)  # rounding noise can make these -1e-14
        weights = terms[T_WMEM_DENSE] + terms[T_WMEM_EMB]
        memory = memory_factor * weights
        capacity = row[P_HBM_CAPACITY]
        out[R_STEP_TIME, col] = t
        out[R_THROUGHPUT, col] = terms[T_GLOBAL_BATCH] / t
        out[R_GLOBAL_BATCH, col] = terms[T_GLOBAL_BATCH]
        out[R_FORWARD_TIME, col] = sched[O_FORWARD_TIME]
        out[R_TIME_GEMM, col] = gemm
        out[R_TIME_EMB, col] = emb
        out[R_TIME_ALL2ALL, col] = a2a
        out[R_TIME_ALLREDUCE, col] = ar
        out[R_TIME_ALLGATHER, col] = ag
        out[R_TIME_REDUCESCATTER, col] = rs
        out[R_TIME_COMPUTE, col] = compute
        out[R_TIME_COMM, col] = comm
        out[R_EXPOSED_COMM, col] = exposed
        out[R_OVERLAPPED_COMM, col] = max(comm - exposed, 0.0)
        out[R_WEIGHT_MEMORY_DENSE, col] = terms[T_WMEM_DENSE]
        out[R_WEIGHT_MEMORY_EMB, col] = terms[T_WMEM_EMB]
        out[R_WEIGHT_MEMORY, col] = weights
        out[R_MEMORY_PER_DEVICE, col] = memory
        out[R_HBM_CAPACITY, col] = capacity
        out[R_FITS_MEMORY, col] = 1.0 if memory <= capacity else 0.0
        out[R_EFF_FLOP_PER_S, col] = terms[T_EFF_FLOPS]
        out[R_NUM_COMPUTE_OPS, col] = options.num_compute_ops
        out[R_NUM_COMM_OPS, col] = options.num_comm_ops
        # time to train train_samples, device-hours, cost and energy (NaN when not given)
        train_time = row[P_TRAIN_SAMPLES] / out[R_THROUGHPUT, col]
        gpu_hours = train_time * row[P_NODES] * row[P_DEVICES_PER_NODE] / 3600.0
        out[R_TRAIN_TIME, col] = train_time
        out[R_GPU_HOURS, col] = gpu_hours
        out[R_COST, col] = gpu_hours * row[P_PRICE]
        out[R_ENERGY, col] = gpu_hours * 3600.0 * row[P_NODE_TDP] / row[P_DEVICES_PER_NODE]
        if options.mask_infeasible and memory > capacity:
            status[r] = STATUS_DOES_NOT_FIT
            for v in range(N_RESULTS):
                keep = False
                for m in MEMORY_RESULTS:
                    if v == m:
                        keep = True
                if not keep:
                    out[v, col] = np.nan


@njit(cache=True, parallel=True)
def evaluate_parallel(params, status, plan, program, options, out, offset):
    """Evaluate every config (column) of ``params`` into ``out[:, offset:offset + n]`` (threads over chunks).

    ``plan``, ``program``, ``options``: the bundles of ``kernels/args.py`` (PlanCodes, ProgramArrays, EvalOptions).
    """
    n = params.shape[1]
    n_chunks = (n + CHUNK_ROWS - 1) // CHUNK_ROWS
    for chunk in prange(n_chunks):
        lo = chunk * CHUNK_ROWS
        hi = min(n, lo + CHUNK_ROWS)
        _evaluate_rows(lo, hi, params, status, plan, program, options, out, offset)


@njit(cache=True)
def evaluate_serial(params, status, plan, program, options, out, offset):
    """:func:`evaluate_parallel` on one thread: for a few rows, where waking threads costs more."""
    _evaluate_rows(0, params.shape[1], params, status, plan, program, options, out, offset)
