"""The exact pipeline path (lm/pipeline_program.py, lm/pipeline.py; docs/model.md §11.7.1).

Golden values are hand-derived: a two-stage 1F1B schedule traced op by op, and the textbook
makespans (m + p - 1)(t_f + t_b) for GPipe and 1F1B (Huang et al. 2019; Narayanan et al. 2021
eq. 1) and m (t_f + t_b) + (p - 1)(t_f + t_b)/v for the interleaved schedule (eq. 2). Then the
real-world closed form (kernels/lm/step.py) against the exact schedule of the same stage times.
"""

from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.first_rank import embedding_stage
from fastmodel.kernels.madmax.layout import MAX_STREAMS
from fastmodel.lm.calibrate.overlay import overlay_columns
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.pipeline import chunk_layers, exact_pipeline, send_time, stage_times
from fastmodel.lm.pipeline_program import pipeline_program, pipeline_slots, schedule_pipeline, stage_order
from fastmodel.lm.records import read_records

RECORDS = {r.id: r for r in read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")}


def test_two_stage_1f1b_traced_by_hand():
    # p = 2, m = 2, t_f = 1, t_b = 2. Stage 0: F0 F1 B0 B1 (one warm-up forward); stage 1: F0 B0 F1 B1.
    # S0.F0 0-1; S1.F0 1-2; S1.B0 2-4; S0.F1 1-2; S0.B0 waits for S1.B0: 4-6; S1.F1 4-5; S1.B1 5-7;
    # S0.B1 waits for S1.B1: 7-9. Makespan 9 = (m + p - 1)(t_f + t_b); each stage idles 9 - 6 = 3.
    program = pipeline_program(2, 2, "1f1b")
    times = schedule_pipeline(program, pipeline_slots(1.0, 2.0, 2))
    got = {name: (s, e) for name, s, e in zip(program.op_names, times.start, times.end)}
    assert got == {"F0.0": (0, 1), "F0.1": (1, 2), "F1.0": (1, 2), "B1.0": (2, 4), "B0.0": (4, 6),
                   "F1.1": (4, 5), "B1.1": (5, 7), "B0.1": (7, 9)}
    assert times.makespan == 9.0
    assert times.busy.tolist() == [6.0, 6.0] and times.idle.tolist() == [3.0, 3.0]
    assert program.op_stream.tolist().count(0) == 4 and program.n_streams == 2


def test_stage_orders_follow_the_schedules():
    assert stage_order("gpipe", 3, 2, 0) == [("F", 0, 0), ("F", 1, 0), ("B", 0, 0), ("B", 1, 0)]
    # 1F1B: stage s runs p - s - 1 warm-up forwards (at most m)
    assert stage_order("1f1b", 4, 5, 0)[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 3, 0)]
    assert stage_order("1f1b", 4, 5, 0)[4] == ("B", 0, 0)
    assert stage_order("1f1b", 4, 5, 3)[:3] == [("F", 0, 0), ("B", 0, 0), ("F", 1, 0)]
    assert stage_order("1f1b", 4, 2, 0) == [("F", 0, 0), ("F", 1, 0), ("B", 0, 0), ("B", 1, 0)]
    # interleaved, p = 2, v = 2, m = 4: stage 0 warms up with 2 (p - 1) + (v - 1) p = 4 forwards, chunk 0 for
    # micro-batches 0, 1, then chunk 1 for them; backwards start at the last chunk
    order = stage_order("interleaved", 2, 4, 0, 2)
    assert order[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1)]
    assert order[4:8] == [("F", 2, 0), ("B", 0, 1), ("F", 3, 0), ("B", 1, 1)]
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 3)):
        for stage in range(4):
            order = stage_order(schedule, 4, 8, stage, v)
            assert sorted(order) == sorted((kind, j, c) for kind in "FB" for j in range(8) for c in range(v))


SHAPES = [(schedule, v, p, m) for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 4))
          for p, m in ((1, 3), (2, 4), (4, 4), (4, 8), (8, 16), (8, 24)) if v == 1 or p > 1]


