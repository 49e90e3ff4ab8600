"""Megatron-Core, Megatron-LM and what is built on them (NeMo, Megatron-Bridge): stack ``megatron-core``.

Defaults: the registry's -- FlashAttention through Transformer Engine, fused element-wise kernels (bias-GeLU,
bias-dropout-add, RMSNorm/LayerNorm, rotary), Megatron's selective recompute (the attention core), and the
distributed optimizer's gradient reduce-scatter and parameter all-gather overlapped with the backward and
forward passes.
"""

from fastmodel.lm.stacks.base import StackProfile

# issue 26 (audit): the overlap switches are what NeMo's recipes and the MLPerf submissions pass
# (overlap_grad_reduce / overlap_param_gather on); Megatron-LM's own arguments default to off
# (--overlap-grad-reduce, --overlap-param-gather are store_true flags). A version-aware split is issue 26's.
PROFILE = StackProfile(
    name="megatron-core",
    title="Megatron-Core / NeMo",
    names=("megatron-core", "mcore", "megatron-lm", "megatron", "nemo", "nemo-megatron", "megatron-bridge"),
    source="today's registry defaults (fastmodel/registry/lm.py), unchanged",
)
