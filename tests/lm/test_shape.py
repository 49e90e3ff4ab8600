"""One transformer-layer shape for training and serving (kernels/lm/shape.py; docs/model.md §11.4).

Golden values are derived by hand from the models' published shapes (DeepSeek-V3 report Table/sec. 2.1:
h 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128, rope 64, v 128, 256 experts of 2048, 1 shared) and
from the H100 device columns (HBM 3.35 TB/s x 0.8, FP8 peak 1979 TF/s x 0.65, 132 SMs, 4 us launch).
"""

import numpy as np
import pytest

from fastmodel.engines import LM
from fastmodel.kernels.lm.shape import (
    attention_params,
    elementwise_bytes,
    expert_tp,
    expert_weight_params,
    norm_params,
)
from fastmodel.kernels.roofline import expert_gemm_roofline, gemm_roofline, grouped_gemm_time, tile_quantization
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.serve.api import columns, evaluate
from tests.interpreted import run_interpreted


def _dsv3(**changes):
    model = LM.door().model_columns("deepseek-v3")[1]
    return columns(model, "H200", precision="fp8", batch_size=32, **changes)


def test_the_mla_attention_count_by_hand():
    row = _dsv3()
    # q: 7168 x 1536 + 1536 x 128 x 192; kv: 7168 x (512 + 64) + 512 x 128 x (128 + 128); o: 128 x 128 x 7168
    q = 7168 * 1536 + 1536 * 128 * 192
    kv = 7168 * 576 + 512 * 128 * 256
    o = 128 * 128 * 7168
    assert attention_params(row) == q + kv + o == 187_105_280
    assert norm_params(row) == 2 * 7168 + 1536 + 512          # two RMSNorms and the two latent norms


def test_serving_and_training_hold_the_same_layer():
    """A DeepSeek-V3 MoE layer at tp 8, ep 8: serving splits each expert over tp / ep = 1 device and holds
    256 / 8 experts; training at ep 8, etp 1 holds the same. Per device: 187,105,280 / 8 attention
    + 16,384 norms + 32 x 3 x 7168 x 2048 routed + 3 x 7168 x 2048 / 8 shared = 1,438,195,712."""
    from fastmodel.kernels.serve.memory import layer_weight_params

    row = _dsv3(tp=8, ep=8)
    assert expert_tp(row, 1.0) == 1.0 and row[C["etp"]] == 0.0 and expert_tp(row, 0.0) == 8.0  # etp 0: tp
    assert expert_weight_params(row, 1.0) == 32 * 3 * 7168 * 2048
    assert layer_weight_params(row, 1.0) == 1_438_195_712
    # training's count of the same layer (kernels/lm/layer.layer_costs' W_PARAMS: matmuls and router, no norms)
    from fastmodel.kernels.lm.layer import N_WORK, W_PARAMS, layer_costs

    work = np.zeros(N_WORK)
    training = row.copy()
    training[C["micro_batch"]], training[C["cp"]], training[C["etp"]] = 1.0, 1.0, 1.0
    layer_costs(training, True, False, work)
    # training holds MLA's replicated down-projections whole (h (q_lora + kv_lora + rope) = 15,138,816; §11.44)
    assert work[W_PARAMS] == pytest.approx(1_438_195_712 - 16_384 + 7168 * 256 + 15_138_816 * 7 / 8, rel=1e-15)


def test_the_element_wise_byte_model_by_hand():
    row = _dsv3()
    assert row[C["fused_kernels"]] == 1.0 and row[C["gated_mlp"]] == 1.0
    # fused: norm 2+2 and residual 2+2+2 twice per hidden element, SwiGLU 2+2+2, rotary 2+2
    assert elementwise_bytes(row, 1.0, 0.0, 0.0) == 20.0
    assert elementwise_bytes(row, 0.0, 1.0, 0.0) == 6.0
    assert elementwise_bytes(row, 0.0, 0.0, 1.0) == 4.0
    row[C["fused_kernels"]] = 0.0      # eager FP32 references: RMSNorm 36 B, SwiGLU 10 B, complex rotary 24 B
    assert elementwise_bytes(row, 1.0, 1.0, 1.0) == 2.0 * (36.0 + 6.0) + 10.0 + 24.0


