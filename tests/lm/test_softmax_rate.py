"""Flash attention's softmax exponentials against its matmuls (docs/model.md §11.58, kernels/softmax_rate.py):
a device file that carries B200's measured attention efficiency (B300, GB300) runs the exponential part of the
measured time at its own MUFU rate. Hand-derived: per score element 2 (d_qk + d_v) MMA FLOPs and 1 exponential
forward, 7 (d_qk + d_v) and 2 forward + backward; R = dense BF16 FLOPs per exponential per SM per clock, B200
8,192 / 16 = 512, Blackwell Ultra 8,192 / 32 = 256, H100 4,096 / 16 = 256."""

import pytest

from fastmodel.kernels.roofline import attention_fwd_time, attention_time
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
    """Head dim 128, training: f = 7 x 256 = 1,792 FLOPs and n = 2 exponentials per score; B200's time splits into
    1,792 : 2 x 512 = 1,792 : 1,024, the exponential part halves on sm_103: (1,792 + 512) / (1,792 + 1,024) = 9/11.
    Forward: (512 + 256) / (512 + 512) = 3/4. GPT-OSS (64): (896 + 512) / (896 + 1,024) = 11/15, forward
    (256 + 256) / (256 + 512) = 2/3. MLA (d_qk 192, d_v 128): (2,240 + 512) / (2,240 + 1,024) = 43/51, forward
    (640 + 256) / (640 + 512) = 7/9."""
    for head_dim, train, forward in ((128, 9 / 11, 3 / 4), (64, 11 / 15, 2 / 3)):
        r = _row("gb300", head_dim=head_dim)
        assert exp_rate_scale(r, 7.0, 2.0) == pytest.approx(train, rel=1e-12)
        assert exp_rate_scale(r, 2.0, 1.0) == pytest.approx(forward, rel=1e-12)
    mla = _row("b300", mla=1, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, head_dim=128)
    assert exp_rate_scale(mla, 7.0, 2.0) == pytest.approx(43 / 51, rel=1e-12)
    assert exp_rate_scale(mla, 2.0, 1.0) == pytest.approx(7 / 9, rel=1e-12)


def test_b200_gb200_and_hopper_reproduce_their_attention_time():
    """Where attn_eff was measured on the device itself (B200; GB200 has B200's ratio; Hopper's efficiencies are
    Hopper's), the factor is 1 and the attention time is F / (peak x attn_eff) + one launch, exactly as before."""
    for name in ("b200", "gb200", "h100", "h200", "gh200"):
        r = _row(name, head_dim=128)
        d = DEVICES[name]
        assert exp_rate_scale(r, 7.0, 2.0) == 1.0 == exp_rate_scale(r, 2.0, 1.0)
        assert attention_time(r, F, 1.0) == pytest.approx(F / (d["peak_flops_16"] * d["attn_eff"]) + 4e-6, rel=1e-12)
    b200 = _row("b200", head_dim=128)
    assert attention_fwd_time(b200, F, 1.0) == pytest.approx(F / (2.25e15 * 0.372) + 4e-6, rel=1e-12)


def test_gb300_attention_runs_faster_by_the_derived_factor():
    """GB300 at head dim 128: training F / (2.5e15 x 0.35) x 9/11, prefill (forward) F / (2.5e15 x 0.372) x 3/4, each
    plus one launch; B300 the same factors on its 2.25e15 peak. Without the reference ratio GB300 is B200's
    efficiency on its peak, as before this change."""
    gb300 = _row("gb300", head_dim=128)
    assert attention_time(gb300, F, 1.0) == pytest.approx(F / (2.5e15 * 0.35) * 9 / 11 + 4e-6, rel=1e-12)
    assert attention_fwd_time(gb300, F, 1.0) == pytest.approx(F / (2.5e15 * 0.372) * 3 / 4 + 4e-6, rel=1e-12)
    b300 = _row("b300", head_dim=128)
    assert attention_time(b300, F, 0.5) == pytest.approx(F / (2.25e15 * 0.35 * 0.5) * 9 / 11 + 4e-6, rel=1e-12)
    before = _row("gb300", head_dim=128, attn_eff_mma_flops_per_exp=0.0)
    assert attention_time(before, F, 1.0) == pytest.approx(F / (2.5e15 * 0.35) + 4e-6, rel=1e-12)
