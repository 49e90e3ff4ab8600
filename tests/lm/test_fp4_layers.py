"""NVFP4 training, second pass (docs/model.md §11.39): one element size of the GEMM formats, the layers a run keeps
in BF16 (Megatron-LM ``--num-layers-at-start-in-bf16`` / ``--num-layers-at-end-in-bf16``), the NVFP4 activation
operands of W4A4 GEMMs and NVFP4's amax all-reduces over the TP group, each against a hand derivation."""

import numpy as np
import pytest

from fastmodel.kernels.lm.bf16_layers import bf16_end_work
from fastmodel.kernels.lm.fp4 import low_precision_gemms
from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.lm.layer import N_WORK as N_LAYER_WORK
from fastmodel.kernels.lm.layer import W_TP, layer_costs
from fastmodel.kernels.lm.passes import N_WORK, head_passes, layer_passes, layer_time
from fastmodel.kernels.lm.step import busiest_stage
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
from fastmodel.registry.lm import BREAKDOWN, PRECISION_CODES, column_defaults
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.lm.lowprec_rows import precision_row

NVFP4 = 0.5 + 1.0 / 16.0
B200 = {"peak_flops_16": 2.25e15, "peak_flops_8": 4.5e15, "peak_flops_4": 9e15, "compute_capability": 10.0}


def _row(precision: str, **values) -> np.ndarray:
    return precision_row(precision, **{**B200, **values})


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
    n_first, d_first, n_last, d_last = bf16_end_work(row, False)
    first, last = n_first * layer_time(d_first), n_last * layer_time(d_last)
    if pp == 1.0:
        assert (first, last) == (0.0, pytest.approx((start + end) * delta, rel=1e-12))
    else:
        assert (first, last) == (pytest.approx(start * delta, rel=1e-12), pytest.approx(end * delta, rel=1e-12))
    # a 16-bit run has no low-precision layer to keep in BF16
    assert bf16_end_work(_row("bf16", bf16_layers_end=end), False)[::2] == (0.0, 0.0)


def test_the_last_stage_carries_its_bf16_layers_per_micro_batch():
    """pp 1: the busiest stage's micro-batch grows by (start + end)(t16 - t4); the average stage by the same / p."""
    base = _row("fp4", pp=1.0)
    kept = _row("fp4", pp=1.0, bf16_layers_start=1.0, bf16_layers_end=2.0)
    delta = _layer_time(_row("bf16", pp=1.0)) - _layer_time(base)
    before, after = busiest_stage(base, np.zeros(N_WORK))[:6], busiest_stage(kept, np.zeros(N_WORK))[:6]
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
    """More BF16 layers than a rank holds (the rule table refuses them, ``bf16_layers_above_stage``: Megatron-LM's
    floor(L / pp) under FP8) count as floor(L / pp) layers if a kernel meets them; without a pipeline at most L."""
    from fastmodel.kernels.lm.bf16_layers import bf16_rank_layers

    assert bf16_rank_layers(_row("fp4", pp=1.0, layers=16.0, bf16_layers_start=10.0, bf16_layers_end=10.0)) == (0, 16)
    assert bf16_rank_layers(_row("fp4", pp=2.0, layers=15.0, bf16_layers_start=100.0, bf16_layers_end=1.0)) == (7, 1)
    assert bf16_rank_layers(_row("bf16", pp=2.0, layers=16.0, bf16_layers_start=1.0, bf16_layers_end=1.0)) == (0, 0)


