"""DeepSpeed ZeRO (stages 1-3): stack ``deepspeed``; Megatron-DeepSpeed's ZeRO is this one too.

Defaults from DeepSpeed's own source at v0.3.15 (2021-04-19, the release of Narayanan et al.'s comparison),
``deepspeed/runtime/zero/constants.py`` lines 57-66, unchanged in later releases' ``zero/config.py``:

- ``overlap_comm``: off for stages 1-2 (``ZERO_OPTIMIZATION_OVERLAP_COMM_DEFAULT = False``), on for stage 3
  (``ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT = True``): ZeRO-3 (``sharding = "fsdp"``) reduce-scatters its
  gradients on a reduction stream during the backward pass (``stage3.py``: ``average_tensor`` under
  ``torch.cuda.stream(self.reduction_stream)``) and prefetches the next sub-module's parameters on a
  communication stream while the current one computes (``PartitionedParameterCoordinator.
  prefetch_next_sub_modules``); ZeRO-1/2 (``distopt``) reduce after the backward pass and gather the
  updated parameters after the step;
- gradients reduced in the training dtype (``grad_reduce_dtype = "fp16"``, 2 bytes): ZeRO keeps each
  gradient in its parameter's 16-bit dtype from the backward pass to its reduce(-scatter) and refuses an
  FP32 reduction (v0.3.15 ``runtime/engine.py`` line 747: ``assert not self.allreduce_always_fp32(), "ZeRO does
  not support 'fp32_allreduce': true"``; ``FP32_ALLREDUCE_DEFAULT = False``, ``runtime/constants.py`` line
  191; stage3.py ``reduce_independent_p_g_buckets_and_remove_grads`` buckets ``param.grad`` itself), so the
  gradient partitions and buckets hold 2 bytes per element, not Megatron's 4-byte ``main_grad``;
- ``reduce_bucket_size = 5e8`` elements (16-bit, so 1e9 bytes): the collectives' bucket. ZeRO-3 gathers each
  parameter on its own, i.e. one collective per weight matrix (a 175B GPT layer's 3.6 GB in four), which
  buckets of 1e9 bytes reproduce.

By era (the version is the token after ``deepspeed``, e.g. ``"DeepSpeed 0.3 ZeRO-3"``; none given: the current
era). Up to v0.4.1 ZeRO-3 fetched each parameter itself, synchronously: ``_allgather_param`` runs
``torch.cuda.synchronize()`` and zero-fills a buffer before every parameter's all-gather and copies the result
out, and ``fetch_sub_module`` formats ``param.norm()`` for a debug print that is not shown (v0.3.15
partition_parameters.py lines 741-788, stage3.py lines 390-446; the print went in v0.4.2, PR #1188 coalesced
the gathers). Measured on one p4d node (8 A100, NVLink; DeepSpeed issue #1174, v0.3.16): a 5.1e9-parameter
BERT's forward took 470 ms under ZeRO-3 against 60 ms under ZeRO-2, i.e. its 8.95 GB received per GPU in the
extra 410 ms, 21.8 GB/s per GPU, nothing hidden behind compute -- the era's ``param_fetch_bw`` with the
parameter gather not overlapped. Each gather is hooked on a sub-module's forward, so under full recompute
(activation checkpointing re-runs the forward) the layer is fetched a third time (its parameters are released
after the forward once a layer exceeds ``stage3_max_reuse_distance`` = 1e9 elements, constants.py).

Gradient accumulation and reduction by mixed-precision path (``gradient_path``; ZeRO-1 and its equivalent only,
``sharding`` ``zero1``/``distopt``: ZeRO-2/3 reduce every micro-batch in their hooks, not modelled here):

- the 16-bit path -- fp16 (``FP16_Optimizer``), or bf16 under a ZeRO optimizer (``zero/stage_1_and_2.py``, before
  v0.5.10 ``stage1.py``/``stage2.py``): gradients stay in the model's 16-bit ``param.grad``; stage 1 without
  ``overlap_comm`` registers no gradient hooks (v0.6.2 stage_1_and_2.py line 482: hooks only under
  ``partition_gradients or overlap_comm``), so autograd adds each micro-batch's gradient into it in place, read
  2 + 2 and write 2 = 6 B per parameter and micro-batch (``INPLACE_16BIT_ACCUM_BYTES``; the first micro-batch of a
  step only stores its gradient, charged too: (m - 1) / m of it is real [A]), and the reduction is 16-bit;
- ``BF16_Optimizer`` (``runtime/bf16_optimizer.py``, from v0.6.2, PR #1801 "bf16+pipeline parallelism"): bf16
  with ZeRO stage 0 -- "bf16 must use z0! it implements its own zero stage 1 equivalent" (BigScience
  tr11-176B-ml.slurm), it shards the FP32 master weights and moments over data parallelism, the record's
  ``zero1``. After every micro-batch's backward ``update_hp_grads`` runs ``hp_grad.add_(lp.grad.to(fp32))``
  into FP32 gradient buffers (v0.6.2 bf16_optimizer.py line 393; the pipeline engine calls it after each
  backward, pipe/engine.py line 760): the cast reads 2 and writes an FP32 temporary 4, the add reads 4 + 4 and
  writes 4, 18 B per parameter and micro-batch (``BF16_OPTIMIZER_ACCUM_BYTES``), and the data-parallel
  reduction is an all-reduce of those FP32 buffers (pipe/engine.py ``_bf16_reduce_grads`` ->
  ``buffered_allreduce_fallback``: ``grad_allreduce``, below). Up to
  v0.9 the pipeline engine runs bf16 only this way (pipe/engine.py ``_exec_reduce_grads``: stage 1 raises
  ``NotImplementedError``); until v0.17 bf16 without ZeRO defaults to FP32 accumulation (engine.py
  ``get_data_types``: ``grad_accum_dtype = float32`` when ``not self.zero_optimization()``), which PR #7515
  (v0.18.0) made the model's dtype.

Either path all-reduces the whole gradient, then gathers the updated parameter partitions
(``grad_allreduce``): ``BF16_Optimizer`` as above; ZeRO stage 1 up to v0.12 runs with ``contiguous_gradients``
forced off (v0.6.2 engine.py lines 1316-1320, "meaningless in stage 1"; lifted by PR #4887, v0.13.0), so each
reduce bucket goes through ``buffered_reduce_fallback`` -> ``allreduce_bucket``, which sets ``rank = None`` and
calls ``dist.all_reduce`` (v0.5.8 stage2.py lines 1191, 1311, 1326); from v0.13 ``use_multi_rank_bucket_allreduce``
(default True, PR #4695) all-reduces each bucket too (``allreduce_and_scatter``).

Which path a run took: fp16 -> 16-bit; bf16 -> ``BF16_Optimizer`` when the DeepSpeed version lies in
[0.6.2, 0.18) and the framework text names no ZeRO stage >= 1 (``ZeRO-1``, ``ZeRO stage 1``: then the ZeRO
optimizer's 16-bit path), else 16-bit. The version is the text's (``deepspeed 0.5.8``), else the caller's era:
the current one for ``deepspeed``, v0.6.2 for Megatron-DeepSpeed (``stacks.megatron_2021``).

DeepSpeed decides no kernel: the model code (Megatron's, HF's) does, so fields such as ``flash_attention``
keep the registry's defaults unless another profile (``megatron-2021``) sets them.
"""

