"""The attention kernels the MLPerf GPT-3 175B submissions ran (docs/model.md §11.60).

v3.1 (TransformerEngine 09ba842, Azure's 4ee8e8e; the image installs flash-attn 2.0.8): TE's DotProductAttention
returns the flash-attn package's FlashAttention-2 before its cuDNN fused path (attention.py lines 1493-1496, 1747,
1773), so the records state ``attn_fa2`` and attention runs at the device's ``attn_eff_fa2``; on that path TE copies
the interleaved QKV apart before the kernel and the gradients back after it (``_PrepareQKVForFA``, lines 767-795,
936-945), ``fa_qkv_prepare``. v4.0 (TE v1.6rc1): fused attention is preferred on sm90 (attention.py lines
2912-2917), the records keep ``attn_eff`` and no copy. Hand derivations for one v3.1 row: the attention seconds
from the causal FLOP count, the copies' bytes.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.api import evaluate_record
from fastmodel.errors import FastmodelError
from fastmodel.kernels.lm.attn_layout import fa_qkv_prepare_s
from fastmodel.lm.records import read_records
from fastmodel.lm.validate import predict_records
from fastmodel.registry.lm import COLUMN_INDEX as C

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
V31_N96 = "mlperf-v31-gpt3-175b-nvidia-n96"


def _plans() -> dict:
    rows = [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()]
    return {r["id"]: r["plan"] for r in rows if r["id"].startswith("mlperf-")}


def test_v31_records_state_flash_attention_2_and_v40_records_do_not():
    plans = _plans()
    v31 = [i for i in plans if i.startswith("mlperf-v31-")]
    v40 = [i for i in plans if i.startswith("mlperf-v40-")]
    assert len(v31) == 8 and len(v40) == 3
    assert all(plans[i].get("attn_fa2") is True and plans[i].get("fa_qkv_prepare") is True for i in v31)
    assert not any(plans[i].get("attn_fa2") or plans[i].get("fa_qkv_prepare") for i in v40)


def test_v31_attention_seconds_by_hand():
    record = next(r for r in read_records(RUNS) if r.id == V31_N96)
    out = predict_records([record], np.zeros(1, dtype=np.int8))
    col = record.columns
    assert col[C["attn_fa2"]] == 1.0 and col[C["attn_eff_fa2"]] == pytest.approx(0.339)
    # one layer, one micro-batch on a TP-4 rank: 96 / 4 = 24 heads of 128, s = 2,048, causal:
    # QK^T and PV, 2 x 2 s^2 d h FLOPs halved by the mask = 2 s^2 d h = 2.577e10
    flops = 2.0 * 2048.0**2 * 128.0 * 24.0
    assert flops == pytest.approx(2.577e10, rel=1e-3)
    # 24 heads x 16 query tiles of 128 = 384 CTAs: more than one wave of 132 SMs, so the grid share is 1 (§11.51);
    # the forward at 989 TFLOP/s x 0.339 plus one kernel's 4 us, the backward 2.5 x the forward (kernels/lm/passes.py)
    forward = flops / (989e12 * 0.339) + 4e-6
    assert forward == pytest.approx(80.86e-6, rel=1e-3)
    per_layer_mb = 3.5 * forward
    # 128 micro-batches (3,072 / 24 data-parallel ranks) x 12 layers a rank (96 / 8 stages)
    assert out["time_attention"][0] == pytest.approx(128 * 12 * per_layer_mb, rel=1e-9)
    # the same kernels at the fused-attention efficiency (0.45) were 216.7 us a layer and micro-batch: +66.4 us
    fused = 3.5 * (flops / (989e12 * 0.45) + 4e-6)
    assert 1e6 * (per_layer_mb - fused) == pytest.approx(66.4, abs=0.1)


def test_v31_qkv_copies_by_hand():
    record = next(r for r in read_records(RUNS) if r.id == V31_N96)
    col = record.columns
    assert col[C["fa_qkv_prepare"]] == 1.0
    # one direction: read and write 2,048 tokens x 24 heads x (128 + 128 + 128) elements at 2 B = 75.5 MB
    nbytes = 2.0 * 2.0 * 2048.0 * 24.0 * 384.0
    assert nbytes == pytest.approx(75.50e6, rel=1e-3)
    rate = col[C["hbm_bw"]] * col[C["hbm_eff"]] * col[C["stack_compute_eff"]]
    one = nbytes / rate
    assert fa_qkv_prepare_s(col, 2048.0) == pytest.approx(one, rel=1e-12)
    assert 1e6 * one == pytest.approx(28.2, abs=0.1)
    # the step's memory-bound time grows by both directions, every layer and micro-batch: 128 x 12 x 2 x 28.2 us
    row = next(json.loads(line) for line in RUNS.read_text().splitlines() if V31_N96 in line)
    with_copies = float(evaluate_record(row)["time_memory_bound"].values.ravel()[0])
    row["plan"]["fa_qkv_prepare"] = False
    without = float(evaluate_record(row)["time_memory_bound"].values.ravel()[0])
    assert with_copies - without == pytest.approx(128 * 12 * 2 * one, rel=1e-9)
    # none without the flag
    col_off = col.copy()
    col_off[C["fa_qkv_prepare"]] = 0.0
    assert fa_qkv_prepare_s(col_off, 2048.0) == 0.0


def test_no_copy_where_te_would_not_take_it():
    # review16 #1: TE 09ba842 attention.py ~945-950 copies only the sbh3d layout (as many KV heads as heads),
    # head dim 128, s x b >= 512, on the flash-attn path; the same v3.1 column vector changed one fact at a time
    col = next(r for r in read_records(RUNS) if r.id == V31_N96).columns
    assert fa_qkv_prepare_s(col, 2048.0) > 0.0
    for name, value in (("kv_heads", 8.0), ("head_dim", 64.0), ("attn_fa2", 0.0)):
        other = col.copy()
        other[C[name]] = value
        assert fa_qkv_prepare_s(other, 2048.0) == 0.0, name
    assert fa_qkv_prepare_s(col, 511.0) == 0.0


def test_a_plan_stating_the_copy_without_flash_attention_is_refused():
    row = next(json.loads(line) for line in RUNS.read_text().splitlines() if V31_N96 in line)
    row["plan"]["attn_fa2"] = False
    with pytest.raises(FastmodelError, match="fa_qkv_prepare.*needs attn_fa2"):
        evaluate_record(row)


def test_selective_core_attention_recompute_copies_again():
    # review16 #11: TE runs _PrepareQKVForFA inside FlashAttention.forward, which Megatron's selective recompute
    # (checkpoint_core_attention) re-runs: per layer and micro-batch the copy three times (forward, recomputed
    # forward, backward) instead of two
    col = next(r for r in read_records(RUNS) if r.id == V31_N96).columns
    one = fa_qkv_prepare_s(col, 2048.0)
    row = next(json.loads(line) for line in RUNS.read_text().splitlines() if V31_N96 in line)
    row["plan"]["recompute"] = "selective"
    with_copies = float(evaluate_record(row)["time_memory_bound"].values.ravel()[0])
    row["plan"]["fa_qkv_prepare"] = False
    without = float(evaluate_record(row)["time_memory_bound"].values.ravel()[0])
    assert with_copies - without == pytest.approx(128 * 12 * 3 * one, rel=1e-9)
