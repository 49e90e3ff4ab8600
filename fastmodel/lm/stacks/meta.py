"""Meta's internal training stack (Llama 3: 4D parallelism, TP/CP/PP/FSDP): stack ``meta-internal``.

Skeleton: no default of its own, so these runs keep today's reading (the registry's defaults: fused kernels,
flash attention, overlapped data-parallel communication). ``vp = "unknown"``: the Llama 3 paper (Dubey et
al. 2024, section 3.3.2) interleaves its pipeline without stating the virtual stages; the rule takes the default of
Meta's public PyTorch pipelining, TorchTitan: 2 stages per rank for multi-stage schedules.
"""

from fastmodel.lm.stacks.base import StackProfile
from fastmodel.lm.stacks.torchtitan import unknown_vp

# issue 26: every default of this profile is today's fall-through
PROFILE = StackProfile(
    name="meta-internal",
    title="Meta internal (Llama 3)",
    names=("meta internal",),
    source="Dubey et al. 2024 (The Llama 3 Herd of Models) section 3.3; vp rule from torchtitan/distributed/pipeline.py",
    unknown_vp=unknown_vp,
)
