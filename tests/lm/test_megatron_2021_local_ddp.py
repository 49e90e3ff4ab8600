"""Megatron's own data parallelism of 2021-22 under fp16 (``stacks.megatron_2021.local_ddp_gradient_path``,
docs/model.md §11.49), derived by hand: 6 B per parameter and micro-batch of 16-bit gradient accumulation, an fp16
all-reduce, 64 B per parameter of optimizer step without a gradient buffer (the SC21 scripts), and which runs get
it -- the Narayanan et al. 2021 records (fp16 by the SC21 scripts' CONFIG.sh), the vTrain Megatron-DeepSpeed runs;
not a fused run, bf16, ZeRO-3, or a run whose DeepSpeed gradient path is read."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from fastmodel.kernels.lm.step import optimizer_step_bytes
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.lowering import Mesh, execution_values
from fastmodel.lm.records import lower_record
from fastmodel.lm.stacks import megatron_2021, resolve
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C

DATA = Path(__file__).resolve().parents[1] / "data"
PTDP = "Megatron-LM (PTD-P)"
VTRAIN = "Megatron-LM (vTrain ground truth, 2023-24; data/README: Megatron-DeepSpeed codebase)"


def _resolved(framework, **fields):
    return resolve(ExecutionSpec(framework=framework, stack="megatron-2021", **fields), pp=1, layers=24)


def test_fp16_without_fusion_accumulates_and_reduces_16_bit_gradients():
    """fp16 without --accumulate-allreduce-grads-in-fp32: read 2 + 2, write 2 = 6 B a parameter and micro-batch,
    the all-reduce in fp16; the step's extra passes by the buffer: the contiguous buffer by default (Megatron-LM
    from e8fb052f81, Megatron-DeepSpeed), none only for a plan stating ``step_zero_grad = false`` (the SC21
    scripts); the FP32 gradient copy 4 B."""
    for sharding in ("ddp", "distopt"):
        spec = _resolved(PTDP, precision="fp16", sharding=sharding, step_zero_grad=False)
        assert (spec.grad_reduce_dtype, spec.grad_accum_bytes) == ("fp16", 2.0 + 2.0 + 2.0)
        assert (spec.step_grad_passes, spec.step_master_copy, spec.step_zero_grad) == (16.0, True, False)
        assert (spec.step_grad_prescale, spec.step_grad_copy_bytes) == (None, 4.0)
    # not stated (or stated true): the buffered step, whatever the text -- no text selects the no-buffer step
    for stated in ({}, {"step_zero_grad": True}):
        spec = _resolved(PTDP, precision="fp16", sharding="ddp", **stated)
        assert (spec.grad_reduce_dtype, spec.grad_accum_bytes, spec.step_grad_copy_bytes) == ("fp16", 6.0, 4.0)
        assert (spec.step_grad_passes, spec.step_master_copy, spec.step_zero_grad, spec.step_grad_prescale) == (
            10.0, True, True, True)
    fork = _resolved(VTRAIN, precision="fp16", sharding="ddp")
    assert (fork.grad_reduce_dtype, fork.grad_accum_bytes, fork.step_grad_copy_bytes) == ("fp16", 6.0, 4.0)
    assert (fork.step_grad_passes, fork.step_master_copy, fork.step_zero_grad, fork.step_grad_prescale) == (
        10.0, True, True, True)
    assert fork.pp_engine_deepspeed is None          # Megatron's own schedule, as before


def test_fused_bf16_zero3_and_deepspeeds_engine_keep_their_own_paths():
    fused = _resolved(PTDP, precision="fp16", sharding="distopt", wgrad_fused_accumulation=True)
    assert (fused.grad_accum_bytes, fused.grad_reduce_dtype, fused.step_grad_passes) == (None, None, None)
    bf16 = _resolved(PTDP, precision="bf16", sharding="distopt")
    assert (bf16.grad_accum_bytes, bf16.grad_reduce_dtype, bf16.step_grad_copy_bytes) == (None, None, None)
    assert _resolved(PTDP, precision="fp16", sharding="fsdp").grad_accum_bytes is None
    # ZeRO stage 0 named: DeepSpeed's engine (FP16_Optimizer), nothing of Megatron's DDP left over
    stage0 = _resolved("Megatron-DeepSpeed, ZeRO stage 0", precision="fp16", sharding="ddp")
    assert (stage0.grad_accum_bytes, stage0.step_grad_passes) == (6.0, 25.0)
    assert (stage0.step_zero_grad, stage0.step_grad_prescale, stage0.step_grad_copy_bytes) == (None, None, None)
    # a text naming both the fork and Megatron-DeepSpeed with ZeRO stage 0: the fork's path was the one merged, and
    # it is dropped whole under DeepSpeed's engine (was a KeyError 'step_grad_prescale', review 4 finding 1)
    both = _resolved("Megatron-DeepSpeed (stanford-futuredata fork), ZeRO stage 0", precision="fp16", sharding="ddp")
    assert (both.grad_accum_bytes, both.step_grad_passes, both.pp_engine_deepspeed) == (6.0, 25.0, True)
    assert (both.step_zero_grad, both.step_grad_prescale, both.step_grad_copy_bytes) == (None, None, None)
    # MegaBlocks' fork keeps its own (the same accumulation, its buffer's step)
    fork = _resolved("Megatron-LM (stanford-futuredata fork 0bdc8181, 2022), fp16", precision="fp16", sharding="ddp")
    assert (fork.step_grad_passes, fork.step_zero_grad, fork.step_grad_prescale) == (10.0, True, None)
    # a field the record sets wins
    assert _resolved(PTDP, precision="fp16", sharding="ddp", grad_accum_bytes=0).grad_accum_bytes == 0


def test_the_sc21_fp16_step_moves_64_bytes_per_parameter_by_hand():
    """Float16OptimizerWithFloat16Params.step as the fork's (52 B: ``main_grad.float()`` 2 + 4, unscale 4 + 4, the
    clip's norm 4, Adam 4 + 4 + 8 + 8 + 4, the copy to the fp16 weights 4 + 2) and, without a buffer, the all-reduce's
    flatten 2 + 2, ``/= dp`` 2 + 2 and copy back 2 + 2: 64 B per local parameter, nothing per held parameter
    (``zero_grad(set_to_none=True)``)."""
    r = row(optimizer="adam", grad_reduce_bytes=2, **megatron_2021.LOCAL_DDP_FP16_STEP_PASSES)
    real = (2 + 4) + (4 + 4) + 4 + (4 + 4 + 8 + 8 + 4) + (4 + 2) + (2 + 2) + (2 + 2) + (2 + 2)
    assert real == 64
    assert optimizer_step_bytes(r, 1e9, 3e9) == pytest.approx(1e9 * real, rel=1e-12)


GPT_1_7B = dict(layers=24, hidden=2304, ffn=9216, heads=24, kv_heads=24, head_dim=96, vocab=51200, seq_len=2048,
                global_batch=512, hbm_bw=2.039e12, hbm_eff=0.85, gated_mlp=0)


def _gpt_1_7b_step(**fields):
    """Narayanan's GPT-1.7B row (TP 1, PP 1, DP 32, micro-batch 1 as the record assumes: 16 micro-batches), with
    the plan columns of the resolved stack."""
    from fastmodel.lm.engine import evaluate_table
    from fastmodel.lm.table import table

    spec = _resolved(PTDP, precision="fp16", sharding="distopt", micro_batch=1, recompute="full",
                     step_zero_grad=False, **fields)
    values = execution_values(spec, SimpleNamespace(moe_experts=0, layers=24), Mesh(dp=32))
    return evaluate_table(table(1, **{**GPT_1_7B, **values}))["step_time"][0]


def test_gpt_1_7b_pays_6_bytes_per_layer_parameter_every_micro_batch_by_hand():
    """24 layers x 12 x 2304^2 weights (4 h^2 attention, 2 h x 4h MLP), 16 micro-batches: 6 B x 16 x that over
    A100's 2.039 TB/s x 0.85 = 0.0847 s beyond the same plan with the term set to 0."""
    layer_params = 12 * 2304 ** 2
    extra = _gpt_1_7b_step() - _gpt_1_7b_step(grad_accum_bytes=0)
    assert extra == pytest.approx(24 * layer_params * 6 * 16 / (2.039e12 * 0.85), rel=1e-6)
    assert extra == pytest.approx(0.0847, abs=5e-5)


