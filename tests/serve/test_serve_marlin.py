"""vLLM's Marlin MoE kernel, stated by the records the InferenceX recipe covers (``serve.moe_backend = "marlin"``;
fastmodel/serve/record_schema.py; docs/model_serving.md S33; priced by its published rate since S38,
tests/serve/test_serve_marlin_rate.py). Its row blocks (8..64) as the grouped expert kernel's tiles are derived here
by hand on gpt-oss-120b (h 2880, 128 experts of width 2880, top-4) at TP 1 on an H200, the sensitivity S33 reports."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.roofline import expert_gemm_roofline, expert_row_tile, exposed_weight_share, tiled_bounds
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.records import lower_serve_record

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
HOPPER = ("H100-SXM-80GB", "H200-SXM-141GB")


def _records():
    with open(DATA, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _h200_tp1():
    """The first Marlin record on an H200 at TP 1 with Marlin's row blocks (8, 64) set by hand, and the same record
    without the field as lowered."""
    record = next(r for r in _records() if r["serve"].get("moe_backend") == "marlin"
                  and r["system"]["gpu"] == "H200-SXM-141GB" and r["serve"]["tp"] == 1)
    plain = copy.deepcopy(record)
    del plain["serve"]["moe_backend"]
    marlin = lower_serve_record(record).columns
    marlin[COLUMN_INDEX["expert_tile_min"]], marlin[COLUMN_INDEX["expert_tile_max"]] = 8.0, 64.0
    return marlin, lower_serve_record(plain).columns


def test_the_stated_backend_changes_only_the_expert_kernel_columns():
    """Priced since S38: a record with ``moe_backend = "marlin"`` lowers to the columns it has without the field
    but for ``expert_gemm_eff`` (0 -> 0.304), ``expert_hide_rows`` (0 -> 14.4) and the weight padding (S46: Triton's
    (64, 0) -> Marlin's (128, 256)), with a note saying so; on another engine than vLLM the field is refused, naming it."""
    record = next(r for r in _records() if r["serve"].get("moe_backend") == "marlin")
    plain = copy.deepcopy(record)
    del plain["serve"]["moe_backend"]
    stated = lower_serve_record(record)
    other_cols = lower_serve_record(plain).columns
    for name, value, without in (("expert_gemm_eff", 0.304, 0.0), ("expert_hide_rows", 0.9 * 16.0, 0.0),
                                 ("expert_ffn_align", 128.0, 64.0), ("expert_hidden_align", 256.0, 0.0)):
        at = COLUMN_INDEX[name]
        assert (stated.columns[at], other_cols[at]) == (value, without)
        other_cols[at] = stated.columns[at]
    assert (stated.columns == other_cols).all()
    assert any("moe_backend = marlin" in note for note in stated.notes)
    other = dict(copy.deepcopy(record), framework="TensorRT-LLM 1.2.0")
    with pytest.raises(SpecError, match="serve.moe_backend"):
        lower_serve_record(other)


def test_row_tile_and_exposed_share_at_decode_and_prefill():
    """1 row per expert: 8 (library: 16); 20 rows: 32 (both); 256 rows (8,192 tokens x 4 / 128): 64, so a quarter of
    the shorter bound stays exposed (library: tile 128, half)."""
    marlin, plain = _h200_tp1()
    assert [expert_row_tile(marlin, m) for m in (1.0, 20.0, 256.0)] == [8.0, 32.0, 64.0]
    assert [expert_row_tile(plain, m) for m in (1.0, 20.0, 256.0)] == [16.0, 32.0, 128.0]
    assert exposed_weight_share(marlin, 256.0) == 0.25
    assert exposed_weight_share(plain, 256.0) == 0.5


def test_gate_up_grouped_gemm_of_an_8192_token_chunk_by_hand():
    """128 experts of 256 rows, (256 x 2880) @ (2880 x 5760), BF16 compute on 4.25-bit weights, H200. Row tile 64,
    column tile 256: 128 x 4 x 23 = 11,776 tiles, padding 5760 / 5888, in 90 waves of 132 SMs; the compute bound is
    2 g m n (k + k_half) / (P16 gemm_eff_16 Q) with Q = (5760 / 5888) x 11776 / 11880, and the GEMM
    max(c, w) + 64 / 256 min(c, w) + launch."""
    marlin, _ = _h200_tp1()
    g, m, n, k, wb = 128.0, 256.0, 5760.0, 2880.0, 4.25 / 8.0
    tiles = g * (256 / 64) * math.ceil(n / 256)
    assert tiles == 11776
    useful = (n / 5888.0) * tiles / (math.ceil(tiles / 132) * 132)
    peak = marlin[COLUMN_INDEX["peak_flops_16"]] * marlin[COLUMN_INDEX["gemm_eff_16"]]
    compute = 2.0 * g * m * n * (k + marlin[COLUMN_INDEX["gemm_k_half"]]) / (peak * useful)
    memory = g * (wb * k * n + 2.0 * m * k + 2.0 * m * n) / (marlin[COLUMN_INDEX["hbm_bw"]] * marlin[COLUMN_INDEX["hbm_eff"]])
    c, w = tiled_bounds(marlin, g, m, n, k, 0.0, wb, 64.0)
    assert (c, w) == (pytest.approx(compute, rel=1e-12), pytest.approx(memory, rel=1e-12))
    launch = marlin[COLUMN_INDEX["kernel_overhead_s"]]
    compute *= marlin[COLUMN_INDEX["gemm_eff_16"]] / 0.304       # S38: the expert kernel at Marlin's published rate
    assert expert_gemm_roofline(marlin, g, m, n, k, 0.0, wb, 1.0) == pytest.approx(
        max(compute, memory) + 0.25 * min(compute, memory) + launch, rel=1e-12)


def test_exactly_the_rows_the_recipe_covers_state_marlin():
    """The 99 vLLM 0.18.0 gpt-oss-120b rows on H100 / H200 (image vllm/vllm-openai:v0.18.0, measured 2026-03-27)
    state it, with the recipe's lines in their assumptions; no other row does (vLLM 0.11.2 and unrecorded rows
    predate the flag, 2026-01-02; B200 recipes do not set it)."""
    records = _records()
    marlin = [r for r in records if r["serve"].get("moe_backend") == "marlin"]
    assert len(marlin) == 99
    for r in marlin:
        assert r["framework"] == "vLLM 0.18.0" and r["system"]["gpu"] in HOPPER
        assert r["aic"]["provenance"]["image"] == "vllm/vllm-openai:v0.18.0"
        assert any("VLLM_MXFP4_USE_MARLIN=1" in a and "cec542a9a" in a for a in r["assumptions"])
    assert all(r["serve"].get("moe_backend", "default") != "marlin" for r in records if r not in marlin)


def test_an_unknown_backend_is_refused():
    record = copy.deepcopy(next(r for r in _records() if r["serve"].get("moe_backend") == "marlin"))
    record["serve"]["moe_backend"] = "machete"
    with pytest.raises(SpecError):
        lower_serve_record(record)
