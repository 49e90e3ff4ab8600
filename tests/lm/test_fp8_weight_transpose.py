"""One FP8 weight form kept, the other orientation transposed per use (``fp8_weight_transpose_per_use``,
docs/model.md §11.50): the weight bytes per parameter, the transpose traffic per micro-batch, its seconds in the
layer's backward and the refusal of a bad value, each against a hand derivation."""

import numpy as np
import pytest

from fastmodel.kernels.lm.fp8 import fp8_transpose_bytes, fp8_weight_copy_bytes
from fastmodel.kernels.lm.layer import N_WORK, W_BACKWARD_MEM, layer_costs, layer_kind_params
from fastmodel.kernels.lm.memory_states import weight_bytes_per_param
from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import FP8_RECIPES, column_defaults

HOPPER = 9.0
#: one FP32 scale per 128 x 128 weight block (DeepSeek-V3 report sec. 3.3.2)
BLOCK = 4.0 / 128.0 ** 2


def _row(recipe="blockwise", per_use=1.0, **values) -> np.ndarray:
    row = np.array(column_defaults())
    row[C["precision"]] = 1.0
    row[C["fp8_recipe"]] = FP8_RECIPES[recipe]
    row[C["compute_capability"]] = HOPPER
    row[C["fp8_weight_transpose_per_use"]] = per_use
    for name, value in values.items():
        row[C[name]] = value
    return row


@pytest.mark.parametrize("recipe, fp8_params, per_use, expected", [
    # BF16 weight + both 128 x 128-block FP8 orientations (Transformer Engine's Float8BlockScaling on Hopper)
    ("blockwise", 0.0, 0.0, 2.0 + 2.0 * (1.0 + BLOCK)),
    # BF16 weight + one orientation; the other is a transient of its GEMM
    ("blockwise", 0.0, 1.0, 2.0 + (1.0 + BLOCK)),
    ("blockwise", 1.0, 1.0, 1.0 + BLOCK),
    # per-tensor scaling on Hopper keeps the rowwise data and its transpose; per use, the rowwise data only
    ("delayed", 0.0, 1.0, 2.0 + 1.0),
    ("unstated", 0.0, 1.0, 2.0 + 1.0),
])
def test_one_fp8_weight_form_is_kept(recipe, fp8_params, per_use, expected):
    row = _row(recipe, per_use, fp8_params=fp8_params)
    assert weight_bytes_per_param(row) == pytest.approx(expected, rel=1e-12)
    assert fp8_weight_copy_bytes(row) == pytest.approx(expected - (0.0 if fp8_params else 2.0), rel=1e-12)


def test_the_transposes_read_and_write_each_weight_once_per_micro_batch():
    """A DeepSeek-V3 routed-expert up-projection on one EP-64 rank, 4 x 4,096 x 7,168 = 117,440,512 elements:
    read 1 B and write 1 B of each, with one FP32 scale per 128 x 128 block read and written, per micro-batch."""
    params = 4.0 * 4096 * 7168
    assert fp8_transpose_bytes(_row(), params) == pytest.approx(2 * params + 2 * 4 * params / 128 ** 2, rel=1e-12)
    assert fp8_transpose_bytes(_row(per_use=0.0), params) == 0.0
    sixteen = _row()
    sixteen[C["precision"]] = 0.0
    assert fp8_transpose_bytes(sixteen, params) == 0.0


@pytest.mark.parametrize("moe", [False, True])
def test_the_layer_backward_pays_the_transposes_of_its_fp8_weights(moe):
    """The backward's memory-bound seconds grow by the transposes of every weight an FP8 GEMM reads: the layer's
    parameters less the router's h E (BF16 gating, DeepSeek-V3 report sec. 3.3.1)."""
    values = dict(hidden=1024, heads=8, kv_heads=8, head_dim=128, ffn=4096, seq_len=2048, micro_batch=1)
    if moe:
        values.update(moe_experts=16, moe_topk=2, moe_ffn=512, ep=2, moe_shared_experts=1)
    with_, without = _row(**values), _row(per_use=0.0, **values)
    work_with, work_without = np.zeros(N_WORK), np.zeros(N_WORK)
    layer_costs(with_, moe, False, work_with)
    layer_costs(without, moe, False, work_without)
    cast = layer_kind_params(with_, moe)[0] - (1024 * 16 if moe else 0.0)
    expected = memory_bound_time(with_, 2.0 * (1.0 + BLOCK) * cast)
    assert work_with[W_BACKWARD_MEM] - work_without[W_BACKWARD_MEM] == pytest.approx(expected, rel=1e-12)
    assert expected > 0.0


def test_a_bad_value_is_refused_with_one_line_and_exit_2():
    from click.testing import CliRunner

    from fastmodel.cli import main

    args = ["run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-x", "precision=fp8"]
    result = CliRunner().invoke(main, [*args, "-x", "fp8_weight_transpose_per_use=\"sometimes\""])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "fp8_weight_transpose_per_use" in result.output
    assert CliRunner().invoke(main, [*args, "-x", "fp8_weight_transpose_per_use=true"]).exit_code == 0
