"""Chunked local attention (Llama 4's iRoPE layers, docs/model.md §11.55): query i attends to the keys j of its own
chunk of C tokens, floor(j / C) = floor(i / C) and j <= i, on ``attention_chunk_layers`` of the layers; not a
sliding window (a window of W keeps the last W keys across chunk boundaries). Training counts pairs in the
continuous convention of its full causal s^2 / 2 (``attention_context``), so a chunked layer's queries see C / 2
keys on average when C divides s."""

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.lm.layer import N_WORK, W_FLOPS, attention_context, layer_costs
from fastmodel.kernels.lm.shape import layer_mix
from fastmodel.lm.loader import load_lm_model
from fastmodel.lm.lowering import model_values
from fastmodel.lm.table import row

MAVERICK = model_values(load_lm_model("llama4-maverick"))
#: one Maverick micro-batch of 16,384 tokens on a TP 8 rank (40 / 8 = 5 local heads, d_qk + d_v = 256)
PLAN = dict(seq_len=16384.0, micro_batch=1.0, tp=8.0, ep=8.0, n_gpus=64.0, dp=8.0, global_batch=64.0)


def maverick(**change):
    return row(**{**MAVERICK, **PLAN, **change})


def test_llama4_specs_state_the_chunk_and_its_36_of_48_layers():
    """config.json attention_chunk_size 8192; transformers' default no_rope_layers: (i + 1) % 4 != 0 uses RoPE and
    chunked attention, so layers 3, 7, ..., 47 (12) are global and 36 chunked (configuration_llama4.py)."""
    chunked = sum((i + 1) % 4 != 0 for i in range(48))
    for name in ("llama4-maverick", "llama4-scout"):
        model = load_lm_model(name)
        assert (model.attention_chunk, model.attention_chunk_layers) == (8192, chunked) == (8192, 36), name


def test_a_chunk_and_a_window_on_one_model_or_more_chunked_layers_than_layers_are_refused():
    spec = load_lm_model("llama4-scout").model_dump()
    with pytest.raises((SpecError, ValueError), match="not both"):
        load_lm_model({**spec, "sliding_window": 4096})
    with pytest.raises((SpecError, ValueError), match="exceeds the 48 layers"):
        load_lm_model({**spec, "attention_chunk_layers": 49})


def test_chunked_layers_take_the_sliding_kind_of_the_layer_mix():
    """Maverick: 24 dense and 24 MoE layers, 36 of 48 chunked. layer_mix spreads the chunked share over both kinds
    in proportion, 3/4 of each: (6, 18, 6, 18). That is not the model's layout: Llama4TextConfig puts the MoE layers
    at ``range(interleave_moe_layer_step - 1, L, step)`` = 1, 3, ..., 47 and the global (NoPE, unchunked) ones where
    ``(i + 1) % 4 == 0`` = 3, 7, ..., 47, all 12 of them MoE: the true mix is (0, 24, 12, 12). The split keeps what
    the costs sum: 12 full and 36 chunked attention layers, 24 dense and 24 MoE MLPs, and each layer's cost is its
    attention's plus its MLP's, so review7 (F5) found the same step time, attention time, exposed EP and memory
    with the true mix (Maverick tp4.pp4.ep8 at 4096 and 32768 tokens)."""
    mix = layer_mix(maverick())
    assert mix == (6.0, 18.0, 6.0, 18.0)
    assert (mix[1] + mix[3], mix[2] + mix[3]) == (36.0, 24.0)          # chunked layers, MoE layers: the model's
    assert layer_mix(maverick(attention_chunk=0.0)) == (24.0, 0.0, 24.0, 0.0)


def test_keys_per_query_of_a_chunked_layer():
    """Continuous pairs: q C^2 / 2 + r^2 / 2 over s queries (q = floor(s / C), r = s - q C). s = 2 C: C / 2 = 4096
    (a window of 8192 would give w - w^2 / (2 s) = 6144); s = 2 C + 5: (2 C^2 + 25) / (2 (2 C + 5)); s <= C:
    full causal s / 2; no causal mask: twice the causal count (whole chunks)."""
    c = 8192.0
    assert attention_context(maverick(), True) == c / 2 == 4096.0
    assert attention_context(maverick(), False) == 16384.0 / 2
    assert attention_context(maverick(seq_len=2 * c + 5), True) == pytest.approx(
        (2 * c * c + 25) / (2 * (2 * c + 5)), rel=1e-15)
    assert attention_context(maverick(seq_len=c), True) == c / 2
    assert attention_context(maverick(seq_len=4096.0), True) == 2048.0
    assert attention_context(maverick(causal=0.0), True) == c
    windowed = maverick(attention_chunk=0.0, sliding_window=c, sliding_window_layers=36.0)
    assert attention_context(windowed, True) == c - c * c / (2 * 16384.0) == 6144.0


def test_maverick_training_step_attention_flops_at_seq_16384():
    """Executed attention-core FLOPs of one micro-batch on one TP rank, by hand: 2 x tokens x keys x local heads x
    (d_qk + d_v) per layer, a global layer at s / 2 = 8192 keys, a chunked one at C / 2 = 4096:
    full 2 x 16384 x 8192 x 5 x 256 = 343,597,383,680; chunked half that, 171,798,691,840; the 48 layers,
    12 x full + 36 x chunked = 10,307,921,510,400 (62.5 % of the 16,492,674,416,640 of full attention)."""
    r = maverick()
    full_attn = 2.0 * 16384 * 8192 * 5 * 256
    chunk_attn = 2.0 * 16384 * 4096 * 5 * 256
    assert (full_attn, chunk_attn) == (343_597_383_680.0, 171_798_691_840.0)
    step = 0.0
    counts = layer_mix(r)
    for kind, (moe, sliding) in enumerate(((False, False), (False, True), (True, False), (True, True))):
        work, other = np.zeros(N_WORK), np.zeros(N_WORK)
        layer_costs(r, moe, sliding, work)
        layer_costs(r, moe, not sliding, other)
        # the layer kinds differ in their attention core alone
        assert work[W_FLOPS] - other[W_FLOPS] == pytest.approx((chunk_attn - full_attn) * (1 if sliding else -1),
                                                               rel=1e-12)
        step += counts[kind] * (chunk_attn if sliding else full_attn)
    assert step == 10_307_921_510_400.0 == 0.625 * 48 * full_attn