@pytest.mark.parametrize("schedule, v, p, m", SHAPES)
@pytest.mark.parametrize("t_f, t_b", [(1.0, 2.0), (1.0, 1.0), (0.3, 1.7)])
def test_uniform_stages_give_the_textbook_makespan(schedule, v, p, m, t_f, t_b):
    program = pipeline_program(p, m, schedule, v)
    times = schedule_pipeline(program, pipeline_slots(t_f, t_b, p, v))   # chunks of t_f / v, t_b / v
    want = m * (t_f + t_b) + (p - 1) * (t_f + t_b) / v
    assert times.makespan == pytest.approx(want, rel=1e-12)
    assert times.idle == pytest.approx(np.full(p, (p - 1) * (t_f + t_b) / v), rel=1e-12, abs=1e-12)
    assert times.bubble_fraction == pytest.approx(np.full(p, (p - 1) / (v * m)), rel=1e-12, abs=1e-12)
    assert program.num_ops == 2 * m * v * p


def test_ops_respect_the_cross_stage_dependencies():
    p, m, v = 4, 8, 2
    program = pipeline_program(p, m, "interleaved", v)
    rng = np.random.default_rng(1)
    times = schedule_pipeline(program, rng.uniform(0.5, 2.0, 2 * p * v))
    at = {name: i for i, name in enumerate(program.op_names)}
    for k in range(p * v):
        for j in range(m):
            f, b = at[f"F{k}.{j}"], at[f"B{k}.{j}"]
            assert program.op_stream[f] == program.op_stream[b] == k % p
            assert times.start[b] >= times.end[f]
            if k:
                assert times.start[f] >= times.end[at[f"F{k - 1}.{j}"]]
            if k < p * v - 1:
                assert times.start[b] >= times.end[at[f"B{k + 1}.{j}"]]
    for s in range(p):   # one stage never runs two ops at once
        on = np.flatnonzero(program.op_stream == s)
        assert np.all(times.start[on][1:] >= times.end[on][:-1])


def test_two_stage_1f1b_with_sends_traced_by_hand():
    # As above with a send of 0.5 after every op that feeds the other stage, on the sender's send stream:
    # S0.F0 0-1, its send 1-1.5; S1.F0 1.5-2.5; S1.B0 2.5-4.5, send 4.5-5; S0.F1 1-2, send 2-2.5;
    # S1.F1 4.5-5.5; S1.B1 5.5-7.5, send 7.5-8; S0.B0 5-7; S0.B1 8-10. Makespan 10 = 9 + 2 (p - 1) x 0.5.
    program = pipeline_program(2, 2, "1f1b", sends=True)
    times = schedule_pipeline(program, pipeline_slots(1.0, 2.0, 2, send=0.5))
    got = {name: (s, e) for name, s, e in zip(program.op_names, times.start, times.end)}
    assert got == {"F0.0": (0, 1), "SF0.0": (1, 1.5), "F0.1": (1, 2), "SF0.1": (2, 2.5), "F1.0": (1.5, 2.5),
                   "B1.0": (2.5, 4.5), "SB1.0": (4.5, 5), "F1.1": (4.5, 5.5), "B1.1": (5.5, 7.5),
                   "SB1.1": (7.5, 8), "B0.0": (5, 7), "B0.1": (8, 10)}
    assert program.n_streams == 4 and times.busy.tolist() == [6.0, 6.0] and times.idle.tolist() == [4.0, 4.0]


@pytest.mark.parametrize("p, m", [(2, 4), (3, 9), (4, 8), (4, 16)])
@pytest.mark.parametrize("t_f, t_b, c", [(1.0, 2.0, 0.1), (1.0, 1.0, 0.3)])
def test_what_sends_add_to_uniform_schedules(p, m, t_f, t_b, c):
    def makespan(schedule, micro_batches, v=1):
        program = pipeline_program(p, micro_batches, schedule, v, sends=True)
        return schedule_pipeline(program, pipeline_slots(t_f, t_b, p, v, send=c)).makespan

    # GPipe: the first forward crosses p - 1 sends to reach the last stage, whose forwards then run back to
    # back (each arrives a send after the previous stage finished it, no later than the last stage is free);
    # the last backward crosses p - 1 sends back: every other send overlaps compute.
    assert makespan("gpipe", m) == pytest.approx((m + p - 1) * (t_f + t_b) + 2 * (p - 1) * c, rel=1e-12)
    # 1F1B, steady state: the cycle B(p-1, j) -> ... -> B(0, j) -> F(0, j + p) -> ... -> F(p-1, j + p) runs
    # through every stage's forward and backward and 2 (p - 1) sends per p micro-batches
    assert makespan("1f1b", m + p) - makespan("1f1b", m) == pytest.approx(p * (t_f + t_b) + 2 * (p - 1) * c,
                                                                        rel=1e-12)
    # interleaved, sends short against a chunk: the first micro-batch's forward crosses all p v - 1 virtual
    # stage boundaries before its backward starts back, and the uniform schedule has no slack on that chain
    v = 2
    assert makespan("interleaved", m, v) == pytest.approx(m * (t_f + t_b) + (p - 1) * (t_f + t_b) / v
                                                         + 2 * (p * v - 1) * c, rel=1e-12)


