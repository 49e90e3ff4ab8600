"""The pipeline makespan with uneven stages (docs/model.md §11.43; kernels/lm/bubble_last.py).

Hand-derived makespans for p = 2, 3 with uneven forward and backward times, then the exact scheduler
(lm/pipeline_program.py) against T = (m - 1) max_k t_k + sum_k t_k on random stage times: equal to 1e-9 when
the last stage is the busiest, and not in general (a busiest first stage waits less).
"""

import numpy as np
import pytest

from fastmodel.kernels.lm.bubble_last import last_rank_bubble_credit
from fastmodel.kernels.lm.first_rank import embedding_terms
from fastmodel.lm.pipeline_program import pipeline_program, pipeline_slots, schedule_pipeline
from fastmodel.registry.lm import COLUMN_INDEX, PIPELINE_SCHEDULES


def makespan(f, b, m, schedule="1f1b", v=1):
    p = np.shape(f)[-1]
    return schedule_pipeline(pipeline_program(p, m, schedule, v), pipeline_slots(f, b, p, v)).makespan


def sum_form(f, b, m):
    t = np.asarray(f) + np.asarray(b)
    return (m - 1) * t.max() + t.sum()


def _credit(row, last_mb=10.0, average_mb=7.0):
    """``last_rank_bubble_credit`` with the row's own embedding terms, as ``step.step_row`` hands them."""
    return last_rank_bubble_credit(row, last_mb, average_mb, embedding_terms(row))


def test_two_stages_last_busiest_by_hand():
    # p = 2, m = 3, f = (1, 2), b = (2, 3): t = (3, 5). Stage 0: F0 F1 B0 F2 B1 B2; stage 1: F0 B0 F1 B1 F2 B2.
    # S0.F0 0-1, S0.F1 1-2; S1.F0 1-3, S1.B0 3-6; S0.B0 6-8; S1.F1 6-8, S1.B1 8-11; S0.F2 8-9; S0.B1 11-13;
    # S1.F2 11-13, S1.B2 13-16; S0.B2 16-18. The last stage runs 3 x 5 from t = 1 without a wait, then stage 0's
    # last backward: 1 + 15 + 2 = 18 = (m - 1) 5 + (3 + 5).
    assert makespan([1.0, 2.0], [2.0, 3.0], 3) == 18.0 == sum_form([1.0, 2.0], [2.0, 3.0], 3)


def test_two_stages_first_busiest_by_hand():
    # p = 2, m = 3, f = (2, 1), b = (3, 1): t = (5, 2). Stage 0: F0 0-2, F1 2-4; S1.F0 2-3, S1.B0 3-4;
    # S0.B0 4-7; S1.F1 4-5, S1.B1 5-6; S0.F2 7-9; S0.B1 9-12; S1.F2 9-10, S1.B2 10-11; S0.B2 12-15.
    # Stage 0 never waits: 3 x 5 = 15, below (m - 1) 5 + 7 = 17 (the sum form is no makespan here).
    assert makespan([2.0, 1.0], [3.0, 1.0], 3) == 15.0
    assert sum_form([2.0, 1.0], [3.0, 1.0], 3) == 17.0


def test_three_stages_last_busiest_by_hand():
    # p = 3, m = 2, f = (1, 1, 2), b = (1, 2, 4): t = (2, 3, 6). The first forward reaches stage 2 at 2, which
    # runs F0 2-4, B0 4-8, F1 8-10, B1 10-14 (F1 arrived at 3); the last backward crosses stage 1 (14-16) and
    # stage 0 (16-17): 17 = (2 - 1) 6 + 11. GPipe: stage 2 runs F0 2-4, F1 4-6, B0 6-10, B1 10-14: 17 too.
    assert makespan([1.0, 1.0, 2.0], [1.0, 2.0, 4.0], 2) == 17.0 == sum_form([1.0, 1.0, 2.0], [1.0, 2.0, 4.0], 2)
    assert makespan([1.0, 1.0, 2.0], [1.0, 2.0, 4.0], 2, "gpipe") == 17.0


