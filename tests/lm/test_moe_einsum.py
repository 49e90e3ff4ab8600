"""DeepSpeed-MoE's dense einsum dispatch and combine (kernels/lm/moe.py ``einsum_time``, docs/model.md §11.14.4),
derived by hand on the 1.3B+MoE-128 shape of Rajbhandari et al. 2022 (tests/data/runs_moe_public.jsonl)."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import N_WORK, W_GEMM, W_WGRAD, layer_costs
from fastmodel.kernels.lm.moe import einsum_time, permutation_pairs
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
