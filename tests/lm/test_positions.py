"""The position-embedding terms of docs/model.md §11.56 (``kernels/lm/positions.py``), by hand on the records:
MLA's decoupled RoPE on the B200 DeepSeek-V2 rows (Megatron-LM 23e00ed, TP 1: 128 heads, qk_nope 128, qk_rope 64,
v 128), ALiBi's score-sized pass on BLOOM-176B (b 2, s 2,048, 112 / 4 = 28 heads a rank, no flash attention), the
learned table of the MLPerf GPT-3 rows (2,048 x 12,288) in the data-parallel step and its lookup."""

from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.dp_step import ends_alike
from fastmodel.kernels.lm.positions import (
    alibi_bias_s,
    mla_rope_elements,
    position_lookup_s,
    position_table_params,
    position_table_s,
    rotary_bytes,
)
from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.records import read_records
from fastmodel.registry.lm import COLUMN_INDEX as C

DATA = Path(__file__).resolve().parents[1] / "data"


def record(run, name="runs_dev.jsonl"):
    return next(r for r in read_records(DATA / name) if r.id == run).columns.copy()


def dsv2():
    return record("simumax-b200-deepseekv2_tp1_ep8_pp1_dp8_l4_mbc4_cef", "runs_dev_b200.jsonl")


def bloom():
    return record("bloom-176b-n384")


def gpt3():
    return record("mlperf-v31-gpt3-175b-nvidia-n1344")


def test_the_records_state_what_the_hand_figures_read():
    r = dsv2()
    assert (r[C["mla"]], r[C["heads"]], r[C["tp"]], r[C["fused_kernels"]]) == (1, 128, 1, 1)
    assert (r[C["qk_nope_head_dim"]], r[C["qk_rope_head_dim"]], r[C["v_head_dim"]]) == (128, 64, 128)
    r = bloom()
    assert (r[C["alibi_bias"]], r[C["flash_attention"]], r[C["micro_batch"]], r[C["seq_len"]]) == (1, 0, 2, 2048)
    assert (r[C["heads"]], r[C["tp"]], r[C["rotary_fraction"]]) == (112, 4, 0)
    r = gpt3()
    assert (r[C["learned_positions"]], r[C["seq_len"]], r[C["hidden"]], r[C["alibi_bias"]]) == (1, 2048, 12288, 0)


def test_mla_rope_moves_the_fused_kernels_bytes_by_hand():
    r = dsv2()
    # fused (23e00ed: apply_rope_fusion, YaRN): query rope in place 2 x 64 x 128 = 16,384; KV kernel reads
    # (128 + 128) x 128 + 64 = 32,832 and writes (128 + 64 + 128) x 128 = 40,960: 90,176 elements a token
    # unfused: copies 2 x 192 x 128 + (256 + 64) x 128 + 64 + 2 x 128 x 128 = 122,944; rotated 129 x 64 = 8,256
    assert mla_rope_elements(r) == (90176.0, 122944.0, 8256.0)
    assert rotary_bytes(r, 4096.0) == 2 * 4096 * 90176             # 738.7 MB a layer-forward at 4,096 tokens
    # the count before §11.56: (a + kv) x (nope + rope) at 2 + 2 B: 196,608 B a token, 9.0% above the kernels'
    assert 4 * (128 + 128) * 192 / (2 * 90176) == pytest.approx(1.0902, abs=1e-4)
    r[C["fused_kernels"]] = 0.0     # eager: the rotated elements at 24 B, the copies at 2 B
    assert rotary_bytes(r, 1.0) == 24 * 8256 + 2 * 122944
    r[C["tp"]] = 8.0                # 16 heads a rank, the shared rope key on each: copies 15,424, rotated 1,088
    assert mla_rope_elements(r) == ((192 + 256 + 256) * 16 + 64, (512 + 192 + 256) * 16 + 64, 17 * 64)


def test_rotary_of_gqa_heads_is_the_rotated_share():
    r = record("simumax-b200-llama3_70b_l12_tp1_pp2_dp4_mbc4_cef", "runs_dev_b200.jsonl")
    assert (r[C["heads"]], r[C["kv_heads"]], r[C["head_dim"]], r[C["tp"]], r[C["mla"]]) == (64, 8, 128, 1, 0)
    assert rotary_bytes(r, 4096.0) == 4 * 4096 * (64 + 8) * 128
    r[C["rotary_fraction"]] = 0.25
    assert rotary_bytes(r, 4096.0) == 4096 * (64 + 8) * 128
    r[C["rotary_fraction"]] = 0.0
    assert rotary_bytes(r, 4096.0) == 0.0


