"""Llama 4 Scout and Maverick (specs/models/llama4-*.toml) against Meta's published counts (Llama 4 model card:
Scout 17B activated / 109B total, Maverick 17B / 400B). Total: ``memory_states.stage_params`` at tp = pp = ep = 1
(the text decoder). Active: ``model_flops_per_token`` / 6 less its attention-score term, 6 s a (d_qk + d_v) L / 6
(matmul parameters a token runs through, LM head and routers included, input embedding excluded), plus the V x h
input embedding, which Meta's 17B counts (without it both models are 16.1B)."""

from __future__ import annotations

import pytest

from fastmodel.kernels.lm.layer import model_flops_per_token
from fastmodel.kernels.lm.memory_states import stage_params
from fastmodel.lm.loader import load_lm_model
from fastmodel.lm.lowering import model_values
from fastmodel.lm.table import row


def _counts(name: str) -> tuple[float, float]:
    values = model_values(load_lm_model(name))
    vector = row(**values)
    total = sum(stage_params(vector, 0.0))
    scores = values["seq_len"] * values["heads"] * 2 * values["head_dim"] * values["layers"]
    active = model_flops_per_token(vector) / 6.0 - scores + values["vocab"] * values["hidden"]
    return total, active


def test_scout_total_and_active_parameters():
    """By hand, per layer (all 48 MoE): attention 5120 x (5120 + 2 x 1024) + 5120 x 5120 = 62,914,560; 16 routed +
    1 shared SwiGLU experts of 3 x 5120 x 8192 = 125,829,120 each; router 5120 x 16; two RMSNorms of 5120. Embedding
    and head 2 x 202,048 x 5120, final norm 5120. Total 107,769,861,120: Meta's 109B includes the vision encoder (34 layers of 4 x 1408^2 + 2 x
    1408 x 5632 = 0.81B), which the spec does not model, hence 2 % (the rule of tests/lm/test_moe.py's built-in MoE
    totals). Active: 48 x (62,914,560 + 2 x 125,829,120 + 81,920) + 2 x 1,034,485,760 = 17,172,398,080: 17B."""
    total, active = _counts("llama4-scout")
    layer = 62_914_560 + 17 * 125_829_120 + 5120 * 16 + 2 * 5120
    assert total == 48 * layer + 2 * 202_048 * 5120 + 5120 == 107_769_861_120
    assert total == pytest.approx(109e9, rel=0.02)
    assert active == 48 * (62_914_560 + 2 * 125_829_120 + 81_920) + 2 * 1_034_485_760 == 17_172_398_080
    assert round(active / 1e9) == 17


def test_maverick_active_parameters_are_17b_too():
    """24 dense layers (SwiGLU 3 x 5120 x 16384 = 251,658,240, the same as a routed + a shared expert) and 24 MoE
    layers (router 5120 x 128): 48 x 314,572,800 + 24 x 655,360 + 2 x 1,034,485,760 = 17,184,194,560."""
    total, active = _counts("llama4-maverick")
    assert active == 48 * (62_914_560 + 251_658_240) + 24 * 5120 * 128 + 2 * 1_034_485_760 == 17_184_194_560
    assert round(active / 1e9) == 17
    assert total == pytest.approx(400e9, rel=0.02)
