"""ZB-H1 and DualPipe: the closed forms (kernels/lm/pipeline.py) and the exact scheduler path
(fastmodel/lm/pipeline_program.py), docs/model.md §11.7.

Golden values are hand-derived: small schedules traced op by op in the docstrings, the bubble formulas of
Qi et al. (ICLR 2024, sec. 3.1: ZB-H1 (p - 1)(T_F + T_B - T_W)) and of the DeepSeek-V3 report (Table 2:
DualPipe (PP/2 - 1)(F&B + B - 3W), 2x parameters, PP + 1 activations).
"""

from pathlib import Path

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.lm.pipeline_orders import dualpipe_order, stage_order, zb_h1_order
from fastmodel.lm.calibrate.overlay import overlay_columns
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.pipeline import exact_pipeline, stage_times
from fastmodel.lm.pipeline_program import pipeline_program, pipeline_slots, schedule_pipeline
from fastmodel.lm.records import lower_record, read_records
from fastmodel.registry.lm import COLUMN_INDEX, PIPELINE_SCHEDULES, STATUS_CODES

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDS = {r.id: r for r in read_records(DATA / "runs_dev.jsonl")}
#: 1F1B at pp 2, 4, 8 (test_pipeline_program.PIPELINED)
PIPELINED = ["narayanan2021_t1-GPT-39.1B-n512-tp8pp2-full", "narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full",
             "narayanan2021_t1-GPT-145.6B-n1536-tp8pp8-full"]


def _columns(record_id, **changes):
    return overlay_columns(RECORDS[record_id].columns, changes)    # a copy with the columns changed by name


def _times(schedule, p, m, forward, backward_input, weight):
    program = pipeline_program(p, m, schedule)
    times = schedule_pipeline(program, pipeline_slots(forward, backward_input + weight, p, weight=weight))
    return program, times


def test_zb_h1_two_stages_traced_by_hand():
    """p = 2, m = 2, F = B = W = 1 (B the input gradient, W the weight gradient).

    Stage 0 (one warm-up forward, defers no W): F0 F1 I0 W0 I1 W1. Stage 1 (defers its first W): F0 I0 F1 I1 W0 W1.
    S0.F0 0-1; S0.F1 1-2; S1.F0 1-2; S1.I0 2-3; S0.I0 waits for S1.I0: 3-4; S1.F1 3-4; S0.W0 4-5; S1.I1 4-5;
    S0.I1 waits for S1.I1: 5-6; S1.W0 5-6; S0.W1 6-7; S1.W1 6-7. Makespan 7 = m (F + B + W) + (p - 1)(F + B - W)
    = 6 + 1; 1F1B on the same passes takes 9 (test_pipeline_program: (m + p - 1)(F + B + W)).
    """
    assert zb_h1_order(2, 2, 0) == [("F", 0, 0), ("F", 1, 0), ("I", 0, 0), ("W", 0, 0), ("I", 1, 0), ("W", 1, 0)]
    assert zb_h1_order(2, 2, 1) == [("F", 0, 0), ("I", 0, 0), ("F", 1, 0), ("I", 1, 0), ("W", 0, 0), ("W", 1, 0)]
    program, times = _times("zb_h1", 2, 2, 1.0, 1.0, 1.0)
    got = {name: (s, e) for name, s, e in zip(program.op_names, times.start, times.end)}
    assert got == {"F0.0": (0, 1), "F0.1": (1, 2), "F1.0": (1, 2), "I1.0": (2, 3), "I0.0": (3, 4), "F1.1": (3, 4),
                   "W0.0": (4, 5), "I1.1": (4, 5), "I0.1": (5, 6), "W1.0": (5, 6), "W0.1": (6, 7), "W1.1": (6, 7)}
    assert times.makespan == 7.0 and times.idle.tolist() == [1.0, 1.0]


