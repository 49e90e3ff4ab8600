"""NVFP4 training, second pass (docs/model.md §11.39): one element size of the GEMM formats, the layers a run keeps
in BF16 (Megatron-LM ``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16``), the NVFP4 activation
operands of W4A4 GEMMs and NVFP4's amax all-reduces over the TP group, each against a hand derivation."""

import numpy as np
import pytest

from fastmodel.kernels.lm.bf16_layers import bf16_layer_seconds
from fastmodel.kernels.lm.fp4 import low_precision_gemms
from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.lm.layer import N_WORK as N_LAYER_WORK
from fastmodel.kernels.lm.layer import W_TP, layer_costs
from fastmodel.kernels.lm.passes import N_WORK, layer_passes, layer_time
from fastmodel.kernels.lm.step import stage_passes
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.roofline import (
    expert_gemm_roofline,
    expert_gemm_time,
    expert_wgrad_time,
    gemm_bounds,
    gemm_roofline,
    gemm_weight_bytes,
    grouped_gemm_time,
)
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import PRECISION_CODES, column_defaults

NVFP4 = 0.5 + 1.0 / 16.0
B200 = {"peak_flops_16": 2.25e15, "peak_flops_8": 4.5e15, "peak_flops_4": 9e15, "compute_capability": 10.0}


def _row(precision: str, **values) -> np.ndarray:
    row = np.array(column_defaults())
    row[C["precision"]] = PRECISION_CODES[precision]
    for name, value in {**B200, **values}.items():
        row[C[name]] = value
    return row


def test_one_element_size_per_gemm_format():
    assert [gemm_weight_bytes(f) for f in (0.0, 1.0, 2.0)] == [2.0, 1.0, NVFP4]
    assert gemm_weight_bytes(False) == 2.0 and gemm_weight_bytes(True) == 1.0
    assert [low_precision_gemms(_row(p)) for p in ("bf16", "fp8", "fp4")] == [False, True, True]


def test_the_grouped_and_expert_gemm_times_read_the_format_bytes():
    """``grouped_gemm_time`` / ``expert_gemm_time`` are the rooflines at ``gemm_weight_bytes`` over
    ``stack_compute_eff`` with one launch: what moe_compute and mtp_costs computed by hand before."""
    row = _row("fp4", stack_compute_eff=0.5)
    for fmt in (0.0, 1.0, 2.0):
        wb = gemm_weight_bytes(fmt)
        assert (
            grouped_gemm_time(row, 4.0, 8.0, 4096.0, 2048.0, fmt)
            == gemm_roofline(row, 4.0, 8.0, 4096.0, 2048.0, fmt, wb, 1.0) / 0.5
        )
        assert (
            expert_gemm_time(row, 4.0, 8.0, 4096.0, 2048.0, fmt)
            == expert_gemm_roofline(row, 4.0, 8.0, 4096.0, 2048.0, fmt, wb, 1.0) / 0.5
        )


def test_a_w4a4_training_gemm_reads_its_input_at_nvfp4_bytes():
    """Memory bound of one (m x k) @ (k x n) GEMM: ``(w k n + a m k + 2 m n) / (bw eff)``. NVFP4 training (TE
    ``fp4_quant_fwd_inp``): w = a = 0.5625; FP8: 1 and 1; serving's W4A4 (precision code 0, format 2) keeps a = 1
    beside its own weight bytes."""
    m, n, k = 64.0, 4096.0, 2048.0
    bw = 8e12 * 0.8

    def memory(w, a):
        return (w * k * n + a * m * k + 2.0 * m * n) / bw

    extra = {"hbm_bw": 8e12, "hbm_eff": 0.8}
    assert gemm_bounds(_row("fp4", **extra), 1.0, m, n, k, 2.0, NVFP4)[1] == pytest.approx(memory(NVFP4, NVFP4))
    assert gemm_bounds(_row("fp8", **extra), 1.0, m, n, k, 1.0, 1.0)[1] == pytest.approx(memory(1.0, 1.0))
    assert gemm_bounds(_row("bf16", **extra), 1.0, m, n, k, 2.0, NVFP4)[1] == pytest.approx(memory(NVFP4, 1.0))
    # NVFP4's activation operand is (1 - 0.5625) m k B shorter than FP8's: 57,344 B here
    saved = memory(NVFP4, 1.0) - memory(NVFP4, NVFP4)
    assert saved * bw == pytest.approx(0.4375 * 64 * 2048)


