"""DeepSpeed-MoE's dense einsum dispatch and combine (kernels/lm/moe.py ``einsum_time``, docs/model.md §11.14.4),
derived by hand on the 1.3B+MoE-128 shape of Rajbhandari et al. 2022 (tests/data/runs_moe_public.jsonl)."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_BACKWARD_MEM, W_FORWARD_ONLY, W_GEMM, W_WGRAD, layer_costs
from fastmodel.kernels.lm.moe import (
    EINSUM_GATING_BACKWARD_BYTES,
    EINSUM_GATING_FORWARD_BYTES,
    einsum_gating_time,
    einsum_time,
    permutation_pairs,
)
from fastmodel.kernels.lm.passes import A_BACKWARD_INPUT, A_FORWARD, A_MEM, A_RECOMPUTE, _add_layer_kind
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.kernels.roofline import gemm_time
from fastmodel.lm.records import lower_record
from fastmodel.lm.table import row

DATA = Path(__file__).resolve().parents[1] / "data"
#: 1.3B base, 128 top-1 experts of width 8192, one per GPU, capacity factor 1 padded, 4 x 2048 tokens per GPU
MOE128 = dict(layers=24, hidden=2048, ffn=8192, heads=16, kv_heads=16, vocab=50304, seq_len=2048, moe_experts=128,
              moe_topk=1, moe_ffn=8192, moe_capacity_factor=1.0, moe_pad_to_capacity=1, ep=128, dp=128,
              micro_batch=4, global_batch=512)


def test_each_einsum_is_one_gemm_over_the_capacity_slots():
    """S = 4 x 2048 = 8192 tokens; top1gating's capacity C = ceil(S / E x cf) = 64, so E C = 8192 slots.
    'sec,sm->ecm' is (E C x S) @ (S x h), 'sec,ecm->sm' is (S x E C) @ (E C x h): 2 S E C h = 2.75e11 FLOPs each,
    the FLOPs of one expert GEMM of width h over the same rows."""
    r = row(**MOE128, moe_dispatcher="einsum")
    s, slots, h = 4 * 2048, 128 * 64, 2048
    dispatch, combine = einsum_time(r)
    assert dispatch == gemm_time(r, slots, h, s, False)
    assert combine == gemm_time(r, s, h, slots, False)
    assert 2 * s * slots * h == pytest.approx(2.749e11, rel=1e-3)
    assert einsum_time(row(**MOE128, moe_dispatcher="alltoall")) == (0.0, 0.0)


def test_the_einsums_replace_the_permutation():
    assert permutation_pairs(row(**MOE128, moe_dispatcher="einsum")) == 0.0
    assert permutation_pairs(row(**MOE128, moe_dispatcher="alltoall")) == 1.0


def test_the_layer_runs_both_einsums_and_a_weight_gradient_for_the_combine_only():
    """Forward (and so input gradients and recompute): dispatch + combine added to the layer's GEMMs. The weight-
    gradient pass charges the layer's GEMMs once more; the dispatch mask is not differentiable (one_hot, cast),
    so its share comes off W_WGRAD: backward = dispatch + 2 combine (gradients of input, expert output, weights)."""
    with_, without = np.zeros(N_WORK), np.zeros(N_WORK)
    r = row(**MOE128, moe_dispatcher="einsum")
    layer_costs(r, True, False, with_)
    layer_costs(row(**MOE128, moe_dispatcher="alltoall"), True, False, without)
    dispatch, combine = einsum_time(r)
    assert with_[W_GEMM] - without[W_GEMM] == pytest.approx(dispatch + combine, rel=1e-12)
    assert with_[W_WGRAD] - without[W_WGRAD] == pytest.approx(-dispatch, rel=1e-12)


def test_the_deepspeed_moe_record_dispatches_with_einsums():
    line = next(x for x in (DATA / "runs_moe_public.jsonl").read_text().splitlines()
                if '"id": "deepspeed-moe-1.3b-moe128-a100-n128"' in x)
    columns = lower_record(json.loads(line)).columns
    dispatch, combine = einsum_time(np.ascontiguousarray(columns))
    assert dispatch > 0.0 and combine > 0.0


def test_the_gating_tensors_move_18_bytes_per_slot_forward_and_10_backward_by_hand():
    """DeepSpeed v0.5.8 ``top1gating`` and ``MOELayer.forward`` over S x E C = 8192 x 8192 = 67.1M elements
    (docs/model.md §11.14.9): the FP32 combine weights written (4), read by ``.bool()`` (4) which writes the mask
    (1), the mask cast to 16 bits (1 + 2), the combine weights cast to 16 bits (4 + 2): 18 B forward; backward,
    the gradient cast back to FP32 (2 + 4) and read by the gates' gradient (4): 10 B. On A100-40GB (1.555 TB/s x
    0.85) under full recompute (two forwards, one backward) that is (2 x 18 + 10) x 67.1M B = 2.33 ms per MoE
    layer and micro-batch, 28.0 ms over the row's 12 MoE layers."""
    assert EINSUM_GATING_FORWARD_BYTES == 4 + 4 + 1 + 1 + 2 + 4 + 2 == 18.0
    assert EINSUM_GATING_BACKWARD_BYTES == 2 + 4 + 4 == 10.0
    bw = 1.555e12 * 0.85
    fields = dict(MOE128, hbm_bw=1.555e12, hbm_eff=0.85)
    elements = 8192 * 8192
    forward, backward = einsum_gating_time(row(**fields, moe_dispatcher="einsum"))
    assert forward == pytest.approx(18 * elements / bw, rel=1e-12)
    assert backward == pytest.approx(10 * elements / bw, rel=1e-12)
    assert einsum_gating_time(row(**fields, moe_dispatcher="alltoall")) == (0.0, 0.0)
    # through the layer's passes (full recompute: the forward slot twice, the backward slot once)
    r = row(**fields, moe_dispatcher="einsum", recompute=2)
    gated = np.zeros(N_PASS_WORK)
    layer_costs(r, True, False, gated)
    assert (gated[W_FORWARD_ONLY], gated[W_BACKWARD_MEM]) == (forward, backward)
    plain = gated.copy()
    plain[W_FORWARD_ONLY] = plain[W_BACKWARD_MEM] = 0.0
    _add_layer_kind(r, 1.0, 1.0, 0.0, False, 1.0, gated)
    _add_layer_kind(r, 1.0, 1.0, 0.0, False, 1.0, plain)
    slots = (A_FORWARD, A_BACKWARD_INPUT, A_RECOMPUTE)
    per_layer = sum(gated[k] - plain[k] for k in slots)
    assert per_layer == pytest.approx((2 * 18 + 10) * elements / bw, rel=1e-9)
    assert gated[A_MEM] - plain[A_MEM] == pytest.approx(per_layer, rel=1e-9)
    assert per_layer == pytest.approx(2.335e-3, rel=1e-3)
    assert 12 * per_layer == pytest.approx(0.0280, rel=2e-3)
