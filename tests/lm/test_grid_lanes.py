"""kernels/lm/grid.py deals its chunks to the threads round-robin (lane k: chunks k, k + T, ...): every chunk is
evaluated once, into its own place, whatever the number of lanes, so a sweep's status and results do not depend
on the thread count (docs/performance.md "Where the dense sweep's wall-clock went")."""

import numpy as np
import pytest

import fastmodel.kernels.lm.grid as grid
from fastmodel.lm.sweep import sweep_plan

#: the kernel as compiled (or the plain function under FASTMODEL_JIT=0)
COMPILED = grid.evaluate_grid


def INTERPRETED_LOOP(base, axis_columns, axis_values, shape, auto_shard, only_fitting, status, out, offset, lanes):
    """The same loop (``evaluate_points``) run by the interpreter, so the lane count and the chunk size can be set
    (each chunk still runs the compiled ``_evaluate_points``, at the serial table path's argument types)."""
    loop = getattr(grid.evaluate_points, "py_func", grid.evaluate_points)
    loop(grid.NO_TABLE, base, axis_columns, axis_values, shape, auto_shard, only_fitting, status, out, offset,
         grid.CHUNK_POINTS, lanes)


#: legal and illegal plans (tp8.pp16 and cp8 do not fit 32 GPUs), 2 x 2 x 4 = 16 points
AXES = {"num_nodes": [4, 64], "micro_batch": [1, 2], "plan": ["tp8", "tp8.pp4", "tp8.pp16", "tp4.pp2.cp8"]}


def _sweep(plan, monkeypatch, kernel, lanes=None, chunk=None):
    """(status, results) of every point of ``plan``, each slot pre-filled with a value no evaluation writes;
    ``lanes`` replaces the thread count sweep_plan.evaluate_unit passes."""
    if lanes is not None:
        inner = kernel

        def kernel(*args):
            return inner(*args[:-1], lanes)

    monkeypatch.setattr(grid, "evaluate_grid", kernel)       # sweep_plan.evaluate_unit imports it at each call
    if chunk is not None:
        monkeypatch.setattr(grid, "CHUNK_POINTS", chunk)
    out = np.full((plan.num_rows, plan.num_configs), -7.0)
    status = np.full(plan.num_configs, -1, dtype=np.int8)
    for unit in plan.units(plan.num_configs):
        plan.evaluate_unit(unit, out, status, plan.unit_offset(unit))
    return status, out


@pytest.fixture(scope="module")
def plan():
    made = sweep_plan("llama3.1-70b", "dgx-h100", "llm-pretrain", axes=dict(AXES))
    assert made.num_configs == 16
    return made


def test_every_lane_count_gives_the_compiled_result_bit_for_bit(plan, monkeypatch):
    status, out = _sweep(plan, monkeypatch, COMPILED)
    assert (status != -1).all() and (out != -7.0).all()
    assert 0 < (status == 0).sum() < plan.num_configs                # legal and illegal points both
    # chunks of 5 points: 4 chunks, the last one short; lanes fewer, as many as and more than the chunks
    for lanes in (-1, 0, 1, 2, 3, 4, 9):       # lanes <= 0 run as one lane
        with monkeypatch.context() as patch:
            got_status, got_out = _sweep(plan, patch, INTERPRETED_LOOP, lanes=lanes, chunk=5)
        assert np.array_equal(got_status, status), lanes
        assert np.array_equal(got_out, out, equal_nan=True), lanes


def test_a_lane_that_skipped_its_chunks_would_be_seen(plan, monkeypatch):
    """The check above can fail: a loop that ran only lane 0 of two leaves the other lane's chunks unwritten."""
    def lane_zero_only(base, axis_columns, axis_values, shape, auto_shard, only_fitting, status, out, offset, lanes):
        n = int(np.prod(shape))
        chunks = (n + 4) // 5
        for chunk in range(0, chunks, 2):           # lane 0 of 2 only
            grid._evaluate_points(chunk * 5, min(n, chunk * 5 + 5), grid.NO_TABLE, base, axis_columns, axis_values,
                                  shape, auto_shard, only_fitting, status, out, offset)

    status, _ = _sweep(plan, monkeypatch, lane_zero_only)
    assert (status[5:10] == -1).all() and (status[:5] != -1).all()
