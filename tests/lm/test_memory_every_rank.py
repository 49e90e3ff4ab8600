"""The peak over every pipeline rank (issue 23 "peaks per rank"; docs/model_memory.md "Every pipeline rank (issue 23)").

``memory_row`` (kernels/lm/memory.py) reports the largest peak over the ranks it evaluates: every rank but a middle
one that holds the same layers as the rank before it (outside ZB-H1). The hand derivations below fix which rank
is the worst in three cases (the DeepSeek-V2 zero-bubble record, a uniform 1F1B split, an explicit layout), and
the random plans check the skip against every rank evaluated one by one, and the per-rank report
(``fastmodel.lm.memory_stages``, the memory timeline's peak moment per rank) against the kernel's rank peaks.
"""

import numpy as np
import pytest

from fastmodel.kernels.lm.bf16_layers import bf16_stage_share
from fastmodel.kernels.lm.layout import (
    C_PP,
    M_ACTIVATIONS,
    M_BUFFERS,
    M_GRADIENTS,
    M_OPTIMIZER,
    M_WEIGHTS,
    N_MEMORY_KINDS,
)
from fastmodel.kernels.lm.memory import _with_bf16_layers, memory_row, peak_terms
from fastmodel.kernels.lm.memory_peak import stage_peak
from fastmodel.lm.memory_stages import stage_peaks
from fastmodel.lm.records import lower_record
from fastmodel.lm.rules import plan_status
from fastmodel.lm.table import row
from tests.data_records import record_by_id

GIB = 2.0**30
ALLOCATED = (M_WEIGHTS, M_GRADIENTS, M_OPTIMIZER, M_ACTIVATIONS, M_BUFFERS)
#: Megatron 2022 GPT layer (2-matrix GeLU MLP, dropout, unfused attention), no overhead, no allocator cache
GPT = dict(hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512, gated_mlp=0,
           tied_embeddings=0, dropout=1, flash_attention=0, dp=1, sharding="ddp", grad_reduce_bytes=4,
           cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0, nccl_p2p_channels_per_peer=0,
           allocator_cache_fraction=0)


def rank_totals(columns) -> list[float]:
    """Allocated bytes at every rank's peak, ranks 0 .. pp - 1 one by one (no skip): ``stage_peak`` with the
    kernel's rank-independent terms, and the BF16-layer mix where a rank holds BF16 layers, as ``memory_row``."""
    d, m, resident, working, gather, comm, grads, logits = peak_terms(columns)
    totals = []
    for stage in range(int(columns[C_PP])):
        kinds = stage_peak(columns, float(stage), d, m, working, gather, comm, grads, logits, resident)
        share = bf16_stage_share(columns, float(stage))
        if share > 0.0:
            kinds = _with_bf16_layers(columns, float(stage), share)
        totals.append(float(sum(kinds)))
    return totals


def reported(columns) -> tuple[float, int]:
    """(``memory_row``'s allocated bytes, the rank it names)."""
    out = np.full(N_MEMORY_KINDS, np.nan)
    stage = memory_row(columns, out)
    return float(sum(out[k] for k in ALLOCATED)), int(stage)


# --- by hand ----------------------------------------------------------------------------------------------------------

