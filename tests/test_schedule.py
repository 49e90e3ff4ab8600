"""The two-stream scheduler kernel on small hand-built programs."""

import numpy as np
import pytest

from fastmodel.kernels.layout import (
    CAT_ALLGATHER, CAT_ALLREDUCE, CAT_GEMM, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME,
    STREAM_COMM as COMM, STREAM_COMPUTE as COMP,
)
from fastmodel.kernels.schedule import schedule_many, schedule_trace
from fastmodel.program import ProgramBuilder


def _program():
    b = ProgramBuilder()
    b.op("ag0", COMM, 0, CAT_ALLGATHER)                # 0..2
    b.op("g0", COMP, 1, CAT_GEMM, ["ag0"])            # 2..5
    b.op("ar0", COMM, 2, CAT_ALLREDUCE, ["g0"])        # 5..9
    b.op("g1", COMP, 1, CAT_GEMM, ["g0", "missing"])   # 5..8 (missing dep ignored)
    b.barrier()
    b.op("g2", COMP, 1, CAT_GEMM)                      # barrier at 9 -> 9..12
    b.op("ar1", COMM, 2, CAT_ALLREDUCE, ["g2"])        # 12..16
    return b.build()


def test_hand_schedule():
    program = _program()
    slots = np.array([[2.0, 3.0, 4.0]])
    out = schedule_many(*program.arrays(), slots)[0]
    assert out[O_ITERATION_TIME] == 16.0
    assert out[O_FORWARD_TIME] == 9.0
    assert out[O_CATEGORY0 + CAT_GEMM] == 9.0
    assert out[O_CATEGORY0 + CAT_ALLREDUCE] == 8.0
    assert out[O_CATEGORY0 + CAT_ALLGATHER] == 2.0
    start, end, _ = schedule_trace(*program.arrays(), slots[0])
    assert start.tolist() == [0, 2, 5, 5, 9, 12]
    assert end.tolist() == [2, 5, 9, 8, 12, 16]


def test_many_rows_equal_single_rows():
    program = _program()
    rng = np.random.default_rng(0)
    slots = rng.uniform(0, 1, size=(1000, 3))
    many = schedule_many(*program.arrays(), slots)
    for i in range(0, 1000, 97):
        _, end, out = schedule_trace(*program.arrays(), slots[i])
        assert many[i].tolist() == out.tolist()


def test_deps_must_be_earlier_and_unique_keys():
    b = ProgramBuilder()
    b.op("a", COMP, 0, CAT_GEMM, ["b"])   # forward reference is dropped, as in the reference
    program = b.build()
    assert program.dep_ptr.tolist() == [0, 0]
    with pytest.raises(ValueError):
        b.op("a", COMP, 0, CAT_GEMM)
