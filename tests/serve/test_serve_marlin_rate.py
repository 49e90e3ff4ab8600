"""vLLM's Marlin MoE priced from its published H100 times (``engine_kernels.MARLIN_MOE_SM90_EFF``,
``MARLIN_HIDE_ROWS``; kernels/roofline.py ``hides_math``; kernels/serve/upcast.py ``software_upcast``;
docs/model_serving.md S38), derived by hand: the rate from FlagGems PR #4350's H100 rows (Mixtral, 8 experts, h 4096,
width 14336, top-2), the regime where the weight stream hides the MMA, the gpt-oss-120b rows at decode and prefill,
and the rule by engine, backend and device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastmodel.kernels.roofline import expert_bounds, expert_gemm_roofline, hides_math, tiled_bounds
from fastmodel.kernels.serve import upcast
from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.serve.api import columns
from fastmodel.serve.engine_kernels import MARLIN_HIDE_ROWS, MARLIN_MOE_SM90_EFF, expert_hide_rows, expert_kernel_eff
from fastmodel.serve.records import lower_serve_record
from tests.suite_fixtures import GPT_OSS

DATA = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
MIXTRAL = {"layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8, "head_dim": 128, "vocab": 32000,
           "gated_mlp": 1, "tied_embeddings": 0, "moe_experts": 8, "moe_topk": 2, "moe_ffn": 14336}
#: FlagGems PR #4350, H100 table, vLLM ``fused_marlin_moe`` W4A16 on Mixtral: tokens -> ms
PUBLISHED = {4: 0.186099, 16: 0.282324, 32: 0.297245, 256: 0.921453, 1024: 2.720316, 4096: 9.909706,
             16384: 38.999008, 32768: 78.78656}
WB = 4.25 / 8.0


def _marlin(model, device, tokens=1024):
    row = columns(model, device, precision="mxfp4", input_len=tokens, output_len=2, batch_size=1,
                  quant_experts_only=1.0)
    row[COLUMN_INDEX["expert_gemm_eff"]] = MARLIN_MOE_SM90_EFF
    row[COLUMN_INDEX["expert_hide_rows"]] = MARLIN_HIDE_ROWS
    return row


def _mixtral_ms(row, tokens):
    """The model's two grouped expert GEMMs of Mixtral at ``tokens`` (experts touched 8 (1 - (3/4)^t))."""
    groups = min(8.0, 8.0 * (1.0 - 0.75 ** tokens))
    m = tokens * 2.0 / groups
    return 1e3 * sum(expert_gemm_roofline(row, groups, m, n, k, 0.0, WB, 1.0)
                     for n, k in ((2.0 * 14336.0, 4096.0), (4096.0, 14336.0)))


def test_raw_rate_of_the_reference_row():
    """At 1,024 tokens Mixtral has 1024 x 2 / 8 = 256 rows per expert, as an 8,192-token gpt-oss prefill (8192 x 4 /
    128): 2 x 1024 x 2 x 3 x 4096 x 14336 FLOP in 2.720316 ms = 265.3 TFLOP/s, 0.268 of the 989.4 TFLOP/s BF16 peak."""
    flop = 2 * 1024 * 2 * 3 * 4096 * 14336
    assert flop == 721554505728
    assert flop / 2.720316e-3 / 989.4e12 == pytest.approx(0.268, abs=5e-4)
    assert 1024 * 2 / 8 == 8192 * 4 / 128 == 256


def test_the_model_at_0_304_reproduces_the_reference_row_and_the_large_rows():
    """0.304 is where the model's own grouped GEMM (row tile, waves, gemm_k_half on top of 0.268's raw FLOP) lands on
    the 1,024-token time (within 0.5 %); the 256-, 4,096-, 16,384- and 32,768-token rows then follow within 2.5 %."""
    row = _marlin(MIXTRAL, "H100")
    assert _mixtral_ms(row, 1024) == pytest.approx(PUBLISHED[1024], rel=5e-3)
    for tokens in (256, 4096, 16384, 32768):
        assert _mixtral_ms(row, tokens) == pytest.approx(PUBLISHED[tokens], rel=0.025)