def test_deepseek_v2_zero_bubble_rank_1_above_rank_0_by_hand():
    """DeepSeek-V2 (runs_moe_public.jsonl; arXiv 2405.04434 sec. 3.1.2-3.1.3): 60 layers (the first dense) on PP 16
    zero-bubble (ZB-H1), EP 8, ZeRO-1 over DP 128, no TP, BF16, 4,096 tokens a micro-batch, 72 micro-batches.
    Rank 0 holds the embedding, the dense layer and 3 MoE layers; rank 1 4 MoE layers (the busiest count 4).

    Parameters: MLA q_down h d_c' + kv_down h (d_c + d_h^R) + q_up d_c' a (d_nope + d_rope) + kv_up d_c a (d_nope +
    d_v) + out a d_v h = 149,225,472, norms 2 h + d_c' + d_c = 12,288; dense MLP 3 h f = 188,743,680; MoE: shared
    experts 3 h 2 f_e = 47,185,920, router h E = 819,200, routed 160 / 8 = 20 experts x 3 h f_e = 471,859,200;
    embedding V h = 524,288,000. States: 2 + 4 B (BF16 weights, FP32 gradients unsharded under ZeRO-1), AdamW
    12 B over DP 128 (experts over 128 / 8 = 16).

    Activations per token (kept, 16-bit; core attention recomputed, so its Q, K, V are kept and no softmax
    statistic): attention 4 h + 2 (d_c' + d_c + d_h^R) + 2 a (2 (d_nope + d_rope) + d_v) + 2 a d_v = 188,544;
    dense MLP 4 h + 6 f = 94,208; MoE block 4 h + 8 E (router logits and scores FP32) + k (4 h + 6 f_e) (k = 6
    routed rows: input, output, SwiGLU input, fc2 input) + 6 (2 f_e) (shared) = 218,368. ZB-H1 (docs/model_memory.md
    "ZB-H1"): rank 0 holds p = 16 micro-batches, rank 1 p - 1 = 15 and one deferred weight gradient per layer,
    M_W = attention (a d_v 2 + 2 h) + (2 h + 2 (d_c' + d_c + d_h^R)) + (2 d_c' + 2 a (d_nope + d_rope)) + (2 d_c +
    2 a (d_nope + d_v)) + routed k (2 h + 4 f_e + 2 f_e + 2 h) + shared (2 h + 4 (2 f_e) + 2 (2 f_e) + 2 h) =
    393,344. Both at the backward's start, beside the same buffers (EP and PP sends, activation gradients).
    Rank 1 is above rank 0 (the issue's "known gap"); the reported peak is the largest of every rank."""
    h, a, dq, dc, dr, nope, dv, f, fe, e, k, vocab, t = 5120, 128, 1536, 512, 64, 128, 128, 12288, 1536, 160, 6, \
        102400, 4096
    columns = lower_record(record_by_id("deepseek-v2-pretrain-h800-172.8k-gpuh-per-T")).columns
    mla = h * dq + h * (dc + dr) + dq * a * (nope + dr) + dc * a * (nope + dv) + a * dv * h
    norms = 2 * h + dq + dc
    assert mla == 149_225_472
    moe_non_expert = mla + norms + 3 * h * 2 * fe + h * e
    expert = 20 * 3 * h * fe
    dense = mla + norms + 3 * h * f
    non_expert = {0: vocab * h + dense + 3 * moe_non_expert, 1: 4 * moe_non_expert}
    experts = {0: 3 * expert, 1: 4 * expert}
    states = {r: 6 * (non_expert[r] + experts[r]) + 12 * non_expert[r] / 128 + 12 * experts[r] / 16 for r in (0, 1)}
    attention = 4 * h + 2 * (dq + dc + dr) + 2 * a * (2 * (nope + dr) + dv) + 2 * a * dv
    dense_layer = attention + 4 * h + 6 * f
    moe_layer = attention + 4 * h + 8 * e + k * (4 * h + 6 * fe) + 6 * 2 * fe
    assert (attention, dense_layer, moe_layer) == (188_544, 282_752, 406_912)
    pending = (2 * a * dv + 2 * h) + (2 * h + 2 * (dq + dc + dr)) + (2 * dq + 2 * a * (nope + dr)) \
        + (2 * dc + 2 * a * (nope + dv)) + k * (2 * h + 6 * fe + 2 * h) + (2 * h + 4 * 2 * fe + 2 * 2 * fe + 2 * h)
    assert pending == 393_344
    held = {0: 16 * (dense_layer + 3 * moe_layer) * t, 1: (15 * 4 * moe_layer + 4 * pending) * t}
    totals = rank_totals(columns)
    buffers = totals[0] - states[0] - held[0]
    assert buffers == pytest.approx(4 * k * t * h + 4 * t * h + 2 * t * h + 4 * t * f, rel=1e-9)   # EP, PP, grads
    assert totals[1] == pytest.approx(states[1] + held[1] + buffers, rel=1e-12)
    assert (totals[0] / GIB, totals[1] / GIB) == pytest.approx((109.690, 116.253), abs=1e-3)
    # without the deferred weight gradients (15 micro-batches of 4 MoE layers), the figures
    assert (states[1] + 60 * moe_layer * t + buffers) / GIB == pytest.approx(110.25, abs=0.005)
    assert totals[1] > totals[0]
    best, stage = reported(columns)
    assert best == pytest.approx(max(totals), rel=1e-12) and totals[stage] == max(totals) and stage == 15