def test_interleaved_exposed_sends_cross_every_virtual_stage_by_hand():
    # p = 4, v = 2, m = 8, F = 1, B = 2 per rank (0.5 and 1 per chunk), sends of 0.1 on their own stream.
    # Micro-batch 0 runs chunk 0 on ranks 0..3, then chunk 1 on ranks 0..3 (rank 3 hands over to rank 0):
    # 7 boundaries forward; its backward runs them back: 7 more. Uniform stages have no slack on that chain,
    # so the sends add 2 (p v - 1) x 0.1 = 1.4 to the textbook m t + (p - 1)/v t = 24 + 4.5 (eq. 2).
    def makespan(send):
        program = pipeline_program(4, 8, "interleaved", 2, sends=True)
        return schedule_pipeline(program, pipeline_slots(1.0, 2.0, 4, 2, send=send)).makespan

    assert makespan(0.0) == pytest.approx(28.5, rel=1e-12)
    assert makespan(0.1) - makespan(0.0) == pytest.approx(1.4, rel=1e-9)
    # the closed form (kernels/lm/pipeline.pipeline_p2p) charges the same 2 (p v - 1) sends: 14 of them, less
    # those that run under the first rank's embedding wait (TP 4 here; host_step.embedding_send_overlap, §11.44
    # item 1d): 3 e_F and 3 e_B < 4 s, so (p - 1)(e_F + e_B) = 3 e. Under SP with NeMo's learned positions the
    # embedding all-reduces forward and all-gathers backward (sp_regather.embedding_tp): e_F = AR(2 T h) + o >
    # e_B = AG(2 T h) + o (e_F = e_B, both the gather, before the record stated its position embedding, issue 26)
    # (the per-chunk DP collectives off: the exact path has none to share the NIC with the chain sends, §11.65)
    columns = _columns("mlperf-v40-gpt3-175b-eos_n64_ngc24.04_nemo", pp=4, vp=2, **NO_DP_OVERLAP)
    exposed = float(evaluate_table(columns[:, None])["exposed_pp"][0])
    forward, backward = embedding_stage(columns)
    assert forward > backward and 3 * forward < 4 * send_time(columns)
    assert exposed == pytest.approx(14 * send_time(columns) - 3 * (forward + backward), rel=1e-12)


@pytest.mark.parametrize("m", [4, 8, 16])
def test_interleaved_steady_state_hides_sends_shorter_than_a_chunk(m):
    # Llama 3's regime (docs/model.md §11.7, "Llama 3 405B: what was checked"): one layer per chunk, v = 8.
    # p = 4, F = 1, B = 2 per rank, so a chunk's forward is 0.125; textbook eq. 2: 3 m + 3 x 3 / 8.
    # A send of 0.1 (0.8 of a chunk's forward) adds only the warm-up/cool-down chain 2 (p v - 1) x 0.1 = 6.2,
    # m = p (Megatron's depth-first group) included; a send of 0.3 (2.4 chunks) shows in the steady state too.
    def makespan(send):
        program = pipeline_program(4, m, "interleaved", 8, sends=True)
        return schedule_pipeline(program, pipeline_slots(1.0, 2.0, 4, 8, send=send)).makespan

    assert makespan(0.0) == pytest.approx(3.0 * m + 9.0 / 8.0, rel=1e-12)
    assert makespan(0.1) - makespan(0.0) == pytest.approx(2 * 31 * 0.1, rel=1e-9)
    assert makespan(0.3) - makespan(0.0) > 2 * 31 * 0.3


