"""DeepSpeed's gradient path by era (fastmodel/lm/stacks/deepspeed.py ``gradient_path``; docs/model.md §11.7
"Gradient accumulation outside the GEMM"): which mixed-precision path a ZeRO-1 run took, the bytes it moves per
parameter and micro-batch, and what the dev records read as."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.records import lower_record
from fastmodel.lm.stacks import deepspeed, resolve
from fastmodel.registry.lm import COLUMN_INDEX as C

DATA = Path(__file__).resolve().parents[1] / "data"


def resolved(framework, **fields):
    return resolve(ExecutionSpec(framework=framework, **fields), pp=12, layers=70)


def record(name, ident):
    line = next(x for x in (DATA / name).read_text().splitlines() if f'"id": "{ident}"' in x)
    return json.loads(line)


def test_the_bytes_are_the_kernels_of_each_path():
    # autograd's in-place add of a 16-bit gradient: read the stored and the new gradient, write the sum
    assert deepspeed.INPLACE_16BIT_ACCUM_BYTES == 2 + 2 + 2
    # BF16_Optimizer.update_hp_grads: lp.grad.to(fp32) reads 2 B and writes 4 B, hp_grad.add_ reads 4 + 4, writes 4
    assert deepspeed.BF16_OPTIMIZER_ACCUM_BYTES == (2 + 4) + (4 + 4 + 4)


# (framework text, precision, sharding) -> (grad_reduce_dtype, grad_accum_bytes), read by hand from the rule
PATHS = [
    # no version: Megatron-DeepSpeed reads at v0.6.2 (BF16_Optimizer's first release), bf16 without a ZeRO stage
    ("Megatron-DeepSpeed", "bf16", "zero1", ("fp32", 18.0)),
    ("Megatron-DeepSpeed (3D)", "bf16", "zero1", ("fp32", 18.0)),
    ("Megatron-DeepSpeed", "fp16", "zero1", ("fp16", 6.0)),
    # a ZeRO stage >= 1 named: the ZeRO optimizer keeps 16-bit gradients
    ("Megatron-DeepSpeed, ZeRO-1", "bf16", "zero1", ("fp16", 6.0)),
    ("Megatron-DeepSpeed, ZeRO stage 1", "bf16", "distopt", ("fp16", 6.0)),
    ("Megatron-DeepSpeed, ZeRO-0", "bf16", "zero1", ("fp32", 18.0)),
    # the stated version decides: before v0.6.2 there is no BF16_Optimizer; from v0.18 bf16 accumulates in bf16
    ("Megatron-DeepSpeed + DeepSpeed-MoE (DeepSpeed >= 0.5.8), ZeRO-1, 2021-22", "bf16", "zero1", ("fp16", 6.0)),
    ("Megatron-DeepSpeed, DeepSpeed 0.5.8", "bf16", "zero1", ("fp16", 6.0)),
    ("DeepSpeed 0.7", "bf16", "zero1", ("fp32", 18.0)),
    ("DeepSpeed 0.17.6", "bf16", "zero1", ("fp32", 18.0)),
    ("DeepSpeed 0.18", "bf16", "zero1", ("fp16", 6.0)),
    # plain DeepSpeed, no version: the current release
    ("DeepSpeed", "bf16", "zero1", ("fp16", 6.0)),
    ("GPT-NeoX (Megatron + DeepSpeed ZeRO-1), 2022-23, fp16", "fp16", "zero1", ("fp16", 6.0)),
]


@pytest.mark.parametrize("framework, precision, sharding, expected", PATHS)
def test_a_zero1_run_takes_the_gradient_path_of_its_era(framework, precision, sharding, expected):
    spec = resolved(framework, precision=precision, sharding=sharding)
    assert (spec.grad_reduce_dtype, spec.grad_accum_bytes) == expected


def test_other_shardings_keep_their_defaults():
    # ZeRO-2/3 reduce in their hooks every micro-batch (not this term); DDP may be Megatron's own, not DeepSpeed's
    for sharding in ("ddp", "zero2", "fsdp"):
        assert resolved("Megatron-DeepSpeed", sharding=sharding).grad_accum_bytes is None
    assert resolved("DeepSpeed 0.3 ZeRO-3", sharding="fsdp").grad_accum_bytes is None
    assert resolved("Megatron-DeepSpeed", sharding="ddp").grad_reduce_dtype is None
    # a run stating its own accumulation keeps it
    assert resolved("Megatron-DeepSpeed", sharding="zero1", grad_accum_bytes=0.0).grad_accum_bytes == 0.0


def test_bloom_and_mtnlg_accumulate_in_fp32_and_deepspeed_moe_in_16_bits():
    for ident in ("bloom-176b-n384", "mtnlg-530b-n2240"):
        columns = lower_record(record("runs_dev.jsonl", ident)).columns
        assert (columns[C["grad_accum_bytes"]], columns[C["grad_reduce_bytes"]]) == (18.0, 4.0)
    columns = lower_record(record("runs_moe_public.jsonl", "deepspeed-moe-paper-6.7b-dense-a100-n128")).columns
    assert (columns[C["grad_accum_bytes"]], columns[C["grad_reduce_bytes"]]) == (6.0, 2.0)


def test_zero_stage_0_fp16_keeps_16_bit_gradients_in_the_engine():
    """DeepSpeed's engine at stage 0 (FP16_Optimizer): fp16 param.grad accumulated in place, all-reduced in fp16
    (v0.5.8 engine.py communication_data_type); only when the text names stage 0 and the run is fp16."""
    named = "Megatron-DeepSpeed, DeepSpeed 0.5.8, ZeRO stage 0"
    spec = resolved(named, precision="fp16", sharding="ddp")
    assert (spec.grad_reduce_dtype, spec.grad_accum_bytes) == ("fp16", 6.0)
    assert resolved(named, precision="bf16", sharding="ddp").grad_accum_bytes is None
    # no stage named: Megatron's own local DDP under fp16 (the same 6 B and fp16 reduction, its own step, §11.49)
    own = resolved("Megatron-DeepSpeed", precision="fp16", sharding="ddp")
    assert (own.grad_accum_bytes, own.step_grad_passes, own.pp_engine_deepspeed) == (6.0, 10.0, None)
    assert spec.step_grad_passes == 25.0


def test_the_stage_0_path_needs_exactly_one_zero_stage_named_and_two_stages_get_a_note():
    """docs/model.md §11.8 (DeepSpeed row): ``ZeRO stage 0`` or ``ZeRO-0`` alone picks the stage-0 path; a list
    (``stage 0/1``, ``0 or 1``), ``stage 0 off`` or a second stage named elsewhere does not, and a text naming two
    stages gets a note (review 2, finding 1)."""
    for text in ("DeepSpeed, ZeRO stage 0 (FP16_Optimizer)", "DeepSpeed ZeRO-0", "Megatron-DeepSpeed, ZeRO stage 0."):
        notes = []
        spec = resolve(ExecutionSpec(framework=text, precision="fp16", sharding="ddp"), pp=1, layers=8, notes=notes)
        assert (spec.grad_reduce_dtype, spec.grad_accum_bytes, notes) == ("fp16", 6.0, []), text
    assert deepspeed.zero_stages("DeepSpeed ZeRO stage 0") == (0,)
    for text, stages in (("DeepSpeed ZeRO stage 0/1", (0, 1)), ("DeepSpeed, zero stage 0 off: stage 1", (0, 1)),
                         ("DeepSpeed ZeRO stage 0 or 1", (0, 1)), ("DeepSpeed ZeRO-0, ZeRO-2", (0, 2)),
                         ("DeepSpeed ZeRO stage 0 off", (0,))):
        notes = []
        spec = resolve(ExecutionSpec(framework=text, precision="fp16", sharding="ddp"), pp=1, layers=8, notes=notes)
        assert spec.grad_accum_bytes is None, text
        assert deepspeed.zero_stages(text) == stages, text
        named = ", ".join(map(str, stages))
        assert [n for n in notes if "ZeRO stages" in n] == ([f"framework names ZeRO stages {named}: not read as "
                                                             "ZeRO stage 0 (DeepSpeed's stage-0 fp16 gradient path "
                                                             "needs exactly one stage named); state one stage"]
                                                            if len(stages) > 1 else []), text


def test_zero1_16_bit_gradients_take_as_much_memory_as_the_16_bit_weights():
    # ZeRO-1 replicates gradients and weights over data parallelism, both 2 B per parameter on the 16-bit path
    data = record("runs_moe_public.jsonl", "deepspeed-moe-paper-6.7b-dense-a100-n128")
    data["framework"] = "Megatron-DeepSpeed, DeepSpeed 0.5.8, ZeRO-1"
    data["plan"].update(sharding="zero1", tp=1, dp=128, micro_batch=8, grad_accum=1)
    columns = lower_record(data).columns
    result = {k: v[0] for k, v in evaluate_table(np.ascontiguousarray(columns[:, None])).items()}
    assert result["memory_gradients"] == pytest.approx(result["memory_weights"], rel=1e-12)


def test_bloom_pays_18_bytes_per_stage_parameter_every_micro_batch():
    """BLOOM-176B (TP 4, PP 12, 128 micro-batches): the busiest stage's layers stream their TP-local parameters
    once per micro-batch at 18 B; the memory-bound time grows by exactly that, read from the same row."""
    columns = lower_record(record("runs_dev.jsonl", "bloom-176b-n384")).columns
    without = columns.copy()
    without[C["grad_accum_bytes"]] = 0.0

    def run(cols):
        return {k: v[0] for k, v in evaluate_table(np.ascontiguousarray(cols[:, None])).items()}

    h, f = 14336, 57344
    layer_params = (4 * h * h + 2 * h * f) / 4                                  # QKV, projection, two MLP GEMMs / tp
    layers = np.ceil(70 / 12)                                                   # the busiest stage (uneven split)
    hbm = columns[C["hbm_bw"]] * columns[C["hbm_eff"]]
    micro_batches = 2048 / (2 * 8)
    expected = micro_batches * layers * layer_params * 18.0 / hbm
    delta = run(columns)["time_memory_bound"] - run(without)["time_memory_bound"]
    assert delta == pytest.approx(expected, rel=0.01)                           # biases and norms: < 0.1%


def test_an_all_reduced_gradient_costs_twice_the_reduce_scatter():
    """grad_allreduce (kernels/lm/parallel.py data_parallel): DeepSpeed's ZeRO-1 all-reduces the gradient, then
    gathers the parameters. With 16-bit gradients the reduce-scatter and the parameter all-gather move the same
    bytes over the same ring, so DP communication is 2 AG without the flag; a ring all-reduce moves 2 (d - 1) / d
    of the buffer per rank, twice a reduce-scatter, so with it 2 AG + AG = 3 AG: the ratio is 3/2 (a 7B stage's
    gigabytes are bandwidth-bound; latencies < 1%)."""
    from fastmodel.lm.table import table

    plan = dict(layers=32, hidden=4096, ffn=16384, heads=32, kv_heads=32, head_dim=128, vocab=50304, seq_len=2048,
                n_gpus=64, micro_batch=1, global_batch=64, tp=1, pp=1, dp=64, sharding="zero1",
                grad_reduce_bytes=2.0, overlap_grad_reduce=0, overlap_param_gather=0)

    def comm(**values):
        return evaluate_table(table(1, **plan, **values))["comm_dp"][0]

    assert comm(grad_allreduce=1) / comm(grad_allreduce=0) == pytest.approx(1.5, rel=0.01)
    assert comm(grad_allreduce=1) != comm(grad_allreduce=0)
