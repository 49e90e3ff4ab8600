"""bench/serve_c512.py (docs/model_serving.md §S44): the sweep grid of a cell and the run's TTFT, by hand."""

import csv
import json

import pytest

from tests.bench_scripts import load_bench

serve_c512 = load_bench("serve_c512")


def _record(rid, tp, isl, osl, conc=512):
    return {"id": rid, "framework": "vLLM 0.11.2", "model": {"name": "gpt-oss-120b"},
            "system": {"gpu": "H100-SXM-80GB"}, "measured": {"ttft_s": 24.0, "tpot_s": 0.005},
            "serve": {"tp": tp, "input_len": isl, "output_len": osl, "concurrency": conc}}


def test_the_grid_is_4_to_64_and_4_to_16_for_tp8_at_8k_in():
    assert serve_c512.grid({"tp": 2, "input_len": 8192, "output_len": 1024}) == (4, 8, 16, 32, 64)
    assert serve_c512.grid({"tp": 8, "input_len": 8192, "output_len": 1024}) == (4, 8, 16)
    assert serve_c512.grid({"tp": 8, "input_len": 1024, "output_len": 8192}) == (4, 8, 16, 32, 64)


def test_variants_and_the_run_ttft(tmp_path):
    recs = tmp_path / "r.jsonl"
    with open(recs, "w") as fh:
        fh.write(json.dumps(_record("a", 4, 1024, 1024)) + "\n")
        fh.write(json.dumps(_record("other", 4, 1024, 1024, conc=64)) + "\n")
    out = tmp_path / "v.jsonl"
    assert serve_c512.variants(str(recs), str(out)) == 5
    first = json.loads(out.read_text().splitlines()[0])
    assert first["id"] == "a__C4"
    assert (first["serve"]["concurrency"], first["serve"]["max_batch_size"], first["serve"]["num_requests"]) == (4, 4, 40)
    table = tmp_path / "v.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "predicted_ttft_s", "predicted_tpot_s"])
        w.writerow(["a__C4", 0.1, 0.005])
        w.writerow(["a__C64", 0.3, 0.02])
    (row,) = serve_c512.table(str(table), str(recs))
    # C 4: E = 0.1 + 1023 x 0.005 = 5.215 s; 40 prompts through 512 slots to 4: 4.5 E; TTFT 0.1 + 23.4675.
    assert row["at"][4] == pytest.approx((0.005, 0.1 + 4.5 * 5.215))
    # C 64: E = 0.3 + 1023 x 0.02 = 20.76 s; 640 prompts: 4.2 E.
    assert row["at"][64] == pytest.approx((0.02, 0.3 + 4.2 * 20.76))
    assert row["best"] == 4  # 5 ms measured: C 4's 5 ms, not C 64's 20
