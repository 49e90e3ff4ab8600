"""The once-a-step FP8 weight preparation (kernels/lm/fp8.py ``fp8_weight_step_bytes``, docs/model.md §11.65 C), by
hand: the bytes per weight element by recipe and parameter dtype, and the MLPerf v3.1 rank's seconds."""

from pathlib import Path

import pytest

from fastmodel.kernels.lm.fp8 import fp8_weight_chain_s, fp8_weight_step_bytes, fp8_weight_step_s
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
    # it) a rank, 12 x 452,984,832 = 5.436e9, at delayed scaling's 4 B on Hopper (the record states NeMo's
    # DelayedScaling; 3 B, 6.09 ms, while it was unstated) through 3.35 TB/s x hbm_eff: 8.11 ms a step, whatever
    # the micro-batches
    record = next(r for r in read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")
                  if r.id == "mlperf-v31-gpt3-175b-nvidia-n1344")
    col = record.columns
    params = 12 * 12 * 12288.0 ** 2 / 4
    seconds = 4.0 * params / (col[C["hbm_bw"]] * col[C["hbm_eff"]] * col[C["stack_compute_eff"]])
    assert fp8_weight_step_s(col, params) == pytest.approx(seconds, rel=1e-12)
    assert 1e3 * seconds == pytest.approx(8.11, abs=0.01)
    # the v4.0 records gather FP8 parameters: the transpose rebuilt from the gathered form, 1 B read + 1 B written;
    # under an unstated recipe no second form, no pass
    assert fp8_weight_step_s(overlay_columns(col, {"fp8_params": 1}), params) == pytest.approx(seconds / 2, rel=1e-12)
    assert fp8_weight_step_s(overlay_columns(col, {"fp8_params": 1, "fp8_recipe": 0}), params) == 0.0


def test_the_other_ranks_casts_on_the_chain_by_hand():
    # 1F1B, p = 2, m = 2, t_f = 1, t_b = 2 (tests/lm/test_pipeline_program.py's trace), each stage's first forward
    # (micro-batch 0) longer by its cast C: S0.F0 0-(1+C); S1.F0 (1+C)-(2+2C); S1.B0 -(4+2C); S0.F1 (1+C)-(2+C);
    # S0.B0 (4+2C)-(6+2C); S1.F1 -(5+2C); S1.B1 -(7+2C); S0.B1 (7+2C)-(9+2C). Makespan 9 + 2C: stage 0 computes
    # 6 + C (its own cast) and waits 3 + C, the other rank's cast on micro-batch 0's chain: (p - 1) C more bubble.
    # Interleaved (v chunks): rank 0 forwards a chunk's p micro-batches in p f + C while micro-batch 0 crosses the
    # p ranks in p (f + C) + p s, so (p - 1) C more a cycle, v cycles of a chunk's cast: (p - 1) x the rank's.
    col = row(**dict(H100, pp=2, layers=8, dp=4))
    params = 8 / 2 * 12 * 1024.0 ** 2
    cast = 3.0 * params / (col[C["hbm_bw"]] * col[C["hbm_eff"]] * col[C["stack_compute_eff"]])
    assert fp8_weight_chain_s(col, params) == pytest.approx(cast, rel=1e-12)       # (2 - 1) C
    assert fp8_weight_chain_s(row(**H100), params) == 0.0                           # no pipeline: its own cast only
    # MLPerf v3.1 n1344, p 8: the 8.11 ms of the rank's casts (above) and 7 x 8.11 = 56.8 ms on the chain (7 x 6.09
    # = 42.6 ms while the record's recipe was unstated)
    record = next(r for r in read_records(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")
                  if r.id == "mlperf-v31-gpt3-175b-nvidia-n1344")
    v31 = 12 * 12 * 12288.0 ** 2 / 4
    assert 1e3 * fp8_weight_chain_s(record.columns, v31) == pytest.approx(7 * 8.113, abs=0.05)


def test_the_step_bubble_carries_the_chain_casts():
    """A pp = 2 FP8 step under an unstated recipe against the same step with FP8 parameters (one form kept, no
    preparation): the bubble differs by the other rank's cast, (2 - 1) x 3 B x the rank's 4 layers' GEMM weights
    (4 h^2 attention + 3 h x 4h gated MLP, the table's default: 16 h^2 a layer; norms, < 1e-3 of them, left out)
    through HBM, and the optimizer's time by the rank's own cast."""
    from tests import suite_fixtures

    shape = dict(H100, pp=2, dp=4, global_batch=16)
    col = row(**shape)
    cast = 3.0 * 4 * 16 * 1024.0 ** 2 / (col[C["hbm_bw"]] * col[C["hbm_eff"]] * col[C["stack_compute_eff"]])
    cast16, prepared = suite_fixtures.one(**shape), suite_fixtures.one(**shape, fp8_params=1)
    assert cast16["pipeline_bubble"] - prepared["pipeline_bubble"] == pytest.approx(cast, rel=1e-3)
    assert cast16["time_optimizer"] - prepared["time_optimizer"] == pytest.approx(cast, rel=1e-3)