import re

from fastmodel.lm.stacks.base import VERSION, StackProfile, names_in, tokens

#: reduce_bucket_size default, elements (deepspeed/runtime/zero/constants.py, v0.3.15, line 66)
REDUCE_BUCKET_ELEMENTS = 5e8
#: ZeRO-3's own parameter fetch up to v0.4.1, bytes received per GPU per second (DeepSpeed issue #1174: 8.95 GB
#: in 410 ms on A100 NVLink)
HOOK_FETCH_BYTES_S = 8.95e9 / 0.410
#: the last release with the synchronous per-parameter fetch
LAST_HOOK_FETCH = (0, 4, 1)


#: the first release with BF16_Optimizer (deepspeed/runtime/bf16_optimizer.py, PR #1801, v0.6.2 of 2022-04-25)
FIRST_BF16_OPTIMIZER = (0, 6, 2)
#: the first release whose bf16 training without ZeRO accumulates in bf16 (engine.py get_data_types, PR #7515)
FIRST_BF16_ACCUM_DEFAULT = (0, 18, 0)
#: a 16-bit gradient accumulated in place by autograd: read the gradient and the new one, write (2 + 2 + 2)
INPLACE_16BIT_ACCUM_BYTES = 2.0 + 2.0 + 2.0
#: BF16_Optimizer.update_hp_grads: ``lp.grad.to(fp32)`` reads 2 and writes 4, ``hp_grad.add_`` reads 4 + 4, writes 4
BF16_OPTIMIZER_ACCUM_BYTES = (2.0 + 4.0) + (4.0 + 4.0 + 4.0)
#: The per-step passes of DeepSpeed's engine at ZeRO stage 0 under fp16, in bytes per local parameter beyond the
#: Adam kernel's own count (``step.optimizer_bytes_per_param``, which reads a 2-B gradient), read at v0.5.8.
#: ``FP16_Optimizer.step`` (the fused path DeepSpeed wraps an Apex or DeepSpeed ``FusedAdam`` in;
#: runtime/fp16/fused_optimizer.py lines 217-298, runtime/utils.py ``CheckOverflow`` lines 223-286): the overflow
#: check's ``float(x.float().sum())`` per gradient tensor (read 2, write 4, read 4 = 10), ``p.grad.to(fp32)``
#: (2 + 4) and ``_flatten_dense_tensors`` (4 + 4), the norm of the flat FP32 gradient (4), ``unscale_and_clip_grads``'
#: ``mul_`` (4 + 4), Adam reading it at 4 B, not 2 (+2): 38 B. The reduction before it (engine.py
#: ``buffered_allreduce_fallback`` -> ``allreduce_and_copy``, lines 2088-2131, experts over their own group): the
#: bucket's ``flatten`` (2 + 2), ``prescale_gradients``' ``mul_`` (2 + 2), the copy back (2 + 2): 12 B. 50 B = 25
#: passes of the 2-B gradient; ``p.data.copy_(q.data)`` from the FP32 master rereads it (``step_master_copy``); no
#: zeroing (``p.grad = None``) (docs/model.md §11.32)
STAGE0_FP16_STEP_PASSES = {"step_grad_passes": 25.0, "step_master_copy": True}


