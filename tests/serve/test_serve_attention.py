"""Serving prefill attention (kernels/serve/attention.py ``prefill_attention_time``, kernels/roofline.py
``attention_fwd_time``): forward kernels only, at the device's forward efficiency (docs/model_serving.md S48)."""

from __future__ import annotations

import pytest

from fastmodel.serve.api import device_columns, evaluate


def _by_hand(device: str, eff: float) -> float:
    """Llama-3.1-8B (32 layers, 32 heads of 128) at TP 1, one 4,096-token prompt: 2 x 2 x 32 x 128 FLOPs per
    causal pair, 4096 x 4097 / 2 pairs per layer, at ``eff`` of the 16-bit peak, plus one kernel per layer."""
    d = device_columns(device)
    flops = 2.0 * 2.0 * 32 * 128 * 4096 * 4097 / 2.0
    return 32 * (flops / (d["peak_flops_16"] * eff) + d["kernel_overhead_s"])


def test_prefill_attention_runs_at_the_forward_efficiency_where_the_device_states_it():
    """B200 states attn_eff_fwd = 0.372 (its forward microbenchmark alone): the prompt's attention is priced at it,
    not at the forward + backward attn_eff = 0.35 of training, i.e. 0.35 / 0.372 = 0.94 of the time."""
    d = device_columns("B200")
    r = evaluate("llama3.1-8b", "B200", tp=1, input_len=4096, output_len=2, batch_size=1)
    assert r["prefill_attention"] == pytest.approx(_by_hand("B200", d["attn_eff_fwd"]), rel=1e-9)
    assert r["prefill_attention"] < _by_hand("B200", d["attn_eff"])


def test_a_device_without_a_forward_efficiency_keeps_attn_eff():
    """H100's file states no attn_eff_fwd (column default 0): the prefill stays at attn_eff, as before S48."""
    d = device_columns("H100")
    assert "attn_eff_fwd" not in d
    r = evaluate("llama3.1-8b", "H100", tp=1, input_len=4096, output_len=2, batch_size=1)
    assert r["prefill_attention"] == pytest.approx(_by_hand("H100", d["attn_eff"]), rel=1e-9)


def test_prefill_attention_of_few_heads_per_gpu_pays_the_forward_grid():
    """At TP 8 the prompt's 4 heads per B200 launch 4 x 16 CTAs of 256 query rows; the causal tiles carry 8.5 s key
    rows per head against the longest one's s: Q_f = 4 x 8.5 / 148 = 17/74 of the forward rate (docs/model.md
    §11.51), each layer's FLOPs an eighth of TP 1's."""
    d = device_columns("B200")
    r = evaluate("llama3.1-8b", "B200", tp=8, input_len=4096, output_len=2, batch_size=1)
    flops = 2.0 * 2.0 * 4 * 128 * 4096 * 4097 / 2.0
    expected = 32 * (flops / (d["peak_flops_16"] * d["attn_eff_fwd"] * 17 / 74) + d["kernel_overhead_s"])
    assert r["prefill_attention"] == pytest.approx(expected, rel=1e-9)