def test_dualpipe_two_ranks_traced_by_hand():
    """p = 2, m = 4 (2 per direction), F = B = W = 1 (full backward 2). Both ranks are middle ranks (h = 0, n = 1):
    step 2 one forward of each direction, step 4 once: a plain forward and full backward, then an overlapped pair
    P (forward) + B, step 6 a full backward and an input backward, step 8 its W. Direction 0 runs virtual stages
    0 (rank 0), 1 (rank 1); direction 1 runs 2 (rank 1), 3 (rank 0).

    Rank 0: F0.0 0-1; F3.0 waits for F2.0 (rank 1, 0-1): 1-2; F0.1 2-3; B3.0 (last stage of direction 1) 3-5;
    pair: F3.1 waits for F2.1 (rank 1, 2-3) and for B0.0's input B1.0 (rank 1, 3-5): 5-6, then B0.0 6-8;
    B3.1 8-10; I0.1 waits for B1.1 (rank 1, 8-10): 10-11; W0.1 11-12. Rank 1 mirrors it. Makespan 12 =
    m (F + B + W): the report's bubble (PP/2 - 1)(F&B + B - 3W) is 0 at PP = 2.
    """
    assert dualpipe_order(2, 4, 0) == [("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("B", 0, 1), ("P", 1, 1), ("B", 0, 0),
                                       ("B", 1, 1), ("I", 1, 0), ("W", 1, 0)]
    program, times = _times("dualpipe", 2, 4, 1.0, 1.0, 1.0)
    got = {name: (s, e) for name, s, e in zip(program.op_names, times.start, times.end)}
    rank0 = {"F0.0": (0, 1), "F3.0": (1, 2), "F0.1": (2, 3), "B3.0": (3, 5), "F3.1": (5, 6), "B0.0": (6, 8),
             "B3.1": (8, 10), "I0.1": (10, 11), "W0.1": (11, 12)}
    assert {k: got[k] for k in rank0} == rank0
    assert times.makespan == 12.0 and times.idle.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("p, m", [(2, 2), (4, 8), (4, 3), (8, 16)])
def test_zb_h1_orders_run_every_pass_once(p, m):
    for s in range(p):
        order = zb_h1_order(p, m, s)
        assert sorted(order) == sorted((kind, j, 0) for kind in "FIW" for j in range(m))
        # 1F1B's warm-up (the in-flight count) and s deferred W passes at the end
        assert order[:min(p - s - 1, m)] == [("F", j, 0) for j in range(min(p - s - 1, m))]
        assert [kind for kind, _, _ in order[-min(s, m) - 1:]].count("W") >= min(s, m)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (6, 12), (8, 20)])
def test_dualpipe_orders_run_every_pass_once(p, m):
    for s in range(p):
        order = dualpipe_order(p, m, s)
        forwards = sorted((j, c) for kind, j, c in order if kind in "FP")
        backwards = sorted((j, c) for kind, j, c in order if kind in "BI")
        weights = sorted((j, c) for kind, j, c in order if kind == "W")
        assert forwards == backwards == sorted((j, c) for j in range(m // 2) for c in (0, 1))
        assert weights == sorted((j, c) for kind, j, c in order if kind == "I")   # each split backward's W once
    assert stage_order("dualpipe", p, m, 0) == dualpipe_order(p, m, 0)


PASSES = [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8), (1.0, 1.5, 0.5), (1.0, 2.0, 1.0), (1.0, 0.6, 1.0)]


@pytest.mark.parametrize("f, b, w", PASSES)
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 24)])
def test_zb_h1_uniform_makespan_is_the_closed_form(f, b, w, p, m):
    # (p - 1)(F + B - W) while W <= B (Qi et al.); beyond, the B chain no longer hides W: (p - 1) F
    _, times = _times("zb_h1", p, m, f, b, w)
    assert times.makespan == pytest.approx(m * (f + b + w) + (p - 1) * (f + b - min(b, w)), rel=1e-12)
    assert times.makespan < m * (f + b + w) + (p - 1) * (f + b + w)          # below 1F1B's


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 24)])
def test_dualpipe_uniform_makespan_is_the_report_s_bubble_when_passes_are_equal(p, m):
    # F = B = W = 1: F&B = F + B + W = 3 (the pair shares the GPU), full backward 2: (p/2 - 1)(3 + 2 - 3)
    _, times = _times("dualpipe", p, m, 1.0, 1.0, 1.0)
    assert times.makespan == pytest.approx(3.0 * m + (p / 2 - 1) * 2.0, rel=1e-12)
    assert times.idle == pytest.approx(np.full(p, (p / 2 - 1) * 2.0), rel=1e-12)