def test_below_one_mma_row_block_the_weight_stream_hides_the_math():
    """4, 16, 32 tokens: 1, 4, 8 rows per expert < 0.9 x 16 = 14.4, so max(c, w): within 10 % of the published times
    (w + c would be 1.5-1.8 x); 256 tokens (64 rows) keeps max(c, w) + min(c, w) (one 64-row tile)."""
    row = _marlin(MIXTRAL, "H100")
    assert MARLIN_HIDE_ROWS == pytest.approx(14.4)
    for tokens in (4, 16, 32):
        assert hides_math(row, 8.0 * (1.0 - 0.75 ** tokens), tokens * 2.0 / (8.0 * (1.0 - 0.75 ** tokens)))
        assert _mixtral_ms(row, tokens) == pytest.approx(PUBLISHED[tokens], rel=0.10)
    assert not hides_math(row, 8.0, 64.0)
    c, w = expert_bounds(row, 8.0, 2.0, 2.0 * 14336.0, 4096.0, 0.0, WB)
    launch = row[COLUMN_INDEX["kernel_overhead_s"]]
    assert expert_gemm_roofline(row, 8.0, 2.0, 2.0 * 14336.0, 4096.0, 0.0, WB, 1.0) == max(c, w) + launch


def test_gpt_oss_decode_hides_and_prefill_computes_at_0_304_of_the_16_bit_peak():
    """gpt-oss-120b on an H200 at TP 1: 64 requests decoding give 64 x 4 / 128 = 2 rows per local expert (hidden);
    an 8,192-token prefill 256 (not). Its gate/up, 128 experts x (256 x 2880) @ (2880 x 5760), computes at
    P16 x 0.304: the library bound times gemm_eff_16 / 0.304, the weight stream unchanged."""
    row = _marlin(GPT_OSS, "H200", 8192)
    assert hides_math(row, 110.0, 64.0 * 4.0 / 110.0)
    assert not hides_math(row, 128.0, 256.0)
    g, m, n, k = 128.0, 256.0, 5760.0, 2880.0
    plain_c, plain_w = tiled_bounds(row, g, m, n, k, 0.0, WB, 128.0)
    c, w = expert_bounds(row, g, m, n, k, 0.0, WB)
    assert w == plain_w
    assert c == pytest.approx(plain_c * row[COLUMN_INDEX["gemm_eff_16"]] / 0.304, rel=1e-12)


def test_the_measured_rate_includes_the_conversion_so_no_upcast_is_added():
    """The published time is the whole ``fused_marlin_moe`` (conversion in registers included): with
    ``expert_gemm_eff`` set the software upcast of S23 is not added again; without it, it is."""
    marlin = _marlin(GPT_OSS, "H200", 8192)
    library = columns(GPT_OSS, "H200", precision="mxfp4", input_len=8192, output_len=2, batch_size=1,
                      quant_experts_only=1.0)
    assert not upcast.software_upcast(marlin, 0.0)
    assert upcast.expert_upcast_time(marlin, 128.0, 256.0, 2880.0, 2880.0, 3.0, 0.0, WB) == 0.0
    assert upcast.software_upcast(library, 0.0)
    assert upcast.expert_upcast_time(library, 128.0, 256.0, 2880.0, 2880.0, 3.0, 0.0, WB) > 0.0


def test_only_vllm_with_marlin_stated_on_hopper_takes_the_kernel():
    assert expert_kernel_eff("vllm", False, True, marlin=True) == 0.304
    assert expert_kernel_eff("vllm", False, False, marlin=True) == 0.0       # B200: FlashInfer, not Marlin
    assert expert_kernel_eff("vllm", False, True) == 0.0                    # default backend: Triton matmul_ogs
    assert expert_kernel_eff("trtllm", False, True, marlin=True) == 0.0
    assert expert_hide_rows("vllm", True, True) == MARLIN_HIDE_ROWS
    assert expert_hide_rows("vllm", True, False) == expert_hide_rows("vllm", False, True) == 0.0
    assert expert_hide_rows("sglang", True, True) == 0.0


def test_exactly_the_marlin_records_lower_the_kernel():
    """The 99 vLLM 0.18.0 gpt-oss-120b records on H100/H200 stating ``moe_backend = "marlin"`` carry (0.304, 14.4);
    every other gpt-oss record (0, 0)."""
    seen, count = {}, 0
    with open(DATA, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec["model"]["name"] == "gpt-oss-120b":
                cols = lower_serve_record(rec).columns
                key = rec["serve"].get("moe_backend", "default")
                seen.setdefault(key, set()).add((cols[COLUMN_INDEX["expert_gemm_eff"]],
                                                 cols[COLUMN_INDEX["expert_hide_rows"]]))
                count += key == "marlin"
    assert seen["marlin"] == {(0.304, MARLIN_HIDE_ROWS)} and count == 99
    assert seen["default"] == {(0.0, 0.0)}
