"""NVFP4 training (``precision = fp4``, docs/model.md §11.38): the GEMM at the FP4 peak, the cast bytes of the
GEMM inputs, the NVFP4 weight and saved-input copies and the refusal off Blackwell, each against a hand
derivation."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.fp4 import fp4_supported, nvfp4_cast_bytes, train_gemm_format
from fastmodel.kernels.lm.layer import N_WORK, W_GEMM, W_MEM, layer_costs, mtp_costs
from fastmodel.kernels.lm.memory_activations import gemm_input_bytes
from fastmodel.kernels.lm.memory_states import weight_bytes_per_param
from fastmodel.kernels.lm.moe import expert_rows, moe_compute
from fastmodel.kernels.lm.rules import plan_status_row
from fastmodel.kernels.roofline import format_peak, gemm_time
from fastmodel.lm.records import lower_record
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import PRECISION_CODES, STATUS_CODES
from tests.lm.lowprec_rows import precision_row

DATA = Path(__file__).parents[1] / "data"
#: B300's datasheet peaks (specs/devices/b300.toml) and TE gemm_profiling.rst's kernel-only per-layer times
B300 = {"peak_flops_16": 2.25e15, "peak_flops_8": 4.5e15, "peak_flops_4": 13.5e15, "compute_capability": 10.3}
RATE = (6.812 / 3.764) / (13.5 / 4.5)


def _row(precision: str, **values) -> np.ndarray:
    return precision_row(precision, **{**B300, **values})


def test_fp4_and_nvfp4_name_one_gemm_format():
    assert PRECISION_CODES["fp4"] == PRECISION_CODES["nvfp4"] == 2
    assert [train_gemm_format(_row(p)) for p in ("bf16", "fp8", "fp4")] == [0.0, 1.0, 2.0]


#: a GEMM of 4 tiles on 4 SMs, one full wave, far from the HBM bound, no launch time
ONE_WAVE = dict(sm_count=4.0, gemm_tile_m=128.0, gemm_tile_n=128.0, hbm_bw=1e18, kernel_overhead_s=0.0,
                stack_compute_eff=1.0, gemm_eff_8=0.48, gemm_k_half=128.0)


def test_a_gemm_runs_at_the_fp4_peak_times_the_fp8_efficiency_times_the_measured_nvfp4_rate():
    """m = n = 256 on 4 SMs with 128 x 128 tiles: 4 tiles, one full wave, quantization 1; HBM far from binding:
    t = 2 m n (k + k_half) / (peak_4 x eff_8 x 0.603)."""
    row = _row("fp4", **ONE_WAVE)
    m = n = 256.0
    k = 4096.0
    expected = 2.0 * m * n * (k + 128.0) / (13.5e15 * 0.48 * RATE)
    assert gemm_time(row, m, n, k, 2.0) == pytest.approx(expected, rel=1e-12)
    assert RATE == pytest.approx(0.6033, abs=1e-4)
    # the same GEMM under FP8: 4.5e15 x 0.48 x 1 (per-tensor scaling, unstated recipe) -> 1.81x longer
    fp8 = _row("fp8", **ONE_WAVE)
    assert gemm_time(fp8, m, n, k, 1.0) / expected == pytest.approx(6.812 / 3.764, rel=1e-12)


def test_serving_w4a4_keeps_the_plain_fp4_rate():
    """Serving's W4A4 rows carry precision code 0 (fastmodel/serve/precisions.py): FP4 peak x gemm_eff_8."""
    row = _row("bf16", gemm_eff_8=0.48)
    assert format_peak(row, 2.0) == (13.5e15, 0.48)
    assert format_peak(_row("fp4", gemm_eff_8=0.48), 2.0)[1] == pytest.approx(0.48 * RATE, rel=1e-12)


def test_the_cast_bytes_of_one_linear_input():
    """Amax pass, rowwise cast and columnwise RHT cast each read the 16-bit input (2 B); two NVFP4 copies are
    written, 0.5 B of E2M1 and 1/16 B of E4M3 scale each: 3 x 2 + 2 x 0.5625 = 7.125 B per element."""
    assert nvfp4_cast_bytes() == pytest.approx(3.0 * 2.0 + 2.0 * (0.5 + 1.0 / 16.0), rel=1e-15)
    assert nvfp4_cast_bytes() == 7.125