def test_bad_pipelines_are_refused():
    with pytest.raises(ValueError, match="streams"):
        pipeline_program(MAX_STREAMS + 1, 16)
    with pytest.raises(ValueError, match="streams"):
        pipeline_program(MAX_STREAMS // 2 + 1, 16, sends=True)
    with pytest.raises(ValueError, match="multiple"):
        pipeline_program(4, 6, "interleaved", 2)
    with pytest.raises(ValueError, match="interleaved"):
        pipeline_program(4, 8, "1f1b", 2)
    with pytest.raises(ValueError, match="virtual_stages >= 2"):
        pipeline_program(4, 8, "interleaved", 1)
    with pytest.raises(ValueError, match="unknown pipeline schedule"):
        pipeline_program(4, 8, "zero-bubble")   # a record alias (record_schema), no schedule name
    with pytest.raises(ValueError, match="shape"):
        pipeline_slots(np.ones(3), 1.0, 4)


# --- the real-world closed form against the exact schedule -------------------------------------------------

# pp <= MAX_STREAMS: 1F1B at pp 2; interleaved at (pp, vp) = (4, 3), (8, 2) (the SC21 scripts' virtual stages,
# docs/model.md §11.49), (8, 3), (8, 4), (8, 12), (6, 8); GPipe (and 1F1B in the uneven-stage test) with vp 1
PIPELINED = [
    "narayanan2021_t1-GPT-39.1B-n512-tp8pp2-full",
    "narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full",
    "narayanan2021_t1-GPT-145.6B-n1536-tp8pp8-full",
    "korthikanti2022_t5-GPT-175B-n64-tp8pp8-selective",
    "mlperf-v40-gpt3-175b-eos_n64_ngc24.04_nemo",
    "mlperf-v31-gpt3-175b-nvidia-n512",
    "mlperf-v40-gpt3-175b-eos-dfw_n1344_ngc24.04_nemo",
]


#: the per-chunk data-parallel collectives not overlapped: the exact path has none, so the closed form's chain sends
#: keep their NIC to themselves (kernels/lm/chain_nic.py, docs/model.md §11.65)
NO_DP_OVERLAP = {"overlap_grad_reduce": 0, "overlap_param_gather": 0}


#: the once-a-step FP8 weight preparation off (FP8 parameters keeping one form: the recipe unstated, as the MLPerf
#: records were before they stated delayed scaling, which keeps a transpose on Hopper): the exact path has no
#: per-micro-batch costs, so not the casts the closed form puts on micro-batch 0's chain (docs/model.md §11.65 C)
NO_CAST = {"fp8_params": 1, "fp8_recipe": 0}


def _columns(record_id, **changes):
    # a copy with the columns changed by name
    return overlay_columns(RECORDS[record_id].columns, {**NO_CAST, **changes})


def _embedding_wait(columns, p, v):
    """What the first rank's word embedding (its TP collectives e = e_F + e_B a micro-batch on the first virtual
    stage, docs/model.md §11.44 item 1d, and its dense gradient in e_B, §11.43) adds to the makespan when the last
    rank is the busiest: 1F1B and GPipe cross rank 0 once, e; interleaved, rank 0 runs its group of p chunk-0
    forwards (backwards) before (after) the chunk the last rank waits for, p e (kernels/lm/bubble_last.py)."""
    from fastmodel.kernels.lm.first_rank import embedding_stage

    e = sum(embedding_stage(columns))
    return p * e if v > 1 else e


@pytest.mark.parametrize("record_id", PIPELINED)
def test_the_kernels_average_stage_bubble_is_exact_for_uniform_stages(record_id):
    from fastmodel.kernels.lm.pipeline import pipeline_bubble

    columns = _columns(record_id)
    times = stage_times(columns, uniform=True)
    p, v, m = times.stages, times.virtual_stages, times.micro_batches
    assert p > 1 and times.head > 0.0
    # every stage the average one (body + head / p): the kernel's closed form of kernels/lm/pipeline.py, fed that
    # stage's F + B + W, F and W, is the exact scheduler's bubble on every rank
    average = times.forward[:, 0].sum() + times.backward[:, 0].sum()
    closed = pipeline_bubble(columns, average, times.forward[:, 0].sum(), times.weight[:, 0].sum())
    assert closed == pytest.approx((p - 1) / v * average, rel=1e-12)
    exact = exact_pipeline(times)
    assert exact.makespan == pytest.approx(m * average + closed, rel=1e-9)
    assert exact.idle == pytest.approx(np.full(p, closed), rel=1e-9)
    # the kernel's own bubble for these records (the last rank, with the head, the busiest) is the credited one
    # (kernels/lm/bubble_last.py, §11.43): (p t_avg - t_mb)/v = (p - 1)/v x the body, and the embedding's wait
    wait = _embedding_wait(columns, p, v)
    assert wait > 0.0       # TP > 1 on every record here
    assert times.closed_bubble == pytest.approx((p - 1) / v * (times.stage_mb - times.head) + wait, rel=1e-12)


@pytest.mark.parametrize("record_id, gpipe, dense", [(r, False, 0) for r in PIPELINED]
                         + [(r, True, 0) for r in PIPELINED[:3]] + [(PIPELINED[i], False, 1) for i in (1, 4)])
def test_the_closed_form_is_exact_with_the_head_on_the_last_stage(record_id, gpipe, dense):
    # The last stage is the slowest (it holds the LM head), so it never waits once it has started: its first
    # forward starts after (p - 1) chunk forwards, its last backward is followed by (p - 1) chunk backwards,
    # so the exact makespan is m t_mb + (p - 1)/v (t_mb - t_head), and the first rank's embedding on the way
    # (_embedding_wait). The kernel's bubble is that (§11.43, §11.44 item 1d); the average stage's,
    # (p - 1)/v (t_mb - t_head + t_head / p), charged (p - 1)/(p v) t_head too much. ``dense``: with the
    # embedding's dense gradient in rank 0's first backward (§11.43), 1F1B at pp 4 and interleaved at (8, 4).
    columns = _columns(record_id, embedding_dense_grad=dense, **({"pipeline_schedule": 2, "vp": 1} if gpipe else {}))
    times = stage_times(columns)
    assert times.schedule == ("gpipe" if gpipe else "1f1b" if times.virtual_stages == 1 else "interleaved")
    p, v, m = times.stages, times.virtual_stages, times.micro_batches
    exact = exact_pipeline(times)
    bubble = (p - 1) / v * (times.stage_mb - times.head) + _embedding_wait(columns, p, v)
    assert exact.makespan == pytest.approx(m * times.stage_mb + bubble, rel=1e-9)
    assert times.closed == pytest.approx(exact.makespan, rel=1e-9)
    assert times.closed_bubble == pytest.approx(bubble, rel=1e-9)
    assert exact.idle[-1] == pytest.approx(bubble, rel=1e-9)


@pytest.mark.parametrize("forward_share", [0.2, 0.5])
def test_the_forward_backward_split_does_not_move_the_makespan(forward_share, monkeypatch):
    import fastmodel.lm.pipeline as lm_pipeline

    record_id = "korthikanti2022_t5-GPT-175B-n64-tp8pp8-selective"
    before = exact_pipeline(stage_times(_columns(record_id))).makespan
    monkeypatch.setattr(lm_pipeline, "pass_shares", lambda columns: (forward_share, 0.2))
    assert exact_pipeline(stage_times(_columns(record_id))).makespan == pytest.approx(before, rel=1e-12)


def test_chunk_layers_take_the_missing_layers_from_the_ends():
    assert chunk_layers(60, 4).tolist() == [[15, 15, 15, 15]]
    assert chunk_layers(62, 4).tolist() == [[15, 16, 16, 15]]
    assert chunk_layers(63, 4).tolist() == [[15, 16, 16, 16]]
    assert chunk_layers(126, 16).sum() == 126 and chunk_layers(126, 16).max() == 8      # Llama 3 405B
    assert chunk_layers(45, 4, 3).tolist() == [[3, 3, 4, 4], [4, 4, 4, 4], [4, 4, 4, 3]]


@pytest.mark.parametrize("record_id, layers, vp", [("narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full", 62, 1),
                                                   ("narayanan2021_t1-GPT-145.6B-n1536-tp8pp8-full", 77, 1),
                                                   ("korthikanti2022_t5-GPT-175B-n64-tp8pp8-selective", 93, None)])
def test_uneven_stages_make_the_closed_form_an_upper_bound(record_id, layers, vp):
    # With uneven stages the closed form charges every stage the busiest rank's layers; the exact schedule
    # of the true layer counts is never slower (schedules are monotone in the durations), so the closed form
    # overestimates, by more than the head term alone. At most by m t_head + bubble: some stage holds the
    # busiest rank's layers, so the exact step is at least m (t_mb - t_head).
    # vp: the Narayanan rows as 1F1B (the SC21 runs interleave, vp 3 and 2; this bound is 1F1B's), else the record's
    times = stage_times(_columns(record_id, layers=layers, uneven_stages=1, **({"vp": vp} if vp else {})))
    p, v = times.stages, times.virtual_stages
    assert chunk_layers(layers, p, v).min() < chunk_layers(layers, p, v).max()
    exact = exact_pipeline(times)
    assert exact.makespan < times.closed - (p - 1) / (p * v) * times.head * (1.0 - 1e-9)
    assert times.closed - exact.makespan <= times.micro_batches * times.head + times.closed_bubble


@pytest.mark.parametrize("vp", [12, 4])
def test_the_loss_in_the_split_against_the_exact_path(vp):
    # Megatron-Core's account_for_embedding/loss_in_pipeline_split on 94 layers and p = 8: 96 slots, the first
    # chunk of rank 0 and the last chunk of rank 7 build a layer fewer (chunk_layers), the head sits on the last.
    # The head is lighter than a layer, so the middle ranks are the busiest (12 layers, no head): the closed form
    # charges m x 12 t_layer and the average stage's bubble, (L t_layer + t_head) / p, an upper bound within
    # 0.5 % of the exact schedule. Charging the head beside the slot it holds added m t_head, several times that.
    columns = _columns("korthikanti2022_t5-GPT-175B-n64-tp8pp8-selective", layers=94, vp=vp, uneven_stages=1,
                       embedding_loss_in_split=1)
    layers = chunk_layers(94, 8, vp)
    assert layers[0, 0] == layers[-1, -1] == 96 // (8 * vp) - 1 and layers.sum() == 94
    times = stage_times(columns)
    exact = exact_pipeline(times)
    assert exact.makespan < times.closed < 1.005 * exact.makespan
    assert times.micro_batches * times.head > 4.0 * (times.closed - exact.makespan)
    # every rank the average one, (94 t_layer + t_head + e) / 8 (t_layer = t_mb / 12 here; e the first rank's
    # embedding, §11.44 item 1d): the bubble is exact
    assert times.head < times.stage_mb / 12
    uniform = stage_times(columns, uniform=True)
    average = (94 * times.stage_mb / 12 + times.head + _embedding_wait(columns, 8, 1)) / 8     # e: 1F1B's wait
    assert uniform.closed_bubble == pytest.approx((8 - 1) / vp * average, rel=1e-12)
    assert exact_pipeline(uniform).makespan == pytest.approx(times.micro_batches * average + uniform.closed_bubble,
                                                            rel=1e-9)


@pytest.mark.parametrize("record_id, changes", [     # megatron-2021's blocking exchanges off (§11.52): Core's sends
    ("narayanan2021_t1-GPT-39.1B-n512-tp8pp2-full", {"pp_exchange_2021": 0}),
    ("narayanan2021_t1-GPT-76.1B-n1024-tp8pp4-full", {"pp_exchange_2021": 0}),
    ("korthikanti2022_t5-GPT-175B-n64-tp8pp8-selective", {"pp": 4, "pp_exchange_2021": 0}),   # 96 layers, 4 x 3
    ("mlperf-v40-gpt3-175b-eos_n64_ngc24.04_nemo", {"pp": 4, **NO_DP_OVERLAP}),     # no DP chunks on the NIC (§11.65)
])
def test_sends_against_the_closed_form(record_id, changes):
    # With each stage's sends on a stream of their own (asynchronous), 1F1B hides most sends behind the
    # compute: the closed form's 2 (p - 1) + 2 m exposed sends (blocking sends) are above the exact path.
    # Interleaved, the warm-up chain crosses p v - 1 boundaries each way, and so does the closed form's
    # 2 (p v - 1) exposed sends: the two agree on alike chunks. With the first rank's embedding on its first chunk
    # (§11.44 item 1d) the chain's p sends to rank 0's chunk 1 run while rank 0 works through its group of p
    # heavier chunk-0 passes, the wait the bubble charges: of (p - 1) e_F and p s only the larger is on the path,
    # each way, so the closed form takes min((p - 1) e_F, p s) + min((p - 1) e_B, p s) off the sends
    # (host_step.embedding_send_overlap; korthikanti pp 4: 6.72 - 1.335 = 5.39 ms; MLPerf pp 4: 18.05 - 1.37 ms).
    columns = _columns(record_id, **changes)
    times = stage_times(columns)
    send = send_time(columns)
    p, v, m = times.stages, times.virtual_stages, times.micro_batches
    added = exact_pipeline(times, send).makespan - exact_pipeline(times).makespan
    closed = float(evaluate_table(columns[:, None])["exposed_pp"][0])
    assert send > 0.0 and p <= 4
    if v == 1:
        assert closed == pytest.approx((2 * (p - 1) + 2 * m) * send, rel=1e-12)
        assert 2 * (p - 1) * send * (1.0 - 1e-12) <= added < closed
    else:
        forward, backward = embedding_stage(columns)
        overlap = min((p - 1) * forward, p * send) + min((p - 1) * backward, p * send)
        assert 0.0 < overlap < _embedding_wait(columns, p, v)
        assert closed == pytest.approx(2 * (p * v - 1) * send - overlap, rel=1e-12)
        assert added == pytest.approx(closed, rel=1e-9)
