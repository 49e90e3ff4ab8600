"""Flash attention's softmax exponentials against its matmuls (docs/model.md §11.58, kernels/softmax_rate.py):
a device file that carries B200's measured attention efficiency (B300, GB300) runs the exponential part of the
measured forward time at its own MUFU rate; the training backward (2.5x the forward, shared-memory bound per
FlashAttention-4) keeps the measured rate. Hand-derived: per score element 2 (d_qk + d_v) MMA FLOPs and 1
exponential forward; R = dense BF16 FLOPs per exponential per SM per clock, B200 8,192 / 16 = 512, Blackwell Ultra
8,192 / 32 = 256, H100 4,096 / 16 = 256."""

import numpy as np
import pytest

from fastmodel.kernels.lm.layer import W_ATTN, W_ATTN_BACKWARD, layer_costs
from fastmodel.kernels.lm.passes import A_ATTN, A_BACKWARD_INPUT, A_FORWARD, N_WORK, layer_passes
from fastmodel.kernels.roofline import attention_backward_base, attention_fwd_time, attention_time
from fastmodel.kernels.softmax_rate import exp_rate_scale
from fastmodel.lm.table import row
from fastmodel.spec.devices import device_table

DEVICES = device_table()
F = 1e15     # attention FLOPs of one kernel call (large: the 4 us launch overhead is 1e-5 of it)


def _row(device, **values):
    return row(**{**DEVICES[device], **values})


def test_the_rates_per_sm_and_clock_behind_each_file():
    """B200 and GB200 (sm_100): 8,192 / 16 = 512; B300, GB300 (sm_103, the SFU's EX2 doubled): 8,192 / 32 = 256;
    Hopper 4,096 / 16 = 256. The MMA rates are each file's dense BF16 peak over SMs x clock: B200 and B300 2.25e15 /
    (148 x 8,192) = 1.856 GHz, H100 989e12 / (132 x 4,096) = 1.829 GHz (the whitepaper's 1.83 GHz boost); GB300
    2.5e15 / (160 x 8,192) = 1.91 GHz. Only the files that borrow B200's efficiency set the
    reference ratio, at B200's own value."""
    assert DEVICES["b200"]["mma_flops_per_exp"] == 8192 / 16 == DEVICES["gb200"]["mma_flops_per_exp"]
    for ultra in ("b300", "gb300"):
        assert DEVICES[ultra]["mma_flops_per_exp"] == 8192 / 32
        assert DEVICES[ultra]["attn_eff_mma_flops_per_exp"] == DEVICES["b200"]["mma_flops_per_exp"]
        assert DEVICES[ultra]["attn_eff"] == DEVICES["b200"]["attn_eff"]
    for hopper in ("h100", "h200", "gh200"):
        assert DEVICES[hopper]["mma_flops_per_exp"] == 4096 / 16
        assert "attn_eff_mma_flops_per_exp" not in DEVICES[hopper]     # registry 0: no rescaling
    clock = {name: DEVICES[name]["peak_flops_16"] / (DEVICES[name]["sm_count"] * per_sm)
             for name, per_sm in (("b200", 8192), ("h100", 4096), ("b300", 8192), ("gb300", 8192))}
    assert clock["b200"] == pytest.approx(1.856e9, rel=1e-3)
    assert clock["h100"] == pytest.approx(1.83e9, rel=2e-3)
    assert clock["b300"] == pytest.approx(1.856e9, rel=1e-3)
    assert clock["gb300"] == pytest.approx(1.907e9, rel=1e-3)


def test_blackwell_ultra_scales_only_the_exponential_part():
    """Head dim 128, forward: f = 2 x 256 = 512 FLOPs and n = 1 exponential per score; B200's time splits into
    512 : 512, the exponential part halves on sm_103: (512 + 256) / (512 + 512) = 3/4. GPT-OSS (64):
    (256 + 256) / (256 + 512) = 2/3. MLA (d_qk 192, d_v 128): (640 + 256) / (640 + 512) = 7/9. Training, with the
    backward (2.5x the forward's time) at the measured rate: (3/4 + 2.5) / 3.5 = 13/14, (2/3 + 2.5) / 3.5 = 19/21,
    (7/9 + 2.5) / 3.5 = 59/63."""
    for head_dim, forward, train in ((128, 3 / 4, 13 / 14), (64, 2 / 3, 19 / 21)):
        r = _row("gb300", head_dim=head_dim)
        assert exp_rate_scale(r, 2.0, 1.0) == pytest.approx(forward, rel=1e-12)
        assert (forward + 2.5) / 3.5 == pytest.approx(train, rel=1e-12)
    mla = _row("b300", mla=1, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, head_dim=128)
    assert exp_rate_scale(mla, 2.0, 1.0) == pytest.approx(7 / 9, rel=1e-12)
    assert (7 / 9 + 2.5) / 3.5 == pytest.approx(59 / 63, rel=1e-12)