@pytest.mark.parametrize("f, b, w", PASSES[1:])
@pytest.mark.parametrize("p, m", [(4, 8), (6, 12), (8, 16)])
def test_dualpipe_closed_form_is_within_p_half_forwards_for_other_ratios(f, b, w, p, m):
    _, times = _times("dualpipe", p, m, f, b, w)
    closed = m * (f + b + w) + (p / 2 - 1) * (f + 2 * b - w)
    assert abs(times.makespan - closed) <= (p / 2 - 1) * f * (1 + 1e-12)
    assert times.makespan < m * (f + b + w) + (p - 1) * (f + b + w)          # below 1F1B's


def test_bad_dualpipe_shapes_are_refused():
    for p, m in ((3, 8), (4, 7), (4, 6)):
        with pytest.raises(ValueError, match="DualPipe needs"):
            pipeline_program(p, m, "dualpipe")
    with pytest.raises(ValueError, match="needs the interleaved schedule"):
        pipeline_program(4, 8, "zb_h1", 2)


# --- the kernel's closed forms on real configurations ------------------------------------------------------

def _scheduled(record_id, schedule, **changes):
    return _columns(record_id, pipeline_schedule=PIPELINE_SCHEDULES[schedule], vp=1, **changes)


def _embedding(columns):
    """The first rank's word-embedding seconds a micro-batch, its TP collectives and dense gradient (docs/model.md
    §11.44 item 1d, §11.43): the average stage holds e / p of it, as it holds t_head / p of the head."""
    from fastmodel.kernels.lm.first_rank import embedding_stage

    return sum(embedding_stage(columns))


#: the ZB-H1 / DualPipe rows: the 1F1B records, and the pp 4 one with MTP modules (docs/model.md §11.4: their layers
#: sit on the last rank beside the head, and the average stage holds 1 / p of them)
MTP_ROWS = [(record_id, 0) for record_id in PIPELINED[:3]] + [(PIPELINED[1], 1), (PIPELINED[1], 2)]


@pytest.mark.parametrize("record_id, mtp", MTP_ROWS)
def test_zb_h1_closed_form_is_exact_for_uniform_stages(record_id, mtp):
    columns = _scheduled(record_id, "zb_h1", mtp_layers=mtp)
    times = stage_times(columns, uniform=True)
    p, m = times.stages, times.micro_batches
    assert times.schedule == "zb_h1"
    assert (times.mtp > 0.0) == (mtp > 0)
    # the last rank leads: t_mb = its body + head + MTP layers; the average stage holds 1 / p of each end's terms
    ends = times.head + times.mtp
    average = times.stage_mb - ends + (ends + _embedding(columns)) / p
    exact = exact_pipeline(times)
    assert exact.makespan == pytest.approx(m * average + times.closed_bubble, rel=1e-9)
    # (p - 1)(t - 2W): W the weight-gradient GEMMs, B (with full recompute here) the rest of the backward
    weight = float(times.weight.sum(axis=0)[0])
    assert times.closed_bubble == pytest.approx((p - 1) * (average - 2.0 * weight), rel=1e-9)
    assert 0.0 < times.closed_bubble < (p - 1) * average


@pytest.mark.parametrize("record_id", PIPELINED[:3])
def test_a_schedule_moves_the_step_by_its_bubble_only(record_id):
    # the fp16 step's FP32 gradient copy (docs/model.md §11.49), a peak of its own on these rows, is left out: the
    # memory compared here is the schedules' activations; so are Megatron-LM 2021's blocking exchanges (§11.52),
    # which 1F1B has and ZB-H1 has not
    base = _scheduled(record_id, "1f1b", step_grad_copy_bytes=0, pp_exchange_2021=0)
    zb = _scheduled(record_id, "zb_h1", step_grad_copy_bytes=0, pp_exchange_2021=0)
    r0 = {k: float(v[0]) for k, v in evaluate_table(base[:, None]).items()}
    r1 = {k: float(v[0]) for k, v in evaluate_table(zb[:, None]).items()}
    assert r1["pipeline_bubble"] < r0["pipeline_bubble"]
    assert r0["step_time"] - r1["step_time"] == pytest.approx(r0["pipeline_bubble"] - r1["pipeline_bubble"], rel=1e-9)
    # full recompute: a deferred W keeps its layers' GEMM inputs and output gradients (kernels/lm/memory_chunks.py
    # wgrad_pending_layer_bytes), more than the checkpoint a micro-batch keeps before I, so a later rank holds more
    assert r1["memory_allocated"] > r0["memory_allocated"]
    # without recompute those residues (M_W) are smaller than a micro-batch (M_B): the peak stays 1F1B's on rank 0
    # (Qi et al. 2024 sec. 2.1: "does not exceed the peak memory of 1F1B")
    keep = {k: float(v[0]) for k, v in evaluate_table(
        _scheduled(record_id, "1f1b", recompute=0, step_grad_copy_bytes=0)[:, None]).items()}
    zb_keep = {k: float(v[0]) for k, v in evaluate_table(
        _scheduled(record_id, "zb_h1", recompute=0, step_grad_copy_bytes=0)[:, None]).items()}
    assert zb_keep["memory_allocated"] == keep["memory_allocated"]