def test_the_layer_charges_the_nvfp4_casts_of_its_gemm_inputs_and_runs_its_gemms_faster():
    """A dense layer, TP 1: the GEMM inputs per token are 2 h (QKV, FC1) + a d_v (proj) + f (FC2); the layer's
    memory-bound time under fp4 exceeds bf16's by 7.125 B per element of them."""
    rows = [_row(p, tp=1.0, sequence_parallel=0.0) for p in ("bf16", "fp4")]
    work = [np.zeros(N_WORK), np.zeros(N_WORK)]
    for row, w in zip(rows, work):
        layer_costs(row, False, False, w)
    row = rows[0]
    tokens = row[C["micro_batch"]] * row[C["seq_len"]]
    elements = tokens * (2.0 * row[C["hidden"]] + row[C["heads"]] * row[C["head_dim"]] + row[C["ffn"]])
    extra = 7.125 * elements / (row[C["hbm_bw"]] * row[C["hbm_eff"]])
    assert work[1][W_MEM] - work[0][W_MEM] == pytest.approx(extra, rel=1e-9)
    assert work[1][W_GEMM] < work[0][W_GEMM]


#: a small memory-bound MoE layer: 8 experts of 8 rows (64 tokens, top-1, ep 1, tp 1), h 2048, moe_ffn 4096,
#: ungated, one shared expert; an FP4 peak so large that the MMA time is below 1e-15 s
MOE_FP4 = {
    "tp": 1.0,
    "cp": 1.0,
    "dp": 1.0,
    "ep": 1.0,
    "micro_batch": 1.0,
    "seq_len": 64.0,
    "hidden": 2048.0,
    "moe_experts": 8.0,
    "moe_topk": 1.0,
    "moe_ffn": 4096.0,
    "moe_shared_experts": 1.0,
    "gated_mlp": 0.0,
    "moe_capacity_factor": 0.0,
    "moe_imbalance": 1.0,
    "moe_expert_maxvio": 0.0,
    "mtp_layers": 1.0,
    "peak_flops_4": 1e30,
    "hbm_bw": 8e12,
    "hbm_eff": 0.8,
    "stack_compute_eff": 0.5,
    "kernel_overhead_s": 0.0,
}


def test_moe_and_mtp_gemms_read_nvfp4_weights_at_0_5625_bytes():
    """Expert GEMM roofline (kernels/roofline.py ``expert_gemm_roofline``): ``max(c, w) + s min(c, w)`` over
    ``stack_compute_eff``, s = min(1, 16 / 8) = 1 (row tile 16 > the 8 rows of an expert), c ~ 0 here, so
    t = w / 0.5 with ``w = E (0.5625 k n + 0.5625 m k + 2 m n) / (hbm_bw hbm_eff)`` (weights and, W4A4, the input
    at NVFP4's 0.5 + 1/16 B, docs/model.md §11.39; the output at 2 B). Routed: FC1 (k 2048, n 4096) + FC2 (k 4096, n 2048) over E = 8
    experts of m = 8 rows; shared: the same two GEMMs once at m = 64 tokens; MTP's ``eh_proj``: k 2h, n h,
    m 64. Each was read at 1 B per weight before (docs/model.md §11.38)."""
    row = _row("fp4", **MOE_FP4)
    assert expert_rows(row) == 64.0
    bw = 8e12 * 0.8
    wb = 0.5 + 1.0 / 16.0

    def memory(groups, m, n, k, weight, act=wb):
        return groups * (weight * k * n + act * m * k + 2.0 * m * n) / bw / 0.5

    def mlp(groups, m, weight, act=wb):
        return memory(groups, m, 4096.0, 2048.0, weight, act) + memory(groups, m, 2048.0, 4096.0, weight, act)

    _, _, shared, _, _, routed = moe_compute(row, 2.0)
    assert routed == pytest.approx(mlp(8.0, 8.0, wb), rel=1e-12)
    assert shared == pytest.approx(mlp(1.0, 64.0, wb), rel=1e-12)
    # the weight stream at 1 B per element (the FP8 bytes the fp4 path read before) is 2 x 8 x 2048 x 4096 x
    # (1 - 0.5625) B longer
    assert mlp(8.0, 8.0, 1.0) - routed == pytest.approx(2.0 * 8.0 * 2048.0 * 4096.0 * 0.4375 / bw / 0.5, rel=1e-9)
    # MTP's eh_proj runs BF16 under fp4 ("currently ignoring FP4 in MTP layers", docs/model.md §11.44): 2 B weights
    # and input, its NVFP4 read (0.5625 B) no longer applies
    mtp_gemm = mtp_costs(row, 64.0, 64.0)[0]
    assert mtp_gemm == pytest.approx(memory(1.0, 64.0, 2048.0, 4096.0, 2.0, 2.0), rel=1e-12)
    assert mtp_gemm > memory(1.0, 64.0, 2048.0, 4096.0, wb)
    # FP8 keeps its 1 B weights
    fp8 = _row("fp8", **{**MOE_FP4, "peak_flops_8": 1e30})
    assert moe_compute(fp8, 1.0)[5] == pytest.approx(mlp(8.0, 8.0, 1.0, 1.0), rel=1e-12)


