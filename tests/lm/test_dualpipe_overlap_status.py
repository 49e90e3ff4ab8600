"""moe_a2a_overlap 'dualpipe' under a schedule other than DualPipe is ``schedule_not_runnable`` at every point of a
grid (walk of issues 22-23: a sweep crossing a pipeline_schedule axis with a moe_a2a_overlap axis evaluated the
point (1f1b, dualpipe) as batch-level overlap with status ok)."""

import numpy as np

from fastmodel.kernels.lm.layout import N_COLUMNS
from fastmodel.kernels.lm.rules import overlap_needs_dualpipe
from fastmodel.lm.rules import status_reason
from fastmodel.lm.sweep import lm_sweep
from fastmodel.registry.lm import COLUMN_INDEX, MOE_A2A_OVERLAPS, PIPELINE_SCHEDULES, STATUS_CODES, STATUSES

MOE = ("qwen3-30b-a3b", "dgx-h100", "llm-pretrain")
ST_SCHEDULE = STATUS_CODES["schedule_not_runnable"]


def test_the_rule_holds_only_dualpipe_overlap_beside_another_schedule():
    """By hand: DualPipe's overlap pairs DualPipe's chunks, so it runs under pipeline_schedule dualpipe only;
    'none' and 'batch' run under every schedule."""
    row = np.zeros(N_COLUMNS)
    for schedule, s_code in PIPELINE_SCHEDULES.items():
        for overlap, o_code in MOE_A2A_OVERLAPS.items():
            row[COLUMN_INDEX["pipeline_schedule"]] = s_code
            row[COLUMN_INDEX["moe_a2a_overlap"]] = o_code
            expected = overlap == "dualpipe" and schedule != "dualpipe"
            assert bool(overlap_needs_dualpipe(row)) is expected, (schedule, overlap)


def test_a_crossed_grid_keeps_a_status_at_the_point_no_schedule_runs():
    """(1f1b, dualpipe overlap) gets schedule_not_runnable and no results; its neighbours are evaluated, and the
    DualPipe point is not the 1F1B batch-level one."""
    ds = lm_sweep(*MOE, num_nodes=8, axes={"plan": ["tp2.pp2.ep8"], "pipeline_schedule": ["1f1b", "dualpipe"],
                                           "moe_a2a_overlap": ["none", "batch", "dualpipe"]})
    status = ds.status.squeeze()
    assert int(status.sel(pipeline_schedule="1f1b", moe_a2a_overlap="dualpipe")) == ST_SCHEDULE
    assert np.isnan(float(ds.step_time.squeeze().sel(pipeline_schedule="1f1b", moe_a2a_overlap="dualpipe")))
    others = status.where(~((status.pipeline_schedule == "1f1b") & (status.moe_a2a_overlap == "dualpipe")), 0)
    assert (others == 0).all()
    assert "moe_a2a_overlap 'dualpipe' needs pipeline_schedule 'dualpipe'" in STATUSES[ST_SCHEDULE].message


def test_the_single_configuration_reason_names_both_fields():
    """The PlanError / batch reason of such a column says which fields clash and what runs instead."""
    column = np.zeros(N_COLUMNS)
    column[COLUMN_INDEX["pipeline_schedule"]] = PIPELINE_SCHEDULES["zb_h1"]
    column[COLUMN_INDEX["moe_a2a_overlap"]] = MOE_A2A_OVERLAPS["dualpipe"]
    reason = status_reason(ST_SCHEDULE, column)
    assert reason.startswith("plan.moe_a2a_overlap = dualpipe with pipeline_schedule zb_h1:")
    assert "moe_a2a_overlap batch" in reason
