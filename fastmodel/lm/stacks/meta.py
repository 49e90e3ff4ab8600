"""Meta's internal training stack (Llama 3: 4D parallelism, TP/CP/PP/FSDP): stack ``meta-internal``.

From the Llama 3 paper (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, section 3.3.2):

- balanced pipeline: "we reduce one Transformer layer each from the first and the last stages ... the first
  model chunk on the first stage has only the embedding, and the last model chunk on the last stage has only
  output projection and loss calculation": the embedding and the loss each take one layer's slot in the split
  (``embedding_loss_in_split``, Megatron-Core's ``account_for_embedding_in_pipeline_split`` /
  ``account_for_loss_in_pipeline_split``);
- ``vp = "unknown"``: the schedule interleaves (V stages per rank) without stating V. A first chunk holding the
  embedding *only* once one layer is removed holds one layer otherwise, so every chunk is one layer and
  ``V = (L + 2) / pp`` (405B: 126 layers, PP 16 -> V = 8). When ``pp`` does not divide ``L + 2`` the rule falls
  back to TorchTitan's default, 2 stages per rank (Meta's public PyTorch pipelining).

- FP32 gradient accumulation and FSDP: "we use FP32 gradient accumulation during backward computation over
  multiple micro-batches and also reduce-scatter gradients in FP32 across data parallel workers in FSDP"
  (sec. 3.3.2, numerical stability); FSDP "shards optimizer states and gradients, but for model shards we do
  not reshard after forward computation" (sec. 3.3.2, 4D parallelism). Gradients kept sharded while they
  accumulate over micro-batches are reduce-scattered every micro-batch (``reduce_every_microbatch``, FSDP's
  behaviour outside ``no_sync``) [A: a reading; the paper also describes FSDP as synchronizing "after each
  training step", which fits one reduction per step, docs/model.md §11.20 "the other reading"]; an unsharded
  FP32 accumulator (4 B per stage parameter, 12.8 GB on a 405B
  TP 8 PP 16 rank) would not fit beside the 8K rows' activations without checkpointing (docs/model.md
  §11.20). Each micro-batch's BF16 gradient is cast into the FP32 reduce-scatter input by its own kernel,
  ``grad_accum_bytes`` = 2 + 4 = 6 B per layer parameter (FSDP2 ``foreach_reduce`` copy-in, torch/distributed/
  fsdp/_fully_shard/_fsdp_collectives.py); the FP32 addition into the 1/dp shard is negligible [A: Meta's
  stack is internal; the paper states the FP32 accumulation and reduce-scatter, not their kernels].

- ``recompute = "unknown"``: after its pipeline memory work (deallocating each stage's input and output tensors
  once no later computation needs them) Meta states it pre-trained Llama 3 on 8K-token sequences without
  activation checkpointing (sec. 3.3.2, pipeline parallelism improvements), so a sequence of at most
  ``NO_CHECKPOINTING_SEQ_LEN`` tokens runs no recompute; the paper does not say what the long-context (CP)
  stage ran, so longer sequences keep the registry's selective assumption.

- context parallelism (``cp_algorithm = "allgather"``): "our CP implementation adopts an all-gather based method
  where we first all-gather the key (K) and value (V) tensors, and then compute attention output for the local
  query (Q) tensor chunk ... the all-gather communication latency is exposed in the critical path" (sec. 3.3.2,
  context parallelism for long sequences); the ring attention the registry assumes would hide it behind attention.

Every other default is the registry's (fused kernels, flash attention, overlapped data-parallel communication).
"""

from fastmodel.lm.stacks.base import StackProfile
from fastmodel.lm.stacks.torchtitan import unknown_vp as torchtitan_vp

#: HBM bytes per parameter and micro-batch of the BF16 gradient cast into the FP32 reduce-scatter input: read the
#: gradient (2), write it in FP32 (4); the FP32 accumulation runs on the 1/dp shard after the reduce-scatter
FP32_ACCUMULATION_BYTES = 2.0 + 4.0


def defaults(execution, framework: str | None) -> dict:
    return {"embedding_loss_in_split": True, "grad_accum_bytes": FP32_ACCUMULATION_BYTES, "cp_algorithm": "allgather",
            "reduce_every_microbatch": True}


#: longest sequence the Llama 3 paper (sec. 3.3.2) states was pre-trained without activation checkpointing
NO_CHECKPOINTING_SEQ_LEN = 8192


def unknown_recompute(seq_len: int) -> tuple[str, str]:
    if seq_len <= NO_CHECKPOINTING_SEQ_LEN:
        return "none", ("none (Llama 3 paper sec. 3.3.2: 8K-token pre-training ran without activation "
                        "checkpointing)")
    return "selective", "selective assumed (the Llama 3 paper states no checkpointing policy beyond 8K tokens)"


def unknown_vp(pp: int, layers: int) -> tuple[int, str]:
    slots = layers + 2
    if pp > 1 and slots % pp == 0:
        return slots // pp, (f"(layers + 2) / pp = {slots // pp}: one layer per virtual stage, the embedding and the "
                             "loss in the first and last chunks (Llama 3 paper sec. 3.3.2)")
    return torchtitan_vp(pp, layers)


PROFILE = StackProfile(
    name="meta-internal",
    title="Meta internal (Llama 3)",
    names=("meta internal",),
    source="Dubey et al. 2024 (The Llama 3 Herd of Models) section 3.3.2 (balanced first/last stages, one layer "
           "per chunk; FP32 gradient accumulation over micro-batches; no activation checkpointing at 8K tokens); "
           "fallback vp rule from torchtitan/distributed/pipeline.py",
    defaults=defaults,
    unknown_vp=unknown_vp,
    unknown_recompute=unknown_recompute,
)
