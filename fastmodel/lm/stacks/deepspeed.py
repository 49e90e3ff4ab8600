"""DeepSpeed ZeRO (stages 1-3) outside Megatron-DeepSpeed: stack ``deepspeed``.

Skeleton: no default of its own yet, so a run naming DeepSpeed keeps today's reading (the registry's
defaults, as Megatron-Core). Issue 26 sources ZeRO's defaults by era (overlap_comm, bucket sizes,
prefetch) from DeepSpeed's own source.
"""

from fastmodel.lm.stacks.base import StackProfile


def unknown_vp(pp: int, layers: int) -> tuple[int, str]:
    raise ValueError("DeepSpeed's pipeline engine runs 1F1B without interleaving (deepspeed/runtime/pipe/"
                     "schedule.py: TrainSchedule); give vp = 1 or name the stack that interleaved")


# issue 26: every default of this profile is today's fall-through, not DeepSpeed's
PROFILE = StackProfile(
    name="deepspeed",
    title="DeepSpeed ZeRO",
    names=("deepspeed",),
    source="none yet (today's fall-through defaults; issue 26)",
    unknown_vp=unknown_vp,
)
