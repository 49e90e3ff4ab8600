"""The two-stream scheduler kernel on small hand-built programs."""

import numpy as np
import pytest

from fastmodel.kernels.madmax.layout import (
    CAT_ALLGATHER, CAT_ALLREDUCE, CAT_GEMM, O_CATEGORY0, O_FORWARD_TIME, O_ITERATION_TIME,
    STREAM_COMM as COMM, STREAM_COMPUTE as COMP, CATEGORY_NAMES,
)
from fastmodel.kernels.schedule import schedule_many, schedule_trace
from fastmodel.schedule.program import ProgramBuilder


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

from fastmodel.kernels.madmax.layout import N_SCHEDULE_OUTPUTS, N_WORK  # noqa: E402
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
    from fastmodel.madmax.lowering.graph import StructureKey, lower

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
    from fastmodel.madmax.engine import evaluate_configs

    from fastmodel.testing import dev_cases

    configs = [fastmodel.make_config(c["model"], c["system"], c["task"], "madmax") for c in dev_cases()]  # every family
    fast = evaluate_configs(configs, extrapolate=True)
    full = evaluate_configs(configs, extrapolate=False)
    for name in fast:
        if name in ("exposed_comm", "overlapped_comm"):  # differences of near-equal sums: scale by T
            assert np.all(np.abs(fast[name] - full[name]) <= 1e-12 * full["step_time"]), name
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


# --- N streams and repeated phases (hand derivations) ------------------------------------------

def _schedule(program, slots):
    n = program.num_ops
    start, end, out = np.empty(n), np.empty(n), np.empty(N_SCHEDULE_OUTPUTS)
    schedule_row(program.kernel_arrays, True, np.asarray(slots, dtype=np.float64), start, end, np.empty(n),
                 np.empty(N_WORK), out)
    return start, end, out


def test_each_process_group_stream_runs_beside_the_others():
    # a 2 s GEMM, then a 3 s allreduce on stream 1 and a 3 s allgather on stream 2, both after the GEMM:
    # on their own streams they overlap (end 2 + 3 = 5); sharing one stream they would end at 2 + 3 + 3 = 8
    b = ProgramBuilder()
    b.op("gemm", COMP, 0, CAT_GEMM)
    b.op("ar", 1, 1, CAT_ALLREDUCE, deps=["gemm"])
    b.op("ag", 2, 1, CAT_ALLGATHER, deps=["gemm"])
    program = b.build()
    assert program.n_streams == 3 and program.num_comm_ops == 2
    start, end, out = _schedule(program, [2.0, 3.0])
    assert list(start) == [0.0, 2.0, 2.0] and out[O_ITERATION_TIME] == 5.0
    shared = ProgramBuilder()
    shared.op("gemm", COMP, 0, CAT_GEMM)
    shared.op("ar", COMM, 1, CAT_ALLREDUCE, deps=["gemm"])
    shared.op("ag", COMM, 1, CAT_ALLGATHER, deps=["gemm"])
    assert _schedule(shared.build(), [2.0, 3.0])[2][O_ITERATION_TIME] == 8.0


def test_a_barrier_moves_every_stream():
    b = ProgramBuilder()
    b.op("a", 2, 0, CAT_ALLGATHER)            # 4 s on stream 2
    b.barrier()
    b.op("b", COMP, 1, CAT_GEMM)              # after the barrier: starts at 4
    start, end, out = _schedule(b.build(), [4.0, 1.0])
    assert start[1] == 4.0 and out[O_ITERATION_TIME] == 5.0 and out[O_FORWARD_TIME] == 4.0


def test_a_repeated_phase_runs_its_micro_batches_in_a_row():
    # gradient accumulation: 3 micro-batches of [1 s forward+backward GEMM, then its 2 s gradient reduce on the
    # communication stream], then a 0.5 s optimizer step after the last reduce.
    # compute: 0-1, 1-2, 2-3; reduces (one stream, each after its GEMM): 1-3, 3-5, 5-7; optimizer 7-7.5
    b = ProgramBuilder()
    b.begin_repeat(3)
    b.op("gemm", COMP, 0, CAT_GEMM)
    b.op("reduce", COMM, 1, CAT_ALLREDUCE, deps=["gemm"])
    b.end_repeat()
    b.op("step", COMP, 2, CAT_GEMM, deps=["reduce"])
    program = b.build()
    assert program.num_compute_ops == 4 and program.num_comm_ops == 3
    start, end, out = _schedule(program, [1.0, 2.0, 0.5])
    assert (start[0], start[1]) == (2.0, 5.0)                 # the ops keep their last run's times
    assert out[O_ITERATION_TIME] == 7.5
    busy = dict(zip(CATEGORY_NAMES, out[O_CATEGORY0:O_CATEGORY0 + len(CATEGORY_NAMES)]))
    assert busy["gemm"] == 3 * 1.0 + 0.5 and busy["allreduce"] == 3 * 2.0


def test_repeated_layers_inside_a_phase_still_extrapolate():
    # a phase repeated 4 times whose body is 30 identical layers: the extrapolating schedule equals the full one
    b = ProgramBuilder()
    b.begin_repeat(4)
    b.begin_layers()
    for layer in range(30):
        b.layer()
        b.op(f"f{layer}", COMP, 0, CAT_GEMM, deps=[f"f{layer - 1}"])
        b.op(f"c{layer}", COMM, 1, CAT_ALLREDUCE, deps=[f"f{layer}", f"c{layer - 1}"])
    b.end_layers()
    b.end_repeat()
    program = b.build()
    assert program.seg_start.size == 1
    slots = np.array([1.0, 1.5])
    n = program.num_ops
    fast, full = np.empty(N_SCHEDULE_OUTPUTS), np.empty(N_SCHEDULE_OUTPUTS)
    for extrapolate, out in ((True, fast), (False, full)):
        schedule_row(program.kernel_arrays, extrapolate, slots, np.empty(n), np.empty(n), np.empty(n),
                     np.empty(N_WORK), out)
    np.testing.assert_allclose(fast, full, rtol=1e-12)
    # stream 1 is the bottleneck: 120 reduces of 1.5 s after the first GEMM (1 s)
    assert full[O_ITERATION_TIME] == pytest.approx(1.0 + 120 * 1.5)


def test_builder_refuses_bad_phases():
    b = ProgramBuilder()
    b.begin_repeat(2)
    with pytest.raises(ValueError, match="do not nest"):
        b.begin_repeat(2)
    with pytest.raises(ValueError, match=">= 1"):
        ProgramBuilder().begin_repeat(0)
    with pytest.raises(ValueError, match="without begin_repeat"):
        ProgramBuilder().end_repeat()
    open_phase = ProgramBuilder()
    open_phase.begin_repeat(2)
    open_phase.op("a", COMP, 0, CAT_GEMM)
    with pytest.raises(ValueError, match="still open"):
        open_phase.build()
