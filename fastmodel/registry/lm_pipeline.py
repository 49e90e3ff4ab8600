"""Plan columns of pipeline execution: an explicit layout (the decoder layers the last pipeline rank builds beside
the loss), under FSDP a gradient reduction per micro-batch and whether the stage's weights stay gathered, and
whether DeepSpeed's pipeline engine (its partitioned, blocking sends; docs/model.md §11.31) runs the schedule,
whether Megatron-LM 2021-22's blocking, scatter-gathered exchanges do (§11.52), and whether the plan stated its
schedule beside its vp (§11.9: the rule table refuses a pair the execution spec refuses).

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so
the registry module stays under the line cap. docs/model.md §11.22 gives the equation, ``kernels/lm/step.py``
``busiest_stage`` / ``last_rank_layers`` compute it. Source: Megatron-Core ``pipeline_model_parallel_layout``
(NVIDIA/Megatron-LM@0823c73, the submodule Megatron-Bridge b7b4e11 pins,
megatron/core/transformer/pipeline_parallel_layer_layout.py): one list of layers per virtual pipeline stage,
stage ``v p + r`` on rank ``r``.
"""

from __future__ import annotations

from fastmodel.registry.validators import Forbidden

#: ``pp_exchange_2021`` codes (kernels/lm/pipeline_2021.py, fastmodel/lm/stacks/megatron_2021.py): blocking
#: exchanges; and the TP scatter-gather of the sent tensors (docs/model.md §11.52)
EXCHANGE_BLOCKING, EXCHANGE_SCATTER_GATHER = 1.0, 2.0
#: ``pp_exchange_2021``'s codes, whole numbers only: a value between two codes (1.5) is refused as 3 is
PP_EXCHANGE_2021_GAPS = tuple(Forbidden(lo, lo + 1.0, "is not a code of pp_exchange_2021: 0, 1 or 2") for lo in (0.0, 1.0))

PIPELINE_PLAN_ROWS = (
    ("last_stage_layers", "layers", -1, "Decoder layers the last pipeline rank builds (all its virtual stages) "
     "beside the loss and the MTP modules, under an explicit pipeline layout (Megatron-Core "
     "pipeline_model_parallel_layout, e.g. DeepSeek-V3 'Et*4|(t*4|)*14tmL': 1 on the last of 16 ranks); the "
     "other ranks split the rest evenly, the busiest ceil((L - last) / (pp - 1)); short and empty stages run. "
     "-1: no explicit layout (docs/model.md §11.22).",
     -1, 1e4, False, "number"),
    ("reduce_every_microbatch", "1", 0, "1: FSDP with pipeline stages reduce-scatters each micro-batch's gradient into "
     "sharded gradients (Llama 3 sec. 3.3.2; docs/model.md §11.20). 0: once per step. Set by the stack.", 0, 1, False, "flag"),
    ("fsdp_stage_gathered", "1", 0, "1: FSDP with pipeline stages keeps the stage's weights gathered between "
     "micro-batches (TorchTitan reshard_after_forward = not pp_enabled; PyTorch pipelining, no reshard after "
     "backward; docs/model_memory.md 'FSDP with pipeline stages'). 0: resharded per layer. Set by the stack.",
     0, 1, False, "flag"),
    ("pp_engine_deepspeed", "1", 0, "1: DeepSpeed's PipelineEngine runs the pipeline (Megatron-DeepSpeed with its "
     "DeepSpeed engine, GPT-NeoX): each send carries 1/tp of the activation, gathered over the TP group on receipt "
     "(PartitionedTensor), and TrainSchedule's blocking send/recv order exposes 4(m - 1) + 2(p - 2) sends and "
     "3(m + p - 1) - 5 gathers per step (docs/model.md §11.31). 0: Megatron's schedules. Set by the stack.",
     0, 1, False, "flag"),
    ("pp_exchange_2021", "code", 0, "Megatron-LM 2021-22's pipeline exchanges (p2p_communication._communicate: "
     "batch_isend_irecv, wait, torch.cuda.synchronize): 1: every exchange blocking, the sends and gathers on the "
     "critical path counted from the schedules' call order; 2: also --scatter-gather-tensors-in-pipeline (on by "
     "default): without SP each send carries 1/tp of the activation, all-gathered over the TP group on receipt "
     "(docs/model.md §11.52). 0: Megatron-Core's closed form (§11.7). 1F1B and interleaved only. Set by the stack.",
     0, 2, False, "number", PP_EXCHANGE_2021_GAPS),
    ("schedule_stated", "1", 0, "1: the plan states pipeline_schedule, so it must agree with vp as the "
     "execution spec requires (ExecutionSpec._consistent): 'interleaved' needs vp > 1, every other "
     "schedule runs one stage per rank (vp = 1); the rule table refuses a disagreeing pair, schedule_not_runnable, "
     "before any other rule (a sweep crossing a pipeline_schedule or vp axis; docs/model.md §11.9). 0: the "
     "lowering derived the schedule from vp (interleaved exactly where vp > 1), or vp \"unknown\", which the "
     "spec reads as interleaved, got 1 from the stack's rule. Set by the lowering, no execution option.", 0, 1),
)