def test_uniform_1f1b_rank_0_is_the_worst_by_hand():
    """pp = 4, 1F1B, 8 layers (2 a rank), 8 micro-batches of b = 2, T = s b = 1,024 tokens. At its backward's start
    rank r holds 4 - r micro-batches of 2 layers, T h (34 + 5 a s / h) each (Korthikanti et al. 2022 Table 2), rank 0
    also the embedding's dropout mask T h per micro-batch; every rank 18 B per parameter (BF16 weights, FP32
    gradients, Adam 12 B), 2 layers of P = 4 h^2 + 2 h f + 2 h, rank 0 the embedding V h, rank 3 the LM head V h and
    the final norm h. Buffers at the backward: 2 x 2 T h sent and received, activation gradients 2 T h + 2 T f. Rank 3
    holds one micro-batch: at the loss with the final-norm and LM-head inputs 4 T h, the logits workspace 6 T V and
    the sends, or at its backward's start without the head inputs (released by the head's backward) beside the
    backward's buffers; with V = 1,000 the second, larger by 2 T f - 6 T V - 2 T h = 147,456 B. Rank 0 is the worst."""
    s, b, h, a, f, v = 512, 2, 1024, 16, 4096, 1000
    t = s * b
    layer = t * h * (34 + 5 * a * s / h)
    p = 4 * h * h + 2 * h * f + 2 * h
    buffers = 4 * t * h + 2 * t * h + 2 * t * f
    by_hand = [18 * (2 * p + v * h) + 4 * (2 * layer + t * h) + buffers,
               18 * 2 * p + 3 * 2 * layer + buffers,
               18 * 2 * p + 2 * 2 * layer + buffers,
               18 * (2 * p + v * h + h) + 2 * layer + max(4 * t * h + 6 * t * v + 4 * t * h, buffers)]
    columns = row(**GPT, layers=8, pp=4, micro_batch=b, global_batch=16)
    assert rank_totals(columns) == pytest.approx(by_hand, rel=1e-12)
    best, stage = reported(columns)
    assert stage == 0 and best == pytest.approx(by_hand[0], rel=1e-12)
    assert by_hand[0] == max(by_hand)


def test_explicit_layout_middle_rank_is_the_worst_by_hand():
    """An explicit layout (``last_stage_layers`` = 1: Megatron-Core ``pipeline_model_parallel_layout`` with one layer
    on the last rank) of 10 layers on pp = 4 under ZB-H1 with full recompute: ranks 0-2 hold ceil(9 / 3) = 3 layers,
    rank 3 one. Before an input-gradient pass rank r holds 4 - r micro-batches not through it, each keeping its
    layers' checkpoints 2 T h, and r deferred weight gradients, M_W = 32 T h per layer (Qi et al. 2024 Table 1),
    plus the recomputed layer's working set T h (34 + 5 a s / h) - 2 T h; rank 0 the dropout masks T h per
    micro-batch and the embedding's states 18 V h. So rank r (r < 3) = 18 x 3 P + (4 - r) 3 x 2 T h + r 3 x 32 T h +
    working + buffers, and rank 2 (2 checkpointed, 2 pending) is the worst, above rank 0 by 2 x 3 x 32 T h - 2 x 3
    x 2 T h - 4 T h - 18 V h, and above rank 1 by 3 x (32 - 2) T h; rank 3 holds one layer."""
    s, b, h, a, f, v = 512, 2, 1024, 16, 4096, 1000
    t = s * b
    p = 4 * h * h + 2 * h * f + 2 * h
    working = t * h * (34 + 5 * a * s / h) - 2 * t * h
    buffers = 4 * t * h + 2 * t * h + 2 * t * f
    by_hand = [18 * 3 * p + 18 * v * h + 4 * 3 * 2 * t * h + 4 * t * h + working + buffers]
    by_hand += [18 * 3 * p + (4 - r) * 3 * 2 * t * h + r * 3 * 32 * t * h + working + buffers for r in (1, 2)]
    columns = row(**GPT, layers=10, pp=4, micro_batch=b, global_batch=16, pipeline_schedule="zb_h1",
                  recompute="full", last_stage_layers=1, n_gpus=4)
    assert int(plan_status(columns[:, None])[0]) == 0
    totals = rank_totals(columns)
    assert totals[:3] == pytest.approx(by_hand, rel=1e-12)
    assert totals[2] - totals[0] == pytest.approx(2 * 3 * 32 * t * h - 2 * 3 * 2 * t * h - 4 * t * h - 18 * v * h,
                                                  rel=1e-12)
    assert totals[2] - totals[1] == pytest.approx(3 * 30 * t * h, rel=1e-12)
    best, stage = reported(columns)
    assert stage == 2 and best == pytest.approx(by_hand[2], rel=1e-12) and totals[3] < best