def _spec_columns(precision, plan, start, end, **values):
    """Llama 3 8B on one DGX B200 node (``fastmodel run -m llama3-8b -s dgx-b200 -t llm-pretrain -p PLAN``)."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    train = load_train_task("llm-pretrain")
    execution = {"precision": precision, "bf16_layers_start": start, "bf16_layers_end": end}
    if precision == "fp8":  # Megatron-LM refuses BF16 layers under delayed scaling, its default (§11.39)
        execution["fp8_recipe"] = "tensorwise"
    columns = point_columns(load_lm_model("llama3-8b"), "dgx-b200", train, plan=train.mesh(plan), execution=execution)
    for name, value in values.items():
        columns[C[name]] = value
    return columns


def _results(columns):
    from fastmodel.lm.engine import evaluate_table

    return {k: float(v[0]) for k, v in evaluate_table(columns[:, None]).items()}


def _passes(columns):
    work = np.zeros(N_WORK)
    layer_passes(columns, work)
    return work


PARTS = BREAKDOWN.overlapped     # the parts that add up to step_time (registry/lm.py)


@pytest.mark.parametrize("precision", ["fp8", "fp4"])
@pytest.mark.parametrize("plan, start, end", [("tp1.pp1", 2, 2), ("tp1.pp4", 2, 2), ("tp1.pp4", 8, 0)])
def test_the_step_is_the_sum_of_its_parts_with_bf16_layers(precision, plan, start, end):
    """The breakdown holds the busiest rank's BF16 layers part by part: with them the step is still the sum of its
    parts, and each part grows by m n (x16 - x), x a layer's seconds of that part at bf16 and at the row's format,
    n the busiest rank's BF16 layers (pp 1: 2 + 2 on the one rank; pp 4: the last rank's 2, or the first rank's 8
    when they make it the busiest: 8 t16 > 8 t + t_head). The per-op timeline draws them and still adds up."""
    from fastmodel.kernels.lm.passes import A_ATTN, A_GEMM, A_MEM, A_TP_COMM
    from fastmodel.lm.timeline import KINDS, timeline

    kept, base = _spec_columns(precision, plan, start, end), _spec_columns(precision, plan, 0, 0)
    r, r0 = _results(kept), _results(base)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)
    wide = kept.copy()
    wide[C["precision"]] = PRECISION_CODES["bf16"]
    low, high = _passes(kept), _passes(wide)
    m = kept[C["global_batch"]] / (kept[C["micro_batch"]] * kept[C["dp"]])
    n = {("tp1.pp1", 2): 4.0, ("tp1.pp4", 2): 2.0, ("tp1.pp4", 8): 8.0}[plan, start]
    for part, slot in (("time_gemm", A_GEMM), ("time_attention", A_ATTN), ("time_memory_bound", A_MEM)):
        if start == 8:  # the first rank leads: its 8 layers, no head, against the last rank's 8 and the head
            continue
        assert r[part] - r0[part] == pytest.approx(m * n * (high[slot] - low[slot]), rel=1e-9, abs=1e-12)
    assert r["comm_tp"] == r0["comm_tp"] == 0.0 and high[A_TP_COMM] == 0.0  # tp 1
    if start == 8:
        t, t16 = layer_time(low), layer_time(high)
        assert r["time_gemm"] == pytest.approx(m * 8.0 * high[A_GEMM], rel=1e-9)  # every layer of rank 0 at bf16
        assert 8.0 * t16 > 8.0 * t + sum(head_passes(kept, np.zeros(N_WORK)))
    tl = timeline(kept)
    assert tl.end.max() == pytest.approx(r["step_time"], rel=1e-9)
    compute = np.isin(tl.kind, [KINDS.index(k) for k in ("gemm", "attention", "memory_bound", "recompute", "head")])
    drawn = float(np.sum((tl.end - tl.start)[compute & (tl.stream == 0)]))
    assert drawn == pytest.approx(r["time_gemm"] + r["time_attention"] + r["time_memory_bound"], rel=1e-9)


def _layer_ops(tl, name):
    """Seconds of one layer's compute ops (forward, backward, recompute) in micro-batch 0 of a timeline."""
    from fastmodel.lm.timeline import KINDS

    on = np.array([n.startswith(f"mb0 {name} ") for n in tl.names]) & (tl.stream == 0)
    on &= tl.kind != KINDS.index("head")
    return float(np.sum((tl.end - tl.start)[on]))


