"""kernels/serve/fused.py ``serve_grid`` deals its chunks to the threads round-robin (lane k: chunks k, k + T,
...), each chunk whole from a fresh memo: every row is evaluated once, into its own place, whatever the number of
lanes, so a serving sweep's status and results do not depend on the thread count (docs/performance.md "The
serving grid's threads")."""

import numpy as np
import pytest

import fastmodel.kernels.serve.fused as fused
from fastmodel.serve.api import sweep
from fastmodel.serve.spec import load_serve_task
from fastmodel.serve.sweep_plan import ServeSweepPlan

#: the kernel as compiled (or the plain function under FASTMODEL_JIT=0)
COMPILED = fused.serve_grid
#: the same loop run by the interpreter, so the lane count and the chunk size can be set
INTERPRETED_LOOP = getattr(COMPILED, "py_func", COMPILED)
#: 2 x 2 x 2 x 6 = 48 points under continuous batching: A100-80GB has no FP8 (status no_fp8), 32 heads do not
#: split over tp 3 (heads_not_divisible_by_tp); the last three concurrencies pass the KV room (379 and 841 requests
#: run), so rows in a row share the memo's steady state (kernels/serve/evaluate.py ``_concurrency``) and chunks
#: of 5 rows cut those runs
AXES = dict(device=["A100-80GB", "H100"], precision=["bf16", "fp8"], tp=[1, 3],
            batch_size=[1, 8, 64, 2048, 4096, 8192])


def _lanes(kernel, lanes):
    """``kernel`` with its last argument (the lane count the callers pass) replaced by ``lanes``."""
    def with_lanes(*args):
        return kernel(*args[:-1], lanes)

    return with_lanes


def _api(patch, kernel):
    """(status, every variable) of ``fastmodel.serve.api.sweep`` of AXES with ``kernel`` as serve_grid."""
    patch.setattr(fused, "serve_grid", kernel)           # the callers import it at each call
    ds = sweep("llama3.1-8b", load_mode="concurrency", **AXES)
    return ds.status.values, {name: ds[name].values for name in ds.data_vars}


def _plan(patch, kernel, plan):
    """(status, result matrix) of ``plan`` run unit by unit, each slot pre-filled with a value no row writes."""
    patch.setattr(fused, "serve_grid", kernel)
    out = np.full((plan.num_rows, plan.num_configs), -7.0)
    status = np.full(plan.num_configs, -1, dtype=np.int8)
    for unit in plan.units():
        plan.evaluate_unit(unit, out, status, plan.unit_offset(unit))
    return status, out


@pytest.fixture(scope="module")
def plan():
    from fastmodel.serve.models import serving_model

    name, columns, notes = serving_model("llama3.1-8b")
    axes = {("concurrency" if k == "batch_size" else k): v for k, v in AXES.items()}
    made = ServeSweepPlan(name, columns, "H100", load_serve_task("serve-chat"), axes, unit_configs=24, notes=notes)
    assert made.num_configs == 48 and made.num_units == 2
    return made


def test_every_lane_count_gives_the_compiled_sweep_bit_for_bit(monkeypatch):
    with monkeypatch.context() as patch:
        status, data = _api(patch, COMPILED)
    codes = set(status.ravel().tolist())
    assert 0 in codes and len(codes) >= 3                        # ok, no_fp8 and heads_not_divisible_by_tp
    # chunks of 5 rows: 10 chunks, the last one short; lanes fewer than, as many as and more than the chunks
    for lanes in (1, 2, 3, 4, 9, 10, 11):
        with monkeypatch.context() as patch:
            patch.setattr(fused, "GRID_CHUNK_ROWS", 5)
            got_status, got = _api(patch, _lanes(INTERPRETED_LOOP, lanes))
        assert np.array_equal(got_status, status), lanes
        for name, values in data.items():
            assert np.array_equal(got[name], values, equal_nan=True), (lanes, name)
            assert np.array_equal(np.signbit(got[name]), np.signbit(values)), (lanes, name)


def test_every_lane_count_gives_the_plan_bit_for_bit(plan, monkeypatch):
    """The sweep-file path (``ServeSweepPlan.evaluate_unit``): units written at their offset in the matrix."""
    with monkeypatch.context() as patch:
        status, out = _plan(patch, COMPILED, plan)
    assert (status != -1).all() and (out != -7.0).all()
    for lanes in (1, 2, 3, 4, 9):
        with monkeypatch.context() as patch:
            patch.setattr(fused, "GRID_CHUNK_ROWS", 5)                 # 5 chunks of each unit of 24 rows
            got_status, got = _plan(patch, _lanes(INTERPRETED_LOOP, lanes), plan)
        assert np.array_equal(got_status, status), lanes
        assert np.array_equal(got, out, equal_nan=True), lanes


def test_a_lane_that_skipped_its_chunks_would_be_seen(plan, monkeypatch):
    """The checks above can fail: a loop that ran only lane 0 of two leaves the other lane's chunks unwritten."""
    def lane_zero_only(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out, offset,
                       chunk_rows, lanes):
        n = int(np.prod(shape))
        for chunk in range(0, (n + 4) // 5, 2):          # lane 0 of 2 only, chunks of 5 rows
            fused._grid_rows(base, axis_cols, col_start, axis_vals, val_start, shape, derive, status, out,
                             chunk * 5, min(n, chunk * 5 + 5), offset)

    status, _ = _plan(monkeypatch, lane_zero_only, plan)
    assert (status[5:10] == -1).all() and (status[:5] != -1).all() and (status[24:29] != -1).all()
