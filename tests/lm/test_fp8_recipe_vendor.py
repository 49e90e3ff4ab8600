"""FP8 recipes on an AMD device (kernels/lm/fp8.py ``fp8_recipe_supported``; docs/model.md §11.19): MI300X (CDNA 3,
gfx942) states no NVIDIA compute capability, so before the ``vendor`` column it ran every recipe. Transformer
Engine's ROCm fork (ROCm/TransformerEngine@030b792 transformer_engine/pytorch/quantization.py) refuses MXFP8 off
gfx95x (``check_mxfp8_support``: "Device arch gfx95x or newer is required for MXFP8 execution") and every
block-scaled FP8 GEMM (``check_fp8_block_scaling_support``: "FP8 block scaled gemm not yet supported for ROCm");
delayed and current (tensor-wise) scaling run (``check_fp8_support``)."""

import numpy as np
import pytest

from fastmodel.errors import PlanError
from fastmodel.kernels.lm.fp8 import fp8_recipe_supported
from fastmodel.kernels.lm.rules import plan_status_row
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import FP8_RECIPES, STATUS_CODES, STATUSES, column_defaults
from fastmodel.registry.lm_lowprec import VENDORS


def _row(recipe: str, vendor: str, cc: float) -> np.ndarray:
    row = np.array(column_defaults())
    row[C["precision"]] = 1.0
    row[C["fp8_recipe"]] = FP8_RECIPES[recipe]
    row[C["vendor"]] = VENDORS[vendor]
    row[C["compute_capability"]] = cc
    row[C["n_gpus"]] = 1.0  # one device: every other rule holds
    return row


@pytest.mark.parametrize("recipe, vendor, cc, ok", [
    ("mxfp8", "amd", 0.0, False), ("blockwise", "amd", 0.0, False),        # ROCm TE: gfx95x only / no block GEMM
    ("delayed", "amd", 0.0, True), ("tensorwise", "amd", 0.0, True), ("unstated", "amd", 0.0, True),
    ("mxfp8", "amd", 10.0, False),                                         # a capability does not make it NVIDIA
    ("mxfp8", "nvidia", 0.0, True), ("blockwise", "nvidia", 0.0, True),    # NVIDIA stating none: not refused
    ("mxfp8", "nvidia", 10.0, True), ("mxfp8", "nvidia", 9.0, False),      # the capability rule, unchanged
])
def test_amd_runs_neither_mxfp8_nor_blockwise(recipe, vendor, cc, ok):
    row = _row(recipe, vendor, cc)
    assert bool(fp8_recipe_supported(row)) is ok
    assert plan_status_row(row) == (0 if ok else STATUS_CODES["fp8_recipe_unsupported"])


def test_a_sweep_on_mi300x_marks_the_block_scaled_recipes():
    from fastmodel.lm.sweep import lm_sweep

    axes = {"precision": ["fp8"], "fp8_recipe": ["delayed", "tensorwise", "mxfp8", "blockwise"]}
    result = lm_sweep("llama3.1-8b", "mi300x", global_batch=64, axes=axes)
    assert [STATUSES[int(c)].name for c in result.status.values.ravel()] == [
        "ok", "ok", "fp8_recipe_unsupported", "fp8_recipe_unsupported"]


def test_a_single_mi300x_run_is_refused_with_the_reason():
    from fastmodel.lm.api import evaluate_lm

    execution = {"precision": "fp8", "fp8_recipe": "mxfp8"}
    with pytest.raises(PlanError, match=r"fp8_recipe_unsupported.*AMD device \(MI300X, CDNA 3\) neither runs"):
        evaluate_lm("llama3.1-8b", "mi300x", "llm-pretrain", execution=execution)
    execution["fp8_recipe"] = "tensorwise"
    assert int(evaluate_lm("llama3.1-8b", "mi300x", "llm-pretrain", execution=execution).status) == 0
