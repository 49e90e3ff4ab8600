"""NeMo's FP32 embedding gradients under Apex's distributed Adam (``embedding_fp32_grads``, docs/model.md §11.54),
by hand on the MLPerf GPT-3 n1344 ranks: v3.1 (``allreduce``, NeMo r1.20) TP 4, PP 8, dp 336; v4.0 (``sharded``,
NeMo 2.0) TP 4, PP 6, dp 448; the word embedding V h / t = 50,257 x 12,288 / 4 = 154,389,504 elements a rank, H100
records (NVLink 450 GB/s x 0.80, NDR 50 GB/s x 0.85, 3.4 / 9.6 us a Simple ring hop, NCCL's LL128 at 1.9 / 4.0 us
and 0.92 of the bandwidth plus 10 us, HBM 3.35 TB/s x 0.80)."""

from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.embedding_fp32 import fp32_embedding_params, fp32_embedding_step, shared_grad_bytes
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
E = 50257 * 12288 / 4           # 154,389,504
HBM = 3.35e12 * 0.80            # 2.68 TB/s
BUS_DP = min(450e9 * 0.80, 2 * 50e9 * 0.85)     # dp 336 at stride 4: 2 ranks a node, one NIC each -> 85 GB/s
# the FP32 all-reduce over dp 336 (168 nodes of 2): NCCL's tree at Simple beats the rings here (docs/model.md
# §11.5): 2 x (1 NVLink hop + log2i(168) = 7 network hops) at the Tree/Simple hop, 28 us, 2 x 4 E at 0.92 of the bus
AR32 = 2 * (1 * 28e-6 + 7 * 28e-6) + 2 * 4 * E / (0.92 * BUS_DP)       # 16.242 ms
NORM = 4 * E / HBM                                                      # 0.2304 ms
# the tied all-reduce of 2 ranks 7 x 4 x 336 devices apart (one NIC, 42.5 GB/s): the Simple ring, 8.4 us + 2 passes
# x 2 network steps of 9.6 us
RING2 = 8.4e-6 + 2 * 2 * 9.6e-6
TIED32, TIED16 = 4 * E / 42.5e9 + RING2, 2 * E / 42.5e9 + RING2       # 14.578 / 7.312 ms
STEP = 98 * E / HBM             # AdamW foreach 80 + scale 8 + copy 6 + zeroing 4 B: 5.646 ms
# v4.0, dp 448 (2 ranks a node, 224 nodes): the FP32 reduce-scatter and the 16-bit all-gather run LL128, whose
# 10 us + 224 x 1.9 + 224 x 4.0 us = 1.3316 ms of ring latency beats Simple's 2.92 ms at these sizes
RING128 = 10e-6 + 224 * 1.9e-6 + 224 * 4.0e-6
RS32 = RING128 + 447 / 448 * 4 * E / (0.92 * BUS_DP)                   # 9.211 ms
AG16 = RING128 + 447 / 448 * 2 * E / (0.92 * BUS_DP)                   # 5.271 ms
SHARDED = 30 * E / 448 / HBM                                            # Apex's sharded step: 3.9 us


def n1344(flag=True, run="mlperf-v31-gpt3-175b-nvidia-n1344", code=1.0):
    record = next(r for r in read_records(RUNS) if r.id == run)
    columns = record.columns.copy()
    assert columns[C["embedding_fp32_grads"]] == code       # the record states it (NeMo bd0b818 / b2eccd27)
    columns[C["embedding_fp32_grads"]] = code if flag else 0.0
    # the hand figures price the word embedding alone: the records' learned position table (NeMo's
    # learned_absolute) is set back to none here and priced on its own in test_which_parameters_...
    assert columns[C["learned_positions"]] == 1.0
    columns[C["learned_positions"]] = 0.0
    return columns


def v40(flag=True):
    return n1344(flag, "mlperf-v40-gpt3-175b-eos-dfw_n1344_ngc24.04_nemo", 2.0)


def test_the_hand_figures_match_the_record():
    r = n1344()
    assert (r[C["tp"]], r[C["pp"]], r[C["dp"]], r[C["vocab"]], r[C["hidden"]]) == (4, 8, 336, 50257, 12288)
    assert (r[C["intra_bw"]], r[C["inter_bw"]], r[C["hbm_bw"]]) == (450e9, 50e9, 3.35e12)
    assert (AR32, NORM, TIED32 - TIED16, STEP) == pytest.approx((16.242e-3, 0.2304e-3, 7.265e-3, 5.646e-3), abs=1e-6)
    r = v40()
    assert (r[C["tp"]], r[C["pp"]], r[C["dp"]], r[C["inter_bw"]]) == (4, 6, 448, 50e9)
    assert (RS32, AG16) == pytest.approx((9.211e-3, 5.271e-3), abs=1e-6)


def test_the_tied_all_reduce_moves_the_fp32_main_gradient():
    assert shared_grad_bytes(n1344()) == 4.0 and shared_grad_bytes(n1344(False)) == 2.0    # grad_reduce_dtype bf16


def test_which_parameters_the_fp32_optimizer_holds_by_hand():
    r = n1344()
    assert fp32_embedding_params(r, False, E, E) == (E, E)          # first stage: the word embedding
    assert fp32_embedding_params(r, True, E, E) == (E, E)           # last stage: the tied copy
    assert fp32_embedding_params(r, True, E, 0.0) == (0.0, 0.0)     # an untied output layer is not an embedding
    assert fp32_embedding_params(n1344(False), False, E, E) == (0.0, 0.0)
    # a position table of 2,048 x 12,288 on the first stage: in the stage's parameters the step hands over since
    # §11.56 (step.position_table_params), so it leaves the 16-bit buffer with the word embedding
    r[C["learned_positions"]] = 1.0
    P = 2048 * 12288
    assert fp32_embedding_params(r, False, E + P, E) == (E + P, E + P)


