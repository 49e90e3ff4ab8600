"""Argument bundles of the MAD-Max kernels: named tuples numba passes as one argument each.

Three bundles carry what the fused pass (``kernels/madmax/evaluate.py``), the cost
kernel (``kernels/madmax/costs.py``) and the scheduler (``kernels/schedule.py``) need
besides the parameter table and their outputs:

- :class:`ProgramArrays`: the op graph of one structure (``Program.kernel_arrays()``);
- :class:`PlanCodes`: the family, each plan component's strategy codes and
  level count, and the semantics flags (``engine.plan_codes``);
- :class:`EvalOptions`: how one evaluation runs (``engine.eval_options``).

numba types a ``typing.NamedTuple`` as a heterogeneous tuple with attribute
access, so a kernel reads ``program.dep_ptr`` or ``plan.num_dense``. Every
field has one fixed dtype, set by the ``make_*`` functions below (the only
constructors the Python side uses): a bundle built with another dtype would
make numba compile, and cache, a second signature of every kernel.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class ProgramArrays(NamedTuple):
    """The op graph of one Program: per-op arrays, CSR dependencies, periodic segments."""

    op_stream: np.ndarray    # int8 (n_ops): 0 compute, 1 communication
    op_slot: np.ndarray      # int32 (n_ops): index into the cost slots
    op_category: np.ndarray  # int8 (n_ops): layout.CAT_*
    op_barrier: np.ndarray   # bool (n_ops): both streams synchronise before this op
    dep_ptr: np.ndarray      # int32 (n_ops + 1): CSR row pointer
    dep_idx: np.ndarray      # int32: indices of earlier ops
    seg_start: np.ndarray    # int32 (n_segments): first op of each periodic segment
    seg_period: np.ndarray   # int32: ops per layer
    seg_layers: np.ndarray   # int32: layers in the segment
    seg_window: np.ndarray   # int32: trailing layers that form the schedule state
    phase_start: np.ndarray  # int32 (n_phases): first op of each phase; phases cover the ops in order
    phase_end: np.ndarray    # int32: one past the last op of each phase
    phase_repeat: np.ndarray  # int32: times the phase runs in a row (micro-batches: > 1)
    n_streams: int           # streams the ops use (<= layout.MAX_STREAMS): 0 compute, the others communication


class PlanCodes(NamedTuple):
    """Family code, plan strategy codes per component (2 levels, STRAT_NONE past the used ones), semantics flags.

    Scalars only. No arrays: the cost kernel reads the codes for every row, and reading an array out of a
    tuple costs numba a reference-count update (an atomic shared by every thread). No nested tuples: the
    parallel pass hands its captured variables to numba's gufunc builder, which takes scalars and arrays only.
    """

    family: int       # layout.FAMILY_*
    dense_code0: int  # layout.STRAT_* of the dense component's level 0
    dense_code1: int
    num_dense: int    # levels used
    emb_code0: int
    emb_code1: int
    num_emb: int
    tr_code0: int     # the transformer component of dlrm-transformer
    tr_code1: int
    num_tr: int
    flags: int        # bit layout.F_* set: that semantics switch is on


class EvalOptions(NamedTuple):
    """Per-evaluation switches and the Program's op counts the fused pass reports."""

    extrapolate: bool        # jump over steady-state layers (kernels/schedule.py)
    memory_factor: float     # memory per device = memory_factor x weights
    mask_infeasible: bool    # rows that do not fit get STATUS_DOES_NOT_FIT and only memory results
    num_compute_ops: float
    num_comm_ops: float


_PROGRAM_DTYPES = (np.int8, np.int32, np.int8, np.bool_, np.int32, np.int32, np.int32, np.int32, np.int32, np.int32,
                   np.int32, np.int32, np.int32)


def make_program_arrays(*fields) -> ProgramArrays:
    """A :class:`ProgramArrays` with every array contiguous in its fixed dtype and ``n_streams`` an int (fields
    in order)."""
    if len(fields) != len(ProgramArrays._fields):
        raise TypeError(f"make_program_arrays: {len(ProgramArrays._fields)} fields expected, got {len(fields)}")
    *arrays, n_streams = fields
    return ProgramArrays(*(np.ascontiguousarray(a, dtype=t) for a, t in zip(arrays, _PROGRAM_DTYPES)), int(n_streams))


def _pair(codes) -> tuple[int, int]:
    pair = tuple(int(c) for c in codes)
    if len(pair) != 2:
        raise ValueError(f"make_plan_codes: strategy codes of 2 levels expected (padded), got {len(pair)}")
    return pair


def make_plan_codes(family: int, dense_codes, num_dense: int, emb_codes, num_emb: int, tr_codes, num_tr: int,
                    flags) -> PlanCodes:
    """A :class:`PlanCodes` of Python ints (numba: int64); ``*_codes``: the 2 padded levels of a component,
    ``flags``: one 0/1 value per layout.F_* switch, packed into bits."""
    bits = 0
    for bit, value in enumerate(flags):
        bits |= (1 << bit) if int(value) else 0
    return PlanCodes(int(family), *_pair(dense_codes), int(num_dense), *_pair(emb_codes), int(num_emb),
                     *_pair(tr_codes), int(num_tr), bits)


def make_eval_options(extrapolate: bool, memory_factor: float, mask_infeasible: bool, num_compute_ops: float,
                      num_comm_ops: float) -> EvalOptions:
    """An :class:`EvalOptions` with bool and float64 fields."""
    return EvalOptions(bool(extrapolate), float(memory_factor), bool(mask_infeasible), float(num_compute_ops),
                       float(num_comm_ops))
