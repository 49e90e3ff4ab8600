"""Tensor-parallel and replicated-weight terms of docs/model.md §11.44, each against a hand derivation: the LM
output layer's own input collectives (forward SP all-gather, backward reduce-scatter under the wgrad GEMM, or the
input gradient's all-reduce without SP), an MLA layer's forward gathers at the latents' widths and their
reduce-scatters, MLA's replicated down-projections (their GEMMs on the SP slice, their parameters whole on every
TP rank, their gradients all-reduced over TP once a step with the norms'), and the MTP module at BF16 under fp4."""

import numpy as np
import pytest

from fastmodel.kernels.lm.bf16_layers import bf16_row
from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.lm.layer import (
    N_WORK,
    W_GEMM,
    W_PARAMS,
    W_TP,
    W_TP_BACKWARD,
    W_TP_HIDDEN,
    head_costs,
    layer_costs,
)
from fastmodel.kernels.lm.mtp_breakdown import mtp_layer
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.kernels.lm.passes import layer_passes_of
from fastmodel.kernels.lm.shape import attention_params, attention_params_per_device, mla_duplicated_params
from fastmodel.kernels.lm.sp_regather import (
    embedding_tp,
    head_input_tp,
    mla_down_sp_excess,
    mla_sp_gathers,
    mtp_gemm_format,
    sp_replicated_grads_allreduce,
)
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.roofline import gemm_roofline, gemm_time, sp_gather_bytes
from fastmodel.lm.records import read_records
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.lm.lowprec_rows import BLACKWELL, HOPPER, MICRO, SEQ, TP, H, sp_row

N = SEQ * MICRO * H                                 # 25,165,824 elements of h per micro-batch
T = SEQ * MICRO
OVERHEAD = 20e-6
VOCAB = 51200.0
MLA = {"mla": 1.0, "heads": 128.0, "kv_heads": 128.0, "q_lora_rank": 1536.0, "kv_lora_rank": 512.0,
       "qk_nope_head_dim": 128.0, "qk_rope_head_dim": 64.0, "v_head_dim": 128.0, "ffn": 18432.0, "gated_mlp": 1.0,
       "hidden": 7168.0, "tp": 8.0}                   # DeepSeek-V3's attention (config.json), a dense layer, TP 8


def _row(precision="bf16", recipe="unstated", cc=HOPPER, **values) -> np.ndarray:
    return sp_row(precision, recipe, cc, overhead=OVERHEAD, vocab=VOCAB, **values)


def _exposed(row, c, d):
    """parallel.exposed by hand: what does not fit in the window d, plus comm_sm_share of the overlap."""
    return max(0.0, c - d) + row[C["comm_sm_share"]] * min(c, d)


def _work(row, fn, *args):
    work = np.zeros(N_WORK)
    fn(row, *args, work)
    return work


# --- 1. the output layer's own input collectives ------------------------------------------------------------------
def test_the_head_gathers_forward_and_reduce_scatters_backward_under_sp():
    """ColumnParallelLinear (Megatron-LM d98e8a6 layers.py 623-629, 700-709): forward AG(2 N) + o, synchronous;
    backward RS(2 N) + o (priced as the gather), async under the wgrad GEMM T x V/t x h (the dgrad's size):
    hidden c - exposed(c, D). MTP depths run the same layer: (1 + d) times."""
    row = _row()
    c = allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD
    d = gemm_time(row, T, VOCAB / TP, H, False)
    forward, backward, hidden = head_input_tp(row, T)
    assert forward == backward == pytest.approx(c, rel=1e-12)
    assert hidden == pytest.approx(c - _exposed(row, c, d), rel=1e-12)
    assert hidden == pytest.approx((1.0 - row[C["comm_sm_share"]]) * c, rel=1e-12)     # D > c: the SM share stays
    two = head_input_tp(_row(mtp_layers=2.0), T)
    assert two == pytest.approx((3.0 * c, 3.0 * c, 3.0 * hidden), rel=1e-12)
    # a DTensor plan (no Megatron async linear): the same collectives, none hidden
    assert head_input_tp(_row(sp_wgrad_regather=0.0), T) == pytest.approx((c, c, 0.0), rel=1e-12)