def version(framework: str | None) -> tuple[int, ...] | None:
    """The DeepSpeed version the framework text states (``deepspeed 0.3`` -> (0, 3)), or None."""
    found = names_in(tokens(framework or ""), rf"deepspeed v?({VERSION})")
    return tuple(int(x) for x in re.findall(r"\d+", found.group(1))) if found else None


def gradient_path(execution, framework: str | None, era: tuple[int, ...] | None = None) -> dict:
    """``grad_reduce_dtype`` and ``grad_accum_bytes`` of DeepSpeed's mixed-precision path (module docstring) for a
    ZeRO-1 run (``sharding`` ``zero1``/``distopt``; {} otherwise). ``era``: the version assumed when the text
    states none (None: the current release)."""
    if execution.sharding == "ddp":
        return stage0_path(execution, framework)
    if execution.sharding not in ("zero1", "distopt"):
        return {}
    stated = version(framework) or era
    stated = None if stated is None else (tuple(stated) + (0, 0, 0))[:3]     # "0.18" is 0.18.0
    text = tokens(framework or "")
    zero_optimizer = names_in(text, r"zero-?[1-3]|zero stage [1-3]") is not None
    in_bf16_era = stated is not None and FIRST_BF16_OPTIMIZER <= stated < FIRST_BF16_ACCUM_DEFAULT
    if execution.precision == "bf16" and in_bf16_era and not zero_optimizer:
        return {"grad_reduce_dtype": "fp32", "grad_accum_bytes": BF16_OPTIMIZER_ACCUM_BYTES, "grad_allreduce": True}
    return {"grad_reduce_dtype": "fp16", "grad_accum_bytes": INPLACE_16BIT_ACCUM_BYTES, "grad_allreduce": True}


#: a ZeRO stage as the framework text's tokens name it: ``zero-N``, ``zero N``, ``zero stage N``, or ``stage N``
#: once the text names ZeRO; a list (``stage 0/1`` gives the tokens ``stage 0 1``, ``0 or 1``) names each digit
ZERO_STAGE = r"(?:zero-|zero stage |zero |stage )([0-3](?: (?:or |and |to )?[0-3])*)"
#: the stage-0 name of ``stage0_path``: ``zero stage 0`` or ``zero-0`` not followed by another stage or ``off``
ZERO_STAGE0 = r"(?:zero stage 0|zero-0)(?! (?:\d+|off|or|and|to)(?: |$))"