def test_a_routed_expert_weight_gradient_reads_both_operands_at_nvfp4_bytes():
    """Weight gradient of E experts of m rows, forward (m x k) @ (k x n): the k x n gradient reduced over m, its
    operands the m x n output gradient (``fp4_quant_bwd_grad``) and the m x k input (columnwise copy), both 0.5625
    B under NVFP4: memory ``E (0.5625 m n + 0.5625 m k + 2 k n) / (bw eff)``; a compute peak so high that memory
    binds, no launch, no accumulation source."""
    row = _row("fp4", peak_flops_4=1e30, hbm_bw=8e12, hbm_eff=0.8, kernel_overhead_s=0.0, stack_compute_eff=1.0)
    groups, m, n, k = 8.0, 8.0, 4096.0, 2048.0
    expected = groups * (NVFP4 * m * n + NVFP4 * m * k + 2.0 * k * n) / (8e12 * 0.8)
    assert expert_wgrad_time(row, groups, m, n, k, 2.0, 0.0) == pytest.approx(expected, rel=1e-12)


def test_nvfp4_reduces_two_amaxes_per_quantized_input_over_tp_under_sp():
    """Per layer and direction two quantized tensors reduce their amaxes over the TP group (the column-parallel
    inputs forward, the row-parallel output gradients backward); NVFP4 coalesces its rowwise and columnwise amax,
    8 B each: ``2 (allreduce(8 B, tp) + collective_overhead_s)``. Current scaling's 4 B stays; bf16 and tp 1: 0."""
    row = _row("fp4", tp=4.0, sequence_parallel=1.0)
    overhead = row[C["collective_overhead_s"]]
    expected = 2.0 * (allreduce_time(row, 8.0, 4.0, 1.0) + overhead)
    assert amax_reduction_time(row) == pytest.approx(expected, rel=1e-15)
    assert amax_reduction_time(_row("fp4", tp=1.0)) == 0.0
    assert amax_reduction_time(_row("bf16", tp=4.0)) == 0.0
    current = _row("fp8", tp=4.0, fp8_recipe=2.0)
    assert amax_reduction_time(current) == pytest.approx(2.0 * (allreduce_time(current, 4.0, 4.0, 1.0) + overhead))
    # the layer's forward TP seconds carry it under sequence parallelism, beside its two all-gathers of the
    # column-parallel inputs at 0.5625 B instead of 2 B per element (docs/model.md §11.40)
    works = []
    for precision in ("bf16", "fp4"):
        work = np.zeros(N_LAYER_WORK)
        layer_costs(_row(precision, tp=4.0, sequence_parallel=1.0), False, False, work)
        works.append(work[W_TP])
    n = row[C["micro_batch"]] * row[C["seq_len"]] * row[C["hidden"]]
    gathers = 2.0 * (allgather_time(row, 0.5625 * n, 4.0, 1.0) - allgather_time(row, 2.0 * n, 4.0, 1.0))
    assert works[1] - works[0] == pytest.approx(expected + gathers, rel=1e-9)


def _layer_time(row):
    work = np.zeros(N_WORK)
    layer_passes(row, work)
    return layer_time(work)


@pytest.mark.parametrize("pp, start, end", [(1.0, 1.0, 2.0), (2.0, 1.0, 2.0), (1.0, 0.0, 0.0)])
def test_the_bf16_layers_take_the_16_bit_layer_time_on_the_ranks_that_hold_them(pp, start, end):
    """Megatron-LM get_fp4_context: layers l < start and l >= L - end run in BF16. Each adds t16 - t4 (the
    average layer at bf16 and at fp4); without a pipeline both ends are on the one rank."""
    row = _row("fp4", pp=pp, bf16_layers_start=start, bf16_layers_end=end)
    t4 = _layer_time(row)
    delta = _layer_time(_row("bf16", pp=pp)) - t4
    assert delta > 0.0
    first, last = bf16_layer_seconds(row, t4)
    if pp == 1.0:
        assert (first, last) == (0.0, pytest.approx((start + end) * delta, rel=1e-12))
    else:
        assert (first, last) == (pytest.approx(start * delta, rel=1e-12), pytest.approx(end * delta, rel=1e-12))
    # a 16-bit run has no low-precision layer to keep in BF16
    assert bf16_layer_seconds(_row("bf16", bf16_layers_end=end), t4) == (0.0, 0.0)