# --- random plans -----------------------------------------------------------------------------------------------------

def random_plan(rng) -> dict:
    """A random plan of every schedule: pp 2-8, dense or MoE (leading dense layers, MTP), the embedding and loss in
    the split, uneven stages, explicit layouts, CUDA-graph buffers, recompute, FP8 with BF16 end layers, offload,
    FSDP; shaped to pass the rule table most of the time (the caller keeps only legal plans)."""
    pp = int(rng.integers(2, 9))
    schedule = str(rng.choice(["1f1b", "interleaved", "gpipe", "zb_h1", "dualpipe"]))
    v = int(rng.integers(2, 4)) if schedule == "interleaved" else 1
    per = int(rng.integers(1, 5))
    values = dict(GPT, pp=pp, vp=v, pipeline_schedule=schedule, micro_batch=1, layers=pp * v * per)
    if rng.random() < 0.3:
        values["embedding_loss_in_split"] = 1
        values["layers"] = max(pp * v * per - 2, pp * v)
    elif rng.random() < 0.3:
        values["last_stage_layers"] = int(rng.integers(0, per * v + 3))
    if rng.random() < 0.3:
        values["uneven_stages"] = 1
        values["layers"] = int(values["layers"] - rng.integers(0, pp))
    if rng.random() < 0.5:
        values.update(moe_experts=8, moe_topk=2, moe_ffn=int(rng.choice([256, 2048, 8192])), ep=2, dp=2,
                      dense_layers=int(rng.integers(0, values["layers"])), mtp_layers=int(rng.integers(0, 2)),
                      gated_mlp=int(rng.integers(0, 2)), moe_layer_freq=int(rng.choice([1, 1, 2])))
    if rng.random() < 0.2 and schedule != "dualpipe":
        values["cuda_graph_microbatch_buffers"] = 1
    if rng.random() < 0.3:
        values["recompute"] = str(rng.choice(["full", "selective"]))
    if rng.random() < 0.2 and schedule != "dualpipe":
        values.update(precision="fp8", fp8_recipe="blockwise", bf16_layers_start=int(rng.integers(0, 2)),
                      bf16_layers_end=int(rng.integers(0, 2)))
    if rng.random() < 0.15:
        values["activation_offload"] = float(rng.choice([0.5, 1.0]))
    if rng.random() < 0.15:
        values.update(sharding="fsdp", dp=4)
    m = int(rng.integers(1, 4 * pp + 1))
    if schedule in ("interleaved", "zb_h1"):
        m = max(m, pp)
    if schedule == "dualpipe":
        values["pp"] = pp = 2 * max(pp // 2, 1)
        m = max(m + m % 2, 2 * pp)
        values["layers"] = pp * per
    values.update(global_batch=m * values["dp"], n_gpus=pp * values["dp"])
    return values


def legal_plans(seed: int, n: int):
    """(values, columns) of the legal ones among ``n`` random plans."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        values = random_plan(rng)
        columns = row(**values)
        if int(plan_status(columns[:, None])[0]) == 0:
            yield values, columns


def test_reported_peak_is_the_largest_of_every_rank_on_random_plans():
    """The skip (a middle rank holding the same layers as the rank before it holds no more micro-batches in flight,
    so it is never the only worst rank) loses nothing: on 400 random plans ``memory_row``'s allocated bytes are the
    largest of every rank's peak, evaluated one by one, and the rank it names holds them."""
    checked = 0
    for values, columns in legal_plans(23, 400):
        totals = rank_totals(columns)
        best, stage = reported(columns)
        assert best == pytest.approx(max(totals), rel=1e-12), values
        assert totals[stage] == pytest.approx(max(totals), rel=1e-12), values
        checked += 1
    assert checked >= 300


def test_the_per_rank_report_is_the_kernel_s_rank_peaks_on_random_plans():
    """The report (``memory_stages.stage_peaks``: each rank's memory-timeline peak) against the kernel's peak of every
    rank, on random legal plans: equal (10^-9) on every rank, and the same worst rank (``memory_peak_stage``, a tie
    keeping the earlier in the order 0, p - 1, 1, ..., p - 2), an explicit layout's last rank under the interleaved
    schedule and DualPipe's symmetric ranks included. Left out: the interleaved schedule with micro-batches not a
    multiple of pp, where both walk groups of pp micro-batches per chunk and Megatron-Core runs the last, smaller
    group chunk by chunk (docs/model_memory.md "Every pipeline rank (issue 23)": not modelled)."""
    checked = explicit = mirrored = 0
    for values, columns in legal_plans(5, 200):
        pp, m = values["pp"], values["global_batch"] // values["dp"]
        interleaved = values["pipeline_schedule"] == "interleaved"
        if interleaved and m % pp:
            continue
        totals = np.array(rank_totals(columns))
        peaks = stage_peaks(columns)
        np.testing.assert_allclose(peaks.allocated, totals, rtol=1e-9, err_msg=str(values))
        assert peaks.peak_stage == reported(columns)[1], values
        checked += 1
        explicit += interleaved and values.get("last_stage_layers", -1) >= 0
        mirrored += values["pipeline_schedule"] == "dualpipe"
    assert checked >= 120 and explicit >= 2 and mirrored >= 20


# --- what the every-rank evaluation changed ---------------------------------------------------------------------------

def test_explicit_layout_last_rank_under_interleaving_by_hand():
    """pp = 2, v = 3, 11 layers with the last rank's layout 7 (``last_stage_layers``; the first rank 4): the last
    rank spreads 7 layers as 3, 2, 2 over its chunks (``layout_chunk_layers``), b = T h (34 + 5 a s / h) a layer, the
    last chunk also the final-norm and head inputs 4 T h; 4 micro-batches (``steady`` = m v - W = 12 - 4 = 8
    backwards after the W = (v - 1) p = 4 warm-up forwards). Walking the order (forward k runs chunk (k // p) mod v,
    backward k chunk v - 1 - (k // p) mod v): before backwards 0, 1 it holds chunks (2, 2, 1) -- 12 b + 4 T h, the
    loss's moment, less the head inputs (released) at the backward; before backward 2 (3, 2, 0) = 13 b; before 3
    (4, 1, 0) = 14 b; before 4 (4, 1, 0) = 14 b; before 5 (3, 2, 0). So 12 b + 4 T h at the loss and 14 b at a
    backward, where taking every chunk but the loss's at chunk 0's 3 layers gave 14 b + 4 T h and 15 b."""
    from fastmodel.kernels.lm.memory_chunks import held_bytes
    from fastmodel.kernels.lm.memory_peak import backward_passed_head_bytes

    s, b, h, a = 512, 1, 1024, 16
    t = s * b
    layer = t * h * (34 + 5 * a * s / h)
    columns = row(**GPT, layers=11, pp=2, vp=3, pipeline_schedule="interleaved", uneven_stages=1,
                  last_stage_layers=7, micro_batch=b, global_batch=4, n_gpus=2)
    assert int(plan_status(columns[:, None])[0]) == 0
    d, m = peak_terms(columns)[:2]
    assert d == layer and backward_passed_head_bytes(columns, 1.0) == 4 * t * h
    at_loss, at_backward, _ = held_bytes(columns, 1.0, d, m, 4 * t * h)
    assert (at_loss, at_backward) == pytest.approx((12 * layer + 4 * t * h, 14 * layer), rel=1e-12)
    assert stage_peaks(columns).allocated[1] == pytest.approx(rank_totals(columns)[1], rel=1e-12)


def test_dualpipe_rank_holds_more_mirror_micro_batches_than_the_rank_before():
    """DualPipe (pp = 8, 16 layers, 2 a stage; the first 6 dense, MoE layers after): rank r holds model stage r and
    its mirror 7 - r, ``p - r`` micro-batches of the first and ``r + 1`` of the second (DeepSeek-V3 report Table 2;
    ``dualpipe_direction_in_flight``). Ranks 1 and 2 hold the same layers (2 dense, mirror 2 MoE), so rank 2 - rank 1
    = 2 (b_moe - b_dense) > 0 (one dense micro-batch fewer, one MoE one more; b_dense = T h (34 + 5 a s / h)): a rank
    that holds the same layers as the one before it can hold more, so no rank is skipped under DualPipe. Ranks r and
    7 - r hold the same stages and counts swapped, so the same bytes, and a tie names the earlier: on a plan whose
    worst ranks are 3 and 4 the kernel names 3, as the per-rank report does."""
    s, h, a = 512, 1024, 16
    layer = s * h * (34 + 5 * a * s / h)
    moe = dict(moe_experts=8, moe_topk=2, ep=2, pipeline_schedule="dualpipe", micro_batch=1, n_gpus=16)
    columns = row(**{**GPT, "dp": 2}, layers=16, pp=8, global_batch=32, moe_ffn=8192, dense_layers=6, **moe)
    d, m = peak_terms(columns)[:2]
    totals = rank_totals(columns)
    assert d == layer and m > d
    assert totals[2] - totals[1] == pytest.approx(2 * (m - d), rel=1e-9)
    assert totals[:4] == pytest.approx(totals[:3:-1], rel=1e-12)
    tied = row(**{**GPT, "dp": 2}, layers=16, pp=8, global_batch=40, moe_ffn=2048, dense_layers=9, mtp_layers=1,
               embedding_loss_in_split=1, **moe)
    totals = rank_totals(tied)
    assert totals[3] == pytest.approx(totals[4], rel=1e-12) and max(totals) == pytest.approx(totals[3], rel=1e-12)
    assert reported(tied)[1] == 3 == stage_peaks(tied).peak_stage


def test_dualpipe_mirror_stage_keeps_its_adafactor_factors():
    """Adafactor's factored second moment, 4 (rows + cols) bytes per matrix (Shazeer & Stern 2018 sec. 3): a GPT
    layer's four h x a d attention matrices and two h x f MLP matrices, 4 (4 (h + a d) + 2 (h + f)) = 73,728 B. Under
    DualPipe rank 1 holds stage 1 and its mirror stage 2 (pp = 4, 2 layers each): 4 layers' factors, 294,912 B,
    beside the per-parameter states of both stages (DDP)."""
    from fastmodel.kernels.lm.memory_optimizer import optimizer_bytes, optimizer_bytes_per_param
    from fastmodel.kernels.lm.memory_states import stage_params

    h, a, d, f = 1024, 16, 64, 4096
    columns = row(**GPT, layers=8, pp=4, micro_batch=1, global_batch=16, pipeline_schedule="dualpipe",
                  optimizer="adafactor", n_gpus=4)
    assert int(plan_status(columns[:, None])[0]) == 0
    non_expert, expert = stage_params(columns, 1.0)
    factors = optimizer_bytes(columns, 1.0, non_expert, expert) - optimizer_bytes_per_param(columns) * non_expert
    assert 4 * (4 * (h + a * d) + 2 * (h + f)) == 73_728
    assert factors == pytest.approx(4 * 73_728, rel=1e-12)
