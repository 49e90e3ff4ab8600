"""PyTorch FSDP (FSDP1, flat parameters) and trainers built on it: stack ``pytorch-fsdp``.

Named by ``pytorch fsdp``, ``pytorch <version> fsdp`` or ``fsdp1``. FSDP1 runs two memory-bound passes over each unit's unsharded gradient before its
reduce-scatter (autograd's ``cat`` into the FlatParameter's gradient, the predivide ``div_``:
``fsdp1_grad_passes = 2``, docs/model.md §11.26). PyTorch-native training runs the model's
element-wise ops eagerly, one kernel per op (no fused bias-GeLU or norm kernels), and its selective
recompute is op-level (matmul outputs kept, element-wise ops recomputed). On 2.x attention goes through
``scaled_dot_product_attention``, whose flash backend (FlashAttention-2) PyTorch tries first (``attn_fa2``,
docs/model.md §11.3; the fms-fsdp records name "SDPA FlashAttention-2"). The PyTorch version is the token
after ``pytorch`` (``"PyTorch 1.10 FSDP"``); none given, or a bare ``2``: 2.x (2.1 on).

PyTorch 1.x additionally predates FlashAttention in ``scaled_dot_product_attention`` (2.0) and trains with
dropout; its FSDP gathers each wrapped layer when it runs (``backward_prefetch`` defaulted to None,
``forward_prefetch`` came in 1.13) and reduce-scatters on its own post-backward stream (PyTorch FSDP docs).

Prefetch and the rate limiter by version (docs/model_memory.md "PyTorch FSDP1: prefetch and the rate limiter";
docs/sources/training_facts.md 4.2): ``backward_prefetch`` None in 1.x (``fsdp_backward_prefetch = none``: the
backward's gathers exposed, the forward's still hidden), BACKWARD_PRE from 2.0 (pytorch/pytorch PR #88428);
``limit_all_gathers`` absent before 1.13 (the rate limiter came with PR #83917, 2022-09), False by default in
1.13 and 2.0, True from 2.1 (PR #104900, merged 2023-07-11): ``fsdp_limit_all_gathers``.
"""

import re

from fastmodel.lm.stacks.base import VERSION, StackProfile, names_in, tokens
from fastmodel.lm.stacks.torchtitan import host_defaults

#: FSDP1's calls per wrapped block and forward (pytorch/pytorch v2.2.0 torch/distributed/fsdp/_runtime_utils.py
#: ``_pre_forward_unshard``, ``_unshard``, ``_post_forward_reshard``, ``_reshard``, ``_register_post_backward_hook``;
#: _flat_param.py ``FlatParamHandle.pre_unshard``, ``unshard``, ``post_unshard``, ``reshard``;
#: ``use_orig_params=False``, ``limit_all_gathers=True``, mixed precision), for a Llama block's 9 parameters:
#: low-precision shard 2, stream wait 1, rate limiter 1, all-gather 2, unsharded views 3 + 9, free of the
#: low-precision shard 2, compute-stream wait 1, post-backward hook 1, reshard 4: 26 (docs/model.md §11.59,
#: table "host-ops-fsdp1")
HOST_OPS_FSDP1_BLOCK = 26.0


def version(framework: str | None) -> tuple[int, int | None] | None:
    """(major, minor) of the PyTorch version the framework text states (``pytorch 1.10`` -> (1, 10)), the minor
    None where only the major is given (``pytorch 2`` -> (2, None): some 2.x, taken as an unstated 2.x -- the
    2.1+ rate limiter --, not as 2.0; review14 #3), or None."""
    found = names_in(tokens(framework or ""), rf"pytorch ({VERSION})")
    if not found:
        return None
    numbers = [int(part) for part in re.findall(r"\d+", found.group(1))]
    return numbers[0], (numbers[1] if len(numbers) > 1 else None)


def fsdp1_prefetch(execution, prefetch: str, limit_all_gathers: bool) -> dict:
    """An FSDP1 stack's ``backward_prefetch`` and ``limit_all_gathers`` defaults, and without backward prefetch
    (the run's ``fsdp_backward_prefetch`` or else ``prefetch`` is ``none``) the backward's gathers not overlapped
    (``overlap_param_gather`` false, the forward's stay hidden: kernels/lm/parallel.py ``fsdp_layer_exposed``).
    Only for FSDP sharding: ``overlap_param_gather`` also gates ZeRO-1/2's post-step parameter all-gather
    (kernels/lm/parallel.py) and the FP32 embedding's late gather, which FSDP1's knob does not touch (review14 #14)."""
    values = {"fsdp_backward_prefetch": prefetch, "fsdp_limit_all_gathers": limit_all_gathers}
    if execution.sharding == "fsdp" and (execution.fsdp_backward_prefetch or prefetch) == "none":
        values["overlap_param_gather"] = False
    return values


def defaults(execution, framework: str | None) -> dict:
    # 2.x: attention through SDPA, whose flash backend (FlashAttention-2) comes first (docs/model.md §11.3)
    # FSDP1 (flat parameters, torch.distributed.fsdp.FullyShardedDataParallel: fsdp_version 1): the cat and
    # predivide passes over each unit's unsharded gradient (§11.26)
    values = {"fused_kernels": False, "selective_policy": "op", "attn_fa2": True, "fsdp_version": 1,
              "fsdp1_grad_passes": 2}
    stated = version(framework)
    if stated is not None and stated[0] == 1:
        # issue 26 (audit): the 1.x branch exists for one dev row (minGPT on PyTorch 1.10)
        # no DP overlap on 1.x (overlap_param_gather false whatever the sharding, as before fsdp1_prefetch)
        values.update({"dropout": True, "flash_attention": False, "attn_fa2": False, "overlap_grad_reduce": False,
                       "overlap_param_gather": False})
        if execution.sharding == "fsdp":
            values["overlap_grad_reduce"] = True
        values.update(fsdp1_prefetch(execution, "none", False))    # no prefetch, no rate limiter by default
    else:
        values.update(fsdp1_prefetch(execution, "pre", stated != (2, 0)))    # the limiter's default: 2.1 on
        # eager 2.x: the Llama block's and FSDP1's dispatcher calls per layer forward (docs/model.md §11.59)
        values.update(host_defaults(execution, HOST_OPS_FSDP1_BLOCK))
    return values


PROFILE = StackProfile(
    name="pytorch-fsdp",
    title="PyTorch FSDP1 (1.x, 2.x)",
    names=(rf"pytorch(?: {VERSION})? fsdp", "fsdp1"),
    source="PyTorch FSDP docs (backward_prefetch, forward_prefetch by version); eager element-wise ops",
    defaults=defaults,
)