def test_without_sp_the_head_all_reduces_its_input_gradient_exposed():
    """694-696: without SP no forward collective and AR(2 N) + o backward, charged exposed [A]; TP 1: nothing."""
    row = _row(sequence_parallel=0.0)
    assert head_input_tp(row, T) == pytest.approx((0.0, allreduce_time(row, 2.0 * N, TP, 1.0) + OVERHEAD, 0.0))
    assert head_input_tp(_row(tp=1.0), T) == (0.0, 0.0, 0.0)


def test_head_costs_add_the_output_layer_collectives_to_the_loss_all_reduce():
    """PP 2 (the embedding on the first rank): forward loss + c, backward loss + c (RS) + c (the wgrad re-gather,
    §11.42). PP 1: the same rank also reduce-scatters the embedding forward (c) and all-gathers its gradient (c),
    exposed (VocabParallelEmbedding with reduce_scatter_embeddings, mappings.py 372-377)."""
    row = _row(pp=2.0)
    work = _work(row, head_costs)
    loss = allreduce_time(row, 12.0 * T, TP, 1.0)
    c = allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD
    assert work[W_TP] == pytest.approx(loss + c, rel=1e-12)
    assert work[W_TP_BACKWARD] == pytest.approx(loss + c + c, rel=1e-12)      # + the wgrad re-gather (§11.42)
    assert work[W_TP_HIDDEN] == pytest.approx(2.0 * (1.0 - row[C["comm_sm_share"]]) * c, rel=1e-12)
    one = _work(_row(pp=1.0), head_costs)
    assert one[W_TP] - work[W_TP] == pytest.approx(c, rel=1e-12)
    assert one[W_TP_BACKWARD] - work[W_TP_BACKWARD] == pytest.approx(c, rel=1e-12)
    assert one[W_TP_HIDDEN] == work[W_TP_HIDDEN]


def test_the_embedding_reduce_scatters_or_all_reduces_its_output():
    """SP: RS(2 N) + o forward (priced as the gather of its output), AG(2 N) + o backward; SP with learned
    positions: AR(2 N) + o forward, then a split (backward AG(2 N) + o); no SP: AR(2 N) + o forward, nothing
    backward (the all-reduce's backward is the identity); TP 1: nothing."""
    row = _row()
    c = allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD
    ar = allreduce_time(row, 2.0 * N, TP, 1.0) + OVERHEAD
    assert embedding_tp(row, T) == pytest.approx((c, c), rel=1e-12)
    assert embedding_tp(_row(learned_positions=1.0), T) == pytest.approx((ar, c), rel=1e-12)
    assert embedding_tp(_row(sequence_parallel=0.0), T) == pytest.approx((ar, 0.0), rel=1e-12)
    assert embedding_tp(_row(tp=1.0), T) == (0.0, 0.0)


def test_mlperf_v31_n96_head_gather_by_hand():
    """The MLPerf v3.1 n96 row (GPT-3 175B, TP 4, H100): AG(2 N) = 0.1235 ms (§11.40), o = its
    collective_overhead_s; forward + exposed backward per micro-batch = c + 0.15 c."""
    record = next(r for r in read_records("tests/data/runs_dev.jsonl") if r.id == "mlperf-v31-gpt3-175b-nvidia-n96")
    row = np.asarray(record.columns, dtype=np.float64).ravel()
    tokens = row[C["micro_batch"]] * row[C["seq_len"]]
    ag = allgather_time(row, 2.0 * tokens * row[C["hidden"]], 4.0, 1.0)
    assert ag == pytest.approx(0.1235e-3, abs=0.0005e-3)
    forward, backward, hidden = head_input_tp(row, tokens)
    c = ag + row[C["collective_overhead_s"]]
    assert forward == pytest.approx(c, rel=1e-12)
    assert backward - hidden == pytest.approx(row[C["comm_sm_share"]] * c, rel=1e-12)


# --- 2. MLA's forward gathers at the latents' widths ----------------------------------------------------------------
@pytest.mark.parametrize("precision, recipe, cc", [("bf16", "unstated", HOPPER), ("fp8", "current", HOPPER),
                                                   ("fp8", "mxfp8", BLACKWELL)])
