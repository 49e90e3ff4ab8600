"""PyTorch FSDP (FSDP1, flat parameters) and trainers built on it: stack ``pytorch-fsdp``.

Named by ``pytorch fsdp``, ``pytorch <version> fsdp`` or ``fsdp1``. FSDP1 runs two memory-bound passes over each unit's unsharded gradient before its
reduce-scatter (autograd's ``cat`` into the FlatParameter's gradient, the predivide ``div_``:
``fsdp1_grad_passes = 2``, docs/model.md §11.26). PyTorch-native training runs the model's
element-wise ops eagerly, one kernel per op (no fused bias-GeLU or norm kernels), and its selective
recompute is op-level (matmul outputs kept, element-wise ops recomputed). On 2.x attention goes through
``scaled_dot_product_attention``, whose flash backend (FlashAttention-2) PyTorch tries first (``attn_fa2``,
docs/model.md §11.3; the fms-fsdp records name "SDPA FlashAttention-2"). The PyTorch version is the token
after ``pytorch`` (``"PyTorch 1.10 FSDP"``); none given: 2.x.

PyTorch 1.x additionally predates FlashAttention in ``scaled_dot_product_attention`` (2.0) and trains with
dropout; its FSDP gathers each wrapped layer when it runs (``backward_prefetch`` defaulted to None,
``forward_prefetch`` came in 1.13) and reduce-scatters on its own post-backward stream (PyTorch FSDP docs).
"""

import re

from fastmodel.lm.stacks.base import VERSION, StackProfile, names_in, tokens


def major_version(framework: str | None) -> int | None:
    """The PyTorch major version the framework text states (``pytorch 1.10`` -> 1), or None."""
    found = names_in(tokens(framework or ""), rf"pytorch ({VERSION})")
    return int(re.match(r"\d+", found.group(1)).group()) if found else None


def defaults(execution, framework: str | None) -> dict:
    # 2.x: attention through SDPA, whose flash backend (FlashAttention-2) comes first (docs/model.md §11.3)
    # FSDP1 (flat parameters): the cat and predivide passes over each unit's unsharded gradient (§11.26)
    values = {"fused_kernels": False, "selective_policy": "op", "attn_fa2": True, "fsdp1_grad_passes": 2}
    if major_version(framework) == 1:
        # issue 26 (audit): the 1.x branch exists for one dev row (minGPT on PyTorch 1.10)
        values.update({"dropout": True, "flash_attention": False, "attn_fa2": False, "overlap_grad_reduce": False,
                       "overlap_param_gather": False})
        if execution.sharding == "fsdp":
            values["overlap_grad_reduce"] = True
    return values


PROFILE = StackProfile(
    name="pytorch-fsdp",
    title="PyTorch FSDP1 (1.x, 2.x)",
    names=(rf"pytorch(?: {VERSION})? fsdp", "fsdp1"),
    source="PyTorch FSDP docs (backward_prefetch, forward_prefetch by version); eager element-wise ops",
    defaults=defaults,
)