@pytest.mark.parametrize(
    "plan, bf16, other",
    [("tp1.pp1", ("L0", "L1", "L30", "L31"), ("L2", "L29")), ("tp1.pp4", ("L6", "L7"), ("L0", "L5"))],
)
def test_the_timeline_draws_the_bf16_layers_at_their_16_bit_ops(plan, bf16, other):
    """A BF16 layer's ops last a layer's compute at bf16 (GEMM + attention + memory-bound seconds of all its
    passes, ``layer_passes`` of the bf16 row), the others the fp4 layer's: pp 1 draws Megatron's layers 0, 1 and
    30, 31 so; pp 4's busiest (last) rank its last two of 8."""
    from fastmodel.kernels.lm.passes import A_ATTN, A_GEMM, A_MEM
    from fastmodel.lm.timeline import timeline

    columns = _spec_columns("fp4", plan, 2, 2)
    wide = columns.copy()
    wide[C["precision"]] = PRECISION_CODES["bf16"]
    low, high = _passes(columns), _passes(wide)
    tl = timeline(columns)
    for name in bf16:
        assert _layer_ops(tl, f"{name} (BF16)") == pytest.approx(high[A_GEMM] + high[A_ATTN] + high[A_MEM], rel=1e-9)
    for name in other:
        assert _layer_ops(tl, name) == pytest.approx(low[A_GEMM] + low[A_ATTN] + low[A_MEM], rel=1e-9)
    assert _layer_ops(tl, f"{bf16[0]} (BF16)") > _layer_ops(tl, other[0])


def test_the_1f1b_bubble_takes_the_first_ranks_bf16_layers_in_its_average_stage():
    """1F1B, pp 4 (8B: 32 layers, 8 a rank), the first 2 layers in BF16 on rank 0. The busiest rank stays the last
    (8 t + t_head > 8 t + 2 (t16 - t)), so the bubble is the exact p t_avg - t_mb, the ranks before the last
    (docs/model.md §11.43): 3 x 8 t + 2 (t16 - t), with t_avg = (L / p) t + t_head / p + 2 (t16 - t) / p; the
    step grows by the first rank's 2 (t16 - t) only."""
    from fastmodel.kernels.lm.pipeline import pipeline_bubble

    kept, base = _spec_columns("fp4", "tp1.pp4", 2, 0), _spec_columns("fp4", "tp1.pp4", 0, 0)
    assert kept[C["pipeline_schedule"]] == 0.0 and kept[C["pp"]] == 4.0 and kept[C["layers"]] == 32.0
    wide = kept.copy()
    wide[C["precision"]] = PRECISION_CODES["bf16"]
    t, t16 = layer_time(_passes(kept)), layer_time(_passes(wide))
    head = sum(head_passes(kept, np.zeros(N_WORK)))
    assert 8.0 * t + head > 8.0 * t + 2.0 * (t16 - t)
    average = 8.0 * t + head / 4.0 + 2.0 * (t16 - t) / 4.0
    bubble = 4.0 * average - (8.0 * t + head)
    assert bubble == pytest.approx(3.0 * 8.0 * t + 2.0 * (t16 - t), rel=1e-12)
    r, r0 = _results(kept), _results(base)
    assert r["time_host_wait"] == 0.0
    assert r["pipeline_bubble"] == pytest.approx(bubble, rel=1e-9)
    assert r["step_time"] - r0["step_time"] == pytest.approx(2.0 * (t16 - t), rel=1e-9)
    # ZB-H1 reads the average stage's F and W: the BF16 layers' forward and weight passes are in them
    zb = kept.copy()
    zb[C["pipeline_schedule"]] = 3.0
    _, average, forward, weight, *_ = busiest_stage(zb, np.zeros(N_WORK))[:6]
    low, high = _passes(kept), _passes(wide)
    from fastmodel.kernels.lm.passes import A_BACKWARD_WEIGHT, A_EXPOSED_F, A_FORWARD

    f = (
        8.0 * (low[A_FORWARD] + low[A_EXPOSED_F])
        + head_passes(kept, np.zeros(N_WORK))[0] / 4.0
        + 2.0 * (high[A_FORWARD] + high[A_EXPOSED_F] - low[A_FORWARD] - low[A_EXPOSED_F]) / 4.0
    )
    w = (
        8.0 * low[A_BACKWARD_WEIGHT]
        + head_passes(kept, np.zeros(N_WORK))[2] / 4.0
        + 2.0 * (high[A_BACKWARD_WEIGHT] - low[A_BACKWARD_WEIGHT]) / 4.0
    )
    assert (forward, weight) == (pytest.approx(f, rel=1e-12), pytest.approx(w, rel=1e-12))
    b = average - f - w
    assert pipeline_bubble(zb, average, forward, weight) == pytest.approx(3.0 * (f + b - min(b, w)), rel=1e-12)
