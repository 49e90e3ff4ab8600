"""Tensor-parallel terms of docs/model.md §11.42, each against a hand derivation: the LM head's and the MTP
``eh_proj``'s backward re-gathers of their sequence-parallel inputs and their overlap with the dgrad GEMM, the
``eh_proj`` input gather's bytes, an MLA layer's re-gathers (its up-projections' inputs, under their own dgrads), and
per-projection TP under SP priced gather by gather and reduce-scatter by reduce-scatter."""

import numpy as np
import pytest

from fastmodel.kernels.lm.fp8 import amax_reduction_time
from fastmodel.kernels.lm.layer import N_WORK, W_TP, W_TP_BACKWARD, W_TP_HIDDEN, head_costs, layer_costs
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.kernels.lm.passes import head_passes, tp_pass_factors
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.roofline import gemm_roofline, gemm_time
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.lm.lowprec_rows import BLACKWELL, HOPPER, MICRO, SEQ, TP, H, sp_row

N = SEQ * MICRO * H                                 # 25,165,824 elements of h per micro-batch
T = SEQ * MICRO
OVERHEAD = 20e-6
VOCAB = 51200.0


def _row(precision="bf16", recipe="unstated", cc=HOPPER, **values) -> np.ndarray:
    """MLPerf GPT-3 175B's shape at TP 4 with SP on (tests/lm/lowprec_rows.py), a collective overhead of OVERHEAD."""
    return sp_row(precision, recipe, cc, overhead=OVERHEAD, vocab=VOCAB, **values)


def _exposed(row, c, d):
    """parallel.exposed by hand: what does not fit in the window d, plus comm_sm_share of the overlap."""
    return max(0.0, c - d) + row[C["comm_sm_share"]] * min(c, d)


def _head(row):
    work = np.zeros(N_WORK)
    head_costs(row, work)
    return work


# --- 1. the LM head's output layer re-gathers its SP input (Megatron-Core ColumnParallelLinear, BF16) -------------
@pytest.mark.parametrize("precision, recipe, cc", [("bf16", "unstated", HOPPER), ("fp8", "delayed", HOPPER),
                                                   ("fp8", "mxfp8", BLACKWELL)])
def test_the_head_regathers_its_bf16_input_under_its_dgrad(precision, recipe, cc):
    """backward = forward + AG(2 N) + o (2 B at every precision: the output layer is Megatron-Core's own BF16
    ColumnParallelLinear); hidden = c - exposed(c, D), D the head's dgrad GEMM T x h x V/t at 16 bits. Since §11.44
    the forward also gathers the input (AG(2 N) + o) and the backward reduce-scatters its gradient (as much, hidden
    under the wgrad GEMM of the dgrad's size): twice the hidden share. PP 2: the embedding is on another rank."""
    row = _row(precision, recipe, cc, pp=2.0)
    work = _head(row)
    c = allgather_time(row, 2.0 * N, TP, 1.0) + OVERHEAD          # 50,331,648 B over 4 ranks, + o
    d = gemm_time(row, T, VOCAB / TP, H, False)
    assert work[W_TP] == pytest.approx(allreduce_time(row, 12.0 * T, TP, 1.0) + c, rel=1e-12)   # + the gather
    assert work[W_TP_BACKWARD] - work[W_TP] == pytest.approx(c, rel=1e-12)
    assert work[W_TP_HIDDEN] == pytest.approx(2.0 * (c - _exposed(row, c, d)), rel=1e-12)
    assert d > c            # the head's dgrad (T x 12,288 x 12,800) is the longer: all but the SM share hides
    assert work[W_TP_HIDDEN] == pytest.approx(2.0 * (1.0 - row[C["comm_sm_share"]]) * c, rel=1e-12)


def test_the_head_backward_pass_charges_only_the_exposed_regather():
    row = _row()
    work = _head(row)
    off = _head(_row(sp_wgrad_regather=0.0))
    forward, backward, weight = head_passes(row, np.zeros(N_PASS_WORK))
    forward0, backward0, weight0 = head_passes(_row(sp_wgrad_regather=0.0), np.zeros(N_PASS_WORK))
    assert (forward, weight) == (forward0, weight0)
    assert backward - backward0 == pytest.approx(work[W_TP_BACKWARD] - work[W_TP_HIDDEN] - off[W_TP_BACKWARD], rel=1e-9)
    assert off[W_TP_BACKWARD] == off[W_TP] and off[W_TP_HIDDEN] == 0.0     # a DTensor plan: symmetric as before