def test_one_gemm_model_by_hand():
    """m = 1, n = k = 4096, FP8 weights (1 B) and input (1 B), 2 B output: 16,777,216 + 4,096 + 8,192 bytes over
    3.35 TB/s x 0.8 = 6.2647 us; the compute side (1/16 of a 16 x 256 tile used, 8-way split-K over 128 of 132
    SMs) takes 0.44 us, so the GEMM is memory-bound; + 4 us launch."""
    row = columns("llama3.1-8b", "H100", precision="fp8", batch_size=1)
    memory = (4096 * 4096 + 4096 + 2 * 4096) / (3.35e12 * 0.8)
    compute = 2.0 * 4096 * (4096 + 128) / (1979e12 * 0.65 * (1 / 16) * 128 / 132)
    assert compute < memory
    assert gemm_roofline(row, 1.0, 1.0, 4096.0, 4096.0, True, 1.0, 0.0) == pytest.approx(memory, rel=1e-12)
    assert gemm_roofline(row, 1.0, 1.0, 4096.0, 4096.0, True, 1.0, 1.0) == pytest.approx(memory + 4e-6, rel=1e-12)
    # the modelled speed; a GEMM list (or training's single GEMM) is over stack_compute_eff
    row[C["stack_compute_eff"]] = 0.5
    assert gemm_roofline(row, 1.0, 1.0, 4096.0, 4096.0, True, 1.0, 0.0) == pytest.approx(memory, rel=1e-12)
    assert grouped_gemm_time(row, 1.0, 1.0, 4096.0, 4096.0, True) == pytest.approx((memory + 4e-6) / 0.5, rel=1e-12)


def test_expert_gemm_exposes_the_weight_stream_by_hand():
    """8 experts of (m x 4096) @ (4096 x 4096), 16-bit, on H100 (tile_m 128). Compute 2 x 8 m 4096 (4096 + 128) /
    (989 TF x 0.72 x Q); memory 8 (2 x 4096^2 + 2 m 4096 + 2 m 4096) B / (3.35 TB/s x 0.8). With m = 32 each expert
    is one row tile: nothing hides the weight load, the two add. With m = 512 (4 row tiles of 128) a quarter of
    the shorter one stays exposed. The dense roofline is max(compute, memory)."""
    row = columns("llama3.1-8b", "H100", batch_size=1)
    assert row[C["gemm_tile_m"]] == 128.0 and row[C["gemm_eff_16"]] == 0.72
    for m, share in ((32.0, 1.0), (512.0, 0.25)):
        q = tile_quantization(row, 8.0, m, 4096.0, 4096.0)
        compute = 2.0 * 8 * m * 4096 * (4096 + 128) / (989e12 * 0.72 * q)
        memory = 8 * (2.0 * 4096 * 4096 + 4.0 * m * 4096) / (3.35e12 * 0.8)
        dense = gemm_roofline(row, 8.0, m, 4096.0, 4096.0, False, 2.0, 0.0)
        assert dense == pytest.approx(max(compute, memory), rel=1e-12)
        expert = expert_gemm_roofline(row, 8.0, m, 4096.0, 4096.0, False, 2.0, 0.0)
        assert expert == pytest.approx(max(compute, memory) + share * min(compute, memory), rel=1e-12)
        assert expert_gemm_roofline(row, 8.0, m, 4096.0, 4096.0, False, 2.0, 1.0) == pytest.approx(expert + 4e-6)
    assert expert_gemm_roofline(row, 0.0, 32.0, 4096.0, 4096.0, False, 2.0, 1.0) == 0.0