def test_the_fp32_step_by_hand():
    r = n1344()
    comm, before, gather, after = fp32_embedding_step(r, E, 0.0, 0.0)   # nothing left to gather: the step shows
    assert comm == pytest.approx(AR32, rel=1e-12)
    assert before == pytest.approx(AR32 + NORM, rel=1e-12)
    assert gather == 0.0 and after == pytest.approx(STEP, rel=1e-12)
    # beside a first-chunk all-gather longer than the step it hides (v3.1: ~11 ms against 5.6 ms)
    assert fp32_embedding_step(r, E, 12 * 453e6, 12 * 453e6 * 2 * 335 / 336 / BUS_DP * 11 / 12)[3] == 0.0
    r[C["overlap_param_gather"]] = 0.0      # Apex gathers inside its step, before the FP32 step: nothing hides it
    assert fp32_embedding_step(r, E, 12 * 453e6, 0.0)[3] == pytest.approx(STEP, rel=1e-12)
    assert fp32_embedding_step(r, 0.0, 12 * 453e6, 0.0) == (0.0, 0.0, 0.0, 0.0)


def test_the_sharded_fp32_buckets_by_hand():
    """v4.0: the FP32 reduce-scatter before the norm, the 16-bit all-gather and the sharded step after the step,
    both with the first chunk's group, whatever is left to the stage (no overlap credit: §11.28's chunk 0)."""
    got = fp32_embedding_step(v40(), E, 16 * 453e6, 1.0)
    assert got == pytest.approx((RS32 + AG16, RS32, AG16, SHARDED), rel=1e-12)
    assert fp32_embedding_step(v40(False), E, 16 * 453e6, 1.0) == (0.0, 0.0, 0.0, 0.0)


def test_the_step_of_the_v31_rank_grows_by_the_hand_terms():
    """The step grows by the FP32 all-reduce, the norm's read and the tied all-reduce's second half; the
    embedding leaving the BF16 reduce-scatter and all-gather gives back at most its share of them: 1/v of each
    exposed plus the contention share 0.15 of the rest (§11.28), of 2 E x 335/336 / (0.92 x 85 GB/s) = 3.94 ms each
    (3.62 ms at the full bus before §11.65 timed one collective per chunk: 906 MB a chunk runs NCCL's LL128, whose
    bandwidth is 0.92 of Simple's, §11.5)."""
    out = evaluate_table(np.stack([n1344(), n1344(False)], axis=1))
    grown = out["step_time"][0] - out["step_time"][1]
    hand = AR32 + NORM + TIED32 - TIED16                                    # 23.74 ms
    own = 2 * E * 335 / 336 / (0.92 * BUS_DP)
    assert hand - 2 * own * (1 / 12 + 0.15) < grown < hand
    assert out["time_optimizer"][0] <= out["time_optimizer"][1]         # its AdamW hides behind chunk 0's gather


def test_the_step_of_the_v40_rank_grows_by_the_hand_terms():
    """As above for the sharded buckets: the FP32 reduce-scatter, the all-gather and the tied all-reduce's second
    half, less at most the embedding's share of the stage's BF16 reduce-scatter and FP8 all-gather (v = 8)."""
    out = evaluate_table(np.stack([v40(), v40(False)], axis=1))
    grown = out["step_time"][0] - out["step_time"][1]
    hand = RS32 + AG16 + SHARDED + TIED32 - TIED16                         # 21.75 ms
    own = (2 + 1) * E * 447 / 448 / BUS_DP
    assert hand - own * (1 / 8 + 0.15) < grown < hand


def test_a_row_without_the_flag_is_unchanged():
    plain = row(tp=4, pp=8, dp=16, vp=12, tied_embeddings=1)
    assert plain[C["embedding_fp32_grads"]] == 0.0
    assert shared_grad_bytes(plain) == plain[C["grad_reduce_bytes"]]


def test_the_fp32_embeddings_memory_by_hand():
    """``allreduce`` (NeMo r1.20): the FP32 main gradient 4 E in place of the BF16 buffer's 2 E, and an unsharded
    FP32 AdamW (master + two moments, 12 E) in place of the distributed optimizer's 12 E / 336:
    2 E + 12 E x 335 / 336 = 308,779,008 + 1,847,160,137 B = 2.0079 GiB on the n1344 end ranks; ``sharded``
    (NeMo 2.0): the FP32 buckets of the gradient buffer, 2 E = 0.2876 GiB, the sharded state unchanged."""
    table = evaluate_table(np.stack([n1344(), n1344(False)], axis=1))
    grads, optimizer = 2 * E, 12 * E * 335 / 336
    assert np.diff(table["memory_gradients"][::-1])[0] == pytest.approx(grads, rel=1e-12)
    assert np.diff(table["memory_optimizer"][::-1])[0] == pytest.approx(optimizer, rel=1e-12)
    assert np.diff(table["memory_per_device"][::-1])[0] == pytest.approx(grads + optimizer, rel=1e-12)
    assert (grads + optimizer) / 2**30 == pytest.approx(2.0079, abs=1e-4)
    table = evaluate_table(np.stack([v40(), v40(False)], axis=1))
    assert np.diff(table["memory_gradients"][::-1])[0] == pytest.approx(2 * E, rel=1e-12)
    assert table["memory_optimizer"][0] == table["memory_optimizer"][1]
    assert np.diff(table["memory_per_device"][::-1])[0] == pytest.approx(2 * E, rel=1e-12)