def test_no_head_regather_without_sp_or_tp():
    """Without SP the backward all-reduces the input gradient instead (§11.44, exposed); without TP nothing (PP 2:
    the embedding's all-reduce is on the first rank)."""
    row = _row(sequence_parallel=0.0, pp=2.0)
    work = _head(row)
    assert work[W_TP_BACKWARD] - work[W_TP] == pytest.approx(allreduce_time(row, 2.0 * N, TP, 1.0) + OVERHEAD, rel=1e-12)
    assert work[W_TP_HIDDEN] == 0.0
    work = _head(_row(tp=1.0))
    assert work[W_TP_BACKWARD] == work[W_TP] == 0.0 and work[W_TP_HIDDEN] == 0.0


# --- 3. the MTP eh_proj: its input gathered at the FP8 bytes (a TE column-parallel linear), re-gathered backward ---
@pytest.mark.parametrize("precision, recipe, cc, eh_bytes", [
    ("bf16", "unstated", HOPPER, 2.0),
    ("fp8", "delayed", HOPPER, 1.0),            # TE gathers the rowwise uint8 copy
    ("fp8", "mxfp8", BLACKWELL, 1.03125),       # data + E8M0 scales per 32
    ("fp4", "unstated", BLACKWELL, 2.0),        # "currently ignoring FP4 in MTP layers": 16-bit
])
def test_an_mtp_module_gathers_eh_proj_input_at_its_bytes_and_regathers_it(precision, recipe, cc, eh_bytes):
    """Per module: forward AG(b_eh T 2h) + AG(2 T h) (the output gather) + the loss all-reduce; backward the
    input gradient's reduce-scatter at 2 B (priced as AG(2 T 2h)), AG(2 T h), the loss all-reduce, and the
    re-gathers: the head's input again (AG(2 N) + o, once more per module) and eh_proj's (AG(b_eh T 2h) + o);
    each direction also the depth's word-embedding call's RS / AG (AG(2 N) + o, docs/model.md §11.44 1c)."""
    base, one = _head(_row(precision, recipe, cc)), _head(_row(precision, recipe, cc, mtp_layers=1.0))
    row = _row(precision, recipe, cc, mtp_layers=1.0)
    eh = allgather_time(row, eh_bytes * T * 2.0 * H, TP, 1.0)
    out = allgather_time(row, 2.0 * N, TP, 1.0)
    loss = allreduce_time(row, 12.0 * T, TP, 1.0)
    head = out + OVERHEAD       # §11.44: the output layer's own input gather, and its reduce-scatter backward
    embedding = out + OVERHEAD  # §11.44 1c: the depth's embedding call, RS forward (priced as AG), AG backward
    assert one[W_TP] - base[W_TP] == pytest.approx(loss + out + eh + head + embedding, rel=1e-12)
    scatter = allgather_time(row, 2.0 * T * 2.0 * H, TP, 1.0)
    backward = loss + out + scatter + (out + OVERHEAD) + (eh + OVERHEAD) + head + embedding
    assert one[W_TP_BACKWARD] - base[W_TP_BACKWARD] == pytest.approx(backward, rel=1e-12)
    # hidden: the head's re-gather under the head's dgrad again, eh_proj's under its own (T x h/t x 2h)
    fmt = {"bf16": 0.0, "fp8": 1.0, "fp4": 0.0}[precision]     # eh_proj GEMM at the training format, BF16 under fp4
    c_eh, d_eh = eh + OVERHEAD, gemm_time(row, T, H / TP, 2.0 * H, fmt)
    c_head, d_head = out + OVERHEAD, gemm_time(row, T, VOCAB / TP, H, False)
    hidden = 2.0 * (c_head - _exposed(row, c_head, d_head)) + c_eh - _exposed(row, c_eh, d_eh)
    assert one[W_TP_HIDDEN] - base[W_TP_HIDDEN] == pytest.approx(hidden, rel=1e-12)


