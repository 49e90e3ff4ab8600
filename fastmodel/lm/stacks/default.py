"""The profile of a framework text that names no known stack: stack ``default``.

It sets nothing, so such a run keeps the registry's defaults (the same as Megatron-Core today), and the
record's notes say that its framework was not recognised.
"""

from fastmodel.lm.stacks.base import StackProfile

PROFILE = StackProfile(
    name="default",
    title="unknown framework (registry defaults)",
    names=(),
    source="the registry's column defaults (fastmodel/registry/lm.py)",
)
