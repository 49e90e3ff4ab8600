"""NVFP4 training (``precision = fp4``, docs/model.md §11.38): the GEMM format of a training row and what the NVFP4
recipe costs beyond its FP4 GEMMs, per element of a 16-bit tensor it quantizes.

Transformer Engine's ``NVFP4BlockScaling`` (TE transformer_engine/common/recipe/__init__.py at 000b637; Megatron-LM
``--fp4-format e2m1 --fp4-recipe nvfp4``, megatron/core/fp4_utils.py ``get_fp4_recipe``) quantizes the inputs of
every linear's three GEMMs (fprop, dgrad, wgrad) to E2M1 (4 bits) in 1 x 16 blocks, each with one E4M3 scale byte,
under an FP32 per-tensor scale; weights use 16 x 16 blocks. A tensor read by the forward and the backward GEMMs is
quantized twice from its 16-bit source, rowwise and columnwise (the docstring: "both versions are computed from the
high precision input"). TE's ``NVFP4Quantizer::quantize_impl`` (transformer_engine/pytorch/csrc/quantizer.cpp):
one amax pass over the 16-bit input first (``nvte_hadamard_transform_amax``: the input's amax and that of its
random-Hadamard transform, or ``nvte_compute_amax``), then for activations and gradients a rowwise cast
(``nvte_quantize_v2``) and a columnwise random-Hadamard-transform cast (``nvte_hadamard_transform_cast_fusion_
columnwise``), each reading the 16-bit input; the scale tensor holds one byte per 16 elements along the rows
(``get_scale_shape``: ``last_dim / NVFP4_BLOCK_SIZE``), for weights too.
"""

from fastmodel.kernels.columns import C_COMPUTE_CAPABILITY, C_PEAK_FLOPS_4, C_PRECISION, PRECISION_FP4, PRECISION_FP8
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.fp8 import SOURCE_BYTES, fp8_cast_bytes, fp8_saved_input_bytes, fp8_weight_copy_bytes

# the NVFP4 copy's bytes per element live with the roofline, which reads them for every GEMM format
from fastmodel.kernels.roofline import NVFP4_COPY_BYTES

#: NVFP4 copies of a tensor the forward and backward GEMMs both read (rowwise + columnwise)
NVFP4_COPIES = 2.0
#: 16-bit reads of an activation or gradient cast: the amax pass, the rowwise cast, the columnwise RHT cast
NVFP4_CAST_READS = 3.0
#: first compute capability with FP4 tensor cores (Blackwell sm_100; TE runs NVFP4 GEMMs on 10.x and later)
FP4_CC = 10.0


@njit(inline="always")
def train_gemm_format(row):
    """The GEMM format of a training row, the ``fp8`` argument of the roofline (``kernels/roofline.py``
    ``format_peak``): 0 16-bit, 1 FP8, 2 FP4 (NVFP4)."""
    precision = row[C_PRECISION]
    if precision == PRECISION_FP4:
        return 2.0
    if precision == PRECISION_FP8:
        return 1.0
    return 0.0


@njit(inline="always")
def low_precision_gemms(row):
    """True when the row's linear GEMMs run in a low-precision format (FP8 or NVFP4, :func:`train_gemm_format`
    > 0): the recipe's weight forms and saved GEMM inputs are held (docs/model_memory.md "FP8 recipe copies")."""
    return train_gemm_format(row) > 0.0


@njit
def nvfp4_cast_bytes():
    """HBM bytes per element of a 16-bit GEMM input cast to the two NVFP4 forms the forward and backward read:
    ``3 x 2 (amax pass, rowwise cast, columnwise RHT cast) + 2 x 0.5625`` = 7.125."""
    return NVFP4_CAST_READS * SOURCE_BYTES + NVFP4_COPIES * NVFP4_COPY_BYTES


@njit
def lowp_cast_bytes(row):
    """Cast bytes per element of a GEMM input under the row's low-precision GEMMs: NVFP4's
    (:func:`nvfp4_cast_bytes`) under fp4, else the FP8 recipe's (``fp8_cast_bytes``)."""
    if row[C_PRECISION] == PRECISION_FP4:
        return nvfp4_cast_bytes()
    return fp8_cast_bytes(row)


@njit
def lowp_weight_copy_bytes(row):
    """Bytes per weight element of the low-precision weight forms kept across micro-batches: NVFP4 rowwise +
    columnwise, ``2 x 0.5625`` = 1.125, under fp4; else the FP8 recipe's (``fp8_weight_copy_bytes``)."""
    if row[C_PRECISION] == PRECISION_FP4:
        return NVFP4_COPIES * NVFP4_COPY_BYTES
    return fp8_weight_copy_bytes(row)


@njit
def lowp_saved_input_bytes(row):
    """Bytes per element of a GEMM input saved for the weight-gradient GEMM: its columnwise NVFP4 copy, 0.5625,
    under fp4; else the FP8 recipe's (``fp8_saved_input_bytes``)."""
    if row[C_PRECISION] == PRECISION_FP4:
        return NVFP4_COPY_BYTES
    return fp8_saved_input_bytes(row)


@njit
def fp4_supported(row):
    """False for an fp4 row on a device without FP4 tensor cores: no FP4 peak (``peak_flops_4`` 0) or a stated
    compute capability below 10.0; True for every other precision."""
    if row[C_PRECISION] != PRECISION_FP4:
        return True
    cc = row[C_COMPUTE_CAPABILITY]
    return row[C_PEAK_FLOPS_4] > 0.0 and (cc <= 0.0 or cc >= FP4_CC)