# --- 2. MLA: the up-projections re-gather their (latent-wide) inputs under their own dgrads -----------------------
MLA = {"mla": 1.0, "heads": 128.0, "kv_heads": 128.0, "q_lora_rank": 1536.0, "kv_lora_rank": 512.0,
       "qk_nope_head_dim": 128.0, "qk_rope_head_dim": 64.0, "v_head_dim": 128.0, "ffn": 18432.0, "gated_mlp": 1.0,
       "hidden": 7168.0, "tp": 8.0}                   # DeepSeek-V3's attention (config.json), a dense layer, TP 8


def _layer(row):
    work = np.zeros(N_WORK)
    layer_costs(row, False, False, work)
    return work


def _gemm(row, m, n, k):
    return gemm_roofline(row, 1.0, m, n, k, False, 2.0, 1.0) / row[C["stack_compute_eff"]]


@pytest.mark.parametrize("q_lora", [1536.0, 0.0])
def test_an_mla_layer_regathers_its_up_projection_inputs(q_lora):
    """Re-gathers: q_up's input (q_lora wide; linear_q_proj's, h wide, without a query low rank), kv_up's (kv_lora
    wide) and FC1's (h wide), each AG(2 T width) + o; the down-projections are duplicated TELinear (no TP
    communication). Hidden: each under its own dgrad, q T x a (nope + rope)/t x q_width, kv T x a (nope + v)/t x
    kv_lora, FC1 T x 2 f/t x h."""
    row = _row(**{**MLA, "q_lora_rank": q_lora})
    h, t = 7168.0, 8.0
    on, off = _layer(row), _layer(_row(**{**MLA, "q_lora_rank": q_lora}, sp_wgrad_regather=0.0))
    q_width = q_lora if q_lora > 0.0 else h
    c_q = allgather_time(row, 2.0 * T * q_width, t, 1.0) + OVERHEAD
    c_kv = allgather_time(row, 2.0 * T * 512.0, t, 1.0) + OVERHEAD
    c_fc1 = allgather_time(row, 2.0 * T * h, t, 1.0) + OVERHEAD
    assert on[W_TP] == off[W_TP]
    assert on[W_TP_BACKWARD] - off[W_TP_BACKWARD] == pytest.approx(c_q + c_kv + c_fc1, rel=1e-12)
    d_q = _gemm(row, T, 128.0 * 192.0 / t, q_width)
    d_kv = _gemm(row, T, 128.0 * 256.0 / t, 512.0)
    d_fc1 = _gemm(row, T, 2.0 * 18432.0 / t, h)
    hidden = sum(c - _exposed(row, c, d) for c, d in ((c_q, d_q), (c_kv, d_kv), (c_fc1, d_fc1)))
    assert on[W_TP_HIDDEN] == pytest.approx(hidden, rel=1e-12)
    assert on[W_TP_HIDDEN] > c_fc1 - _exposed(row, c_fc1, d_fc1)        # the QKV window is no longer 0


# --- 4. per-projection TP under SP: gathers and reduce-scatters each at their own bytes --------------------------
@pytest.mark.parametrize("gated, n", [(0.0, 4.0), (1.0, 5.0)])      # q, k, v + up (+ gate)
@pytest.mark.parametrize("precision, recipe, cc, b_f, b_b", [
    ("bf16", "unstated", HOPPER, 2.0, 2.0),
    ("fp8", "mxfp8", BLACKWELL, 1.03125, 2.0625),
])
def test_per_projection_tp_under_sp_by_hand(gated, n, precision, recipe, cc, b_f, b_b):
    """forward n AG(b_f N) + 2 AG(2 N) + (n + 2) o; backward 2 AG(b_b N) + n AG(2 N) + (n + 2) o (the reduce-
    scatters at 2 B, priced as all-gathers); KempnerForge's DTensor plan re-gathers nothing. At 16 bits this is the
    former (n + 2)/4 of the Megatron layer's TP; under MXFP8 it is not."""
    row = _row(precision, recipe, cc, tp_per_projection=1.0, gated_mlp=gated, sp_wgrad_regather=0.0)
    assert tp_pass_factors(row) == (1.0, 1.0)
    work = _layer(row)
    ag_f, ag_b, rs = (allgather_time(row, b * N, TP, 1.0) for b in (b_f, b_b, 2.0))
    forward = n * ag_f + 2.0 * rs + (n + 2.0) * OVERHEAD
    backward = 2.0 * ag_b + n * rs + (n + 2.0) * OVERHEAD
    assert (work[W_TP], work[W_TP_BACKWARD]) == pytest.approx((forward, backward), rel=1e-12)
    megatron = _layer(_row(precision, recipe, cc, gated_mlp=gated, sp_wgrad_regather=0.0))
    former = (n + 2.0) / 4.0
    if precision == "bf16":
        assert (work[W_TP], work[W_TP_BACKWARD]) == pytest.approx(
            (former * megatron[W_TP], former * megatron[W_TP_BACKWARD]), rel=1e-12)
    else:     # the factor gave the n cheap forward gathers the reduce-scatters' 2 B weight, and the backward's
        # 2 gathers of 2.0625 B the weight of n: both directions too high
        assert former * megatron[W_TP] > work[W_TP] * 1.05 and former * megatron[W_TP_BACKWARD] > work[W_TP_BACKWARD]


