"""Megatron-Core, Megatron-LM and what is built on them (NeMo, Megatron-Bridge): stack ``megatron-core``.

Defaults: the registry's -- FlashAttention through Transformer Engine, fused element-wise kernels (bias-GeLU,
bias-dropout-add, RMSNorm/LayerNorm, rotary), Megatron's selective recompute (the attention core), and the
distributed optimizer's gradient reduce-scatter and parameter all-gather overlapped with the backward and
forward passes.
"""

from fastmodel.lm.stacks.base import StackProfile

#: small memory-bound CUDA kernels one MoE layer forward launches besides its GEMMs, flash attention and NCCL
#: collectives: Megatron-LM 23e00ed (megatron/core/transformer/moe/router.py, moe_utils.py, token_dispatcher.py,
#: moe_layer.py) with TransformerEngine 2.11 fused permutation (transformer_engine/pytorch/triton/permutation.py),
#: counted op by op in docs/model.md §11.14 "Router and dispatcher kernels" for the options of the B200 runs
#: (pre-softmax top-k with group-limited routing, sequence auxiliary loss, capacity padding, alltoall dispatcher):
#: router 19, capacity padding 5, auxiliary-loss scores 6, sequence auxiliary loss 8, dispatcher 10
MOE_MEM_KERNELS_MEGATRON_CORE = 48.0


def defaults(execution, framework: str | None) -> dict:
    """Megatron-Core's counted MoE router and dispatcher kernels (unfused router, ``--moe-router-fusion`` off)."""
    return {"moe_mem_kernels": MOE_MEM_KERNELS_MEGATRON_CORE}

# issue 26 (audit): the overlap switches are what NeMo's recipes and the MLPerf submissions pass
# (overlap_grad_reduce / overlap_param_gather on); Megatron-LM's own arguments default to off
# (--overlap-grad-reduce, --overlap-param-gather are store_true flags). A version-aware split is issue 26's.
PROFILE = StackProfile(
    name="megatron-core",
    title="Megatron-Core / NeMo",
    names=("megatron-core", "mcore", "megatron-lm", "megatron", "nemo", "nemo-megatron", "megatron-bridge"),
    source="today's registry defaults (fastmodel/registry/lm.py); MoE router and dispatcher kernels counted "
           "from Megatron-LM 23e00ed",
    defaults=defaults,
)
