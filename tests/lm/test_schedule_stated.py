"""A stated pipeline schedule and vp: one rule for sweeps, single runs and records (kernels/lm/rules.py
``stated_schedule_refused``, the lowering's ``schedule_stated`` column; docs/model.md §11.9).

The execution spec refuses 'interleaved' at vp 1 and every other schedule at vp > 1 (``ExecutionSpec._consistent``);
a sweep crossing a ``pipeline_schedule`` axis (or a stated schedule) with a ``vp`` axis reaches those pairs point by
point and gets ``schedule_not_runnable`` there from the rule table, before any other rule. Every other point has the
status a single run (``point_columns``) and a run record of it give."""


import numpy as np
import pytest

from fastmodel.errors import PlanError, SpecError
from fastmodel.lm.api import record_values
from fastmodel.lm.loader import load_cluster, load_execution, load_lm_model
from fastmodel.lm.records import lower_record
from fastmodel.lm.rules import check_plan, plan_status
from fastmodel.lm.sweep import lm_sweep, parse_mesh, point_columns
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import PIPELINE_SCHEDULES, STATUS_CODES, STATUSES

SCHEDULES = tuple(PIPELINE_SCHEDULES)            # 1f1b, interleaved, gpipe, zb_h1, dualpipe
REFUSED = STATUS_CODES["schedule_not_runnable"]
#: llama3.1-8b (32 layers) on one DGX H100: pp 1, 2, 4 (dp 1); m = global_batch: 2, 6 and 16 give m < pp
#: (too_few_microbatches), m no multiple of pp (the interleaved remainder; DualPipe m < 2 pp) and m a multiple
PLANS = ("tp8", "tp4.pp2", "tp2.pp4")
VPS = (1, 2, 4)
BATCHES = (2, 6, 16)
#: a legal llama-like configuration at pp 4, m = 16 (every schedule runs it at its own vp)
LEGAL = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256, seq_len=8192, n_gpus=8, tp=2,
             pp=4, dp=1, global_batch=16)


def _spec_refuses(schedule: str, vp: int) -> bool:
    """The execution spec's rule by hand: 'interleaved' needs vp > 1, the others vp = 1."""
    return (schedule == "interleaved") != (vp > 1)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("vp", (1, 2))
def test_the_rule_refuses_a_stated_schedule_its_vp_refuses_and_nothing_derived(schedule, vp):
    """Hand-derived: at schedule_stated 1 the status is schedule_not_runnable exactly where the spec refuses the
    pair ((interleaved, 1), (other, 2)); at 0 (the lowering derived the schedule) this rule never fires, so the
    configuration keeps its other rules' status (legal here: pp 4, m = 16 runs every schedule, an interleaved code
    at vp 1 as 1F1B and 1F1B at vp 2 as interleaved)."""
    column = row(**LEGAL, vp=vp, pipeline_schedule=PIPELINE_SCHEDULES[schedule])
    derived = plan_status(column[:, None])[0]
    column[C["schedule_stated"]] = 1.0
    stated = plan_status(column[:, None])[0]
    if _spec_refuses(schedule, vp):
        assert stated == REFUSED, (schedule, vp)
    else:
        assert stated == derived, (schedule, vp)
    assert derived == 0


def test_the_stated_rule_comes_before_every_other_rule_and_names_the_pair():
    """A sweep's refused pair got schedule_not_runnable whatever else the point broke (the NumPy pass after the
    kernel overwrote every status): n_gpus 6 breaks devices_not_divisible, yet the stated pair is reported."""
    column = row(**{**LEGAL, "n_gpus": 6}, vp=1, pipeline_schedule=PIPELINE_SCHEDULES["interleaved"])
    assert plan_status(column[:, None])[0] == STATUS_CODES["devices_not_divisible"]
    column[C["schedule_stated"]] = 1.0
    assert plan_status(column[:, None])[0] == REFUSED
    with pytest.raises(PlanError, match=r"pipeline_schedule 'interleaved' needs vp > 1 \(vp = 1\)"):
        check_plan(column)
    column = row(**LEGAL, vp=2, pipeline_schedule=PIPELINE_SCHEDULES["zb_h1"], schedule_stated=1)
    with pytest.raises(PlanError, match="zb_h1 runs one stage per rank; vp = 2 > 1 needs an interleaved schedule"):
        check_plan(column)


def test_the_lowering_sets_the_column_where_the_plan_states_the_schedule():
    """1 for a stated schedule (also 'interleaved' beside vp "unknown" that the stack's rule resolves above 1);
    0 where the lowering derives it from vp."""
    model, cluster = "llama3.1-8b", "dgx-h100"
    for execution, stated in (({}, 0.0), ({"vp": 2}, 0.0), ({"pipeline_schedule": "1f1b"}, 1.0),
                              ({"pipeline_schedule": "interleaved", "vp": 2}, 1.0),
                              ({"pipeline_schedule": "interleaved", "vp": "unknown"}, 1.0)):
        columns = point_columns(model, cluster, plan="tp2.pp4", execution=execution, num_nodes=1, global_batch=16)
        assert columns[C["schedule_stated"]] == stated, execution


