"""FSDP1 under mixed precision with FP32 flat parameters (``kernels/lm/fsdp1_cast.py``, ``shape.stored_grad_bytes``;
docs/model.md §11.63, second note; docs/model_memory.md "PyTorch FSDP1: the FP32 gradient shard and the shard
casts"), derived by hand: the reduced gradient shard stored in the parameter's FP32 (4 B) whatever the reduce
dtype, each all-gather's cast of the FP32 shard to BF16 (4 + 2 B), each reduce-scatter's cast of the BF16 shard to
FP32 (2 + 4 B), at 3.35 TB/s x 0.8 of HBM."""

import json

import pytest

from fastmodel.kernels.lm.fsdp1_cast import fsdp1_grad_cast_time, fsdp1_shard_cast_time
from fastmodel.kernels.lm.memory_states import gradients_bytes
from fastmodel.kernels.lm.shape import fsdp1_fp32_shards, stored_grad_bytes
from fastmodel.lm.records import lower_record
from fastmodel.lm.table import row
from tests.lm.test_fsdp1_grad_passes import LLAMA7B
from tests.suite_fixtures import DATA, H100, one

# a Llama 2 7B block: 4 h^2 attention + 3 h ffn MLP + 2 h norms
LAYER = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
HBM = 3.35e12 * 0.8
FSDP1 = dict(**H100, sharding="hsdp", shard_degree=8, dp=16, grad_reduce_bytes=2, fsdp_version=1, fsdp1_grad_passes=2,
             master_weights=1)


def _record(name):
    line = next(s for s in (DATA / "runs_dev.jsonl").read_text().splitlines() if name in s)
    return lower_record(json.loads(line)).columns


def test_only_fsdp1_with_fp32_flat_parameters_stores_fp32_gradient_shards():
    assert fsdp1_fp32_shards(row(**FSDP1))
    assert stored_grad_bytes(row(**FSDP1)) == 4.0                               # BF16 reduce, FP32 shard
    assert stored_grad_bytes(row(**{**FSDP1, "grad_reduce_bytes": 4})) == 4.0   # Composer's DEFAULT: FP32 either way
    # FSDP2 (no FSDP1 passes) keeps the reduce dtype; a 16-bit model (PyTorch 1.10's FP16 minGPT) its 16 bits
    assert stored_grad_bytes(row(**{**FSDP1, "fsdp_version": 2})) == 2.0
    assert stored_grad_bytes(row(**{**FSDP1, "master_weights": 0})) == 2.0
    assert stored_grad_bytes(row(**{**FSDP1, "sharding": "ddp", "shard_degree": 0})) == 2.0
    assert not fsdp1_fp32_shards(_record("aws-fsdp-gpt3-175b-s512-n128"))        # FP16 parameters, no master


def test_the_fms_fsdp_7b_record_holds_its_gradient_shard_at_four_bytes():
    r = _record("llama2-7b-arch-h100")
    params = 6_738_149_376                            # 32 x 202,375,168 + 2 x 32,000 x 4,096: the kernel's count
    assert gradients_bytes(r, params, 0.0) == pytest.approx(params / 8 * 4, rel=1e-12)   # 3.37 GB, was 1.68 GB


def test_one_gather_and_one_reduce_cast_a_7b_units_shard():
    r = row(**FSDP1)
    shard = LAYER / 8                                                       # 25.3 M elements of the 8-GPU shard
    assert fsdp1_shard_cast_time(r, LAYER, 8.0) == pytest.approx(shard * (4 + 2) / HBM, rel=1e-12)   # 56.6 us
    assert fsdp1_grad_cast_time(r, LAYER, 8.0) == pytest.approx(shard * (2 + 4) / HBM, rel=1e-12)
    fp32_reduce = row(**{**FSDP1, "grad_reduce_bytes": 4})
    assert fsdp1_grad_cast_time(fp32_reduce, LAYER, 8.0) == 0.0            # reduced in FP32: nothing to cast
    assert fsdp1_shard_cast_time(fp32_reduce, LAYER, 8.0) == pytest.approx(shard * 6 / HBM, rel=1e-12)
    for other in (dict(master_weights=0), dict(fsdp_version=2)):
        assert fsdp1_shard_cast_time(row(**{**FSDP1, **other}), LAYER, 8.0) == 0.0
        assert fsdp1_grad_cast_time(row(**{**FSDP1, **other}), LAYER, 8.0) == 0.0
    assert fsdp1_shard_cast_time(r, LAYER, 1.0) == 0.0                      # one device: nothing gathered


def test_the_recompute_of_units_in_the_checkpoint_casts_each_shard_once_more():
    # full recompute of FSDP units inside the checkpoint: a third gather per layer and step, so a third cast
    plan = {**LLAMA7B, "fsdp_version": 1, "fsdp1_grad_passes": 2, "recompute": "full"}
    inside, outside = one(**plan, fsdp_units_in_checkpoint=1), one(**plan, fsdp_units_in_checkpoint=0)
    expected = 32 * LAYER / 8 * (4 + 2) / HBM                                 # 1.81 ms
    assert inside["time_memory_bound"] - outside["time_memory_bound"] == pytest.approx(expected, rel=1e-3)
