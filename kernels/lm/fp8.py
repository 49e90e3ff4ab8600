"""FP8 training recipes (``fp8_recipe``, docs/model.md §11.19 and docs/model_memory.md "FP8 recipe copies").

What each Transformer Engine recipe (TE d0067d0, 2.20.0.dev0) costs beyond the FP8 GEMM itself, per element of a
16-bit tensor it quantizes, and the rate of its GEMM kernel:

- copies: the FP8 forms kept of a tensor both the forward and the backward GEMMs read. Per-tensor scaling
  (delayed, tensorwise) on a device without non-TN FP8 GEMMs (compute capability below 10) keeps the rowwise data
  and its transpose, on compute capability 10.x one copy serves both (transformer_engine/pytorch/utils.py
  ``is_non_tn_fp8_gemm_supported``; csrc/quantizer.cpp ``Float8Quantizer::create_tensor``, ``with_transpose``).
  MXFP8 and blockwise scaling keep a rowwise and a columnwise copy on every device: a 1 x 32 or 1 x 128 block's
  scale is constant along the contracted dimension only, so the transposed operand is quantized again from the
  16-bit input (TE recipe/__init__.py ``Float8BlockScaling`` docstring; docs/features/low_precision_training/mxfp8/
  mxfp8.rst); a 128 x 128 weight block's columnwise copy is its rowwise data and scale transposed, but on Hopper
  still a second tensor in memory (docs/features/low_precision_training/fp8_blockwise_scaling, "Handling
  transposes").
- scale bytes per element: MXFP8 one E8M0 byte per 32 elements (OCP MX v1.0, block 32), blockwise one FP32 scale
  per 128 elements of an activation or gradient (1 x 128) and per 128 x 128 of a weight.
- the amax pass: current scaling reads the 16-bit tensor once for its amax before the cast
  (csrc/quantizer.cpp ``Float8CurrentScalingQuantizer::quantize_impl``: ``nvte_compute_amax``, then
  ``nvte_quantize_v2``); delayed scaling takes last step's amax, MXFP8 and blockwise compute each block's scale in
  the cast kernel.
- GEMM rate: the share of the per-tensor FP8 GEMM rate (``gemm_eff_8``) the recipe's kernel attains
  (``fastmodel.kernels.roofline.fp8_gemm_rate``, beside the roofline that applies it).
"""

from fastmodel.kernels.columns import (
    C_COLLECTIVE_OVERHEAD_S, C_COMPUTE_CAPABILITY, C_FP8_PARAMS, C_FP8_RECIPE, C_FP8_WEIGHT_TRANSPOSE_PER_USE,
    C_PP, C_PRECISION, C_TP,
    FP8_BLOCKWISE, FP8_DELAYED,
    FP8_MXFP8, FP8_TENSORWISE, FP8_UNSTATED, PRECISION_FP4, PRECISION_FP8, C_VENDOR, VENDOR_AMD,
)
from fastmodel.kernels.jit import njit
from fastmodel.kernels.nccl import allreduce_time
from fastmodel.kernels.roofline import (  # noqa: F401 - the GEMM rate and the scale sizes live with the roofline
    BLOCK_ACT_SCALE_BYTES, MX_SCALE_BYTES, fp8_gemm_rate, memory_bound_time, non_tn,
)

#: bytes of the 16-bit tensor a cast reads
SOURCE_BYTES = 2.0
#: generic cast count of an unstated recipe (docs/model.md §11.4): two casts, each reading 2 B and writing 1 B
UNSTATED_CAST_BYTES = 6.0
#: blockwise: one FP32 scale per 128 x 128 weight block (TE recipe/__init__.py ``Float8BlockScaling``: w
#: block_scaling_dim 2); MX_SCALE_BYTES and the 1 x 128 BLOCK_ACT_SCALE_BYTES live in kernels/roofline.py
BLOCK_WEIGHT_SCALE_BYTES = 4.0 / (128.0 * 128.0)
#: compute capability from which blockwise FP8 GEMMs run (quantization.py ``_compute_fp8_block_scaling_support``)
BLOCKWISE_CC = 9.0


@njit
def fp8_copies(row):
    """FP8 copies kept of a tensor the forward and the backward GEMMs both read (module docstring)."""
    recipe = row[C_FP8_RECIPE]
    if (recipe == FP8_DELAYED or recipe == FP8_TENSORWISE) and non_tn(row):
        return 1.0
    return 2.0


