"""The one not-finite rule (kernels/finite.py): an evaluated point whose results are not all finite numbers gets
status ``not_finite`` and NaN results; every engine's kernel applies it while the point is in its frame vector
(the lm table pass, the lm grid, serving's rows and grid). Hand cases on the helpers, then one case per path
(tests/behaviour/test_extreme_magnitudes.py holds the CLI and sweep cases of absurd inputs)."""

import numpy as np
import pytest

from fastmodel.kernels.finite import all_finite, finite_or_marked

OK, REFUSED, KEPT, NOT_FINITE = 0, 3, 10, 11


@pytest.mark.parametrize("bad", [np.inf, np.nan, -np.inf])
def test_one_value_that_is_not_finite_marks_the_point_and_clears_every_result(bad):
    values = np.array([1.0, 2.0, bad, 4.0])
    assert not all_finite(values, 4)
    assert finite_or_marked(values, 4, OK, True, NOT_FINITE) == NOT_FINITE
    assert np.isnan(values).all()


def test_finite_results_keep_their_code_and_values():
    values = np.array([1.0, -2.0, 0.0, 3e300])
    assert all_finite(values, 4)
    assert finite_or_marked(values, 4, OK, True, NOT_FINITE) == OK
    np.testing.assert_array_equal(values, [1.0, -2.0, 0.0, 3e300])
    # a status given after evaluation (does_not_fit keeps its results) stays when they are finite
    assert finite_or_marked(values, 4, KEPT, True, NOT_FINITE) == KEPT


def test_finite_values_whose_sum_overflows_are_finite():
    # the sum (inf) only sends the point to the value-by-value look
    values = np.array([1e308, 1e308, 1e308])
    assert all_finite(values, 3)
    assert finite_or_marked(values, 3, OK, True, NOT_FINITE) == OK and values[0] == 1e308


def test_opposite_infinities_whose_sum_is_nan_are_caught():
    values = np.array([np.inf, -np.inf])
    assert not all_finite(values, 2)


def test_only_the_first_n_values_are_results():
    values = np.array([1.0, 2.0, np.inf])
    assert all_finite(values, 2)
    assert finite_or_marked(values, 2, OK, True, NOT_FINITE) == OK and values[2] == np.inf
    assert all_finite(values, 0)


def test_a_refused_point_keeps_its_refusal():
    # not evaluated: its results are NaN (or left over) and say nothing
    values = np.array([np.nan, np.inf])
    assert finite_or_marked(values, 2, REFUSED, False, NOT_FINITE) == REFUSED
    assert values[1] == np.inf
    # evaluated and then given a status that keeps results (does_not_fit): an overflow still marks it
    assert finite_or_marked(values, 2, KEPT, True, NOT_FINITE) == NOT_FINITE and np.isnan(values).all()


def _slow(columns):
    from fastmodel.registry.lm import COLUMN_INDEX

    columns = columns.copy()
    columns[COLUMN_INDEX["intra_bw"]] = columns[COLUMN_INDEX["inter_bw"]] = 1e-300
    return columns


@pytest.mark.parametrize("copies", [1, 300])  # the serial kernel, and the parallel one from PARALLEL_MIN_ROWS
def test_lm_table_marks_an_overflowing_row_beside_a_finite_one_and_leaves_a_refused_row(copies):
    from fastmodel.lm.engine import NOT_FINITE as LM_NOT_FINITE
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.sweep import point_columns

    fine = point_columns("llama3.1-8b", "dgx-h100", global_batch=256, plan="tp8", num_nodes=2)
    table = np.tile(np.stack([fine, _slow(fine), _slow(fine)], axis=1), copies)
    status = np.zeros(table.shape[1], dtype=np.int8)
    status[2::3] = REFUSED
    step = evaluate_table(table, status)["step_time"]
    assert status.tolist() == [0, LM_NOT_FINITE, REFUSED] * copies
    assert np.isfinite(step[0::3]).all() and np.isnan(step[1::3]).all() and np.isnan(step[2::3]).all()


def test_lm_grid_marks_overflowing_points_and_leaves_refused_ones():
    from fastmodel.lm.loader import load_cluster
    from fastmodel.lm.sweep import lm_sweep
    from fastmodel.registry.lm import STATUS_CODES

    slow = load_cluster("dgx-h100").model_copy(update={"intra_node_bw_bytes_s_per_gpu": 1e-300,
                                                       "inter_node_bw_bytes_s_per_gpu": 1e-300})
    ds = lm_sweep("llama3.1-8b", slow, "llm-pretrain", num_nodes=1, axes={"plan": ["dp"], "global_batch": [256, 255]})
    codes = ds.status.values.ravel().tolist()
    assert codes == [STATUS_CODES["not_finite"], STATUS_CODES["batch_not_divisible"]]
    assert np.isnan(ds.step_time.values).all()


def test_serve_table_marks_an_overflowing_row_and_leaves_a_refused_one():
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.registry.serve import SERVE_STATUS
    from fastmodel.serve.api import columns, evaluate_table

    # columns() refuses an hbm_bw outside its bounds; the table is built past that check, as a corrupt input would be
    rows = [columns("llama3.1-8b", "H100", batch_size=8, tp=tp) for tp in (1, 1, 3)]
    table = np.stack(rows, axis=1)
    table[COLUMN_INDEX["hbm_bw"], 1:] = 1e-300
    out, status = evaluate_table(table)
    assert status.tolist() == [0, SERVE_STATUS["not_finite"], SERVE_STATUS["heads_not_divisible_by_tp"]]
    assert np.isfinite(out[:, 0]).all() and np.isnan(out[:, 1:]).all()