@pytest.mark.parametrize(
    "fp8_params, expected",
    [
        (0.0, 2.0 + 2.0 * (0.5 + 1.0 / 16.0)),  # BF16 weight + NVFP4 rowwise and columnwise copies
        (1.0, 2.0 * (0.5 + 1.0 / 16.0)),  # FP4 parameters (Megatron --fp4-param): the two copies only
    ],
)
def test_weight_bytes_hold_the_nvfp4_copies(fp8_params, expected):
    assert weight_bytes_per_param(_row("fp4", fp8_params=fp8_params)) == pytest.approx(expected, rel=1e-15)


def test_a_saved_gemm_input_is_its_columnwise_nvfp4_copy():
    assert gemm_input_bytes(_row("fp4")) == pytest.approx(0.5 + 1.0 / 16.0, rel=1e-15)


@pytest.mark.parametrize(
    "values, ok",
    [
        ({"peak_flops_4": 0.0, "compute_capability": 9.0}, False),  # H100 SXM: no FP4 peak
        ({"peak_flops_4": 9e15, "compute_capability": 9.0}, False),  # a peak stated on a Hopper part
        ({"peak_flops_4": 9e15, "compute_capability": 10.0}, True),  # B200
        ({"peak_flops_4": 13.5e15, "compute_capability": 10.3}, True),  # B300
        ({"peak_flops_4": 9e15, "compute_capability": 0.0}, True),  # no compute capability stated
    ],
)
def test_fp4_off_fp4_tensor_cores_is_refused(values, ok):
    row = _row("fp4", n_gpus=1.0, **values)
    assert bool(fp4_supported(row)) is ok
    assert plan_status_row(row) == (0 if ok else STATUS_CODES["no_fp4"])
    row[C["precision"]] = PRECISION_CODES["bf16"]
    assert fp4_supported(row) and plan_status_row(row) == 0


def test_a_sweep_marks_fp4_on_h100_and_runs_it_on_b200():
    from fastmodel.lm.sweep import lm_sweep
    from fastmodel.registry.lm import STATUSES

    axes = {"precision": ["fp8", "fp4"]}
    hopper = lm_sweep("llama3.1-8b", "dgx-h100", global_batch=64, axes=axes)
    assert [STATUSES[int(c)].name for c in hopper.status.values.ravel()] == ["ok", "no_fp4"]
    blackwell = lm_sweep("llama3.1-8b", "dgx-b200", global_batch=64, axes=axes)
    assert [STATUSES[int(c)].name for c in blackwell.status.values.ravel()] == ["ok", "ok"]


def test_a_record_stating_fp4_is_refused_naming_the_field():
    """RUNS.md's precision list is bf16 | fp8 | fp16: fp4 is for specs, sweeps and -x only."""
    from fastmodel.errors import FastmodelError

    record = json.loads((DATA / "runs_dev_b200.jsonl").read_text().splitlines()[0])
    record["plan"]["precision"] = "fp4"
    with pytest.raises(FastmodelError, match="plan.precision"):
        lower_record(record)
