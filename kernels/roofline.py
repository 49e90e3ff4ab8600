"""Device compute times of the real-world model: a roofline per kernel (docs/model.md §11.3).

- GEMMs: ``max(FLOPs / (peak x gemm_eff x quantization x depth), bytes / (HBM bw x hbm_eff))`` plus a
  launch overhead. *Quantization* is the tile and wave quantization of NVIDIA's GEMM performance guide
  (output tiles of up to ``gemm_tile_m x gemm_tile_n``, one wave = ``sm_count`` tiles, split-K for
  grids under one wave): the share of launched tensor-core work that is useful. *Depth* ``K / (K + gemm_k_half)`` amortises each tile's prologue and
  epilogue over its reduction length.
- Flash attention: FLOPs / (16-bit peak x attn_eff), or x attn_eff_fa2 where the stack runs FlashAttention-2
  through PyTorch SDPA (``attn_fa2``) and the device states that efficiency; a serving prompt's forward-only
  attention at ``attn_eff_fwd`` where the device states it (``attention_fwd_time``, docs/model_serving.md §S48); the
  forward's softmax exponentials at this device's rate where the efficiency was measured on another's (B300/GB300
  carry B200's: ``exp_rate_scale``, docs/model.md §11.58; the backward keeps the measured rate).
- Memory-bound kernels: bytes / (HBM bw x hbm_eff).
- Every kernel time is divided by ``stack_compute_eff`` (1 unless a calibration's ``[stack."NAME"]`` table
  sets the share of the modelled speed a software stack attains; docs/calibration.md).

All functions take the configuration's column vector ``row`` and return seconds.
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.softmax_rate import exp_rate_scale
from fastmodel.kernels.columns import (
    C_ATTN_EFF, C_ATTN_EFF_FA2, C_ATTN_EFF_FWD, C_ATTN_FA2, C_ATTN_TILE_KV, C_ATTN_TILE_Q, C_MLA, C_GEMM_EFF_16, C_GEMM_EFF_8,
    C_GEMM_K_HALF, C_GEMM_TILE_M, C_GEMM_TILE_N, C_HBM_BW, C_HBM_EFF,
    C_EP, C_EXPERT_ALIGN_ROWS, C_EXPERT_GEMM_EFF, C_EXPERT_HIDE_ROWS, C_EXPERT_TILE_MAX, C_EXPERT_TILE_MIN, C_KERNEL_OVERHEAD_S, C_MOE_EXPERTS,
    C_MOE_GROUPED_GEMM,
    C_PEAK_FLOPS_16, C_PEAK_FLOPS_4, C_PEAK_FLOPS_8, C_SM_COUNT, C_STACK_COMPUTE_EFF, C_COMPUTE_CAPABILITY, C_FP8_RECIPE,
    C_PRECISION, C_W4A4_GEMM_RATE, FP8_BLOCKWISE, FP8_MXFP8, PRECISION_FP4, PRECISION_FP8,
)

#: MXFP8 GEMM kernel time over per-tensor FP8's on the same shapes: TE
#: docs/examples/gemm_profiling/gemm_profiling.rst, B300, pre-quantized (kernel-only) per-layer GEMM time of the
#: 5B config, FP8 CurrentScaling 6.812 ms, MXFP8 7.161 ms: 6.812 / 7.161 = 0.951
MX_GEMM_RATE = 6.812 / 7.161
#: NVFP4 training GEMM rate over per-tensor FP8's at the FP4 peak, the same page and shapes: NVFP4 3.764 ms, so
#: NVFP4 runs 6.812 / 3.764 = 1.81x faster than FP8 where B300's datasheet ratio (peak_flops_4 / peak_flops_8) is
#: 13.5 / 4.5 = 3: (6.812 / 3.764) / 3 = 0.603 (docs/model.md §11.38)
NVFP4_GEMM_RATE = (6.812 / 3.764) / (13.5 / 4.5)
#: bytes of one E2M1 element (two per byte)
FP4_BYTES = 0.5
#: one E4M3 scale byte per 1 x 16 block (TE recipe ``NVFP4BlockScaling``; quantizer.cpp ``get_scale_shape``)
NVFP4_SCALE_BYTES = 1.0 / 16.0
#: bytes per element of one NVFP4 tensor (data + block scales): 0.5625 (docs/model.md §11.38)
NVFP4_COPY_BYTES = FP4_BYTES + NVFP4_SCALE_BYTES
#: MXFP8: one E8M0 scale byte per 32 elements (OCP Microscaling Formats (MX) v1.0, sec. 5: k = 32, E8M0)
MX_SCALE_BYTES = 1.0 / 32.0
#: blockwise FP8: one FP32 scale per 1 x 128 block of an activation or gradient (TE recipe/__init__.py
#: ``Float8BlockScaling``: x and grad block_scaling_dim 1, "float32 containers")
BLOCK_ACT_SCALE_BYTES = 4.0 / 128.0
#: compute capability from which FP8 GEMMs take non-TN layouts (TE utils.py ``is_non_tn_fp8_gemm_supported``:
#: 10.0 <= cc < 12.0) and MXFP8 runs (quantization.py ``_compute_mxfp8_support``); 12.x lacks both
NON_TN_CC = 10.0
NON_TN_CC_END = 12.0


@njit(inline="always")
def non_tn(row):
    """True on a device whose FP8 GEMMs take non-TN layouts and MX block scales (compute capability 10.x)."""
    cc = row[C_COMPUTE_CAPABILITY]
    return NON_TN_CC <= cc < NON_TN_CC_END


@njit(inline="always")
def fp8_gemm_rate(row):
    """The recipe's FP8 GEMM rate over per-tensor FP8's: MXFP8 ``MX_GEMM_RATE``; blockwise the same on compute
    capability 10.x, where TE emulates it with MXFP8 (pytorch/csrc/extensions/gemm.cpp), else 1 (Hopper's
    cuBLAS 12.9 block-scaled FP8 GEMMs: 1.75x BF16 on large matmuls, per-tensor's ratio within 1%,
    docs/model.md §11.19); 1 for per-tensor scaling and an unstated recipe."""
    recipe = row[C_FP8_RECIPE]
    if recipe == FP8_MXFP8 or (recipe == FP8_BLOCKWISE and non_tn(row)):
        return MX_GEMM_RATE
    return 1.0


@njit(inline="always")
def fp4_gemm_rate(row):
    """Share of ``peak_flops_4 x gemm_eff_8`` an FP4 GEMM attains: ``NVFP4_GEMM_RATE`` in NVFP4 training
    (``precision`` fp4, TE's cuBLASLt NVFP4 GEMMs, docs/model.md §11.38); serving's W4A4 (precision code 0 there,
    its engines' kernels) at the device's ``w4a4_gemm_rate`` where it states one, else 1 (docs/model_serving.md
    S59). It scales the compute bound only: a memory-bound decode GEMM keeps its time."""
    if row[C_PRECISION] == PRECISION_FP4:
        return NVFP4_GEMM_RATE
    return row[C_W4A4_GEMM_RATE] if row[C_W4A4_GEMM_RATE] > 0.0 else 1.0


@njit(inline="always")
def gemm_weight_bytes(fmt):
    """Bytes per weight element a GEMM of format ``fmt`` reads: 2 (16-bit), 1 (FP8), 0.5625 (NVFP4,
    :data:`NVFP4_COPY_BYTES`); the one element size of the GEMM formats (``kernels/lm/fp4.train_gemm_format``)."""
    if fmt >= 2.0:
        return NVFP4_COPY_BYTES
    return 1.0 if fmt else 2.0


@njit(inline="always")
def gemm_act_bytes(row, fmt):
    """Bytes per element of a GEMM's activation operands (input, or the output gradient and input of a weight
    gradient): 2 (16-bit), 1 (FP8), 0.5625 in NVFP4 training (``precision`` fp4, W4A4: TE's ``NVFP4BlockScaling``
    quantizes every linear's input, ``fp4_quant_fwd_inp``, and output gradient, ``fp4_quant_bwd_grad``; docs/model.md
    §11.39). Serving's W4A4 (precision code 0 there) keeps 1 B."""
    if fmt >= 2.0 and row[C_PRECISION] == PRECISION_FP4:
        return NVFP4_COPY_BYTES
    return 1.0 if fmt else 2.0


@njit(inline="always")
def sp_gather_bytes(row, grad):
    """Bytes per element of a GEMM operand all-gathered over the TP group under sequence parallelism (docs/model.md
    §11.40): the forward input of a column-parallel linear (``grad`` False) or the output gradient of a row-parallel
    one before its dgrad (``grad`` True). Transformer Engine quantizes both before the gather, NCCL or Userbuffers
    (TE 09ba842 and v1.6rc1 ``layernorm_linear.py``, ``base.py`` ``grad_output_preprocess``; v2.14
    ``distributed.py`` ``gather_along_first_dim``). Per-tensor FP8 (delayed, current, unstated) gathers the rowwise
    data, 1 B, and transposes locally; MXFP8 and blockwise add their scales (1/32, 4/128 B), and the output
    gradient gathers the rowwise and the columnwise copy (2x); NVFP4 likewise at 0.5625 B per copy. 2 B for 16-bit
    GEMMs and serving's precision codes."""
    precision = row[C_PRECISION]
    copies = 2.0 if grad else 1.0
    if precision == PRECISION_FP4:
        return copies * NVFP4_COPY_BYTES
    if precision != PRECISION_FP8:
        return 2.0
    recipe = row[C_FP8_RECIPE]
    if recipe == FP8_MXFP8:
        return copies * (1.0 + MX_SCALE_BYTES)
    if recipe == FP8_BLOCKWISE:
        return copies * (1.0 + BLOCK_ACT_SCALE_BYTES)
    return 1.0


@njit(inline="always")
def pow2_tile(extent, smallest, largest):
    """The power of two >= the extent, clamped to [smallest, largest] (smallest a power of two)."""
    tile = smallest
    while tile < extent and tile < largest:     # doubling: exact, and cheaper than log2/pow in sweeps
        tile *= 2.0
    return min(largest, tile)


@njit(inline="always")
def tile_size(extent, largest):
    """The library's tile along one dimension: the largest tile, or the power of two >= the extent (>= 16)."""
    return pow2_tile(extent, 16.0, largest)


@njit(inline="always")
def expert_row_tile(row, m):
    """Row (token) tile of the grouped expert kernel for ``m`` rows per expert: the power of two >= m clamped to
    the kernel's ``[expert_tile_min, expert_tile_max]`` (0: the library's 16 and ``gemm_tile_m``). Serving sets
    the range of the kernel its engine runs (FlashInfer trtllm-gen FP4 MoE: 8..64; docs/model_serving.md S12)."""
    smallest = row[C_EXPERT_TILE_MIN] if row[C_EXPERT_TILE_MIN] > 0.0 else 16.0
    largest = row[C_EXPERT_TILE_MAX] if row[C_EXPERT_TILE_MAX] > 0.0 else row[C_GEMM_TILE_M]
    return pow2_tile(m, smallest, largest)


@njit(inline="always")
def tile_quantization(row, groups, m, n, k):
    """Useful share of the tensor-core work launched for ``groups`` (m x n) outputs scheduled together.

    Padding: the output is cut into tiles (``gemm_tile_m x gemm_tile_n``, smaller for small extents).
    Waves: tiles run ``sm_count`` at a time; a grid smaller than one wave is split along K (split-K,
    while each split keeps >= 256 of K) to fill the SMs.
    """
    return tiled_quantization(row, groups, m, n, k, tile_size(m, row[C_GEMM_TILE_M]))


@njit(inline="always")
def tiled_quantization(row, groups, m, n, k, tm):
    """:func:`tile_quantization` with the row tile ``tm`` given (grouped expert kernels)."""
    tn = tile_size(n, row[C_GEMM_TILE_N])
    tiles = groups * math.ceil(m / tm) * math.ceil(n / tn)
    padding = (groups * m * n) / (tiles * tm * tn)
    sms = row[C_SM_COUNT]
    if tiles < sms:
        split = max(1.0, min(math.floor(sms / tiles), math.floor(k / 256.0)))
        return padding * tiles * split / sms
    return padding * tiles / (math.ceil(tiles / sms) * sms)


@njit(inline="always")
def format_peak(row, fp8):
    """(datasheet FLOP/s, measured large-GEMM efficiency) of the GEMM precision ``fp8`` (False/0: 16-bit, True/1:
    FP8, 2: FP4 W4A4 at the FP4 peak x the FP8 efficiency x :func:`fp4_gemm_rate`: serving's engines at the
    device's ``w4a4_gemm_rate``, NVFP4 training GEMMs at ``NVFP4_GEMM_RATE``); a format the device has no peak for
    runs at the next wider one. FP8 at the training recipe's rate
    (``fp8_recipe``, :func:`fp8_gemm_rate`; 1 unless a recipe is stated)."""
    if fp8 >= 2.0 and row[C_PEAK_FLOPS_4] > 0.0:
        return row[C_PEAK_FLOPS_4], row[C_GEMM_EFF_8] * fp4_gemm_rate(row)
    if fp8 and row[C_PEAK_FLOPS_8] > 0.0:
        return row[C_PEAK_FLOPS_8], row[C_GEMM_EFF_8] * fp8_gemm_rate(row)
    return row[C_PEAK_FLOPS_16], row[C_GEMM_EFF_16]


@njit(inline="always")
def gemm_peak(row, fp8):
    """Attainable FLOP/s of a large GEMM: datasheet peak x measured large-GEMM efficiency (:func:`format_peak`)."""
    peak, eff = format_peak(row, fp8)
    return peak * eff


@njit(inline="always")
def gemm_bounds(row, groups, m, n, k, fp8, weight_bytes):
    """(compute, memory) seconds of ``groups`` equal (m x k) @ (k x n) GEMMs at the modelled speed:
    ``2 m n (k + gemm_k_half) / (peak x quantization)`` and ``(weights + activations) / HBM`` per group, the
    weights at ``weight_bytes`` per element, the input at the GEMM precision's (:func:`gemm_act_bytes`), the output
    at 2 B."""
    return tiled_bounds(row, groups, m, n, k, fp8, weight_bytes, tile_size(m, row[C_GEMM_TILE_M]))


@njit(inline="always")
def tiled_bounds(row, groups, m, n, k, fp8, weight_bytes, tm):
    """:func:`gemm_bounds` with the row tile ``tm`` given (grouped expert kernels)."""
    quantization = tiled_quantization(row, groups, m, n, k, tm)
    compute = 2.0 * groups * m * n * (k + row[C_GEMM_K_HALF]) / (gemm_peak(row, fp8) * quantization)
    element = gemm_act_bytes(row, fp8)
    traffic = groups * (weight_bytes * k * n + element * m * k + 2.0 * m * n)
    return compute, traffic / (row[C_HBM_BW] * row[C_HBM_EFF])


@njit
def gemm_roofline(row, groups, m, n, k, fp8, weight_bytes, launch):
    """Seconds for ``groups`` equal (m x k) @ (k x n) GEMMs launched as one kernel, the one GEMM model of
    training and serving: ``max(compute, memory)`` of :func:`gemm_bounds`; ``launch`` (1.0 or 0.0: serving's
    decode replays CUDA graphs) adds the launch overhead. At the modelled speed: callers divide by
    ``stack_compute_eff`` (per GEMM, or once per list of GEMMs). 0 when empty."""
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    compute, memory = gemm_bounds(row, groups, m, n, k, fp8, weight_bytes)
    return max(compute, memory) + launch * row[C_KERNEL_OVERHEAD_S]


@njit(inline="always")
def expert_compute_scale(row, fp8):
    """Factor on the compute bound of a routed-expert grouped GEMM for the engine's expert kernel
    (``expert_gemm_eff``, docs/model_serving.md S29): :func:`gemm_peak` over ``expert_gemm_eff`` x the format's
    datasheet peak (the FP4 peak for W4A4, FP8 for FP8 and W4A8, else 16-bit), i.e. the format's large-GEMM
    efficiency over ``expert_gemm_eff`` (the peak cancels); 1 when unset (0)."""
    expert_eff = row[C_EXPERT_GEMM_EFF]
    if expert_eff <= 0.0:
        return 1.0
    _, eff = format_peak(row, fp8)
    return eff / expert_eff


@njit(inline="always")
def expert_bounds(row, groups, m, n, k, fp8, weight_bytes):
    """(compute, memory) of :func:`tiled_bounds` at the expert row tile (:func:`expert_row_tile`), the compute
    bound at the engine's expert-kernel efficiency (:func:`expert_compute_scale`)."""
    compute, memory = tiled_bounds(row, groups, m, n, k, fp8, weight_bytes, expert_row_tile(row, m))
    return compute * expert_compute_scale(row, fp8), memory


@njit(inline="always")
def exposed_weight_share(row, m):
    """Share of a grouped GEMM's weight stream that its tensor-core work cannot hide: ``min(1, tile / m)``,
    one over the row tiles (:func:`expert_row_tile`) that reuse each expert's weight tile (docs/model.md §11.3,
    "Grouped GEMMs")."""
    return min(1.0, expert_row_tile(row, m) / m)


@njit(inline="always")
def hides_math(row, groups, m):
    """True when the engine's expert kernel hides its MMA under its weight stream at this load: the routed rows per
    local expert, ``groups m / (moe_experts / ep)``, below ``expert_hide_rows`` (0: never; vLLM's Marlin MoE runs
    one 16-row MMA block with up to 4 thread blocks per SM there, docs/model_serving.md S38)."""
    limit = row[C_EXPERT_HIDE_ROWS]
    return limit > 0.0 and groups * m * row[C_EP] < limit * row[C_MOE_EXPERTS]


@njit
def expert_gemm_roofline(row, groups, m, n, k, fp8, weight_bytes, launch):
    """Seconds of a grouped GEMM over ``groups`` experts of ``m`` rows each (MoE routed experts):
    ``max(c, w) + s min(c, w)`` with ``(c, w)`` of :func:`gemm_bounds` and ``s`` the exposed share
    (:func:`exposed_weight_share`), the compute bound at the engine's expert kernel (:func:`expert_bounds`). Each
    expert's weight tile is loaded once per row tile; with one row tile
    per expert (m <= tile_m) nothing else can run while it streams in, so load and math add up; with ``r`` row
    tiles the later ones find it in L2 and only ``1/r`` of the shorter bound stays exposed; none where the
    kernel hides its math (:func:`hides_math`); a contiguous-layout kernel that computes its whole worst-case buffer
    adds the buffer's tail (:func:`buffer_tail_compute`). Same launch rule as
    :func:`gemm_roofline`; 0 when empty. Row tile: :func:`expert_row_tile`. Without grouped GEMMs
    (``moe_grouped_gemm`` 0, Megatron-Core's SequentialMLP, docs/model.md §11.57): ``groups`` separate GEMMs of ``m``
    rows, each with its own tile and wave quantization (:func:`gemm_bounds`), the same exposed weight-stream share
    and its own launch, and never below the grouped time at equal launches: TE's grouped GEMM, which the share was
    measured on, is itself one cuBLAS GEMM per expert (``nvte_multi_tensor_gemm``)."""
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    compute, memory = expert_bounds(row, groups, m, n, k, fp8, weight_bytes)
    share = 0.0 if hides_math(row, groups, m) else exposed_weight_share(row, m)
    grouped = max(compute, memory) + share * min(compute, memory) + buffer_tail_compute(row, groups, m, n, k, fp8)
    if row[C_MOE_GROUPED_GEMM] > 0.0:
        return grouped + launch * row[C_KERNEL_OVERHEAD_S]
    compute, memory = gemm_bounds(row, 1.0, m, n, k, fp8, weight_bytes)
    each = max(compute, memory) + exposed_weight_share(row, m) * min(compute, memory)
    return max(groups * each, grouped) + groups * launch * row[C_KERNEL_OVERHEAD_S]


@njit
def buffer_tail_compute(row, groups, m, n, k, fp8):
    """Compute seconds of the blocks a contiguous-layout expert kernel runs past the routed rows' own blocks
    (``expert_align_rows`` A > 0, docs/model_serving.md S42): it launches over the worst-case buffer
    ``round_up(groups m ep + (E / ep)(A - 1), A)`` rows (every token's top-k, local or not, plus A - 1 per local
    expert) and computes every A-row block, the ``groups ceil(m / A)`` blocks
    of the touched experts and a tail of ``buffer / A - groups ceil(m / A)`` blocks against one expert's weights,
    which stay in L2: their MMA time at the expert kernel's rate, no weight stream. 0 when A is 0."""
    align = row[C_EXPERT_ALIGN_ROWS]
    if align <= 0.0:
        return 0.0
    buffer = math.ceil((groups * m * row[C_EP] + row[C_MOE_EXPERTS] / row[C_EP] * (align - 1.0)) / align)
    tail = buffer - groups * math.ceil(m / align)
    if tail <= 0.0:
        return 0.0
    compute, _ = tiled_bounds(row, tail, align, n, k, fp8, 0.0, align)
    return compute * expert_compute_scale(row, fp8)


@njit
def expert_wgrad_roofline(row, groups, m, n, k, fp8, source_bytes, launch):
    """Seconds of the weight-gradient GEMMs of ``groups`` routed experts of ``m`` rows each whose forward GEMM is
    (m x k) @ (k x n) (docs/model.md §11.3, "Weight gradients of routed experts"): each expert's k x n gradient is
    cut into output tiles (the dense tile rule) and reduced over its ``m`` rows, ``max(compute, memory)`` of
    :func:`tiled_bounds` with the roles swapped (reduction m, operands the m x n output gradient and the m x k
    input), plus the epilogue's read of the gradient it accumulates into: ``groups k n source_bytes / (HBM bw x
    hbm_eff)`` (beta = 1: the source tile is loaded before the sum is formed and stored; the store is an
    asynchronous TMA store that drains under the next tile's mainloop). ``source_bytes`` 0: a gradient written
    without a source (beta = 0). Same launch rule as :func:`gemm_roofline`; 0 when empty. Without grouped GEMMs
    (``moe_grouped_gemm`` 0, SequentialMLP, §11.57): ``groups`` launches of one expert's gradient each."""
    if groups <= 0.0 or m <= 0.0 or n <= 0.0 or k <= 0.0:
        return 0.0
    launches = 1.0 if row[C_MOE_GROUPED_GEMM] > 0.0 else groups
    each = groups / launches
    element = gemm_act_bytes(row, fp8)
    compute, memory = tiled_bounds(row, each, k, n, m, fp8, element, tile_size(k, row[C_GEMM_TILE_M]))
    source = accumulate_source_time(row, each * k * n, source_bytes)
    return launches * (max(compute, memory) + source + launch * row[C_KERNEL_OVERHEAD_S])


@njit(inline="always")
def accumulate_source_time(row, elements, source_bytes):
    """Seconds (at the modelled speed) of the epilogue's read of the ``elements`` gradient elements a weight-gradient
    GEMM accumulates into with beta = 1, ``source_bytes`` each: ``elements source_bytes / (HBM bw x hbm_eff)``
    (docs/model.md §11.3, "Weight gradients accumulated into the main gradient"); the one definition of the read,
    for the routed experts (:func:`expert_wgrad_roofline`) and the dense linears (``shape.wgrad_source_s``)."""
    return elements * source_bytes / (row[C_HBM_BW] * row[C_HBM_EFF])


@njit
def grouped_gemm_time(row, groups, m, n, k, fp8):
    """Seconds for ``groups`` equal (m x k) @ (k x n) GEMMs launched as one batched/grouped kernel
    (attention heads, MoE experts), the weights at the GEMM format's bytes (:func:`gemm_weight_bytes`;
    :func:`gemm_roofline`)."""
    return gemm_roofline(row, groups, m, n, k, fp8, gemm_weight_bytes(fp8), 1.0) / row[C_STACK_COMPUTE_EFF]


@njit
def expert_gemm_time(row, groups, m, n, k, fp8):
    """Seconds for a grouped GEMM over ``groups`` routed experts of ``m`` rows each, the weights at the GEMM
    format's bytes (:func:`gemm_weight_bytes`; :func:`expert_gemm_roofline`)."""
    return expert_gemm_roofline(row, groups, m, n, k, fp8, gemm_weight_bytes(fp8), 1.0) / row[C_STACK_COMPUTE_EFF]


@njit
def expert_wgrad_time(row, groups, m, n, k, fp8, source_bytes):
    """Seconds for the weight-gradient GEMMs of ``groups`` routed experts of ``m`` rows each
    (:func:`expert_wgrad_roofline`), over ``stack_compute_eff``."""
    return expert_wgrad_roofline(row, groups, m, n, k, fp8, source_bytes, 1.0) / row[C_STACK_COMPUTE_EFF]


@njit
def gemm_time(row, m, n, k, fp8):
    """Seconds for one (m x k) @ (k x n) GEMM; 0 for an empty one."""
    return grouped_gemm_time(row, 1.0, m, n, k, fp8)


@njit(inline="always")
def attention_grid_share(row, groups, s, tile, imbalance):
    """Useful share Q of one flash-attention kernel's launched work (docs/model.md §11.51): ``groups`` (batch x local
    heads) x ceil(s / tile) CTAs, one per query tile (forward) or key tile (backward), on ``sm_count`` SMs. Causal
    (``imbalance``): tile j visits (j + 1) tiles of keys, the last all s; scheduled longest first, the kernel lasts
    max(s, launched / SMs), Q = min(1, launched / (SMs s)). Equal tiles: the GEMM wave form. ``tile`` 0: 1."""
    if tile <= 0.0 or groups <= 0.0 or s <= 0.0:
        return 1.0
    sms = row[C_SM_COUNT]
    n = math.ceil(s / tile)
    if imbalance:
        return min(1.0, groups * (tile * n * (n - 1.0) / 2.0 + s) / (sms * s))
    ctas = groups * n
    return ctas / (math.ceil(ctas / sms) * sms)


@njit(inline="always")
def attention_wave(row, groups, s, imbalance):
    """Q of forward + backward flash attention, the forward's grid over ``attn_tile_q`` query rows and the
    backward's over ``attn_tile_kv`` keys, weighted as their FLOPs (1 : 2.5): 3.5 / (1/Q_f + 2.5/Q_b) (§11.51)."""
    forward = attention_grid_share(row, groups, s, row[C_ATTN_TILE_Q], imbalance)
    backward = attention_grid_share(row, groups, s, row[C_ATTN_TILE_KV], imbalance)
    return 3.5 / (1.0 / forward + 2.5 / backward)


@njit
def attention_time(row, flops, share):
    """Seconds for flash-attention forward kernels executing ``flops`` in training: at ``attn_eff`` x ``share`` (the
    grid's useful share, :func:`attention_wave`; 1 for none), or at ``attn_eff_fa2`` x ``share`` where the stack runs
    FlashAttention-2 (PyTorch SDPA's flash backend, ``attn_fa2``) and the device states it; x the forward's
    exponential rate (:func:`exp_rate_scale`: 2 (d_qk + d_v) FLOPs, 1 exponential per score). The backward's base is
    :func:`attention_backward_base` (docs/model.md §11.58: the backward is not limited by the exponentials)."""
    return _attention_seconds(row, flops * exp_rate_scale(row, 2.0, 1.0), attention_eff(row) * share)


@njit
def attention_backward_base(row, flops, share):
    """The flash backward's base: :func:`attention_time` without the exponential-rate factor (kernels/lm/passes.py
    charges ``BACKWARD_ATTN`` x it; FlashAttention-4: the backward is shared-memory bound, docs/model.md §11.58)."""
    return _attention_seconds(row, flops, attention_eff(row) * share)


@njit
def attention_fwd_time(row, flops, share):
    """Seconds for flash-attention forward kernels alone executing ``flops`` (serving prefill: no backward) at
    ``attn_eff_fwd`` where the device states it, else as :func:`attention_time`, x ``share`` (the forward grid's
    :func:`attention_grid_share`; docs/model_serving.md §S48, docs/model.md §11.51); x the forward's exponential
    rate (:func:`exp_rate_scale`: 2 (d_qk + d_v) FLOPs, 1 exponential per score)."""
    eff = row[C_ATTN_EFF_FWD] if row[C_ATTN_EFF_FWD] > 0.0 else attention_eff(row)
    return _attention_seconds(row, flops * exp_rate_scale(row, 2.0, 1.0), eff * share)


@njit(inline="always")
def _attention_seconds(row, flops, eff):
    """``flops`` at ``eff`` of the 16-bit peak, plus one kernel's overhead, over the stack's compute share."""
    if flops <= 0.0:
        return 0.0
    return (flops / (row[C_PEAK_FLOPS_16] * eff) + row[C_KERNEL_OVERHEAD_S]) / row[C_STACK_COMPUTE_EFF]


@njit(inline="always")
def attention_eff(row):
    """Fraction of the 16-bit peak the attention kernels reach: ``attn_eff_fa2`` for FlashAttention-2 kernels
    (``attn_fa2``) on a device that states it, else ``attn_eff`` (docs/model.md §11.3). MLA keeps ``attn_eff``:
    SDPA's flash backend needs equal query/key and value head widths (sdp_utils.cpp check_head_dim_size_flash)."""
    if row[C_ATTN_FA2] > 0.0 and row[C_ATTN_EFF_FA2] > 0.0 and row[C_MLA] <= 0.0:
        return row[C_ATTN_EFF_FA2]
    return row[C_ATTN_EFF]


@njit
def memory_bound_time(row, nbytes):
    """Seconds to stream ``nbytes`` through HBM."""
    if nbytes <= 0.0:
        return 0.0
    return nbytes / (row[C_HBM_BW] * row[C_HBM_EFF] * row[C_STACK_COMPUTE_EFF])
