"""FP8 training recipes (``fp8_recipe``, docs/model.md §11.19, docs/model_memory.md "FP8 recipe copies"):
reading a record's text, the cast traffic, the GEMM rate, the amax all-reduces, the refusal and the FP8 copies,
each against a hand derivation."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.errors import PlanError
from fastmodel.kernels.lm.fp8 import (
    amax_reduction_time,
    fp8_cast_bytes,
    fp8_recipe_supported,
    fp8_saved_input_bytes,
    fp8_weight_copy_bytes,
)
from fastmodel.kernels.lm.layer import N_WORK, W_MEM, W_TP, layer_costs
from fastmodel.kernels.lm.memory_activations import gemm_input_bytes
from fastmodel.kernels.lm.memory_states import weight_bytes_per_param
from fastmodel.kernels.lm.rules import plan_status_row
from fastmodel.kernels.nccl import allreduce_time
from fastmodel.kernels.roofline import format_peak
from fastmodel.lm.api import record_values
from fastmodel.lm.fp8_recipe import recipe_from_text
from fastmodel.lm.records import lower_record
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import FP8_RECIPES, STATUS_CODES, column_defaults

DATA = Path(__file__).parents[1] / "data"
HOPPER, BLACKWELL = 9.0, 10.0


def _row(recipe: str, cc: float, **values) -> np.ndarray:
    row = np.array(column_defaults())
    row[C["precision"]] = 1.0
    row[C["fp8_recipe"]] = FP8_RECIPES[recipe]
    row[C["compute_capability"]] = cc
    for name, value in values.items():
        row[C[name]] = value
    return row


@pytest.mark.parametrize("text, recipe", [
    ("mxfp8", "mxfp8"), ("fp8_cs", "tensorwise"), ("Delayed", "delayed"), ("blockwise", "blockwise"),
    ("current scaling, tensor-wise (bf16_with_fp8_current_scaling_mixed)", "tensorwise"),
    ("mxfp8: 1x32 E8M0 block scales (bf16_with_mxfp8_mixed)", "mxfp8"),
    ("sub-channel, block-wise 128x128 / 1x128 scaling (bf16_with_fp8_subchannel_scaling_mixed)", "blockwise"),
    ("delayed scaling (bf16_with_fp8_mixed, set by the NeMo script after -fr cs)", "delayed"),
    ("DeepSeek fine-grained FP8: 1x128 activation tiles, 128x128 weight blocks", "blockwise"),
])
def test_a_record_text_names_its_recipe(text, recipe):
    assert recipe_from_text(text) == (recipe, "")


def test_a_text_naming_no_recipe_or_several_leaves_it_unstated_with_a_note():
    assert recipe_from_text(None) == (None, "")
    name, note = recipe_from_text("FP8 hybrid format")
    assert name is None and "names no recipe" in note
    name, note = recipe_from_text("delayed scaling, later mxfp8")
    assert name is None and "several recipes (delayed, mxfp8)" in note


@pytest.mark.parametrize("text, recipe", [
    ("torchao float8 training (Float8Config enabled; default dynamic tensorwise scaling assumed)", None),
    ("tensorwise (assumed)", None), ("probably mxfp8", None),
    ("delayed scaling; mxfp8 assumed for the later runs", "delayed"),   # the stated clause still counts
    ("current scaling. Blockwise presumably on B200", "tensorwise"),
])
def test_only_stated_clauses_name_a_recipe(text, recipe):
    """Review LOW 11: 'tensorwise scaling assumed' is the record author's assumption, not a stated recipe."""
    name, note = recipe_from_text(text)
    assert name == recipe
    assert (note == "") == (recipe is not None)
    if recipe is None:
        assert "only as an assumption" in note


#: every fp8_recipe text of tests/data and the recipe it reads as (the torchao text is an assumption: unstated)
DATA_TEXTS = {
    "DeepSeek fine-grained FP8": "blockwise", "current scaling, tensor-wise": "tensorwise",
    "delayed scaling (bf16_with_fp8_mixed": "delayed", "mxfp8: 1x32 E8M0": "mxfp8",
    "sub-channel, block-wise 128x128": "blockwise", "torchao float8 training": None,
    "delayed (TE DelayedScaling, HYBRID": "delayed",      # the MLPerf GPT-3 v3.1 / v4.0 records (NeMo's config_fp8.sh)
}