@pytest.mark.parametrize("q_lora", [1536.0, 0.0])
def test_an_mla_layer_gathers_its_latents_forward_and_reduce_scatters_them_backward(precision, recipe, cc, q_lora):
    """Forward: AG(b_f T q_w) + AG(b_f T kv_lora) + AG(2 T rope) (k_pos_emb, 16-bit) + FC1's AG(b_f N) + 2 RS(2 N)
    + 6 o + 1.5 amax (three quantized gathers); backward: 2 AG(b_b N) + RS(2 T q_w) + RS(2 T kv_lora) + RS(2 T
    rope) + RS(2 N) + 6 o + amax, then the re-gathers (§11.42). q_w = q_lora, or h without a query low rank."""
    row = _row(precision, recipe, cc, **{**MLA, "q_lora_rank": q_lora})
    h, t = 7168.0, 8.0
    n = T * h
    work = _work(row, layer_costs, False, False)
    bf, bb = sp_gather_bytes(row, False), sp_gather_bytes(row, True)
    q_w = q_lora if q_lora > 0.0 else h
    ag = lambda nbytes: allgather_time(row, nbytes, t, 1.0)   # noqa: E731
    amax = amax_reduction_time(row)
    forward = ag(bf * T * q_w) + ag(bf * T * 512.0) + ag(2.0 * T * 64.0) + ag(bf * n) + 2.0 * ag(2.0 * n) \
        + 6.0 * OVERHEAD + 1.5 * amax
    backward = 2.0 * ag(bb * n) + ag(2.0 * T * q_w) + ag(2.0 * T * 512.0) + ag(2.0 * T * 64.0) + ag(2.0 * n) \
        + 6.0 * OVERHEAD + amax
    regathers = ag(bf * T * q_w) + ag(bf * T * 512.0) + ag(bf * n) + 3.0 * OVERHEAD
    assert work[W_TP] == pytest.approx(forward, rel=1e-12)
    assert work[W_TP_BACKWARD] == pytest.approx(backward + regathers, rel=1e-12)
    if precision == "fp8" and recipe == "current":
        assert amax > 0.0


def test_deepseek_v3_h100_bf16_attention_gathers_narrow():
    """The DeepSeek-V3 H100 BF16 plan (TP 2, T 4,096): the attention input's forward gather(s) + o, MLA's against
    the former AG(2 T h) + o (§11.42 "not modelled (2)": 0.053 against 0.093 ms a layer with their o's)."""
    record = next(r for r in read_records("tests/data/recipe_plans.jsonl")
                  if r.id == "mbridge-deepseek-v3-h100-bf16-v1")
    row = np.asarray(record.columns, dtype=np.float64).ravel()
    tokens, t, o = row[C["micro_batch"]] * row[C["seq_len"]], row[C["tp"]], row[C["collective_overhead_s"]]
    assert (t, tokens) == (2.0, 4096.0)
    wide = allgather_time(row, 2.0 * tokens * 7168.0, t, 1.0) + o
    forward, backward = mla_sp_gathers(row, tokens, t)
    by_hand = sum(allgather_time(row, 2.0 * tokens * w, t, 1.0) for w in (1536.0, 512.0, 64.0)) + 3.0 * o
    assert forward == pytest.approx(by_hand, rel=1e-12) and backward == pytest.approx(by_hand, rel=1e-12)
    assert forward < wide


# --- 3. MLA's replicated down-projections --------------------------------------------------------------------------
def test_mla_down_projections_are_replicated_in_the_parameter_count():
    """DeepSeek-V3: h (q_lora + kv_lora + rope) = 7,168 x 2,112 = 15,138,816 duplicated; all attention
    7,168 x 1,536 + 1,536 x 128 x 192 + 7,168 x 576 + 512 x 128 x 256 + 128 x 128 x 7,168 = 187,105,280; per
    TP 8 rank (187,105,280 - 15,138,816) / 8 + 15,138,816 = 36,634,624 (was 23,388,160)."""
    row = _row(**MLA)
    assert mla_duplicated_params(row) == 15_138_816.0
    assert attention_params(row) == 187_105_280.0
    assert attention_params_per_device(row, 8.0) == 36_634_624.0
    assert attention_params_per_device(row, 1.0) == attention_params(row)
    assert mla_duplicated_params(_row(**{**MLA, "q_lora_rank": 0.0})) == 7168.0 * 576.0   # linear_q_proj is split
    assert mla_duplicated_params(_row()) == 0.0
    dense = _work(row, layer_costs, False, False)
    gated = 3.0 * 7168.0 * 18432.0 / 8.0
    assert dense[W_PARAMS] == pytest.approx(36_634_624.0 + gated, rel=1e-12)