def zero_stages(framework: str | None) -> tuple[int, ...]:
    """The ZeRO stages a framework text names (sorted, distinct; ``ZERO_STAGE``), () when it names no ZeRO."""
    text = tokens(framework or "")
    if not names_in(text, r"zero|zero-[0-3]"):
        return ()
    found = re.finditer(rf"(?:^| ){ZERO_STAGE}(?= |$)", text)
    return tuple(sorted({int(d) for m in found for d in re.findall(r"[0-3]", m.group(1))}))


def stage_notes(execution, framework: str | None) -> list[str]:
    """A note when the framework text names more than one ZeRO stage: it is not read as stage 0 (``stage0_path``
    needs exactly one stage named)."""
    stages = zero_stages(framework)
    if len(stages) < 2:
        return []
    return [f"framework names ZeRO stages {', '.join(map(str, stages))}: not read as ZeRO stage 0 (DeepSpeed's "
            "stage-0 fp16 gradient path needs exactly one stage named); state one stage"]


def stage0_path(execution, framework: str | None) -> dict:
    """DeepSpeed's engine at ZeRO stage 0 (``sharding = "ddp"`` and a text naming exactly one ZeRO stage, stage 0:
    ``ZeRO stage 0`` or ``ZeRO-0``, ``ZERO_STAGE0``; a Megatron ``ddp`` run is otherwise Megatron's own DDP): with
    fp16 the engine wraps ``FP16_Optimizer``, the gradients stay
    in the model's fp16 ``param.grad``, which autograd accumulates in place (no hooks: 6 B per parameter and
    micro-batch), and ``allreduce_gradients`` -> ``buffered_allreduce_fallback`` all-reduces them after the
    backward pass in ``communication_data_type`` = fp16 (v0.5.8 engine.py lines 746-755 and 1656-1671); the
    reduction's buffers and the step's passes are ``STAGE0_FP16_STEP_PASSES``. {} else."""
    named = names_in(tokens(framework or ""), ZERO_STAGE0) is not None
    stage0 = named and zero_stages(framework) == (0,)
    if not stage0 or execution.precision != "fp16":
        return {}
    return {"grad_reduce_dtype": "fp16", "grad_accum_bytes": INPLACE_16BIT_ACCUM_BYTES, **STAGE0_FP16_STEP_PASSES}


def defaults(execution, framework: str | None) -> dict:
    stage3 = execution.sharding == "fsdp"
    values = {"overlap_grad_reduce": stage3, "overlap_param_gather": stage3,
              "collective_bucket_bytes": REDUCE_BUCKET_ELEMENTS * 2.0, "grad_reduce_dtype": "fp16"}
    stated = version(framework)
    if stage3 and stated is not None and stated <= LAST_HOOK_FETCH:
        values.update({"overlap_param_gather": False, "param_fetch_bw": HOOK_FETCH_BYTES_S})
    values.update(gradient_path(execution, framework))
    values["pp_engine_deepspeed"] = True         # a DeepSpeed pipeline is its PipelineEngine (docs/model.md §11.31)
    return values


def unknown_vp(pp: int, layers: int) -> tuple[int, str]:
    """``vp = "unknown"``: 1, by the stack rule. DeepSpeed's ``PipelineEngine`` runs ``TrainSchedule``, one
    forward and one backward per micro-batch on each stage's one contiguous chunk of layers, 2 (micro-batches +
    stages - 1) steps, and no schedule with virtual stages (v0.3.15 deepspeed/runtime/pipe/schedule.py lines
    182-192, engine.py line 280; the same at 38327e07f, lines 189-200 and 386)."""
    return 1, ("DeepSpeed's pipeline engine has no interleaving: TrainSchedule, one chunk per stage (DeepSpeed "
               "v0.3.15 deepspeed/runtime/pipe/schedule.py lines 182-192, engine.py line 280)")


PROFILE = StackProfile(
    name="deepspeed",
    title="DeepSpeed ZeRO",
    names=("deepspeed",),
    source="DeepSpeed v0.3.15 deepspeed/runtime/zero/constants.py lines 57-66 (overlap_comm by stage, "
           "reduce_bucket_size 5e8); engine.py line 747 (16-bit gradient reduction under ZeRO); stage3.py (reduction stream, parameter prefetch); "
           "v0.6.2 bf16_optimizer.py line 393 (FP32 gradient accumulation), engine.py get_data_types v0.8-v0.17",
    defaults=defaults,
    unknown_vp=unknown_vp,
    parse_notes=stage_notes,
)
