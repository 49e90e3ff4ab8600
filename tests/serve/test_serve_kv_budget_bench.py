"""bench/serve_kv_budget.py (docs/model_serving.md §S66): SGLang's automatic fraction and the three engines' KV
budgets from the same memory terms, by hand."""

import pytest

from tests.bench_scripts import load_bench

kvb = load_bench("serve_kv_budget")
GIB = 2**30
H100 = 84943715697  # 79.11 GiB


def test_sglang_fraction_by_hand():
    # reserved on an H100 at TP 2, chunk 8192: 512 + 1.5 x 8192 + 2 x 256 + 1024 x 2 / 8 = 13568 MiB
    reserved = 13568 * 2**20
    assert kvb.sglang_fraction(H100, 8192, 2) == round((H100 - reserved) / H100, 3) == 0.833
    # the chunk counts at least 2048 tokens
    assert kvb.sglang_fraction(H100, 1024, 2) == kvb.sglang_fraction(H100, 2048, 2)


def test_three_budgets_by_hand():
    w, ws, fw = 33.83 * GIB, 1.12 * GIB, 3 * GIB
    b = kvb.budgets(H100, 0.9, w, ws, fw, 8192, 2, 1)
    assert b["trtllm"] == pytest.approx(0.9 * (H100 - w - ws - fw))
    assert b["vllm"] == pytest.approx(0.9 * H100 - w - ws - fw)
    assert b["sglang"] == pytest.approx(0.833 * H100 - w)
    assert b["trtllm"] / GIB == pytest.approx(37.0, abs=0.05) and b["vllm"] / GIB == pytest.approx(33.25, abs=0.05)


def test_held_tokens():
    assert kvb.held_tokens(8192, 1024, True) == 8704
    assert kvb.held_tokens(8192, 1024, False) == 9216
