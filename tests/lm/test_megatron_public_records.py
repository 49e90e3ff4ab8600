"""tests/data/runs_megatron_public.jsonl: public multi-node Megatron runs kept as an unseen check (issues 23 and 26):
MegaScale's Megatron-LM baseline (Jiang et al., NSDI 2024, Tables 2-3, Fig. 9) and Nemotron-4 15B (Table 2).
Every record loads and is answered, the file's step-time MAPE is finite (no threshold: the file was frozen before
its first score), and the published figures behind each record are derived by hand."""

import json

import numpy as np
import pytest

from fastmodel.lm.records import read_records
from fastmodel.lm.validate import group_scores, rows
from tests.data_records import DATA, record_by_id

FILE = "runs_megatron_public.jsonl"


def _raw() -> list[dict]:
    return [json.loads(line) for line in (DATA / FILE).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def table():
    return rows(read_records(DATA / FILE))


def test_every_record_loads_once():
    raw = _raw()
    ids = [r["id"] for r in raw]
    assert len(ids) == len(set(ids)) == len(read_records(DATA / FILE)) == 15


def test_every_record_is_answered_and_the_mape_is_finite(table):
    assert len(table) == 15
    assert all(row["status"] == "ok" and np.isfinite(row["predicted_step_time_s"]) for row in table)
    (_, model, b40, b50), = group_scores(table, None)
    assert model.n == 15 and np.isfinite(model.mape)
    assert np.isfinite(b40.mape) and np.isfinite(b50.mape)


def test_runs_md_identities_hold_in_every_record():
    """tp pp cp dp = GPUs, batch = micro-batch x dp x accumulation, tokens/s/GPU x GPUs x step = batch x sequence;
    an interleaved schedule's micro-batches are a multiple of pp (Megatron-LM's requirement)."""
    for r in _raw():
        p, m, s = r["plan"], r["measured"], r["system"]
        assert p["tp"] * p["pp"] * p["cp"] * p["dp"] == s["n_gpus"], r["id"]
        assert p["micro_batch"] * p["dp"] * p["grad_accum"] == p["global_batch"], r["id"]
        tokens = p["global_batch"] * r["model"]["seq_len"]
        assert m["tokens_per_s_per_gpu"] * s["n_gpus"] * m["step_time_s"] == pytest.approx(tokens, rel=1e-5)
        if p["vp"] > 1:
            assert p["grad_accum"] % p["pp"] == 0, r["id"]


def test_megascale_175b_flops_per_token_by_hand():
    """96 layers of h 12,288, FFN 4h: 4 h^2 + 2 h 4h = 1,811,939,328 parameters per layer, 173,946,175,488 in all,
    plus the tied 64,000 x 12,288 head 786,432,000: 6 x 174,732,607,488 = 1,048,395,644,928; attention
    6 x 2,048 x 128 heads x (96 + 96) x 96 layers = 28,991,029,248; 1,077,386,674,176 FLOPs per token."""
    record = record_by_id("megascale-megatron-175b-a100-n256-gbs768", FILE)
    assert 4 * 12288**2 + 2 * 12288 * 49152 == 1_811_939_328
    assert 6 * (96 * 1_811_939_328 + 64000 * 12288) == 1_048_395_644_928
    assert 6 * 2048 * 128 * 192 * 96 == 28_991_029_248
    assert record["measured"]["flops_per_token_std"] == 1_048_395_644_928 + 28_991_029_248


def test_megascale_table_2_mfu_follows_from_its_iteration_times():
    """Table 2, 256 GPUs: 768 x 2,048 tokens / 40.0 s = 39,321.6 tokens/s (printed 39.3k), x 1.0774e12 FLOPs /
    (256 x 312e12) = 53.04% (printed 53.0%); 12,288 GPUs: 6,144 x 2,048 / 8.57 s = 1,468,280 tokens/s (1466.8k),
    41.26% (41.2%). Every Megatron-LM row of the table within the rounding of its printed iteration time (half its
    last digit) and of its printed MFU (0.05 point)."""
    flops = 1_077_386_674_176
    assert 768 * 2048 / 40.0 == pytest.approx(39321.6)
    assert 768 * 2048 / 40.0 * flops / (256 * 312e12) == pytest.approx(0.5304, abs=5e-5)
    assert 6144 * 2048 / 8.57 * flops / (12288 * 312e12) == pytest.approx(0.4126, abs=5e-5)
    for r in _raw():
        if r["source"] == "megascale2024_t2":
            m = r["measured"]
            decimals = len(str(m["step_time_s"]).split(".")[1])
            rounding = m["mfu_std"] * 0.5 * 10.0**-decimals / m["step_time_s"] + 0.0005
            assert abs(m["mfu_std"] - m["mfu_published"]) <= rounding, r["id"]


def test_megascale_table_3_step_time_from_its_mfu_by_hand():
    """Table 3's baseline, 47.7% MFU on 256 GPUs at batch 256: 256 x 2,048 x 1.0774e12 / (0.477 x 256 x 312e12)
    = 14.826 s."""
    expected = 256 * 2048 * 1_077_386_674_176 / (0.477 * 256 * 312e12)
    assert expected == pytest.approx(14.826, abs=5e-4)
    record = record_by_id("megascale-megatron-175b-a100-n256-gbs256", FILE)
    assert record["measured"]["step_time_s"] == pytest.approx(expected, abs=5e-5)
    assert "measured.step_time_s" in record["measured"]["derived"]


def test_megascale_530b_step_times_from_the_figure_labels_by_hand():
    """530B (105 layers, h 20,480, 160 heads of 128, FFN 4h, tied 64,000 head): 6 (105 x 12 h^2 + 64,000 h) +
    6 x 2,048 x 160 x 256 x 105 FLOPs per token; at 49.20% MFU and batch = GPUs the step is 2,048 x F /
    (0.492 x 312e12), independent of the GPU count."""
    h = 20480
    flops = 6 * (105 * 12 * h * h + 64000 * h) + 6 * 2048 * 160 * 256 * 105
    record = record_by_id("megascale-megatron-530b-a100-n2240-gbs2240", FILE)
    assert record["measured"]["flops_per_token_std"] == flops
    assert record["measured"]["step_time_s"] == pytest.approx(2048 * flops / (0.492 * 312e12), abs=5e-5)


def test_nemotron4_15b_flops_per_token_and_mfu_by_hand():
    """32 layers of h 6,144, 48 query heads and 8 KV heads of 128, squared-ReLU FFN 24,576: 2 x 6,144^2 +
    2 x 6,144 x 1,024 + 2 x 6,144 x 24,576 = 390,070,272 per layer, 12,482,248,704 in all (the paper's 12.5B
    non-embedding parameters), plus the untied 256,000 x 6,144 head: 6 x 14,055,112,704 = 84,330,676,224; attention
    6 x 4,096 x 48 x 256 x 32 = 9,663,676,416. At 0.57 s, 384 x 4,096 tokens on 768 H100s: 3,593.2 tokens/s/GPU,
    34.15% of 989 TFLOP/s (printed 34.3%)."""
    per_layer = 2 * 6144**2 + 2 * 6144 * 1024 + 2 * 6144 * 24576
    assert per_layer == 390_070_272 and 32 * per_layer == 12_482_248_704
    flops = 6 * (32 * per_layer + 256000 * 6144) + 6 * 4096 * 48 * 256 * 32
    record = record_by_id("nemotron4-15b-h100-n768-gbs384", FILE)
    assert record["measured"]["flops_per_token_std"] == flops == 93_994_352_640
    tokens_per_gpu = 384 * 4096 / 0.57 / 768
    assert record["measured"]["tokens_per_s_per_gpu"] == pytest.approx(tokens_per_gpu, abs=1e-3)
    assert tokens_per_gpu * flops / 989e12 == pytest.approx(0.3415, abs=5e-5)
