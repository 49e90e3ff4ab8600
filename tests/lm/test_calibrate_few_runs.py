"""Calibration from a handful of runs (issue 26 item 6): which parameters the runs identify
(``fastmodel.lm.calibrate.identify``) and the pull toward physical values chosen by leave-one-out
(``fastmodel.lm.calibrate.prior``), on toys whose answers are derived by hand, and on five real runs."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from fastmodel.lm.calibrate.fit import Parameter, calibrate
from fastmodel.lm.calibrate.identify import PROBE, replaced_terms, select_identifiable
from fastmodel.lm.calibrate.prior import HELD, LOO_MAX_RUNS, auto_prior, one_standard_error
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records

SMALL = Path(__file__).resolve().parents[1] / "data" / "runs_dev_small.jsonl"


class LinearToy:
    """Log step-time residuals linear in the parameters: ``r = X (theta - 1)`` (runs x parameters), no memory."""

    def __init__(self, x):
        self.x = np.asarray(x, dtype=float)
        self.n = self.x.shape[0]
        self.blocks = np.arange(self.n)

    def residuals(self, thetas):
        return (np.atleast_2d(thetas) - 1.0) @ self.x.T


COLUMNS = ("gemm_eff_16", "attn_eff", "hbm_eff")


def toy_params(k, n, group="dev"):
    return [Parameter(device=group, column=COLUMNS[j], rows=np.arange(n), start=1.0, lo=0.0, hi=10.0, scale=1.0)
            for j in range(k)]


def test_a_parameter_no_run_feels_is_held_and_a_felt_one_is_fitted():
    # parameter 0 moves every run by 0.1 per unit (a PROBE = 0.25 change: 2.5% > 0.5%); parameter 1 moves none
    toy = LinearToy([[0.1, 0.0]] * 4)
    params = toy_params(2, 4)
    select_identifiable(toy, params, min_effect=0.005, min_independence=0.5)
    assert params[0].status == "fitted" and params[0].sensitivity == pytest.approx(0.1 * PROBE)
    assert params[1].status.startswith("too weak")


def test_a_parameter_only_one_run_feels_is_held():
    # parameter 1 moves run 0 alone: its fitted value would carry that run's error to every run
    toy = LinearToy([[0.1, 0.2], [0.1, 0.0], [0.1, 0.0], [0.1, 0.0]])
    params = toy_params(2, 4)
    select_identifiable(toy, params, min_effect=0.005, min_independence=0.5)
    assert params[0].fitted and params[1].status.startswith("one run")


def test_a_parameter_proportional_to_a_stronger_one_is_not_separable():
    # column 1 = column 0 / 2 (rank 1): nothing of it lies outside the span of the stronger one
    toy = LinearToy([[0.2, 0.1], [0.1, 0.05], [0.3, 0.15], [0.1, 0.05]])
    params = toy_params(2, 4)
    select_identifiable(toy, params, min_effect=0.005, min_independence=0.5)
    assert params[0].fitted and params[1].status == 'not separable from device."dev".gemm_eff.bf16 in these runs'


def test_five_runs_fit_at_most_two_parameters_in_all_whatever_their_groups():
    # three independent parameters in three groups (each group's own cap, 5 // 2 = 2, would allow each): the
    # runs are shared, so 5 // 2 = 2 are fitted, the strongest first (column norms 0.5 > 0.3 > 0.2)
    x = np.zeros((5, 3))
    x[:, 0] = 0.5 / np.sqrt(5)
    x[:, 1] = [0.3, -0.3, 0.0, 0.0, 0.0]
    x[:, 2] = [0.0, 0.0, 0.2, -0.2, 0.0]
    toy = LinearToy(x)
    params = [*toy_params(1, 5, "a"), *toy_params(1, 5, "b"), *toy_params(1, 5, "c")]
    select_identifiable(toy, params, min_effect=0.005, min_independence=0.5)
    assert [p.fitted for p in params] == [True, True, False]
    assert params[2].status == "too few runs: 5 runs pin at most 2 parameter(s) in all"


def test_host_layer_s_is_held_where_the_stack_counts_its_operators():
    five = read_records(SMALL)[:5]   # Megatron-DeepSpeed: 60 operators x 20 us (stacks/megatron_2021.py)
    assert set(replaced_terms(five, np.arange(5))) == {"host_layer_s"}
    uncounted = [dataclasses.replace(r, columns=r.columns.copy()) for r in five]
    for r in uncounted:
        r.columns[:] = np.where(np.arange(r.columns.size) == _col("host_ops_layer"), 0.0, r.columns)
    assert set(replaced_terms(uncounted, np.arange(5))) == {"host_op_s"}


def _col(name):
    from fastmodel.registry.lm import COLUMN_INDEX
    return COLUMN_INDEX[name]


def test_one_standard_error_rule_by_hand():
    # best mean 0.2 at pull 0, per-run costs 0, 0.2, 0.4: sample std 0.2, standard error 0.2 / sqrt(3) = 0.1155
    costs = {0.0: np.array([0.0, 0.2, 0.4]), 1.0: np.array([0.3, 0.3, 0.3]), 4.0: np.array([0.32, 0.32, 0.32])}
    assert one_standard_error(costs) == 1.0          # 0.30 <= 0.3155 < 0.32
    costs[math.inf] = np.array([0.31, 0.31, 0.31])   # the physical model within one standard error: chosen
    assert one_standard_error(costs) == math.inf
    # equal costs everywhere: the largest pull (the physical model)
    assert one_standard_error({0.0: np.zeros(5), 0.5: np.zeros(5), math.inf: np.zeros(5)}) == math.inf


def test_auto_prior_uses_the_default_from_ten_runs_and_below_three():
    assert auto_prior([None] * LOO_MAX_RUNS, "soft_l1", 0.05)[:2] == (0.5, {})
    assert auto_prior([None] * 2, "soft_l1", 0.05)[:2] == (0.5, {})


def test_runs_the_model_predicts_exactly_leave_it_unchanged():
    """Five runs whose measured times are the model's own predictions: every pull predicts each left-out run
    exactly, so the rule takes the largest -- the physical model -- and the calibration sets nothing."""
    five = read_records(SMALL)[:5]
    steps = evaluate_table(np.stack([r.columns for r in five], axis=1))["step_time"]
    exact = [dataclasses.replace(r, measured={"step_time_s": float(s)}) for r, s in zip(five, steps)]
    result = calibrate(exact)
    assert result.prior == math.inf and result.prior_rule.startswith("chosen by leave-one-out on the 5 runs")
    assert all(v == pytest.approx(0.0, abs=1e-12) for v in result.prior_scores.values())
    cal = result.calibration()
    assert not cal.devices and not cal.framework and not cal.stacks
    assert any(p.status == HELD for p in result.parameters)
    # the report's lines: leave-one-out's costs, then every identified factor dropped (prior.choose)
    assert result.selection[0].startswith("leave-one-out on the 5 runs")
    assert len(result.selection) > 1 and all(line.startswith("dropped ") for line in result.selection[1:])


def test_a_stack_host_op_s_reads_back_and_scales_the_counted_issue_time():
    """``[stack."megatron-2021"] host_op_s`` keeps each run's operator count (60 here): the host time per layer
    pass becomes 60 x 30 us = 1.8 ms, and host_layer_s stays 0 (the count is used)."""
    from fastmodel.lm.calibrate import apply_calibration, parse_calibration

    cal = parse_calibration({"calibration": {"format": 2, "fitted_on": "x", "fitted_at": "y"},
                             "stack": {"megatron-2021": {"host_op_s": 30e-6}}})
    five = read_records(SMALL)[:5]
    out = apply_calibration(five, cal)
    for r in out:
        assert r.columns[_col("host_op_s")] == 30e-6 and r.columns[_col("host_layer_s")] == 0.0
        assert r.columns[_col("host_ops_layer")] * r.columns[_col("host_op_s")] == pytest.approx(1.8e-3)


def test_a_candidate_at_the_start_keeps_each_runs_own_value_in_a_mixed_batch():
    """Two runs whose gemm_eff_16 differ (0.60, 0.70), one parameter over both starting at their median: a batch
    of [start, moved] candidates predicts the start row exactly as a batch of [start] alone does (each run keeps
    its own value), and the moved row as that value alone."""
    import numpy as np

    from fastmodel.lm.calibrate.fit import Parameter, Problem
    from fastmodel.lm.records import read_records
    from fastmodel.registry.lm import COLUMN_INDEX as C

    records = read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")[:2]
    for record, eff in zip(records, (0.60, 0.70)):
        record.columns[C["gemm_eff_16"]] = eff
    parameter = Parameter(device=None, column="gemm_eff_16", rows=np.arange(2), start=0.65, lo=0.3, hi=0.95,
                          scale=0.1)
    problem = Problem(records, [parameter])
    alone = problem._evaluate(np.array([[0.65]]))["step_time"][0]
    mixed = problem._evaluate(np.array([[0.65], [0.80]]))["step_time"]
    moved = problem._evaluate(np.array([[0.80]]))["step_time"][0]
    np.testing.assert_array_equal(mixed[0], alone)
    np.testing.assert_array_equal(mixed[1], moved)
    assert alone[0] != moved[0]
