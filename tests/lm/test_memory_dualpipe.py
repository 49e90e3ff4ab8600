"""DualPipe's activations per rank by direction (kernels/lm/pipeline.py ``dualpipe_direction_in_flight``,
kernels/lm/memory_activations.py ``rank_microbatch_bytes``), derived by hand.

Rank ``s`` holds model stage ``s`` (direction 0) and its mirror ``p - 1 - s`` (direction 1); at its peak it holds
``p + 1`` micro-batches (DeepSeek-V3 report Table 2), ``p - s`` of its own stage and ``s + 1`` of the mirror. The
first and last ranks' two stages differ (the embedding, the head), so rank 0 holds ``p`` chunks of stage 0 and
one of stage ``p - 1``, not ``p + 1`` of the larger one; a middle rank holds ``p + 1`` chunks of middle stages.
"""

import pytest

from fastmodel.kernels.lm.layout import M_ACTIVATIONS
from fastmodel.kernels.lm.pipeline_orders import dualpipe_order
from fastmodel.lm.memory_timeline import memory_timeline
from fastmodel.lm.table import row
from tests.lm.test_memory_peak import GPT, peak


def test_the_schedule_holds_p_minus_s_own_and_s_plus_1_mirror_micro_batches_at_its_peak():
    """Walk DualPipe's op order (p = 8, m = 20): a forward adds a micro-batch of its direction, a backward (B) or
    weight-gradient pass (W) frees it; every moment holding p + 1 holds (p - s, s + 1)."""
    p, m = 8, 20
    for s in range(p):
        held, at_peak = [0, 0], set()
        for kind, _, direction in dualpipe_order(p, m, s):
            held[direction] += 1 if kind in ("F", "P") else (-1 if kind in ("B", "W") else 0)
            assert sum(held) <= p + 1
            if sum(held) == p + 1:
                at_peak.add(tuple(held))
        assert at_peak == {(p - s, s + 1)}, s


def test_end_ranks_hold_their_own_stage_p_times_and_the_mirror_once():
    """Megatron 2022 GPT (dropout, unfused attention, no recompute), 8 layers on p = 4, T = 2 x 512 tokens, h = 1024,
    16 heads: a layer keeps s b h (34 + 5 a s / h); stage 0 adds the embedding's dropout mask T h, stage 3 the final
    norm and head inputs (2 + 2) T h. Rank 0: 4 (2 layer + T h) + (2 layer + 4 T h); rank 1: 5 x 2 layer."""
    T, h, a, s = 2 * 512, 1024, 16, 512
    layer = T * h * (34 + 5 * a * s / h)
    plan = dict(layers=8, pp=4, micro_batch=2, global_batch=16, pipeline_schedule="dualpipe", recompute="none",
                sequence_parallel=0)
    timeline = memory_timeline(row(**GPT, **plan))
    held = [stage.values[:, M_ACTIVATIONS].max() for stage in timeline.stages]
    assert held[0] == pytest.approx(4 * (2 * layer + T * h) + (2 * layer + 4 * T * h), rel=1e-12)
    # rank 3: one of its own stage (the head's) and four of the mirror, stage 0: the same bytes as rank 0
    assert held[3] == pytest.approx(held[0], rel=1e-12)
    assert held[1] == pytest.approx(5 * 2 * layer, rel=1e-12)
    # the kernel's peak is the worst of ranks 0, p - 1 and 1 (an end rank here); before, rank 3 counted p + 1
    # chunks of its own stage, 5 (2 layer + 4 T h)
    out, stage = peak(**GPT, **plan)
    assert out[M_ACTIVATIONS] == pytest.approx(held[0], rel=1e-12) and stage in (0, 3)
    assert out[M_ACTIVATIONS] < 5 * (2 * layer + 4 * T * h)
