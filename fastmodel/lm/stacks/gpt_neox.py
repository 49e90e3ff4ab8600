"""EleutherAI GPT-NeoX: stack ``gpt-neox`` (docs/model.md §11.66).

GPT-NeoX is Megatron-LM's 2021 model code run by DeepSpeed's engine (EleutherAI's DeeperSpeed fork). Read at
EleutherAI/gpt-neox 72c80715 (2023-03-01, the months of the Pythia runs):

- the engine: ``requirements/requirements.txt`` line 1 pins DeeperSpeed eb7f5cff (2021-09-20, ``version.txt``
  0.3.15), so ZeRO's communication defaults and gradient path are the ``deepspeed`` profile's; a run with
  ``pipe-parallel-size`` >= 1 (Pythia's 1) is DeepSpeed's ``PipelineEngine`` (``neox_arguments/arguments.py``
  line 826, ``is_pipe_parallel``);
- attention: a config without ``attention-config`` runs ``global`` attention in every layer
  (``neox_args.py`` line 169, ``arguments.py`` lines 829-830), the unfused Megatron path (``transformer.py``:
  ``baddbmm`` scores, fused softmax, ``bmm``); ``flash`` is opt-in (lines 262-263, 548-549) and calls
  flash-attn 0.2.2 (``requirements/requirements-flashattention.txt``), whose kernels refuse head dims above 128
  (Dao-AILab/flash-attention v0.2.2 ``csrc/flash_attn/fmha_api.cpp`` line 245): ``flash_attention`` false;
- dropout: ``attention_dropout`` and ``hidden_dropout`` 0.1 by default (``neox_args.py`` lines 885, 890);
- the loss: ``mpu.vocab_parallel_cross_entropy(output.float().contiguous(), labels)`` (``megatron/model/
  gpt2_model.py`` line 67), Megatron's unfused FP32 cross-entropy (``LOSS_BYTES_UNFUSED_CE``).

Named by ``gpt-neox``, before ``deepspeed`` (a GPT-NeoX text also names DeepSpeed, its base).
"""

from fastmodel.lm.stacks import deepspeed
from fastmodel.lm.stacks.base import StackProfile
from fastmodel.lm.stacks.megatron_core import LOSS_BYTES_UNFUSED_CE

#: GPT-NeoX's model-code defaults (module docstring): global (unfused) attention, dropout 0.1, FP32 cross-entropy
MODEL_CODE_DEFAULTS = {"flash_attention": False, "dropout": True, "loss_traffic_bytes_per_logit": LOSS_BYTES_UNFUSED_CE}


def defaults(execution, framework: str | None) -> dict:
    """DeepSpeed's engine defaults (``stacks.deepspeed``) and GPT-NeoX's model-code defaults."""
    return {**deepspeed.defaults(execution, framework), **MODEL_CODE_DEFAULTS}


PROFILE = StackProfile(
    name="gpt-neox",
    title="EleutherAI GPT-NeoX (Megatron 2021 model code, DeeperSpeed)",
    names=("gpt-neox",),
    source="EleutherAI/gpt-neox 72c80715: requirements.txt line 1 (DeeperSpeed eb7f5cff = DeepSpeed 0.3.15); "
           "neox_args.py 169, 885, 890 and arguments.py 826-830 (global attention, dropout 0.1, PipelineEngine); "
           "gpt2_model.py 67 (FP32 cross-entropy); flash-attn v0.2.2 fmha_api.cpp 245 (head dim <= 128)",
    defaults=defaults,
    unknown_vp=deepspeed.unknown_vp,
    parse_notes=deepspeed.stage_notes,
)
