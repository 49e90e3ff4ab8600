"""bench/serve_kv_budget.py (docs/model_serving.md §S66): SGLang's automatic fraction and the three engines' KV
budgets from the same memory terms, by hand."""

import pytest

from fastmodel.serve.api import columns, engine_columns
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


def test_sglang_graph_cap_and_reserve_floor_by_hand():
    # cuda_graph_max_bs: 256 on Hopper below TP 4, 512 at TP 4 and on B200
    assert (kvb.sglang_graph_bs(2, "H200-SXM-141GB"), kvb.sglang_graph_bs(4, "H200-SXM-141GB"),
            kvb.sglang_graph_bs(1, "B200")) == (256, 512, 512)
    # H200 (specs/devices: 150,119,844,413 B) at TP 4, chunk 8192: 512 + 12288 + 1024 + 512 = 14336 MiB
    h200 = 150119844413
    assert kvb.sglang_fraction(h200, 8192, 4, gpu="H200") == round((h200 - 14336 * 2**20) / h200, 3) == 0.900
    # TP 1, chunk 2048 on an H100: 512 + 3072 + 512 + 128 = 4224 MiB, below the 10 GiB floor of a > 60 GiB GPU
    assert kvb.sglang_fraction(H100, 2048, 1) == round((H100 - 10 * GIB) / H100, 3) == 0.874
    # a 40 GiB GPU has no floor
    small = 40 * GIB
    assert kvb.sglang_fraction(small, 2048, 1) == round((small - 4224 * 2**20) / small, 3)


def _row(engine="vllm"):
    profile, _ = engine_columns(engine, "H100")
    return columns("llama3.1-70b", "H100", **profile, precision="fp8", tp=2, input_len=8192, output_len=1024,
                   batch_size=64)


def test_three_budgets_by_hand():
    # the record's own rule does not matter: both kv_budget_of_total values are evaluated (f 0.9, H100 TP 2, chunk
    # 8192, framework 3 GiB); vLLM's leaves out what its snapshot holds: the 287,047,680 B context, 16 NCCL ring
    # connections (LL + LL128 + Simple) and CustomAllreduce's rank_data (8 MiB) and two buffers of the record's
    # custom_allreduce_bytes (vLLM's profile 8 MiB, TensorRT-LLM's 4 MiB)
    w, ws = 33.83 * GIB, 1.12 * GIB
    other = w + ws + 3 * GIB
    ring = 16 * (8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + 4 * 2**20)
    for engine, ca in (("vllm", 8 * 2**20), ("trtllm", 4 * 2**20)):
        b = kvb.budgets(_row(engine), w, ws)
        assert b["trtllm"] == pytest.approx(0.9 * (H100 - other))
        assert b["vllm"] == pytest.approx(0.9 * H100 - other + 287047680 + ring + 8 * 2**20 + 2 * ca)
        assert b["sglang"] == pytest.approx(0.833 * H100 - w)
    assert b["trtllm"] / GIB == pytest.approx(37.0, abs=0.05)


def test_a_csv_without_implied_running_is_an_error_naming_the_file_and_the_column(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("id,status,load_mode,batch_size,framework,gpu\nx,ok,concurrency,1,vLLM,H100-SXM-80GB\n")
    with pytest.raises(ValueError, match=r"old\.csv: no column 'implied_running'"):
        list(kvb.rows(str(path), "tests/data/serve_dev_load.jsonl"))


def test_an_empty_implied_running_prints_nan(tmp_path, monkeypatch):
    row = {"framework": "vLLM 0.11.2", "gpu": "H100-SXM-80GB", "batch_size": "3", "implied_running": ""}
    monkeypatch.setattr(kvb, "rows", lambda *a: iter([(row, _row())]))
    line = kvb.table("v.csv", "r.jsonl")[1]
    assert "H100-SXM-80GB" in line and "| nan |" in line


def test_held_tokens():
    assert kvb.held_tokens(8192, 1024, True) == 8704
    assert kvb.held_tokens(8192, 1024, False) == 9216