def test_mla_down_projections_run_on_the_sp_slice():
    """Under SP the duplicated down-projections take T/t rows at full width: W_GEMM drops by
    [G(T, q_lora, h) + G(T, kv_lora + rope, h)] - [the same at T/t rows], over stack_compute_eff."""
    row = _row(**MLA)
    g = lambda m, n: gemm_roofline(row, 1.0, m, n, 7168.0, 0.0, 2.0, 1.0)    # noqa: E731
    excess = (g(T, 1536.0) + g(T, 576.0) - g(T / 8.0, 1536.0) - g(T / 8.0, 576.0)) / row[C["stack_compute_eff"]]
    assert mla_down_sp_excess(row, T, 0.0, 2.0) == pytest.approx(excess, rel=1e-12)
    off = _row(**MLA, sequence_parallel=0.0)
    assert mla_down_sp_excess(off, T, 0.0, 2.0) == 0.0
    assert _work(off, layer_costs, False, False)[W_GEMM] - _work(row, layer_costs, False, False)[W_GEMM] \
        == pytest.approx(excess, rel=1e-12)


def test_sp_replicated_gradients_are_all_reduced_over_tp_once_a_step():
    """finalize_model_grads (d98e8a6 452, 474): one coalesced all-reduce over TP of L (norms + duplicated) at the
    gradient bytes: DeepSeek-V3, 4 layers, FP32: 4 x (2 x 7,168 + 1,536 + 512 + 15,138,816) x 4 B + o."""
    row = _row(**MLA, grad_reduce_bytes=4.0)
    per_layer = 2.0 * 7168.0 + 1536.0 + 512.0 + 15_138_816.0
    expected = allreduce_time(row, 4.0 * per_layer * 4.0, 8.0, 1.0) + OVERHEAD
    assert sp_replicated_grads_allreduce(row, 4.0) == pytest.approx(expected, rel=1e-12)
    dense = _row(grad_reduce_bytes=4.0)          # GPT-3's two norms only
    assert sp_replicated_grads_allreduce(dense, 12.0) == pytest.approx(
        allreduce_time(dense, 12.0 * 2.0 * H * 4.0, TP, 1.0) + OVERHEAD, rel=1e-12)
    for values in ({"sequence_parallel": 0.0}, {"tp": 1.0}, {"sp_wgrad_regather": 0.0}):
        assert sp_replicated_grads_allreduce(_row(**{**MLA, **values}), 4.0) == 0.0


# --- 4. MTP at BF16 under fp4 ----------------------------------------------------------------------------------------
def test_the_mtp_module_runs_bf16_under_fp4():
    """multi_token_prediction.py 1387-1394: only the FP8 context; under fp4 eh_proj and the layer at 16 bits."""
    fp4, fp8 = _row("fp4", cc=BLACKWELL, mtp_layers=1.0), _row("fp8", "delayed", mtp_layers=1.0)
    assert (mtp_gemm_format(fp4), mtp_gemm_format(fp8), mtp_gemm_format(_row())) == (0.0, 1.0, 0.0)
    expected, work = np.zeros(N_PASS_WORK), np.zeros(N_PASS_WORK)
    layer_passes_of(bf16_row(fp4), expected, False)
    seconds, _, _ = mtp_layer(fp4, work)
    assert np.array_equal(work, expected)
    forced = np.zeros(N_PASS_WORK)
    layer_passes_of(fp4, forced, False)
    assert not np.array_equal(forced, expected)           # the NVFP4 layer would differ
    one, base = _work(fp4, head_costs), _work(_row("fp4", cc=BLACKWELL), head_costs)
    d_eh = gemm_time(fp4, T, H / TP, 2.0 * H, 0.0)
    assert one[W_GEMM] - base[W_GEMM] - gemm_time(fp4, T, VOCAB / TP, H, False) == pytest.approx(d_eh, rel=1e-12)
    assert seconds > 0.0