def test_alibi_bias_is_a_score_sized_copy_and_read():
    r = bloom()
    tokens = 2 * 2048
    scores = tokens * 2048 * 112 / 4                                # 234,881,024 a layer and micro-batch
    assert scores == 234881024
    # 4 B a score (copy written 2, GEMM's C read 2): 939.5 MB, 0.542 ms at 1.733 TB/s (hbm_bw x hbm_eff x stack_compute_eff)
    assert alibi_bias_s(r, tokens) == memory_bound_time(r, 4 * scores)
    assert alibi_bias_s(r, tokens) * r[C["hbm_bw"]] * r[C["hbm_eff"]] * r[C["stack_compute_eff"]] == \
        pytest.approx(939524096, rel=1e-12)
    r[C["flash_attention"]] = 1.0      # applied inside the flash kernel: no pass
    assert alibi_bias_s(r, tokens) == 0.0
    r = bloom()
    r[C["alibi_bias"]] = 0.0
    assert alibi_bias_s(r, tokens) == 0.0


def test_alibi_runs_in_each_forward_bloom_runs():
    # full recompute: the forward and the recomputed forward each pay it (W_FORWARD_ONLY), as memory-bound time
    off = bloom()
    off[C["alibi_bias"]] = 0.0
    out = evaluate_table(np.stack([bloom(), off], axis=1))
    a = alibi_bias_s(bloom(), 2 * 2048.0)                           # 0.542 ms a layer-forward
    # the busiest stage's 6 layers (70 on 12 stages), 2048 / (2 x 8) = 128 micro-batches, forward + recompute
    assert out["time_memory_bound"][0] - out["time_memory_bound"][1] == pytest.approx(6 * 128 * 2 * a, rel=1e-9)
    # the step: the stage's micro-batch through the 1F1B pipeline, m + p - 1 = 139 of them (+0.904 s, +0.83%)
    assert out["step_time"][0] - out["step_time"][1] == pytest.approx(6 * 2 * a * (128 + 11), rel=1e-9)
    assert out["time_gemm"][0] == out["time_gemm"][1]


def test_the_learned_table_is_in_the_first_ends_step_by_hand():
    r = gpt3()
    P = 2048 * 12288                                                # 25,165,824, whole on each of the 4 TP ranks
    assert position_table_params(r) == P
    # the first end holds V h / t + P, the last the tied copy V h / t: the ends are no longer alike
    assert not ends_alike(r, 0.0)
    r[C["learned_positions"]] = 0.0
    assert position_table_params(r) == 0.0 and ends_alike(r, 0.0)


def test_the_learned_tables_lookup_and_gradient_by_hand():
    r = gpt3()
    assert (r[C["micro_batch"]], r[C["grad_reduce_bytes"]], r[C["master_weights"]]) == (1, 2, 1)
    assert r[C["embedding_dense_grad"]] == 0                        # the word embedding's dense gradient: not charged
    T = P = 2048 * 12288                                            # micro-batch 1: the tokens' rows = the table
    forward, backward = position_lookup_s(r)
    assert forward == memory_bound_time(r, 10 * T)                 # lookup 2 + 2, add 2 + 2 + 2 B: 252 MB
    assert backward == memory_bound_time(r, 2 * T)                 # the tokens' gradient read: 50 MB
    assert forward == pytest.approx(251658240 / (3.35e12 * 0.80), rel=1e-12)     # 0.094 ms
    assert position_table_s(r) == forward + backward
    # under the flag that charges the word embedding's (F.embedding's zeros and scatter, the DDP hook's add):
    # the table's too, s h (2 + 2 + 2 b_g) (review9 #2)
    r[C["embedding_dense_grad"]] = 1.0
    forward, backward = position_lookup_s(r)
    assert backward == memory_bound_time(r, 2 * T + P * (4 + 2 * 2))   # gradient read, zeros, scatter, hook: 252 MB
    assert forward == backward == pytest.approx(251658240 / (3.35e12 * 0.80), rel=1e-12)     # 0.094 ms each
    r[C["learned_positions"]] = 0.0
    assert position_lookup_s(r) == (0.0, 0.0)
