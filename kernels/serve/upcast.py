"""FP4 weights upcast in software inside the expert GEMMs of a device without FP4 hardware (docs/model_serving.md
S23).

Hopper (SM90) has neither FP4 tensor cores nor a hardware FP4 conversion instruction: an MXFP4 expert GEMM with
16-bit activations (W4A16: vLLM's and TensorRT-LLM's Triton ``matmul_ogs`` MoE path, vLLM's Marlin) loads the
4-bit weight tile and converts it to BF16 in registers before each tensor-core MMA. Triton lowers the conversion
of 8 packed E2M1 values to 8 BF16 values to 17 integer instructions (``and``/``shr``/``or``/``prmt``: the
``FP4ToBF16Ptx`` sequence of the NVIDIA backend, ``third_party/nvidia/lib/TritonNVIDIAGPUToLLVM``); they run on
the SM's 64 INT32 lanes per clock (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022: 64 INT32 units per
SM), while its tensor cores retire 4,096 dense BF16 FLOP per clock (989.4 TFLOP/s = 132 SMs x 1.83 GHz x 4,096).
Every row tile of an expert converts the whole weight panel it multiplies, so per grouped GEMM of ``G`` experts of
``m`` rows, ``(m x K) @ (K x N)``, row tile ``tm`` (``roofline.expert_row_tile``):

    u = UPCAST_OPS x G ceil(m / tm) N K / (INT_LANES x f_clk x SMs),   f_clk x SMs = P16 / TENSOR_FLOPS_PER_CLK

The conversion's integer instructions are issued by the warps that issue the MMA on its result, so ``u`` adds to
the GEMM's compute bound; they run while the next weight tiles stream in (asynchronous copies), so ``u`` does not
add to the exposed share: ``max(c + u, w) + s min(c, w)`` (``roofline.expert_gemm_roofline`` with its bound
lengthened). Blackwell converts E2M1 pairs in one instruction (PTX ``cvt ... .e2m1x2``, sm_100a) and multiplies
FP4 on its tensor cores, so devices with an FP4 peak pay nothing here. The per-clock constants are SM90's; a
device of another generation without FP4 (A100, L40S) takes them as they are (not sourced for it).
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import C_EXPERT_GEMM_EFF, C_FP4_GEMM, C_PEAK_FLOPS_16, C_PEAK_FLOPS_4
from fastmodel.kernels.roofline import expert_bounds, expert_row_tile

#: integer instructions per converted E2M1 value: 17 per 8 (Triton ``FP4ToBF16Ptx``)
UPCAST_OPS = 17.0 / 8.0
#: INT32 results per clock per SM (Hopper: 64 INT32 units per SM, H100 architecture whitepaper)
INT_LANES = 64.0
#: dense 16-bit tensor FLOP per clock per SM (SM90: 989.4e12 / (132 x 1.83e9))
TENSOR_FLOPS_PER_CLK = 4096.0


@njit(inline="always")
def software_upcast(row, fmt):
    """True when the expert GEMM of GEMM format ``fmt`` takes FP4 weights converted in software: FP4 weights, 16-bit
    activations (format 0), no FP4 peak on the device and no ``expert_gemm_eff`` (a measured rate of the engine's
    whole expert kernel, conversion included: docs/model_serving.md S38)."""
    return row[C_FP4_GEMM] > 0.0 and row[C_PEAK_FLOPS_4] <= 0.0 and fmt == 0.0 and row[C_EXPERT_GEMM_EFF] <= 0.0


@njit(inline="always")
def upcast_time(row, groups, m, n, k):
    """Seconds of integer work converting the FP4 weight panels of ``groups`` experts of ``m`` rows, (K x N) each:
    one conversion per row tile (module docstring)."""
    tiles = math.ceil(m / expert_row_tile(row, m))
    return UPCAST_OPS * groups * tiles * n * k * TENSOR_FLOPS_PER_CLK / (INT_LANES * row[C_PEAK_FLOPS_16])


@njit
def upcast_extra(row, groups, m, n, k, wb):
    """Seconds the software upcast adds to one grouped expert GEMM: ``max(c + u, w) - max(c, w)`` (the exposed
    share ``s min(c, w)`` of ``roofline.expert_gemm_roofline`` is left as it was), 16-bit format, weights at ``wb``
    bytes; 0 when empty."""
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    compute, memory = expert_bounds(row, groups, m, n, k, 0.0, wb)
    slow = compute + upcast_time(row, groups, m, n, k)
    return max(slow, memory) - max(compute, memory)


@njit
def expert_upcast_time(row, groups, m, width, h, nm, fmt, wb):
    """Seconds the software upcast adds to one MoE layer's routed experts (gate/up ``(nm - 1) width x h``, down
    ``h x width``; ``h`` the experts' hidden size as the engine pads it) when :func:`software_upcast` holds, else 0."""
    if not software_upcast(row, fmt):
        return 0.0
    return upcast_extra(row, groups, m, (nm - 1.0) * width, h, wb) + upcast_extra(row, groups, m, h, width, wb)