def test_the_narayanan_records_state_fp16_and_get_the_path():
    """The 16 PTD-P records of Narayanan et al. 2021 (Tables 1 and 2) state fp16 (examples/sc21/CONFIG.sh line 54)
    and lower to 6 B and an fp16 reduction; the Korthikanti 2022 records (fused) and the ZeRO-3 rows do not."""
    seen = 0
    for line in (DATA / "runs_dev.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["source"] not in ("narayanan2021_t1", "narayanan2021_t2", "korthikanti2022_t5"):
            continue
        lowered = lower_record(record)
        ptdp = record["source"] != "korthikanti2022_t5" and record["plan"]["sharding"] != "fsdp"
        assert (record["plan"]["precision"] == "fp16") is ptdp, record["id"]
        assert lowered.columns[C["grad_accum_bytes"]] == (6.0 if ptdp else 0.0), record["id"]
        if record["source"] == "korthikanti2022_t5":
            assert lowered.columns[C["grad_reduce_bytes"]] == 4.0
        elif ptdp:
            assert lowered.columns[C["grad_reduce_bytes"]] == 2.0
            assert record["plan"]["step_zero_grad"] is False, record["id"]     # SC21: no contiguous buffer
            assert lowered.columns[C["step_grad_passes"]] == 16.0, record["id"]
        seen += ptdp
    assert seen == 16


def test_torch_ddp_holds_a_bucket_copy_of_every_gradient_by_hand():
    """``--DDP-impl torch`` (the records' ``overlap_grad_reduce``): PyTorch 1.8's reducer at
    ``gradient_as_bucket_view=False`` keeps a flat copy of each fp16 gradient, 2 B a parameter beside the 2 B
    ``.grad`` (docs/model_memory.md "Gradients"): 1e9 parameters, 4e9 B. The local DDP (no overlap), ZeRO-1 and a
    stack that does not set the flag hold the ``.grad`` only."""
    from fastmodel.kernels.lm.memory_states import gradients_bytes

    grads = getattr(gradients_bytes, "py_func", gradients_bytes)
    values = dict(precision="fp16", grad_reduce_bytes=2, sharding="ddp", master_weights=1, overlap_grad_reduce=1,
                  ddp_bucket_copy=1)
    assert grads(row(**values), 1e9, 0.0) == pytest.approx(4e9, rel=1e-12)
    assert grads(row(**{**values, "overlap_grad_reduce": 0}), 1e9, 0.0) == pytest.approx(2e9, rel=1e-12)
    assert grads(row(**{**values, "ddp_bucket_copy": 0}), 1e9, 0.0) == pytest.approx(2e9, rel=1e-12)
    assert grads(row(**{**values, "sharding": "zero1"}), 1e9, 0.0) == pytest.approx(2e9, rel=1e-12)
    assert megatron_2021.defaults(SimpleNamespace(sharding="ddp", precision="fp16", moe_dispatcher="none"),
                                  PTDP)["ddp_bucket_copy"] is True


def test_the_four_torch_ddp_records_hold_the_buckets():
    """GPT-1.7B ... 18.4B (``--DDP-impl torch``, overlap_grad_reduce true) lower to the flag with the overlap; the
    local-DDP rows do not overlap, so their gradients stay single."""
    torch_rows = 0
    for line in (DATA / "runs_dev.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["source"] != "narayanan2021_t1":
            continue
        columns = lower_record(record).columns
        assert columns[C["ddp_bucket_copy"]] == 1.0
        torch_rows += columns[C["overlap_grad_reduce"]] == 1.0
    assert torch_rows == 4
