"""Plan column of Megatron-Core's fine-grained activation offloading: which modules' saved inputs go to host memory.

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi), kept here so the registry
module stays under the line cap. docs/model_memory.md "Fine-grained activation offloading" gives the equations,
kernels/lm/memory_offload.py computes them. Source: NVIDIA/Megatron-LM@0823c73 (the submodule Megatron-Bridge
b7b4e11 pins, 3rdparty/Megatron-LM), megatron/core/transformer/transformer_config.py lines 1162-1180
(``fine_grained_activation_offloading``, ``offload_modules``, ``min_offloaded_tensor_size``) and 1743-1767 (the
allowed modules, ``attn_proj`` only with ``core_attn``, not with ``cpu_offloading``). The copies' time and the host
memory (device rows and results below): docs/model.md §11.21, kernels/lm/offload_time.py.
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

#: PCIe 5.0 x16, one direction: 16 lanes x 32 GT/s x 128/130 (the 128b/130b encoding of PCIe 3.0 and later) / 8 bits
PCIE5_X16_BYTES_S = 16 * 32e9 * 128 / 130 / 8
#: share of a PCIe link's data rate left to the payload of 256-byte write TLPs: 256 / (256 + 24), the 24 bytes being
#: the 4-DW header with 64-bit address (16), the framing token with sequence number (4) and the LCRC (4)
PCIE_TLP_EFF = 256 / (256 + 24)

OFFLOAD_DEVICE_ROWS = (
    ("host_link_bw", "bytes/s", PCIE5_X16_BYTES_S, "Host link of one GPU, one direction, with every GPU of the node "
     "copying at once: PCIe 5.0 x16 = 63.0e9 (DGX/HGX H100, H200, B200); the NVLink-C2C share of GB200/GB300 "
     "(specs/devices). Carries fine-grained activation offloading's D2H and H2D copies (docs/model.md 11.21).",
     1e8, 1e13),
    ("host_link_eff", "1", PCIE_TLP_EFF, "Attainable fraction of host_link_bw for bulk copies to pinned memory "
     "(PCIe: 256-byte payloads of 280-byte TLPs = 0.914).", 0.05, 1),
)

#: result rows (name, units, better, description) appended to ``registry.lm.RESULTS``
OFFLOAD_RESULT_ROWS = (
    ("time_offload", "s", "min", "Fine-grained activation offloading's D2H / H2D copy time per step not hidden "
     "behind the layer's forward / backward compute (docs/model.md 11.21)."),
    ("host_offload_bytes", "bytes", "min", "Pinned host memory per node that fine-grained activation offloading "
     "holds at its peak (gpus_per_node x the largest rank's offloaded activations in flight; 0 without it)."),
)