def test_the_engines_expert_kernel_sets_the_row_tile_by_hand():
    """The same 8 experts of (m x 4096) @ (4096 x 4096) on H100 with the row tile range of FlashInfer's trtllm-gen
    FP4 MoE at BF16 activations (8..64; expert_tile_min/max). m = 2: the tile is 8, not the library's 16: padding
    8 x 2 x 4096 / (128 tiles x 8 x 256) = 1/4 (library 1/8), 128 tiles < 132 SMs and no split (floor(132/128) =
    1), so Q = 1/4 x 128 / 132 and the padded compute halves. m = 256: 4 row tiles of 64 (library: 2 of 128),
    512 tiles in 4 waves of 132 (Q = 512 / 528), a quarter (not half) of the shorter bound stays exposed. 0 (training) keeps the library's tiles."""
    base = columns("llama3.1-8b", "H100", batch_size=1)
    row = base.copy()
    row[C["expert_tile_min"]], row[C["expert_tile_max"]] = 8.0, 64.0
    for m, q, share in ((2.0, 0.25 * 128 / 132, 1.0), (256.0, 512 / (4 * 132), 0.25)):
        compute = 2.0 * 8 * m * 4096 * (4096 + 128) / (989e12 * 0.72 * q)
        memory = 8 * (2.0 * 4096 * 4096 + 4.0 * m * 4096) / (3.35e12 * 0.8)
        expert = expert_gemm_roofline(row, 8.0, m, 4096.0, 4096.0, False, 2.0, 0.0)
        assert expert == pytest.approx(max(compute, memory) + share * min(compute, memory), rel=1e-12)
    library = 2.0 * 8 * 2 * 4096 * (4096 + 128) / (989e12 * 0.72 * (0.125 * 128 / 132))
    memory = 8 * (2.0 * 4096 * 4096 + 4.0 * 2 * 4096) / (3.35e12 * 0.8)
    assert expert_gemm_roofline(base, 8.0, 2.0, 4096.0, 4096.0, False, 2.0, 0.0) == \
        pytest.approx(memory + library, rel=1e-12)
    # dense GEMMs keep the library's tiles whatever the expert kernel
    assert gemm_roofline(row, 1.0, 2.0, 4096.0, 4096.0, False, 2.0, 0.0) == \
        gemm_roofline(base, 1.0, 2.0, 4096.0, 4096.0, False, 2.0, 0.0)


def test_serving_gains_the_stack_efficiency():
    base = evaluate("llama3.1-8b", "H100", batch_size=8)
    slow = evaluate("llama3.1-8b", "H100", batch_size=8, stack_compute_eff=0.5)
    for name in ("decode_gemm", "decode_memory_bound", "prefill_gemm", "prefill_memory_bound"):
        assert slow[name] == pytest.approx(2.0 * base[name], rel=1e-12), name
    assert slow["decode_comm"] == pytest.approx(base["decode_comm"], rel=1e-12)     # collectives are not kernels


def test_serving_decode_reads_the_layer_gemm_list():
    """A dense decode step of n requests is the layer's GEMM list at m = n with the checkpoint's weight bytes,
    no launch (CUDA graphs), once per layer."""
    one, serving = run_interpreted("""
from fastmodel.kernels.lm.shape import layer_gemm_time
from fastmodel.kernels.serve.costs import layer_gemms
from fastmodel.serve.api import columns
row = columns("llama3.1-8b", "H100", batch_size=16)
result = [layer_gemm_time(row, 16.0, 0.0, 0.0, 0.0, 1.0, False, 2.0, 0.0), layer_gemms(row, 16.0, 0.0, 0.0)]
""")     # interpreted: compiled on their own, the two GEMM lists took six minutes of a cold CI (tests/interpreted.py)
    assert serving == one
    # Llama 3.1 8B, tp 1: QKV 4096 x 6144, O 4096 x 4096, gate+up 4096 x 28672, down 14336 x 4096 weights, 2 B each
    weights = 2.0 * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096)
    assert one == pytest.approx(weights / (3.35e12 * 0.8), rel=0.01)     # memory-bound: weights dominate
