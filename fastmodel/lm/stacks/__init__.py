"""Framework stack profiles (docs/model.md §11.8): which software ran, and the execution defaults it sets.

One module per profile: ``megatron_core`` (Megatron-Core / NeMo), ``megatron_2021`` (Megatron 2021-22 /
Megatron-DeepSpeed), ``gpt_neox`` (EleutherAI GPT-NeoX: Megatron 2021 model code on DeepSpeed),
``deepspeed`` (DeepSpeed ZeRO), ``pytorch_fsdp`` (FSDP1, 1.x and 2.x), ``torchtitan``
(TorchTitan / FSDP2), ``kempnerforge`` (KempnerForge: FSDP2, a BF16 model), ``composer`` (Composer / llm-foundry
on FSDP1), ``accelerate`` (Hugging Face Accelerate's FSDP plugin), ``fms_fsdp`` (IBM fms-fsdp on FSDP1),
``maxtext`` (MaxText on JAX/XLA), ``meta`` (Meta
internal), ``default`` (a framework text naming none); ``base`` holds the profile type and the parse of a
``framework`` string. An execution (``ExecutionSpec.stack``) or a run record (top-level ``stack``) may name a
profile explicitly; otherwise its ``framework`` text picks one.

To add a profile: a module with its ``PROFILE`` and a place in ``PROFILES`` (derived frameworks before
their bases).
"""

from __future__ import annotations

from fastmodel.lm.stacks import (
    accelerate,
    composer,
    deepspeed,
    default,
    fms_fsdp,
    gpt_neox,
    kempnerforge,
    maxtext,
    megatron_2021,
    megatron_core,
    meta,
    pytorch_fsdp,
    torchtitan,
)
from fastmodel.lm.stacks.base import StackProfile, tokens

#: every profile, in the order a framework text is matched (derived frameworks before their bases)
PROFILES: tuple[StackProfile, ...] = (
    megatron_2021.PROFILE, kempnerforge.PROFILE, torchtitan.PROFILE, composer.PROFILE, accelerate.PROFILE, fms_fsdp.PROFILE,
    pytorch_fsdp.PROFILE,
    gpt_neox.PROFILE, deepspeed.PROFILE, meta.PROFILE, megatron_core.PROFILE, maxtext.PROFILE, default.PROFILE,
)
BY_NAME: dict[str, StackProfile] = {profile.name: profile for profile in PROFILES}
STACK_NAMES: tuple[str, ...] = tuple(BY_NAME)


def profile_for(framework: str | None, stack: str | None = None) -> tuple[StackProfile, str | None]:
    """(profile, note or None): the explicit ``stack`` if given, else the profile ``framework`` names
    (``stacks.base`` documents the parse); no framework, or a text naming none: ``default`` with a note (a
    missing field says nothing about the software, so it picks no era's stack)."""
    if stack is not None:
        return BY_NAME[stack], None
    if framework is None:
        return default.PROFILE, ("no framework and no stack: profile 'default' (registry defaults) assumed "
                                 "(give the record's framework text or stack)")
    text = tokens(framework)
    for profile in PROFILES:
        if profile.named_in(text):
            return profile, None
    return default.PROFILE, (f"framework {framework!r} names no known stack: profile 'default' "
                             "(registry defaults) assumed")


def compiles(execution, defaults: dict) -> bool:
    """True when the run is compiled: its own ``torch_compile``, or else its stack's default (``defaults``)."""
    return bool(execution.torch_compile if execution.torch_compile is not None else defaults.get("torch_compile"))


def resolve(execution, pp: int, layers: int, notes: list[str] | None = None, expert_parallel: bool = False):
    """The execution with its stack applied: ``stack`` set, the fields it leaves ``None`` that its profile
    decides filled in (``torch_compile`` first, the run's or else its stack's default: a compiled model runs fused element-wise kernels whatever its
    stack, ``fused_kernels`` true -- TorchInductor generates one kernel per chain of pointwise ops and
    reductions, and AOTAutograd's default min-cut partitioner recomputes those chains in the backward instead
    of saving their intermediates: PyTorch docs ``torch.compiler`` / TorchInductor, and
    ``torch/_functorch/partitioners.py`` ``min_cut_rematerialization_partition``, the partitioner Inductor
    uses; so both the memory-bound traffic of ``elementwise_bytes`` and the extra saved tensors of
    ``eager_elementwise_bytes`` are the fused ones) unless the profile's ``eager_blocks`` gives a reason the
    compiled blocks run eager (``expert_parallel``: the plan's ``ep > 1``; then the profile's ``eager_defaults``
    apply too), and ``vp = "unknown"`` replaced by the profile's rule (1 where the stack cannot interleave,
    DeepSpeed's pipeline engine; 1 at pp 1, where no stack has stages to interleave). Notes (framework not
    recognised, the vp rule) are appended to ``notes``."""
    profile, note = profile_for(execution.framework, execution.stack)
    update = {"stack": profile.name}
    defaults = profile.defaults(execution, execution.framework)
    if compiles(execution, defaults) and execution.fused_kernels is None:
        eager = profile.eager_blocks(execution, expert_parallel)
        update["fused_kernels"] = eager is None     # Inductor fuses the element-wise chains (above)
        if eager is not None:
            defaults = {**defaults, **profile.eager_defaults(execution)}
            if notes is not None:
                notes.append(eager)
    for name, value in defaults.items():
        if getattr(execution, name) is None and name not in update:
            update[name] = value
    if execution.vp == "unknown":
        vp, rule = profile.unknown_vp(pp, layers)
        # the stack's rule for a pipeline, at one stage: nothing to interleave. This replaces the profile's rule
        # text too, for any profile that returns vp > 1 at pp 1 (none does: Megatron-Core's own pp <= 1 branch
        # cites its assert; its p2p-overlap case, pp > 2 without --overlap-p2p-communication, has no column here,
        # a documented assumption; review12 #12)
        if pp <= 1 and vp > 1:
            vp, rule = 1, "pp 1 is one pipeline stage, no virtual stages to interleave"
        update["vp"] = vp
        if notes is not None:
            notes.append(f"vp unknown: {vp} ({rule})")
    if note and notes is not None:
        notes.append(note)
    if notes is not None:
        notes.extend(profile.parse_notes(execution, execution.framework))
        notes.extend(prefetch_overlap_notes(execution, update))
    return execution.model_copy(update=update)


def prefetch_overlap_notes(execution, update: dict) -> list[str]:
    """A run stating ``overlap_param_gather`` true under FSDP1's ``fsdp_backward_prefetch = none`` (its own or its
    stack's): the time hides the backward's gathers as stated, the memory peak holds no prefetched unit, as
    ``none`` says -- named, since the two disagree (review14 #4; docs/model_memory.md "PyTorch FSDP1")."""
    prefetch = execution.fsdp_backward_prefetch or update.get("fsdp_backward_prefetch")
    if execution.sharding == "fsdp" and execution.overlap_param_gather and prefetch == "none":
        return ["overlap_param_gather true with fsdp_backward_prefetch none: the backward's all-gathers are priced "
                "hidden (the stated overlap) and the memory peak holds no prefetched unit (none); state one of them"]
    return []


__all__ = ["PROFILES", "STACK_NAMES", "BY_NAME", "StackProfile", "profile_for", "resolve", "tokens"]
