"""DeepSeek-V3's memory savers (report arXiv 2412.19437 sec. 3.2.3 and 3.3.3) as plan fields, derived by hand.

- ``optimizer_moments = bf16``: AdamW's first and second moments in BF16, master weights and gradients FP32
  (sec. 3.3.3, Low-Precision Optimizer States): 4 + 2 + 2 bytes per parameter instead of 4 + 4 + 4.
- ``moe_act_input_fp8``: the experts cache their SwiGLU input in FP8 and recompute its output (sec. 3.3.3 (2)).
- ``attn_out_e5m6``: the input of the linear after attention is cached once in 12-bit E5M6 (sec. 3.3.3 (1)).
- ``norm_recompute_fp8``: recomputing the RMSNorms frees the FP8 cast of their outputs too (sec. 3.2.3).

The activation setting is tests/lm/test_memory_recompute_modules.py's MoE layer: T = 128 tokens, h = 256, 4 heads
of 64, 8 experts of f_e = 512 (SwiGLU), top-2 (R = 256 rows), flash attention, no dropout.
"""

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import M_OPTIMIZER
from fastmodel.kernels.lm.step import optimizer_bytes_per_param
from fastmodel.lm.table import row
from tests.lm.test_memory import small
from tests.lm.test_memory_recompute_modules import FE, MOE, A, H, R, T, activations, bits
from tests.lm.test_memory_states import _small_params


def test_bf16_moments_adam_8_bytes_sgd_6_bytes_per_parameter():
    p = _small_params()
    assert small(optimizer="adam", optimizer_moments=1)[M_OPTIMIZER] == 8 * p          # 4 master + 2 m + 2 v
    assert small(optimizer="sgd", optimizer_moments=1)[M_OPTIMIZER] == 6 * p           # 4 master + 2 momentum
    # ZeRO-1 over 64 shards them as before: 8/64 per parameter
    assert small(dp=64, sharding="zero1", optimizer_moments=1)[M_OPTIMIZER] == pytest.approx(8 * p / 64, rel=1e-12)
    # FSDP: the FP32 shard is the master, so the moments alone: 2 + 2
    assert small(dp=64, sharding="fsdp", optimizer_moments=1)[M_OPTIMIZER] == pytest.approx(4 * p / 64, rel=1e-12)
    # a 16-bit model keeps 16-bit moments anyway (2 + 2, no master)
    assert small(master_weights=0, optimizer_moments=1)[M_OPTIMIZER] == small(master_weights=0)[M_OPTIMIZER] == 4 * p


def test_bf16_moments_halve_the_optimizer_steps_moment_traffic():
    """Adam reads and writes m and v: 8 + 8 bytes in FP32, 4 + 4 in BF16; master 4 + 4, BF16 copy 2, FP32
    gradient read 4 either way."""
    assert optimizer_bytes_per_param(row(optimizer="adam")) == 8 + 2 + 16 + 4
    assert optimizer_bytes_per_param(row(optimizer="adam", optimizer_moments=1)) == 8 + 2 + 8 + 4


def test_swiglu_input_cached_in_fp8_with_its_output_recomputed():
    """Routed experts: gate/up output 2 x 2 R f_e (BF16) + product 2 R f_e -> the [R, 2 f_e] input in FP8,
    2 R f_e; a shared expert of f_e the same over T rows."""
    base = dict(recompute="selective")
    assert activations(**base) - activations(**base, moe_act_input_fp8=1) == pytest.approx(4 * R * FE, rel=1e-12)
    shared = dict(base, moe_shared_experts=1)
    drop = activations(**shared) - activations(**shared, moe_act_input_fp8=1)
    assert drop == pytest.approx(4 * R * FE + 4 * T * FE, rel=1e-12)
    # with the same discard listed (moe_act), nothing is counted twice
    listed = dict(base, recompute_modules=bits("core_attn", "moe_act"))
    assert activations(**listed, moe_act_input_fp8=1) == activations(**base, moe_act_input_fp8=1)


def test_attention_output_kept_once_at_12_bits():
    """BF16: the flash output O 2 T a d -> 1.5 T a d. FP8: O 2 T a d plus its FP8 copy T a d -> 1.5 T a d."""
    base = dict(recompute="selective")
    out = T * A * 64
    assert activations(**base) - activations(**base, attn_out_e5m6=1) == pytest.approx(0.5 * out, rel=1e-12)
    fp8 = dict(base, precision="fp8")
    assert activations(**fp8) - activations(**fp8, attn_out_e5m6=1) == pytest.approx(1.5 * out, rel=1e-12)


def test_norm_recompute_frees_the_fp8_cast_of_the_norm_output():
    """FP8, layernorm recomputed: each of the layer's two norms frees the FP8 cast of its output, T h bytes.
    Without the layernorm module the flag frees nothing; under BF16 the 16-bit output goes either way."""
    fp8 = dict(recompute="selective", precision="fp8")
    listed = bits("core_attn", "layernorm")
    drop = activations(**fp8, recompute_modules=listed) - \
        activations(**fp8, recompute_modules=listed, norm_recompute_fp8=1)
    assert drop == pytest.approx(2 * T * H, rel=1e-12)
    assert activations(**fp8, norm_recompute_fp8=1) == activations(**fp8)
    bf16 = dict(recompute="selective", recompute_modules=listed)
    assert activations(**bf16, norm_recompute_fp8=1) == activations(**bf16)


def test_the_flags_leave_a_plan_without_them_unchanged():
    values = dict(MOE, recompute="selective", precision="fp8")
    assert np.isfinite(activations(**values))
    assert activations(**values, optimizer_moments=0, moe_act_input_fp8=0, attn_out_e5m6=0,
                       norm_recompute_fp8=0) == activations(**values)