@pytest.mark.parametrize("seed", range(4))
def test_the_sum_form_is_the_exact_1f1b_makespan_when_the_last_stage_is_the_busiest(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        p, m = int(rng.integers(2, 9)), int(rng.integers(1, 17))
        f, b = rng.uniform(0.1, 2.0, p), rng.uniform(0.1, 3.0, p)
        k = int(np.argmax(f + b))  # any forward : backward ratio per stage, the busiest moved last
        f[[k, -1]], b[[k, -1]] = f[[-1, k]], b[[-1, k]]
        assert makespan(f, b, m) == pytest.approx(sum_form(f, b, m), rel=1e-9, abs=0.0)
        # GPipe: the same once the last stage also has the largest forward and the largest backward
        f[-1], b[-1] = f.max() + 0.1, b.max() + 0.1
        assert makespan(f, b, m, "gpipe") == pytest.approx(sum_form(f, b, m), rel=1e-9, abs=0.0)


@pytest.mark.parametrize("seed", range(3))
def test_interleaved_last_rank_busiest(seed):
    # v chunks alike on each rank, the head on the last chunk of the last rank: T = m t_last + sum_{k<p-1} t_k / v
    rng = np.random.default_rng(10 + seed)
    for _ in range(15):
        p, v = int(rng.integers(2, 6)), int(rng.integers(2, 5))
        m = p * int(rng.integers(1, 4))
        share, body = rng.uniform(0.2, 0.5), rng.uniform(0.5, 2.0, p)
        body[-1] = body.max()
        forward, backward = np.tile(share * body / v, (v, 1)), np.tile((1 - share) * body / v, (v, 1))
        head_f, head_b = rng.uniform(0.0, 1.0), rng.uniform(0.0, 2.0)
        forward[-1, -1] += head_f
        backward[-1, -1] += head_b
        t = body + np.eye(p)[-1] * (head_f + head_b)
        expected = m * t[-1] + (t.sum() - t[-1]) / v
        assert makespan(forward, backward, m, "interleaved", v) == pytest.approx(expected, rel=1e-9, abs=0.0)


def test_the_sum_form_is_not_exact_when_another_stage_is_the_busiest():
    # quantified negative result (§11.43): over random stages with the busiest first, the sum form is above the
    # exact makespan by up to tens of percent, and never below it on these
    rng = np.random.default_rng(7)
    gaps = []
    for _ in range(60):
        p, m = int(rng.integers(2, 7)), int(rng.integers(2, 13))
        t = rng.uniform(0.5, 2.0, p)
        t[0] = t.max() + 0.2
        f, b = 0.3 * t, 0.7 * t
        gaps.append(sum_form(f, b, m) / makespan(f, b, m) - 1.0)
    assert min(gaps) >= -1e-12 and max(gaps) > 0.05


def _row(pp, vp, schedule):
    row = np.zeros(len(COLUMN_INDEX))
    row[COLUMN_INDEX["pp"]], row[COLUMN_INDEX["vp"]] = pp, vp
    row[COLUMN_INDEX["pipeline_schedule"]] = PIPELINE_SCHEDULES[schedule]
    row[COLUMN_INDEX["last_stage_layers"]] = -1.0     # no explicit layout (the registry's default)
    return row


def test_the_credit_by_hand():
    # (t_last - t_avg) / v: p = 4, t_last = 10, t_avg = 7 -> 3 (1F1B), 1.5 (v = 2); the bubble (p - 1)/v t_avg
    # less it is (p t_avg - t_last)/v: 21 - 3 = 18 = 28 - 10
    assert _credit(_row(4, 1, "1f1b")) == 3.0
    assert _credit(_row(4, 2, "interleaved")) == 1.5
    assert _credit(_row(4, 1, "gpipe")) == 3.0
    for schedule in ("zb_h1", "dualpipe"):
        assert _credit(_row(4, 1, schedule)) == 0.0
    assert _credit(_row(1, 1, "1f1b")) == 0.0


def first_busiest(f0, b0, f, b, p, m):
    """1F1B with stage 0 (f0, b0) the busiest and the p - 1 others alike (f, b), m >= p: the larger of stage 0
    never idle but for the first and last micro-batch's trips down the others, and the path that crosses stage 0
    once and runs the other stages' m micro-batches (§11.43)."""
    t0, t = f0 + b0, f + b
    return max(m * t0 + (p - 1) * (max(0.0, t - f0) + max(0.0, t - b0)), t0 + (m + p - 2) * t)


def test_first_stage_busiest_by_hand():
    # p = 2, m = 3, f = (2, 1), b = (3, 1): 15 (traced above) = 3 x 5 + (0 + 0), above 5 + 3 x 2 = 11
    assert first_busiest(2.0, 3.0, 1.0, 1.0, 2, 3) == 15.0 == makespan([2.0, 1.0], [3.0, 1.0], 3)
    # p = 3, m = 3, f = (1, 1, 1), b = (2, 1.5, 1.5): t0 = 3, t = 2.5. Stage 0 runs F0, F1, F2 (0-3: m = w + 1);
    # micro-batch 0's trip down stages 1, 2 and back (F 1-2, 2-3; B 3-4.5, 4.5-6) ends at 6: B0 6-8; stage 1 runs
    # F2 6-7, B1 7-8.5: B0's successor B1 8.5-10.5; stage 1's B2 ends at 11: B2 11-13.
    # 13 = 3 x 3 + 2 ((2.5 - 1) + (2.5 - 2)) = 3 + 4 x 2.5. f = (2, 1, 1), b = (2, 1, 1): stage 0 never waits, 12.
    assert makespan([1.0, 1.0, 1.0], [2.0, 1.5, 1.5], 3) == 13.0 == first_busiest(1.0, 2.0, 1.0, 1.5, 3, 3)
    assert makespan([2.0, 1.0, 1.0], [2.0, 1.0, 1.0], 3) == 12.0 == first_busiest(2.0, 2.0, 1.0, 1.0, 3, 3)


def test_first_stage_busiest_exact_when_the_others_are_alike():
    rng = np.random.default_rng(21)
    for _ in range(80):
        p = int(rng.integers(2, 9))
        m = int(rng.integers(p, 20))
        f, b = rng.uniform(0.2, 1.0), rng.uniform(0.2, 2.0)
        f0, b0 = rng.uniform(0.1, 2.0), rng.uniform(0.1, 3.0)
        if f0 + b0 < f + b:
            continue
        forward, backward = np.r_[f0, np.full(p - 1, f)], np.r_[b0, np.full(p - 1, b)]
        assert makespan(forward, backward, m) == pytest.approx(first_busiest(f0, b0, f, b, p, m), rel=1e-9, abs=0.0)


def test_the_credit_only_where_the_ranks_before_the_last_are_alike():
    # §11.43 domain: interleaved and GPipe lose the credit with BF16 first layers (rank 0's chunk 0 heavier) or
    # an explicit layout; GPipe also with the loss in the split (the last rank a layer short); 1F1B keeps it
    fp8 = {"precision": 1.0}
    cases = [("1f1b", 1, {}, 3.0), ("interleaved", 2, {}, 1.5), ("gpipe", 1, {}, 3.0),
             ("interleaved", 2, {**fp8, "bf16_layers_start": 1}, 0.0), ("gpipe", 1, {**fp8, "bf16_layers_start": 1}, 0.0),
             ("1f1b", 1, {**fp8, "bf16_layers_start": 1}, 3.0), ("interleaved", 2, {**fp8, "bf16_layers_end": 1}, 1.5),
             ("interleaved", 2, {"last_stage_layers": 4}, 0.0), ("gpipe", 1, {"last_stage_layers": 4}, 0.0),
             ("1f1b", 1, {"last_stage_layers": 4}, 3.0),
             ("gpipe", 1, {"embedding_loss_in_split": 1}, 0.0), ("interleaved", 2, {"embedding_loss_in_split": 1}, 1.5)]
    for schedule, v, columns, credit in cases:
        row = _row(4, v, schedule)
        row[COLUMN_INDEX["layers"]] = 16.0
        for name, value in columns.items():
            row[COLUMN_INDEX[name]] = value
        assert _credit(row) == credit, (schedule, columns)


def test_bf16_first_layers_interleaved_exact_bubble_above_both_forms():
    # the plan shape of §11.43's domain note (pp 4, vp 5, m 16, four layers a chunk): rank 0's chunk 0 holds a
    # BF16 layer (x = 0.25 a layer more), the last rank's last chunk the head (h = 1) and a BF16 layer. By hand:
    # t = (20.25, 20, 20, 21.25) layer-units, t_avg = 20.375; average form (p - 1)/v t_avg = 12.225, credit form
    # (p t_avg - t_last)/v = 12.05. The exact schedule waits on rank 0's heavier chunk each round: above both.
    p, v, m, x, h = 4, 5, 16, 0.25, 1.0
    forward, backward = np.full((v, p), 4.0 / 3.0), np.full((v, p), 8.0 / 3.0)
    forward[0, 0] += x / 3.0
    backward[0, 0] += 2.0 * x / 3.0
    forward[-1, -1] += (x + h) / 3.0
    backward[-1, -1] += 2.0 * (x + h) / 3.0
    t = (forward + backward).sum(axis=0)
    assert t.tolist() == pytest.approx([20.25, 20.0, 20.0, 21.25])
    average, credited = (p - 1) / v * t.mean(), (p * t.mean() - t[-1]) / v
    assert (average, credited) == pytest.approx((12.225, 12.05))
    bubble = makespan(forward, backward, m, "interleaved", v) - m * t[-1]
    assert bubble > average > credited


@pytest.mark.parametrize("seed", range(2))
def test_the_first_ranks_embedding_waits_p_times_interleaved_once_in_1f1b(seed):
    # docs/model.md §11.44 item 1d: the embedding's e = e_F + e_B on rank 0's first chunk, the ranks' chunks
    # otherwise alike, the head on the last: interleaved, rank 0 runs its group of p chunk-0 forwards before the
    # chunk-1 forward the last rank waits for, and p chunk-0 backwards after its last chunk-1 backward:
    # T = m t_last + sum_{k<p-1} body_k / v + p e (the credited form's e / v and embedding_warmup's (p - 1/v) e);
    # 1F1B (v = 1): the sum form, e once
    rng = np.random.default_rng(30 + seed)
    for _ in range(15):
        p, v = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        m = p * int(rng.integers(1, 4))
        share, body = rng.uniform(0.2, 0.5), np.full(p, rng.uniform(0.5, 2.0))
        forward, backward = np.tile(share * body / v, (v, 1)), np.tile((1 - share) * body / v, (v, 1))
        forward[-1, -1] += rng.uniform(0.05, 1.0)
        backward[-1, -1] += rng.uniform(0.1, 2.0)
        e_f, e_b = rng.uniform(0.0, 0.02), rng.uniform(0.0, 0.02)
        forward[0, 0] += e_f
        backward[0, 0] += e_b
        t = (forward + backward).sum(axis=0)
        wait = (p if v > 1 else 1) * (e_f + e_b)
        expected = m * t[-1] + (p - 1) * body[0] / v + wait
        schedule = "interleaved" if v > 1 else "1f1b"
        assert makespan(forward, backward, m, schedule, v) == pytest.approx(expected, rel=1e-9, abs=0.0)