@njit(inline="always")
def _scale_bytes(row, blockwise_bytes):
    """Scale bytes per element: MXFP8's 1 x 32 blocks, ``blockwise_bytes`` under the blockwise recipe, else 0."""
    recipe = row[C_FP8_RECIPE]
    if recipe == FP8_MXFP8:
        return MX_SCALE_BYTES
    if recipe == FP8_BLOCKWISE:
        return blockwise_bytes
    return 0.0


@njit
def fp8_act_scale_bytes(row):
    """Scale bytes per element of an activation or gradient cast (0 under per-tensor scaling; blockwise 1 x 128)."""
    return _scale_bytes(row, BLOCK_ACT_SCALE_BYTES)


@njit
def fp8_weight_scale_bytes(row):
    """Scale bytes per weight element (MXFP8 1 x 32 blocks, blockwise 128 x 128 blocks, else 0)."""
    return _scale_bytes(row, BLOCK_WEIGHT_SCALE_BYTES)


@njit
def fp8_cast_bytes(row):
    """HBM bytes per element of a 16-bit GEMM input cast to the FP8 forms the forward and backward read:
    ``2 (read) + 2 (current scaling's amax pass) + copies x (1 + scale bytes)``; 6 when the recipe is unstated."""
    recipe = row[C_FP8_RECIPE]
    if recipe == FP8_UNSTATED:
        return UNSTATED_CAST_BYTES
    amax = SOURCE_BYTES if recipe == FP8_TENSORWISE else 0.0
    return SOURCE_BYTES + amax + fp8_copies(row) * (1.0 + fp8_act_scale_bytes(row))


@njit
def fp8_weight_copy_bytes(row):
    """Bytes per weight element of the FP8 weight forms kept across micro-batches (TE ``is_first_microbatch``
    caching, or FP8 parameters): ``copies x (1 + weight scale bytes)``; 1 when the recipe is unstated. With
    ``fp8_weight_transpose_per_use`` one form only, ``1 + weight scale bytes``: the other orientation is a
    transient of one GEMM (docs/model.md §11.50)."""
    if row[C_FP8_RECIPE] == FP8_UNSTATED:
        return 1.0
    copies = 1.0 if row[C_FP8_WEIGHT_TRANSPOSE_PER_USE] > 0.0 else fp8_copies(row)
    return copies * (1.0 + fp8_weight_scale_bytes(row))


@njit
def fp8_weight_step_bytes(row):
    """HBM bytes per FP8-GEMM weight element of the once-a-step weight preparation (docs/model.md §11.65 C):
    16-bit parameters are cast into the FP8 forms kept across micro-batches at each step's first micro-batch,
    2 B read and ``fp8_weight_copy_bytes`` written (TE 09ba842 ``module/linear.py`` lines 92, 145-153:
    ``fp8_cast_transpose_fused`` when ``is_first_microbatch``; NeMo bd0b818 ``transformer.py`` lines 1543-1557,
    1579-1585 pass it True on a step's first micro-batch only); FP8 parameters arrive in their first form by the
    all-gather and rebuild the others from it, ``1 + s`` read and the rest written (TE v1.6rc1 ``float8_tensor.py``
    ``transpose_2d`` lines 466-510, its cache reset after each step by NeMo b2eccd27 ``distributed_adam.py`` lines
    556-561), 0 when no other form is kept. 0 unless ``precision`` is fp8."""
    if row[C_PRECISION] != PRECISION_FP8:
        return 0.0
    kept = fp8_weight_copy_bytes(row)
    if row[C_FP8_PARAMS] <= 0.0:
        return SOURCE_BYTES + kept
    first = 1.0 + fp8_weight_scale_bytes(row)
    return kept if kept > first else 0.0        # read the first form (first), write the others (kept - first)


@njit
def fp8_weight_step_s(row, params):
    """Seconds of the once-a-step FP8 preparation of ``params`` weight elements (:func:`fp8_weight_step_bytes`), on
    the compute stream in the step's first forward of each chunk; the other ranks' on the pipeline's chain:
    :func:`fp8_weight_chain_s`."""
    return memory_bound_time(row, fp8_weight_step_bytes(row) * params)


@njit
def fp8_weight_chain_s(row, params):
    """Seconds the other ``p - 1`` ranks' once-a-step FP8 preparation adds to the pipeline's critical path
    (docs/model.md §11.65 C): each rank prepares a chunk's weights in that chunk's first micro-batch forward
    (TE 09ba842 ``module/linear.py`` line 92), which is micro-batch 0's, on the chain through every rank. Rank 0
    forwards a chunk's group of ``p`` micro-batches (one of them casting) while micro-batch 0 crosses the ``p``
    ranks (each casting), so it waits ``(p - 1)`` chunk casts more per chunk cycle (the last cycle's on the way
    to its first backward; 1F1B alike, v = 1): ``(p - 1) fp8_weight_step_s`` over the rank's ``params``. The
    rank's own casts are its work (:func:`fp8_weight_step_s`, with the optimizer's time)."""
    return (row[C_PP] - 1.0) * fp8_weight_step_s(row, params)