def test_every_fp8_recipe_text_in_the_data_reads_as_listed():
    for path in DATA.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            text = json.loads(line).get("plan", {}).get("fp8_recipe")
            if text is not None:
                [expected] = [recipe for head, recipe in DATA_TEXTS.items() if text.startswith(head)]
                assert recipe_from_text(text)[0] == expected, (path.name, text)


@pytest.mark.parametrize("recipe, cc, expected", [
    ("unstated", HOPPER, 6.0),                   # two casts, each 2 B read + 1 B written (docs/model.md §11.4)
    ("delayed", HOPPER, 2.0 + 2.0),              # one read, rowwise + transpose written
    ("delayed", BLACKWELL, 2.0 + 1.0),           # non-TN FP8 GEMMs: one copy serves both
    ("tensorwise", HOPPER, 2.0 + 2.0 + 2.0),     # + the amax pass
    ("tensorwise", BLACKWELL, 2.0 + 2.0 + 1.0),
    ("mxfp8", BLACKWELL, 2.0 + 2.0 * (1.0 + 1.0 / 32.0)),     # rowwise + columnwise, 1 E8M0 byte per 32
    ("blockwise", HOPPER, 2.0 + 2.0 * (1.0 + 4.0 / 128.0)),   # rowwise + columnwise, FP32 per 1 x 128
])
def test_cast_bytes_per_element(recipe, cc, expected):
    assert fp8_cast_bytes(_row(recipe, cc)) == pytest.approx(expected, rel=1e-12)


def test_the_layer_charges_the_cast_bytes_of_its_gemm_inputs():
    """A dense layer, TP 1: the GEMM inputs cast per token are 2 h (QKV and FC1 inputs) + a d_v (the attention
    output) + f (the FC2 input); tensorwise on Hopper moves 2 B more per element than delayed (the amax pass)."""
    rows = [_row(recipe, HOPPER, tp=1.0, sequence_parallel=0.0) for recipe in ("delayed", "tensorwise")]
    mem = []
    for row in rows:
        work = np.zeros(N_WORK)
        layer_costs(row, False, False, work)
        mem.append(work[W_MEM])
    row = rows[0]
    tokens = row[C["micro_batch"]] * row[C["seq_len"]]
    elements = tokens * (2.0 * row[C["hidden"]] + row[C["heads"]] * row[C["head_dim"]] + row[C["ffn"]])
    assert mem[1] - mem[0] == pytest.approx(2.0 * elements / (row[C["hbm_bw"]] * row[C["hbm_eff"]]), rel=1e-9)


