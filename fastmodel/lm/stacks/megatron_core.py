"""Megatron-Core, Megatron-LM and what is built on them (NeMo, Megatron-Bridge): stack ``megatron-core``.

Defaults: the registry's -- FlashAttention through Transformer Engine, fused element-wise kernels (bias-GeLU,
bias-dropout-add, RMSNorm/LayerNorm, rotary), Megatron's selective recompute (the attention core), and the
distributed optimizer's gradient reduce-scatter and parameter all-gather overlapped with the backward and
forward passes.

The overlap switches differ by launcher. NeMo's recipes, Megatron-Bridge and the MLPerf submissions pass
``overlap_grad_reduce`` / ``overlap_param_gather`` on (the registry defaults). A run launched through
Megatron-LM's own ``pretrain_gpt.py`` takes Megatron-LM's argument defaults: ``--overlap-grad-reduce`` and
``--overlap-param-gather`` are ``store_true`` flags, off unless passed (``megatron/training/arguments.py``,
``_add_distributed_args``), so the distributed optimizer's gradient reduce-scatter runs after the last
backward pass and its parameter all-gather after the optimizer step, both on the critical path. A framework
text naming ``megatron-lm`` (and not NeMo or Megatron-Bridge, which launch it with their recipes) reads as
that launcher (``launcher_defaults``); a record stating the switches keeps its own.
"""

from fastmodel.lm.stacks.base import StackProfile, names_in, tokens

#: names of launchers that pass the overlap switches on (NeMo recipes, Megatron-Bridge)
RECIPE_LAUNCHERS = "nemo|nemo-megatron|megatron-bridge"


def launcher_defaults(framework: str | None) -> dict:
    """The overlap switches of the launcher the framework text names: Megatron-LM's own arguments (off) when it
    names ``megatron-lm`` and no recipe launcher, else nothing (the registry's: on)."""
    text = tokens(framework or "")
    if names_in(text, "megatron-lm") and not names_in(text, RECIPE_LAUNCHERS):
        return {"overlap_grad_reduce": False, "overlap_param_gather": False}
    return {}


#: small memory-bound CUDA kernels one MoE layer forward launches besides its GEMMs, flash attention and NCCL
#: collectives: Megatron-LM 23e00ed (megatron/core/transformer/moe/router.py, moe_utils.py, token_dispatcher.py,
#: moe_layer.py) with TransformerEngine 2.11 fused permutation (transformer_engine/pytorch/triton/permutation.py),
#: counted op by op in docs/model.md §11.14 "Router and dispatcher kernels" for the options of the B200 runs
#: (pre-softmax top-k with group-limited routing, sequence auxiliary loss, capacity padding, alltoall dispatcher):
#: router 19, capacity padding 5, auxiliary-loss scores 6, sequence auxiliary loss 8, dispatcher 10
MOE_MEM_KERNELS_MEGATRON_CORE = 48.0


def defaults(execution, framework: str | None) -> dict:
    """The launcher's overlap switches (``launcher_defaults``), Megatron-Core's counted MoE router and
    dispatcher kernels (unfused router, ``--moe-router-fusion`` off), and its router probabilities applied in the
    expert activation (``moe_probs_in_experts``: TEGroupedMLP's weighted SwiGLU scales by ``permuted_probs`` and
    every dispatcher unpermutes without probabilities, Megatron-LM d98e8a6 megatron/core/transformer/moe/
    experts.py ``bias_act_func``, token_dispatcher.py ``unpermute`` calls)."""
    return {**launcher_defaults(framework), "moe_mem_kernels": MOE_MEM_KERNELS_MEGATRON_CORE,
            "moe_probs_in_experts": True}


PROFILE = StackProfile(
    name="megatron-core",
    title="Megatron-Core / NeMo",
    names=("megatron-core", "mcore", "megatron-lm", "megatron", "nemo", "nemo-megatron", "megatron-bridge"),
    source="registry defaults (fastmodel/registry/lm.py); Megatron-LM's own launcher: overlap switches off "
           "(megatron/training/arguments.py, --overlap-grad-reduce / --overlap-param-gather store_true); MoE router "
           "and dispatcher kernels counted from Megatron-LM 23e00ed",
    defaults=defaults,
)