@njit
def fp8_transpose_bytes(row, params):
    """HBM bytes per micro-batch of the per-use weight transposes (``fp8_weight_transpose_per_use``, FP8 GEMMs;
    kernels/lm/layer.py ``layer_costs`` charges them to the backward's memory-bound time, ``W_BACKWARD_MEM``):
    each of ``params`` weight elements read and written once in the other orientation with its block scales,
    ``2 (1 + weight scale bytes) params``; 0 otherwise (docs/model.md §11.50)."""
    if row[C_FP8_WEIGHT_TRANSPOSE_PER_USE] <= 0.0 or row[C_PRECISION] != PRECISION_FP8:
        return 0.0
    return 2.0 * (1.0 + fp8_weight_scale_bytes(row)) * params


@njit
def fp8_saved_input_bytes(row):
    """Bytes per element of a GEMM input saved in FP8 for the weight-gradient GEMM: one copy (the columnwise
    one) and its scales."""
    return 1.0 + fp8_act_scale_bytes(row)


@njit
def fp8_recipe_supported(row):
    """False for a recipe the device cannot run: MXFP8 off compute capability 10.x, blockwise below 9.0; on an
    AMD device (vendor amd: MI300X, CDNA 3) neither, as Transformer Engine's ROCm fork runs MXFP8 on gfx95x only
    and no block-scaled FP8 GEMM (ROCm/TransformerEngine@030b792 transformer_engine/pytorch/quantization.py
    ``check_mxfp8_support``, ``check_fp8_block_scaling_support``; docs/model.md §11.19); an NVIDIA device that
    states no compute capability (0) is not refused."""
    recipe = row[C_FP8_RECIPE]
    if row[C_VENDOR] == VENDOR_AMD:
        return recipe != FP8_MXFP8 and recipe != FP8_BLOCKWISE
    cc = row[C_COMPUTE_CAPABILITY]
    if cc <= 0.0:
        return True
    if recipe == FP8_MXFP8:
        return non_tn(row)
    if recipe == FP8_BLOCKWISE:
        return cc >= BLOCKWISE_CC
    return True


#: bytes of one amax (FP32)
AMAX_BYTES = 4.0
#: amax all-reduces over the tensor-parallel group per layer and direction under current scaling with sequence
#: parallelism: the inputs of the two column-parallel linears (QKV, FC1) forward and the output gradients of the
#: two row-parallel ones (proj, FC2) backward (TE pytorch/module/linear.py 351-352, 809-818)
AMAX_REDUCTIONS = 2.0
#: amaxes per NVFP4 amax all-reduce: the rowwise and the columnwise (RHT) one of the quantized tensor, one coalesced
#: all-reduce (TE 000b637 pytorch/csrc/quantizer.cpp 2486-2512 ``NVFP4Quantizer::quantize_impl`` ``reduce_amaxes``)
NVFP4_AMAXES = 2.0


@njit
def amax_reduction_time(row):
    """Seconds per layer and direction of current scaling's amax all-reduces over the TP group under sequence
    parallelism (``Float8CurrentScalingQuantizer::quantize_impl`` waits on each before the cast; the layer adds it under SP): ``2 x
    (allreduce(4 B over tp) + collective_overhead_s)``; under NVFP4 (fp4) the same count of coalesced all-reduces of
    its two amaxes, 8 B (TE 000b637 module/linear.py 319-323, 781-797, layernorm_linear.py 232, 727: the
    column-parallel input's and the row-parallel output gradient's quantizer reduce over the TP group under
    sequence parallelism); 0 for every other recipe and 16-bit GEMMs."""
    if row[C_TP] <= 1.0:
        return 0.0
    amaxes = 1.0 if row[C_PRECISION] == PRECISION_FP8 and row[C_FP8_RECIPE] == FP8_TENSORWISE else 0.0
    if row[C_PRECISION] == PRECISION_FP4:
        amaxes = NVFP4_AMAXES       # NVFP4 reduces its amaxes too (docs/model.md §11.39)
    if amaxes <= 0.0:
        return 0.0
    bytes_ = amaxes * AMAX_BYTES
    return AMAX_REDUCTIONS * (allreduce_time(row, bytes_, row[C_TP], 1.0) + row[C_COLLECTIVE_OVERHEAD_S])