def test_current_scaling_reduces_two_amaxes_over_tp_per_layer_and_direction():
    row = _row("tensorwise", HOPPER, tp=4.0, sequence_parallel=1.0, collective_overhead_s=20e-6)
    expected = 2.0 * (allreduce_time(row, 4.0, 4.0, 1.0) + 20e-6)
    assert amax_reduction_time(row) == pytest.approx(expected, rel=1e-12) and expected > 0.0
    delayed = _row("delayed", HOPPER, tp=4.0, sequence_parallel=1.0, collective_overhead_s=20e-6)
    assert amax_reduction_time(delayed) == 0.0
    tp = []
    for r in (delayed, row):
        work = np.zeros(N_WORK)
        layer_costs(r, False, False, work)
        tp.append(work[W_TP])
    assert tp[1] - tp[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("recipe, cc, rate", [
    ("unstated", BLACKWELL, 1.0), ("tensorwise", BLACKWELL, 1.0), ("blockwise", HOPPER, 1.0),
    ("mxfp8", BLACKWELL, 6.812 / 7.161), ("blockwise", BLACKWELL, 6.812 / 7.161),   # emulated with MXFP8
])
def test_gemm_rate_per_recipe(recipe, cc, rate):
    row = _row(recipe, cc)
    peak, eff = format_peak(row, True)
    assert peak == row[C["peak_flops_8"]] and eff == pytest.approx(row[C["gemm_eff_8"]] * rate, rel=1e-12)
    assert format_peak(_row(recipe, cc), False)[1] == row[C["gemm_eff_16"]]     # 16-bit GEMMs untouched


@pytest.mark.parametrize("recipe, cc, ok", [
    ("mxfp8", 9.0, False), ("mxfp8", 8.9, False), ("mxfp8", 12.0, False), ("mxfp8", 10.0, True),
    ("mxfp8", 10.3, True), ("blockwise", 8.9, False), ("blockwise", 9.0, True), ("tensorwise", 8.9, True),
    ("mxfp8", 0.0, True),     # a device that states no compute capability is not refused
])
def test_recipes_a_device_cannot_run_are_refused(recipe, cc, ok):
    row = _row(recipe, cc, n_gpus=1.0)      # one device: every other rule holds
    assert bool(fp8_recipe_supported(row)) is ok
    assert plan_status_row(row) == (0 if ok else STATUS_CODES["fp8_recipe_unsupported"])


def test_an_mxfp8_record_on_h100_is_refused_naming_the_field():
    record = json.loads(next(line for line in (DATA / "recipe_plans.jsonl").read_text().splitlines()
                             if "h100-fp8-cs" in line))
    record["plan"]["fp8_recipe"] = "mxfp8"
    with pytest.raises(PlanError, match="fp8_recipe mxfp8 needs compute capability 10"):
        record_values(record)


@pytest.mark.parametrize("recipe, cc, fp8_params, expected", [
    ("unstated", HOPPER, 0.0, 2.0 + 1.0), ("unstated", HOPPER, 1.0, 1.0),
    ("delayed", HOPPER, 0.0, 2.0 + 2.0), ("delayed", BLACKWELL, 0.0, 2.0 + 1.0),
    ("tensorwise", HOPPER, 1.0, 2.0), ("tensorwise", BLACKWELL, 1.0, 1.0),
    ("mxfp8", BLACKWELL, 0.0, 2.0 + 2.0 * (1.0 + 1.0 / 32.0)), ("mxfp8", BLACKWELL, 1.0, 2.0 * (1.0 + 1.0 / 32.0)),
    ("blockwise", HOPPER, 0.0, 2.0 + 2.0 * (1.0 + 4.0 / 128.0 ** 2)),
])
def test_weight_bytes_hold_the_recipes_fp8_copies(recipe, cc, fp8_params, expected):
    row = _row(recipe, cc, fp8_params=fp8_params)
    assert weight_bytes_per_param(row) == pytest.approx(expected, rel=1e-12)
    assert fp8_weight_copy_bytes(row) == pytest.approx(expected - (0.0 if fp8_params else 2.0), rel=1e-12)


@pytest.mark.parametrize("recipe, expected", [
    ("unstated", 1.0), ("delayed", 1.0), ("tensorwise", 1.0), ("mxfp8", 1.0 + 1.0 / 32.0),
    ("blockwise", 1.0 + 4.0 / 128.0)])
def test_a_saved_gemm_input_is_one_fp8_copy_and_its_scales(recipe, expected):
    row = _row(recipe, BLACKWELL)
    assert fp8_saved_input_bytes(row) == gemm_input_bytes(row) == pytest.approx(expected, rel=1e-12)
    row[C["precision"]] = 0.0
    assert gemm_input_bytes(row) == 2.0


def test_a_record_without_a_recipe_lowers_to_unstated_and_one_with_text_to_its_code():
    lines = (DATA / "recipe_plans.jsonl").read_text().splitlines()
    mx = next(json.loads(line) for line in lines if "fp8-mx" in line)
    assert lower_record(mx).columns[C["fp8_recipe"]] == FP8_RECIPES["mxfp8"]
    del mx["plan"]["fp8_recipe"]
    assert lower_record(mx).columns[C["fp8_recipe"]] == FP8_RECIPES["unstated"]


def test_a_sweep_marks_mxfp8_on_hopper_and_runs_it_on_blackwell():
    from fastmodel.lm.sweep import lm_sweep
    from fastmodel.registry.lm import STATUSES

    axes = {"precision": ["fp8"], "fp8_recipe": ["delayed", "mxfp8"]}
    hopper = lm_sweep("llama3.1-8b", "dgx-h100", global_batch=64, axes=axes)
    assert [STATUSES[int(c)].name for c in hopper.status.values.ravel()] == ["ok", "fp8_recipe_unsupported"]
    blackwell = lm_sweep("llama3.1-8b", "gb200-nvl72", global_batch=576, axes=axes)    # dp 72
    assert [STATUSES[int(c)].name for c in blackwell.status.values.ravel()] == ["ok", "ok"]


@pytest.mark.parametrize("typo, name", [("blokwise", "blockwise"), ("tensorwize", "tensorwise"), ("mxfp", "mxfp8")])
def test_one_word_typo_gets_the_nearest_name(typo, name):
    """A one-word recipe that names none is a typo: the note suggests the nearest name; free text gets none."""
    from fastmodel.lm.fp8_recipe import recipe_from_text

    recipe, note = recipe_from_text(typo)
    assert recipe is None and f"(did you mean '{name}'?)" in note
    assert "did you mean" not in recipe_from_text("some words here")[1]
