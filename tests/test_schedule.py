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
    out = schedule_many(program.kernel_arrays, True, slots)[0]
    assert out[O_ITERATION_TIME] == 16.0
    assert out[O_FORWARD_TIME] == 9.0
    assert out[O_CATEGORY0 + CAT_GEMM] == 9.0
    assert out[O_CATEGORY0 + CAT_ALLREDUCE] == 8.0
    assert out[O_CATEGORY0 + CAT_ALLGATHER] == 2.0
    start, end, _ = schedule_trace(program.kernel_arrays, slots[0])
    assert start.tolist() == [0, 2, 5, 5, 9, 12]
    assert end.tolist() == [2, 5, 9, 8, 12, 16]


def test_many_rows_equal_single_rows():
    program = _program()
    rng = np.random.default_rng(0)
    slots = rng.uniform(0, 1, size=(1000, 3))
    many = schedule_many(program.kernel_arrays, True, slots)
    for i in range(0, 1000, 97):
        _, end, out = schedule_trace(program.kernel_arrays, slots[i])
        assert many[i].tolist() == out.tolist()


def test_deps_must_be_earlier_and_unique_keys():
    b = ProgramBuilder()
    b.op("a", COMP, 0, CAT_GEMM, ["b"])   # forward reference is dropped, as in the reference
    program = b.build()
    assert program.dep_ptr.tolist() == [0, 0]
    with pytest.raises(ValueError):
        b.op("a", COMP, 0, CAT_GEMM)


# --- steady-state extrapolation: agreement with the full schedule ------------------

from fastmodel.kernels.layout import N_SCHEDULE_OUTPUTS, N_WORK  # noqa: E402
from fastmodel.kernels.schedule import schedule_row  # noqa: E402


def _random_layered_program(rng, layers):
    """Prologue, `layers` identical layers (random streams/deps into this or the two
    previous layers), a barrier, a second run of layers, and an epilogue."""
    b = ProgramBuilder()
    n_slots = 8
    b.op("pro0", COMP, 0, CAT_GEMM)
    b.op("pro1", COMM, 1, CAT_ALLREDUCE, ["pro0"])
    shape = [(int(rng.integers(0, 2)), int(rng.integers(0, n_slots))) for _ in range(int(rng.integers(2, 6)))]
    deps = [[(int(rng.integers(0, 3)), int(rng.integers(0, len(shape)))) for _ in range(int(rng.integers(0, 3)))]
            for _ in shape]
    for phase in ("f", "b"):
        if phase == "b":
            b.barrier()
        b.begin_layers()
        for layer in range(layers):
            b.layer()
            for k, (stream, slot) in enumerate(shape):
                names = []
                for back, target in deps[k]:
                    if back == 0 and target >= k:
                        continue
                    names.append(f"{phase}{layer - back}.{target}" if layer - back >= 0 else "pro1")
                b.op(f"{phase}{layer}.{k}", stream, slot, CAT_GEMM if stream == COMP else CAT_ALLGATHER, names)
        b.end_layers()
    b.op("epi", COMM, 2, CAT_ALLREDUCE, [f"b{layers - 1}.0", f"b{layers - 2}.1"])
    return b.build(), n_slots


def test_extrapolation_matches_full_schedule_on_random_programs():
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(300):
        layers = int(rng.integers(5, 120))
        program, n_slots = _random_layered_program(rng, layers)
        slots = rng.choice([rng.uniform(0, 1, (64, n_slots)), rng.integers(0, 4, (64, n_slots)).astype(float)])
        full = schedule_many(program.kernel_arrays, False, slots)
        fast = schedule_many(program.kernel_arrays, True, slots)
        np.testing.assert_allclose(fast, full, rtol=1e-12, atol=0)
        checked += len(program.seg_start) > 0
    assert checked > 200  # most random programs do have periodic segments


def test_extrapolation_really_skips_layers():
    from fastmodel.lower import StructureKey, lower

    program = lower(StructureKey("llm", "pretrain", ("fsdp",), ("ddp",), 80, min_frozen_layer=80))
    slots = np.linspace(1.0, 2.0, 14)
    n = program.num_ops
    start, end = np.full(n, np.nan), np.full(n, np.nan)
    out_fast = np.empty(N_SCHEDULE_OUTPUTS)
    schedule_row(program.kernel_arrays, True, slots, start, end, np.empty(n), np.empty(N_WORK), out_fast)
    middle = program.seg_start[0] + 40 * program.seg_period[0]
    assert np.isnan(end[middle])  # never scheduled: extrapolated over
    _, _, out_full = schedule_trace(program.kernel_arrays, slots)
    np.testing.assert_allclose(out_fast, out_full, rtol=1e-12)


def test_extrapolation_matches_full_schedule_on_reference_cases():
    import fastmodel
    from fastmodel.engine import evaluate_configs

    from fastmodel.testing import dev_cases

    configs = [fastmodel.make_config(c["model"], c["system"], c["task"], "madmax") for c in dev_cases()]  # every family
    fast = evaluate_configs(configs, extrapolate=True)
    full = evaluate_configs(configs, extrapolate=False)
    for name in fast:
        if name in ("exposed_comm", "overlapped_comm"):  # differences of near-equal sums: scale by T
            assert np.all(np.abs(fast[name] - full[name]) <= 1e-12 * full["iteration_time"]), name
        else:
            np.testing.assert_allclose(fast[name], full[name], rtol=1e-12, atol=0, err_msg=name)


def test_extrapolation_counterexample_found_in_review():
    """A program where checking at the first in-window layer compared against the prologue (70 vs 84)."""
    b = ProgramBuilder()
    b.op("pro0", COMM, 0, CAT_ALLGATHER)   # 4
    b.op("pro1", COMM, 1, CAT_ALLGATHER)   # 3
    b.begin_layers()
    for i in range(12):
        b.layer()
        b.op(f"{i}.0", COMM, 1, CAT_ALLGATHER)                       # 3
        b.op(f"{i}.1", COMP, 1, CAT_GEMM, [f"{i - 1}.2"])            # 3, waits on the previous layer
        b.op(f"{i}.2", COMM, 2, CAT_ALLGATHER)                       # 1
        b.op(f"{i}.3", COMM, 2, CAT_ALLGATHER)                       # 1
    b.end_layers()
    program = b.build()
    slots = np.array([[4.0, 3.0, 1.0]])
    full = schedule_many(program.kernel_arrays, False, slots)[0]
    fast = schedule_many(program.kernel_arrays, True, slots)[0]
    assert full[0] == fast[0]