def test_the_last_stage_carries_its_bf16_layers_per_micro_batch():
    """pp 1: the busiest stage's micro-batch grows by (start + end)(t16 - t4); the average stage by the same / p."""
    base = _row("fp4", pp=1.0)
    kept = _row("fp4", pp=1.0, bf16_layers_start=1.0, bf16_layers_end=2.0)
    delta = _layer_time(_row("bf16", pp=1.0)) - _layer_time(base)
    before, after = stage_passes(base, np.zeros(N_WORK)), stage_passes(kept, np.zeros(N_WORK))
    assert after[0] - before[0] == pytest.approx(3.0 * delta, rel=1e-9)
    assert after[1] - before[1] == pytest.approx(3.0 * delta, rel=1e-9)


def test_the_columns_default_to_megatron_default_and_are_execution_options():
    """--first-last-layers-bf16 is off by default (TransformerConfig first_last_layers_bf16 = False): 0 layers."""
    defaults = column_defaults()
    assert defaults[C["bf16_layers_start"]] == 0.0 and defaults[C["bf16_layers_end"]] == 0.0
    assert ExecutionSpec(bf16_layers_end=2).bf16_layers_end == 2.0


def _memory(row):
    from fastmodel.kernels.lm.memory import memory_row
    from fastmodel.registry.lm import MEMORY_KINDS

    out = np.zeros(len(MEMORY_KINDS))
    memory_row(row, out)
    return dict(zip(MEMORY_KINDS, out))


def test_a_bf16_layer_holds_16_bit_weights_without_the_nvfp4_forms():
    """pp 1, tp 1, 16 dense layers (h 4096, 32 heads of 128, gated f 11008): a layer's linear parameters are
    ``h (a d + 2 kv d) + a d h + 3 h f`` = 202,375,168; under fp4 each is held at 2 + 2 x 0.5625 B, in a BF16 layer
    at 2 B. Three BF16 layers (1 first, 2 last) hold 3 x 202,375,168 x 1.125 B = 683,016,192 B less."""
    values = dict(pp=1.0, tp=1.0, layers=16.0, hidden=4096.0, heads=32.0, kv_heads=32.0, head_dim=128.0, ffn=11008.0)
    base, kept = (
        _memory(_row("fp4", **values)),
        _memory(_row("fp4", bf16_layers_start=1.0, bf16_layers_end=2.0, **values)),
    )
    linear = 4096.0 * (32 * 128 + 2 * 32 * 128) + 32 * 128 * 4096.0 + 3 * 4096.0 * 11008.0
    assert linear == 202_375_168
    assert base["weights"] - kept["weights"] == pytest.approx(3.0 * linear * 1.125, rel=1e-12)
    # every kind moves by the held share 3/16 of the way to the 16-bit run's
    wide = _memory(_row("bf16", **values))
    for kind in ("weights", "gradients", "optimizer", "activations", "buffers"):
        assert kept[kind] == pytest.approx(base[kind] + 3.0 / 16.0 * (wide[kind] - base[kind]), rel=1e-12)
    assert kept["activations"] > base["activations"]  # 16-bit saved GEMM inputs instead of NVFP4 copies


def test_the_memory_timeline_agrees_with_the_kernel_with_bf16_layers():
    """The report's per-rank timeline (fastmodel/lm/memory_timeline.py) blends every moment as the kernel blends
    every phase: the same peak on each end rank (pp 2: the first BF16 layer on rank 0, the last two on rank 1)."""
    from fastmodel.lm.memory_timeline import memory_timeline
    from fastmodel.registry.lm import MEMORY_KINDS

    row = _row("fp4", pp=2.0, layers=16.0, bf16_layers_start=1.0, bf16_layers_end=2.0)
    kernel = _memory(row)
    overhead = MEMORY_KINDS.index("overhead")
    peaks = [(s.values.sum(axis=1) - s.values[:, overhead]).max() for s in memory_timeline(row).stages]
    assert max(peaks) == pytest.approx(sum(kernel.values()) - kernel["overhead"], rel=1e-12)


def test_a_rank_holds_at_most_its_layers_in_bf16():
    """More BF16 layers than a rank holds (Megatron-LM refuses them under FP8: at most L / pp) count as the rank's
    ceil(L / pp) layers; without a pipeline at most L."""
    from fastmodel.kernels.lm.bf16_layers import bf16_rank_layers

    assert bf16_rank_layers(_row("fp4", pp=1.0, layers=16.0, bf16_layers_start=10.0, bf16_layers_end=10.0)) == (0, 16)
    assert bf16_rank_layers(_row("fp4", pp=2.0, layers=15.0, bf16_layers_start=100.0, bf16_layers_end=1.0)) == (8, 1)
    assert bf16_rank_layers(_row("bf16", pp=2.0, layers=16.0, bf16_layers_start=1.0, bf16_layers_end=1.0)) == (0, 0)