def test_per_projection_amax_reductions_follow_the_gathers():
    """Current scaling: one amax all-reduce per quantized gather (two per Megatron layer and direction,
    amax_reduction_time): n / 2 of them forward, 1 backward."""
    row = _row("fp8", "tensorwise", tp_per_projection=1.0, gated_mlp=1.0, sp_wgrad_regather=0.0)
    amax = amax_reduction_time(row)
    assert amax > 0.0
    work = _layer(row)
    ag_f, ag_b, rs = (allgather_time(row, b * N, TP, 1.0) for b in (1.0, 1.0, 2.0))
    assert work[W_TP] == pytest.approx(5.0 * ag_f + 2.0 * rs + 7.0 * OVERHEAD + 2.5 * amax, rel=1e-12)
    assert work[W_TP_BACKWARD] == pytest.approx(2.0 * ag_b + 5.0 * rs + 7.0 * OVERHEAD + amax, rel=1e-12)


@pytest.mark.parametrize("gated, n", [(0.0, 4.0), (1.0, 5.0)])
def test_per_projection_tp_regathers_each_projection_input(gated, n):
    """With sp_wgrad_regather each of the n column-parallel projections saves its own local slice and gathers it
    again for its weight gradient: n AG(2 N) + n o in backward beyond the plan's TP (the Megatron layer: 2)."""
    row = _row(tp_per_projection=1.0, gated_mlp=gated, sp_wgrad_regather=1.0)
    plain = _layer(_row(tp_per_projection=1.0, gated_mlp=gated, sp_wgrad_regather=0.0))
    ag = allgather_time(row, 2.0 * N, TP, 1.0)
    assert _layer(row)[W_TP_BACKWARD] - plain[W_TP_BACKWARD] == pytest.approx(n * (ag + OVERHEAD), rel=1e-12)


def test_per_projection_tp_on_moe_or_mla_is_refused():
    """The per-projection counts (3 + 2 inputs) are a dense block's: at tp > 1 an MoE or MLA model is refused with
    its own status (kernels/lm/rules.py, §11.42 item 4); a dense one, or tp 1, is not."""
    from fastmodel.kernels.lm.rules import plan_status_row
    from fastmodel.registry.lm import STATUS_CODES

    refused = STATUS_CODES["tp_per_projection_unsupported"]
    legal = {"n_gpus": TP, "dp": 1.0, "pp": 1.0, "vp": 1.0, "cp": 1.0, "ep": 1.0, "global_batch": MICRO,
             "micro_batch": MICRO}
    assert plan_status_row(_row(tp_per_projection=1.0, **legal)) == 0
    for values in ({"moe_experts": 8.0, "moe_topk": 2.0}, {"mla": 1.0}):
        assert plan_status_row(_row(tp_per_projection=1.0, **legal, **values)) == refused
        assert plan_status_row(_row(tp_per_projection=0.0, **legal, **values)) == 0
        assert plan_status_row(_row(tp_per_projection=1.0, **{**legal, "tp": 1.0, "n_gpus": 1.0}, **values)) == 0
