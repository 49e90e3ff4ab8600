"""Plan column of Megatron-Core's fine-grained activation offloading: which modules' saved inputs go to host memory.

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi), kept here so the registry
module stays under the line cap. docs/model_memory.md "Fine-grained activation offloading" gives the equations,
kernels/lm/memory_offload.py computes them. Source: NVIDIA/Megatron-LM@0823c73 (the submodule Megatron-Bridge
b7b4e11 pins, 3rdparty/Megatron-LM), megatron/core/transformer/transformer_config.py lines 1162-1180
(``fine_grained_activation_offloading``, ``offload_modules``, ``min_offloaded_tensor_size``) and 1743-1767 (the
allowed modules, ``attn_proj`` only with ``core_attn``, not with ``cpu_offloading``).
"""

from __future__ import annotations

#: Megatron-Core ``offload_modules`` (``--offload-modules``) fastmodel models, one bit each in the
#: ``offload_modules`` column. ``gdp_qkv`` (GatedDeltaProduct mixers) and ``fused_group_mlp`` (Transformer Engine's
#: op fuser) offload modules fastmodel has no layer for; a spec naming them is refused.
OFFLOAD_MODULES = {"attn_norm": 1, "qkv_linear": 2, "core_attn": 4, "attn_proj": 8, "mlp_norm": 16,
                   "expert_fc1": 32, "moe_act": 64}

OFFLOAD_PLAN_ROWS = (
    ("offload_modules", "bits", 0, "Megatron-Core fine-grained activation offloading (--fine-grained-activation-"
     "offloading --offload-modules): a sum of OFFLOAD_MODULES bits (1 attn_norm, 2 qkv_linear, 4 core_attn, "
     "8 attn_proj, 16 mlp_norm, 32 expert_fc1, 64 moe_act); the tensors each module saves for backward are "
     "copied to pinned host memory after its forward and back before its backward. 0: none.", 0, 127),
)