def test_b200_gb200_and_hopper_reproduce_their_attention_time():
    """Where attn_eff was measured on the device itself (B200; GB200 has B200's ratio; Hopper's efficiencies are
    Hopper's), the factor is 1 and the attention time is F / (peak x attn_eff) + one launch, exactly as before."""
    for name in ("b200", "gb200", "h100", "h200", "gh200"):
        r = _row(name, head_dim=128)
        d = DEVICES[name]
        assert exp_rate_scale(r, 2.0, 1.0) == 1.0
        assert attention_time(r, F, 1.0) == pytest.approx(F / (d["peak_flops_16"] * d["attn_eff"]) + 4e-6, rel=1e-12)
        assert attention_backward_base(r, F, 1.0) == attention_time(r, F, 1.0)
    b200 = _row("b200", head_dim=128)
    assert attention_fwd_time(b200, F, 1.0) == pytest.approx(F / (2.25e15 * 0.372) + 4e-6, rel=1e-12)


def test_gb300_attention_runs_faster_by_the_derived_factor():
    """GB300 at head dim 128: training forward F / (2.5e15 x 0.35) x 3/4, its backward's base F / (2.5e15 x 0.35)
    unscaled, prefill (forward) F / (2.5e15 x 0.372) x 3/4, each plus one launch; B300 the same factors on its
    2.25e15 peak. Without the reference ratio GB300 is B200's efficiency on its peak, as before the change."""
    gb300 = _row("gb300", head_dim=128)
    assert attention_time(gb300, F, 1.0) == pytest.approx(F / (2.5e15 * 0.35) * 3 / 4 + 4e-6, rel=1e-12)
    assert attention_backward_base(gb300, F, 1.0) == pytest.approx(F / (2.5e15 * 0.35) + 4e-6, rel=1e-12)
    assert attention_fwd_time(gb300, F, 1.0) == pytest.approx(F / (2.5e15 * 0.372) * 3 / 4 + 4e-6, rel=1e-12)
    b300 = _row("b300", head_dim=128)
    assert attention_time(b300, F, 0.5) == pytest.approx(F / (2.25e15 * 0.35 * 0.5) * 3 / 4 + 4e-6, rel=1e-12)
    before = _row("gb300", head_dim=128, attn_eff_mma_flops_per_exp=0.0)
    assert attention_time(before, F, 1.0) == pytest.approx(F / (2.5e15 * 0.35) + 4e-6, rel=1e-12)


def test_the_training_backward_keeps_the_measured_rate():
    """FlashAttention-4: the forward is limited by the exponentials, the backward by shared memory, so a GB300 layer's
    forward attention (and a recomputed one) is B200's-efficiency time x 3/4 and its backward 2.5 x the unscaled
    forward: the layer's attention seconds are W_ATTN + 2.5 W_ATTN_BACKWARD, and W_ATTN_BACKWARD equals the forward of
    the same row without the reference ratio. One dense layer, no recompute."""
    layer = dict(layers=2, hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=32000, seq_len=4096,
                 micro_batch=1, global_batch=8, dp=8, gated_mlp=1)
    gb300, before = _row("gb300", **layer), _row("gb300", **layer, attn_eff_mma_flops_per_exp=0.0)
    work, plain = np.zeros(N_WORK), np.zeros(N_WORK)
    layer_costs(gb300, False, False, work)
    layer_costs(before, False, False, plain)
    assert work[W_ATTN_BACKWARD] == plain[W_ATTN] == plain[W_ATTN_BACKWARD]
    overhead = 4e-6
    assert work[W_ATTN] - overhead == pytest.approx(0.75 * (plain[W_ATTN] - overhead), rel=1e-12)
    passes, passes_before = np.zeros(N_WORK), np.zeros(N_WORK)
    layer_passes(gb300, passes)
    layer_passes(before, passes_before)
    a, b = passes[W_ATTN], passes[W_ATTN_BACKWARD]
    assert passes[A_ATTN] == pytest.approx(a + 2.5 * b, rel=1e-12)
    assert passes[A_BACKWARD_INPUT] == passes_before[A_BACKWARD_INPUT]         # the backward: unchanged
    assert passes_before[A_FORWARD] - passes[A_FORWARD] == pytest.approx(plain[W_ATTN] - a, rel=1e-12)