def _dualpipe_columns(mtp=0):
    # narayanan2021 GPT 76.1B on pp = 4, dp = 32: m = 1792 / (2 x 32) = 28 micro-batches, even and >= 2 pp
    return _scheduled("narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full", "dualpipe", mtp_layers=mtp)


def test_dualpipe_holds_two_stages_and_pp_plus_one_micro_batches():
    from fastmodel.kernels.lm.memory_states import model_stage_params, stage_params
    from fastmodel.kernels.lm.pipeline import microbatches_in_flight, model_copies

    columns = _dualpipe_columns()
    p = columns[COLUMN_INDEX["pp"]]
    assert model_copies(columns) == 2.0
    for stage in range(int(p)):
        mine, mirror = model_stage_params(columns, stage), model_stage_params(columns, p - 1 - stage)
        assert stage_params(columns, stage) == pytest.approx((mine[0] + mirror[0], mine[1] + mirror[1]), rel=1e-15)
        assert microbatches_in_flight(columns, stage) == p + 1
    one = _scheduled("narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full", "1f1b")
    r0 = {k: float(v[0]) for k, v in evaluate_table(one[:, None]).items()}
    r1 = {k: float(v[0]) for k, v in evaluate_table(columns[:, None]).items()}
    assert r1["memory_weights"] > 1.9 * r0["memory_weights"]          # stage 0 also holds stage p - 1
    assert r1["pipeline_bubble"] < r0["pipeline_bubble"]


@pytest.mark.parametrize("mtp", [0, 1])
def test_dualpipe_closed_form_against_the_exact_path(mtp):
    columns = _dualpipe_columns(mtp)
    times = stage_times(columns, uniform=True)
    p, m = times.stages, times.micro_batches
    exact = exact_pipeline(times)
    # the end ranks run half the heads, half the MTP layers and half the embeddings (first_rank.embedding_ends),
    # the average 1 / p
    assert (times.mtp > 0.0) == (mtp > 0)
    ends = times.head + times.mtp + _embedding(columns)
    average = times.stage_mb - ends / 2 + ends / p
    closed = m * average + times.closed_bubble
    forward = float(times.forward[0, 0])
    assert abs(exact.makespan - closed) <= (p / 2 - 1) * forward * (1 + 1e-12)     # at the bound here
    assert exact.makespan < m * times.stage_mb + (p - 1) * average


def test_dualpipe_rule_and_execution_spec():
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.lm.rules import plan_status

    columns = _dualpipe_columns()
    assert plan_status(columns[:, None])[0] == 0
    odd = columns.copy()
    odd[COLUMN_INDEX["global_batch"]] = 7 * odd[COLUMN_INDEX["micro_batch"]] * odd[COLUMN_INDEX["dp"]]
    assert plan_status(odd[:, None])[0] == STATUS_CODES["schedule_not_runnable"]
    with pytest.raises(Exception, match="one stage per rank"):
        ExecutionSpec(pipeline_schedule="dualpipe", vp=2)


def test_a_record_s_zero_bubble_is_zb_h1():
    import copy

    raw = copy.deepcopy(RECORDS["narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full"].raw)
    raw["plan"]["vp"] = 1     # the SC21 run interleaves (vp 3); ZB-H1 runs one stage per rank
    raw["plan"]["pipeline_schedule"] = "zero_bubble (ZB-H1, Qi et al.)"
    assert lower_record(raw).columns[COLUMN_INDEX["pipeline_schedule"]] == PIPELINE_SCHEDULES["zb_h1"]
    raw["plan"]["pipeline_schedule"] = "zb_h2"
    with pytest.raises(SpecError, match="pipeline_schedule"):
        lower_record(raw)
