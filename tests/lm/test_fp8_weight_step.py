"""The once-a-step FP8 weight preparation (kernels/lm/fp8.py ``fp8_weight_step_bytes``, docs/model.md §11.65 C), by
hand: the bytes per weight element by recipe and parameter dtype, and the MLPerf v3.1 rank's seconds."""

from pathlib import Path

import pytest

from fastmodel.kernels.lm.fp8 import fp8_weight_step_bytes, fp8_weight_step_s
from fastmodel.lm.calibrate.overlay import overlay_columns
from fastmodel.lm.records import read_records
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C

H100 = dict(layers=8, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=8, seq_len=2048, tp=1,
            pp=1, dp=8, n_gpus=8, micro_batch=1, global_batch=32, precision="fp8")


def test_bytes_per_weight_element_by_hand():
    # 16-bit parameters: read 2 B, write the FP8 forms kept across micro-batches. Delayed scaling on Hopper keeps
    # the weight and its transpose (TE fp8_cast_transpose_fused): 2 + 2 = 4 B; an unstated recipe keeps one form
    # (the generic count, §11.4): 2 + 1 = 3 B
    assert fp8_weight_step_bytes(row(**H100, fp8_recipe="delayed")) == pytest.approx(4.0, rel=1e-15)
    assert fp8_weight_step_bytes(row(**H100)) == pytest.approx(3.0, rel=1e-15)
    # FP8 parameters: the all-gather writes the first form; the transpose is rebuilt from it, 1 B read + 1 B
    # written; with one form kept (unstated recipe) nothing runs
    assert fp8_weight_step_bytes(row(**H100, fp8_recipe="delayed", fp8_params=1)) == pytest.approx(2.0, rel=1e-15)
    assert fp8_weight_step_bytes(row(**H100, fp8_params=1)) == 0.0
    # not an FP8 run: nothing
    assert fp8_weight_step_bytes(row(**dict(H100, precision="bf16"))) == 0.0


def test_the_mlperf_v31_rank_by_hand():
    # v3.1 n1344: 12 layers of 12 h^2 / 4 GEMM weights (+ the layer's norms and biases, 13 h / 4 ... 4 h, < 1e-4 of
    # it) a rank, 12 x 452,984,832 = 5.436e9, at the unstated recipe's 3 B through 3.35 TB/s x hbm_eff: 6.09 ms a
    # step, whatever the micro-batches
    record = next(r for r in read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")
                  if r.id == "mlperf-v31-gpt3-175b-nvidia-n1344")
    col = record.columns
    params = 12 * 12 * 12288.0 ** 2 / 4
    seconds = 3.0 * params / (col[C["hbm_bw"]] * col[C["hbm_eff"]] * col[C["stack_compute_eff"]])
    assert fp8_weight_step_s(col, params) == pytest.approx(seconds, rel=1e-12)
    assert 1e3 * seconds == pytest.approx(6.08, abs=0.01)
    # the v4.0 records gather FP8 parameters under an unstated recipe: no second form, no pass
    assert fp8_weight_step_s(overlay_columns(col, {"fp8_params": 1}), params) == 0.0
