"""Position-embedding terms of a layer and of the first rank (docs/model.md §11.56): the rotary kernel's bytes of
a layer, MLA's decoupled RoPE from the model's own widths; ALiBi's score-sized bias pass in BLOOM's unfused
attention; the learned absolute table's parameters in the data-parallel step.

- ``rotary_bytes``: a GQA / MHA layer rotates ``rotary_fraction`` of its ``a + kv`` query and key heads at the
  stack's per-element rotary bytes (``shape.elementwise_unit_bytes``). An MLA layer rotates only the decoupled
  parts, ``qk_rope_head_dim`` of each of the ``a / t`` query heads and one key head shared by them all, and
  Megatron-Core's path builds the whole query, key and value around it (NVIDIA/Megatron-LM@23e00ed
  ``megatron/core/transformer/multi_latent_attention.py`` lines 690-773): fused (``apply_rope_fusion``, YaRN,
  ``megatron/core/fusions/fused_mla_yarn_rope_apply.py``) the query kernel rotates the rope part in place (lines
  68-130) and the KV kernel reads the up-projected ``k_nope | v`` and the shared ``k_rope`` and writes the key and
  the value (lines 380-471); unfused, ``apply_rotary_pos_emb`` on ``q_pos_emb`` and ``k_pos_emb`` then
  ``torch.cat`` of the query and the key and ``.contiguous()`` of the value split out of ``kv``.
- ``alibi_bias_s``: bigscience-workshop/Megatron-DeepSpeed@8387ae17 ``megatron/model/transformer.py`` lines
  283-326 pass the ALiBi tensor ``[b np, 1, s]`` as ``torch.baddbmm``'s input with beta 1 (or 1/layer); PyTorch
  expands it to the score's shape and copies it into the output before the batched GEMM when beta != 0, and the
  GEMM reads the output back as C (``aten/src/ATen/native/LinearAlgebra.cpp`` ``common_checks_baddbmm_bmm``:
  ``if (beta != 0) result.copy_(self)``). Forward only (the bias needs no gradient); flash attention applies
  ALiBi in its kernel (no bytes).
- ``position_table_params``: the ``s x h`` table, whole on every TP rank of the first stage, in the rank's
  gradient buffer and optimizer step like the word embedding.
- ``position_lookup_s``: its lookup and add in the forward, ``words_embeddings + position_embeddings``
  (Megatron-LM de7dc40f88 ``megatron/model/language_model.py`` lines 179-183), and in the backward the dense
  gradient of the table that ``F.embedding``'s backward writes (``at::zeros`` of the weight's shape, then the
  tokens' rows scattered in: pytorch 01b9dc56 ``aten/src/ATen/native/cuda/EmbeddingBackwardKernel.cu``), added
  into the main gradient by the DDP hook (``megatron/model/distributed.py`` line 174), on the rank that holds it.
  That dense gradient is the word embedding's mechanism (``F.embedding`` under Megatron's DDP hook), so it is
  charged under the same stack flag, ``embedding_dense_grad`` (``shape.embedding_dense_grad_s``, docs/model.md
  §11.43; review9 #2): a stack that does not run that path (llm.c's ``wpe_backward_kernel`` accumulates into the
  table's gradient; minGPT's ``nn.Parameter`` table; FSDP, whose gradient path was not read) charges neither.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_ALIBI_BIAS, C_CP, C_EMBEDDING_DENSE_GRAD, C_FLASH_ATTENTION, C_FUSED_KERNELS, C_HEADS, C_HIDDEN, C_KV_HEADS, C_LEARNED_POSITIONS,
    C_MICRO_BATCH, C_MLA, C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM, C_ROTARY_FRACTION, C_SEQ_LEN, C_TP, C_V_HEAD_DIM,
)
from fastmodel.kernels.lm.shape import ACT_BYTES, attention_dims, elementwise_unit_bytes, stored_grad_bytes
from fastmodel.kernels.roofline import memory_bound_time

#: bytes per token and hidden element of the learned table's forward (§11.56): the lookup (read 2 B of the table's
#: row, write 2 B) and the add to the word embedding's output (read 2 + 2 B, write 2 B)
POSITION_FORWARD_BYTES = 2.0 + 2.0 + 2.0 + 2.0 + 2.0

#: ALiBi's bytes per attention-score element a forward (§11.56): the copy of the broadcast bias into the 16-bit
#: output (write 2 B; its read, one row of ``s`` per head, is 1/s of it) and the GEMM's read of that output as C
ALIBI_SCORE_BYTES = 2.0 + 2.0


@njit
def mla_rope_elements(row):
    """(elements moved per token of Megatron-Core's fused MLA RoPE kernels, of the unfused path's copies, of its
    rotated elements) of one MLA layer on a TP rank, ``a' = a / t`` heads, widths ``n`` = qk_nope_head_dim,
    ``r`` = qk_rope_head_dim, ``v`` = v_head_dim (module docstring): fused, the query's rope part read and written
    ``2 r a'``, the KV kernel's read of ``(n + v) a' + r`` and write of ``(n + r + v) a'``: ``(3r + 2n + 2v) a' + r``;
    unfused, ``(a' + 1) r`` rotated and the copies: the query's cat ``2 (n + r) a'``, the key's ``(2n + r) a' + r``,
    the value's ``2 v a'``: ``(4n + 3r + 2v) a' + r``."""
    a = row[C_HEADS] / row[C_TP]
    n, r, v = row[C_QK_NOPE_HEAD_DIM], row[C_QK_ROPE_HEAD_DIM], row[C_V_HEAD_DIM]
    return (3.0 * r + 2.0 * n + 2.0 * v) * a + r, (4.0 * n + 3.0 * r + 2.0 * v) * a + r, (a + 1.0) * r


@njit
def rotary_bytes(row, tokens):
    """HBM bytes of one layer's rotary step in the forward for ``tokens`` tokens on a TP rank (module docstring).
    GQA / MHA: ``tokens (a + kv) d / t x rotary_fraction`` elements at the stack's rotary bytes. MLA, fused
    kernels: :func:`mla_rope_elements`' first at 2 B an element; eager: its rotated elements at the eager rotary
    bytes and its copies at 2 B an element."""
    rotary = elementwise_unit_bytes(row)[2]
    if row[C_MLA] > 0.0:
        fused, copies, rotated = mla_rope_elements(row)
        if row[C_FUSED_KERNELS] > 0.0:
            return ACT_BYTES * tokens * fused
        return tokens * (rotary * rotated + ACT_BYTES * copies)
    dqk = attention_dims(row)[0]
    return rotary * tokens * (row[C_HEADS] + row[C_KV_HEADS]) * dqk / row[C_TP] * row[C_ROTARY_FRACTION]


@njit
def alibi_bias_s(row, tokens):
    """Seconds of ALiBi's bias pass in one layer's forward for ``tokens`` tokens on a TP rank (module docstring):
    ``ALIBI_SCORE_BYTES`` over the ``tokens x seq_len x a / t`` scores, memory-bound; 0 without ``alibi_bias`` or
    with flash attention."""
    if row[C_ALIBI_BIAS] <= 0.0 or row[C_FLASH_ATTENTION] > 0.0:
        return 0.0
    return memory_bound_time(row, ALIBI_SCORE_BYTES * tokens * row[C_SEQ_LEN] * row[C_HEADS] / row[C_TP])


@njit
def position_table_params(row):
    """Parameters of a learned absolute position table on the first stage's rank: ``s x h``, not split over TP
    (Megatron-LM de7dc40f88 ``megatron/model/language_model.py`` lines 140-144, ``torch.nn.Embedding``; its
    gradient in the rank's contiguous buffer, ``megatron/model/distributed.py`` lines 134-174); 0 without one."""
    return row[C_LEARNED_POSITIONS] * row[C_SEQ_LEN] * row[C_HIDDEN]


@njit
def position_lookup_s(row):
    """(forward, backward) seconds of a learned position table one micro-batch on the rank that holds it
    (module docstring), ``T = micro_batch x seq_len / cp`` tokens on every TP rank (the table is not split):
    forward ``POSITION_FORWARD_BYTES x T h``; backward the tokens' gradient read, ``2 T h``, and, under
    ``embedding_dense_grad`` as the word embedding's (``shape.embedding_dense_grad_s``), the table's dense
    gradient ``s h (2 + 2 + 2 b_g)`` (zeros, scatter, the hook's add into the main gradient of
    ``b_g = stored_grad_bytes``); (0, 0) without one."""
    table = position_table_params(row)
    if table <= 0.0:
        return 0.0, 0.0
    elements = row[C_MICRO_BATCH] * row[C_SEQ_LEN] / row[C_CP] * row[C_HIDDEN]
    forward = memory_bound_time(row, POSITION_FORWARD_BYTES * elements)
    dense = table * (4.0 + 2.0 * stored_grad_bytes(row)) if row[C_EMBEDDING_DENSE_GRAD] > 0.0 else 0.0
    return forward, memory_bound_time(row, ACT_BYTES * elements + dense)


@njit
def position_table_s(row):
    """:func:`position_lookup_s`' forward and backward together (the head's rank at pp 1, ``layer.head_costs``)."""
    forward, backward = position_lookup_s(row)
    return forward + backward
