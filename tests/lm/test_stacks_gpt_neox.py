"""The GPT-NeoX profile (fastmodel/lm/stacks/gpt_neox.py; docs/model.md §11.66): DeepSpeed's engine under
Megatron 2021 model code, and the Pythia-1B record that reads through it."""

import json
from pathlib import Path

from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.stacks import deepspeed, gpt_neox, profile_for, resolve

DATA = Path(__file__).resolve().parents[1] / "data"
PYTHIA = "GPT-NeoX (Megatron + DeepSpeed ZeRO-1), 2022-23, fp16"


def test_a_gpt_neox_text_names_gpt_neox_not_its_engine():
    assert profile_for(PYTHIA) == (gpt_neox.PROFILE, None)
    # the same text without GPT-NeoX is DeepSpeed's
    assert profile_for("Megatron + DeepSpeed ZeRO-1, fp16")[0] is deepspeed.PROFILE


def test_the_model_code_defaults_with_deepspeeds_zero1_path():
    run = resolve(ExecutionSpec(framework=PYTHIA, sharding="zero1", precision="fp16"), pp=1, layers=16)
    # neox_args.py 169 / arguments.py 829-830: global attention; 885, 890: dropout 0.1; gpt2_model.py 67: FP32 CE
    assert (run.stack, run.flash_attention, run.dropout) == ("gpt-neox", False, True)
    # Megatron's unfused FP32 cross-entropy, the same bytes per logit as megatron-2021's
    assert run.loss_traffic_bytes_per_logit == 52.0
    # DeepSpeed ZeRO-1 under fp16: autograd's in-place 16-bit add (read 2 + 2, write 2), a 16-bit all-reduce,
    # overlap_comm off, 5e8-element buckets of 2 B, and the PipelineEngine (is_pipe_parallel at pp >= 1)
    assert (run.grad_accum_bytes, run.grad_reduce_dtype, run.grad_allreduce) == (2 + 2 + 2, "fp16", True)
    assert (run.overlap_grad_reduce, run.overlap_param_gather) == (False, False)
    assert run.collective_bucket_bytes == 5e8 * 2
    assert run.pp_engine_deepspeed is True


def test_a_run_stating_its_kernels_keeps_them():
    run = resolve(ExecutionSpec(framework=PYTHIA, flash_attention=True, dropout=False), pp=1, layers=16)
    assert (run.flash_attention, run.dropout) == (True, False)


def test_the_pythia_record_runs_global_attention_without_dropout():
    line = next(x for x in (DATA / "runs_small_public.jsonl").read_text().splitlines()
                if '"id": "pythia-1b-a100-40gb-n64"' in x)
    record = json.loads(line)
    model, plan = record["model"], record["plan"]
    # head_dim = hidden / heads = 2048 / 8 = 256 > 128, flash-attn 0.2.2's largest (fmha_api.cpp line 245)
    assert model["hidden"] // model["heads"] == 256 == model["head_dim"]
    assert (plan["flash_attention"], plan["dropout"]) == (False, False)
