"""The slowest GPU of a synchronous step (kernels/lm/straggler.py, docs/model.md §11.68): Blom's expected maximum
and the step factor, by hand."""

import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pytest

from fastmodel.kernels.lm.straggler import expected_max_normal, normal_upper_quantile, straggler_factor
from fastmodel.lm.calibrate.overlay import overlay_columns
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm_straggler import GPU_SPEED_SPREAD

RECORDS = {r.id: r for r in read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")}


def test_the_spread_from_the_measurement_by_hand():
    # 8 H200s all busy: slowest 745, median 755 TFLOP/s -> (755 - 745) / 755 = 1.3245 % below the median; the
    # expected maximum of 8 standard normals is 1.4236 (order-statistics tables, e.g. Harter 1961): 0.93 %
    assert (755.0 - 745.0) / 755.0 / 1.4236 == pytest.approx(GPU_SPEED_SPREAD, abs=5e-5)
    # 8 B200s: 1,421 against 1,439 -> 1.2509 % / 1.4236 = 0.88 %: the same spread within 0.05 points
    assert (1439.0 - 1421.0) / 1439.0 / 1.4236 == pytest.approx(GPU_SPEED_SPREAD, abs=6e-4)


def test_the_upper_quantile_by_hand():
    # P(Z > 1.959964) = 0.025 and P(Z > 2.326348) = 0.01 (normal tables)
    assert normal_upper_quantile(0.025) == pytest.approx(1.959964, abs=1e-6)
    assert normal_upper_quantile(0.01) == pytest.approx(2.326348, abs=1e-6)


def test_blom_expected_maximum_by_hand():
    assert expected_max_normal(1.0) == 0.0
    # n = 2: Phi^-1(1.625 / 2.25 = 0.72222); the exact E[max of 2] is 1 / sqrt(pi) = 0.5642, Blom 4.5 % above
    assert expected_max_normal(2.0) == pytest.approx(NormalDist().inv_cdf(1.625 / 2.25), abs=1e-9)
    assert expected_max_normal(2.0) == pytest.approx(1.0 / math.sqrt(math.pi), rel=0.05)
    # n = 8 and 1,024 against the exact 1.4236 and 3.2482 (the integral of n x Phi^(n-1) phi; Harter 1961): within 1 %
    assert expected_max_normal(8.0) == pytest.approx(1.4236, rel=0.01)
    assert expected_max_normal(1024.0) == pytest.approx(3.2482, rel=0.01)
    # grows like sqrt(2 ln n): 8,192 -> 16,384 GPUs adds 4.5 % to it, not 100 %
    ratio = expected_max_normal(16384.0) / expected_max_normal(8192.0)
    assert ratio == pytest.approx(NormalDist().inv_cdf(1 - 0.625 / 16384.25) / NormalDist().inv_cdf(1 - 0.625 / 8192.25))
    assert 1.04 < ratio < 1.05


def test_the_factor_by_hand():
    row = np.zeros(len(C))
    row[C["n_gpus"]], row[C["gpu_speed_spread"]] = 8192.0, 0.0093
    # 1 + 0.0093 x Phi^-1(1 - 0.625 / 8192.25) = 1 + 0.0093 x 3.7868 = 1.03522
    assert straggler_factor(row) == pytest.approx(1.0 + 0.0093 * 3.78683, rel=1e-6)
    row[C["n_gpus"]] = 1.0
    assert straggler_factor(row) == 1.0


def _results(record_id, **changes):
    columns = overlay_columns(RECORDS[record_id].columns, changes)
    return {k: float(v[0]) for k, v in evaluate_table(columns[:, None]).items()}


def test_the_step_is_the_slowest_gpus():
    # Llama 3 405B at 16,384 GPUs: the step with the measured spread over the one without is the factor,
    # 1 + 0.0093 x 3.9558, and the difference is time_straggler; the default (0) leaves the step alone
    rid = "llama3-paper-405b-s8192-n16384"
    alike = _results(rid)
    assert alike["time_straggler"] == 0.0
    assert _results(rid, gpu_speed_spread=0.0)["step_time"] == alike["step_time"]
    slowest = _results(rid, gpu_speed_spread=GPU_SPEED_SPREAD)
    assert slowest["step_time"] / alike["step_time"] == pytest.approx(1.0 + 0.0093 * 3.95576, rel=1e-5)
    assert slowest["time_straggler"] == pytest.approx(slowest["step_time"] - alike["step_time"], rel=1e-9)
    # the breakdown still adds up to the step (registry BREAKDOWN: compute, optimizer, bubble, exposed comm, wait)
    from fastmodel.registry.lm import BREAKDOWN
    parts = sum(slowest[k] for k in BREAKDOWN.overlapped)
    overhead = RECORDS[rid].columns[C["step_overhead_s"]]
    assert parts + overhead == pytest.approx(slowest["step_time"], rel=1e-9)