def _record(pp: int, vp, schedule: str | None, layers: int = 32, framework: str = "Megatron-Core") -> dict:
    """One run record of llama3.1-8b's shape at tp 1 on 8 H100s with this pipeline."""
    lm, cluster = load_lm_model("llama3.1-8b"), load_cluster("dgx-h100", 1)
    block = load_execution({}).plan_block(tp=1, pp=pp, cp=1, ep=1, dp=8 // pp, global_batch=64)
    block.update(vp=vp)
    block.pop("pipeline_schedule", None)
    if schedule is not None:
        block["pipeline_schedule"] = schedule
    model = {**lm.record_block(), "layers": layers}
    return {"id": "point", "framework": framework, "model": model, "system": cluster.record_block(), "plan": block}


def test_a_record_leaving_vp_to_a_stack_that_gives_1_keeps_its_stated_interleaved_schedule():
    """vp "unknown" beside 'interleaved' is what the spec accepts whatever vp the stack's rule gives; Meta's rule
    gives (layers + 2) / pp, 1 at pp = layers + 2 (6 layers, pp 8): the record is evaluated as before (as the one
    that states no schedule), not refused by the stated rule."""
    stated = _record(8, "unknown", "interleaved", layers=6, framework="Meta internal")
    lowered = lower_record(stated)
    assert (lowered.columns[C["vp"]], lowered.columns[C["schedule_stated"]]) == (1.0, 0.0)
    assert record_values(stated)[0]["step_time"] == record_values(_record(8, "unknown", None, layers=6,
                                                                          framework="Meta internal"))[0]["step_time"]
    assert lower_record(_record(4, 2, "interleaved")).columns[C["schedule_stated"]] == 1.0


def _single_run(schedule: str, vp: int, plan: str, global_batch: int) -> str:
    """The status name a single run gives, or 'spec refused' where the execution spec refuses the pair."""
    try:
        point_columns("llama3.1-8b", "dgx-h100", plan=plan, num_nodes=1, global_batch=global_batch,
                      execution={"pipeline_schedule": schedule, "vp": vp})
    except SpecError:
        return "spec refused"
    except PlanError as error:
        return error.rule
    return "ok"


def _record_run(schedule: str, vp: int, plan: str, global_batch: int) -> str | None:
    """The status name of the same point as a run record; 'spec refused' for the pair; None where RUNS.md refuses
    the record for another reason (vp > 1 at pp 1)."""
    mesh = parse_mesh(plan)
    record = _record(mesh["pp"], vp, schedule)
    record["plan"].update(tp=mesh["tp"], dp=8 // (mesh["tp"] * mesh["pp"]), global_batch=global_batch)
    try:
        record_values(record)
    except PlanError as error:
        return error.rule
    except SpecError as error:
        if "needs pp > 1" in str(error):
            return None
        assert "pipeline_schedule" in str(error), str(error)
        return "spec refused"
    return "ok"


def test_schedule_by_vp_by_pp_the_sweep_a_single_run_and_a_record_agree():
    """Every (schedule, vp, pp, global batch): the sweep's status is the single run's and the record's; where the
    spec refuses the pair (exactly the hand rule), the sweep's is schedule_not_runnable. The same with the
    schedule stated in the execution and only vp an axis."""
    grid = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", num_nodes=1,
                    axes={"plan": list(PLANS), "pipeline_schedule": list(SCHEDULES), "vp": list(VPS),
                          "global_batch": list(BATCHES)})
    seen = set()
    for schedule in SCHEDULES:
        stated = lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", num_nodes=1,
                          execution={"pipeline_schedule": schedule, "vp": 4 if schedule == "interleaved" else 1},
                          axes={"plan": list(PLANS), "vp": list(VPS), "global_batch": list(BATCHES)})
        for plan in PLANS:
            for vp in VPS:
                for batch in BATCHES:
                    at = dict(plan=plan, vp=vp, global_batch=batch)
                    swept = STATUSES[int(grid.status.sel(pipeline_schedule=schedule, **at))].name
                    assert STATUSES[int(stated.status.sel(**at))].name == swept, (schedule, at)
                    single, record = _single_run(schedule, vp, plan, batch), _record_run(schedule, vp, plan, batch)
                    assert (single == "spec refused") == _spec_refuses(schedule, vp), (schedule, at, single)
                    want = "schedule_not_runnable" if single == "spec refused" else single
                    assert swept == want, (schedule, at, single)
                    assert record in (None, single), (schedule, at, record, single)
                    if swept == "schedule_not_runnable":
                        assert np.isnan(float(grid.step_time.sel(pipeline_schedule=schedule, **at)))
                    seen.add(swept)
    assert {"ok", "schedule_not_runnable", "too_few_microbatches"} <= seen, seen

