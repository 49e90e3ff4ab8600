"""The word embedding's TP collectives and dense gradient on the first pipeline rank at pp > 1 (docs/model.md
§11.44 item 1d, §11.43's DeepSeek-V2 note).

Megatron-LM builds the word embedding on the first virtual stage of the first pipeline rank
(NVIDIA/Megatron-LM@d98e8a6 megatron/training/training.py 2382-2409: ``pre_process = is_pp_first_stage and
is_vp_first_stage``; megatron/core/models/gpt/gpt_model.py 173-174 builds ``LanguageModelEmbedding`` when
``pre_process``, 348-354 runs it on every micro-batch), so its collectives (``sp_regather.embedding_tp``) run on
that rank, one micro-batch each: ``e = e_F + e_B``, as does its backward's dense gradient added into the FP32 main
gradient (``embedding_dense_grad``, :func:`embedding_dense_grad_s`: ``g`` in the backward, ``e_B + g``;
:func:`embedding_stage`). ``kernels/lm/step.py`` ``busiest_stage_into`` mirrors the LM
head on the last rank: the first rank's micro-batch grows by ``e`` (:func:`first_rank_mb`), the average stage's by
``e / p`` (its F by ``e_F / p``), and a leading first rank carries ``e`` in its breakdown; under DualPipe each
end rank embeds half the micro-batches (:func:`embedding_ends`). At pp 1 the head's rank holds the embedding and
``layer.head_costs`` charges it with the head (the dense gradient there by the same
``shape.embedding_dense_grad_s``).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_CP, C_LAST_STAGE_LAYERS, C_LAYERS, C_MICRO_BATCH, C_PP, C_SEQ_LEN, C_TP,
)
from fastmodel.kernels.lm.memory_states import explicit_layout, stage_layers
from fastmodel.kernels.lm.pipeline import model_copies
from fastmodel.kernels.lm.positions import position_lookup_s
from fastmodel.kernels.lm.shape import embedding_dense_grad_s
from fastmodel.kernels.lm.sp_regather import embedding_tp


@njit
def embedding_stage_tp(row):
    """(forward, backward) seconds of the word embedding's TP collectives one micro-batch on the rank that holds
    it at pp > 1 (:func:`sp_regather.embedding_tp` on ``micro_batch x seq_len / cp`` tokens, the head's); (0, 0)
    without TP and at pp 1, where ``layer.head_costs`` adds them to the head's TP."""
    if row[C_PP] <= 1.0 or row[C_TP] <= 1.0:
        return 0.0, 0.0
    return embedding_tp(row, row[C_MICRO_BATCH] * row[C_SEQ_LEN] / row[C_CP])


@njit
def embedding_terms(row):
    """(forward, backward, of it the memory-bound part) seconds of the word embedding one micro-batch on the first
    rank at pp > 1: its TP collectives (:func:`embedding_stage_tp`) and, in the backward, its dense gradient ``g``
    (:func:`embedding_dense_grad_s`): ``(e_F, e_B + g, g)``, with a learned position table's ``(p_F, p_B)``
    (``positions.position_lookup_s``, §11.56) ``(e_F + p_F, e_B + g + p_B, g + p_F + p_B)``; (0, 0, 0) at pp 1 (``layer.head_costs``). The step
    evaluates it once a configuration (``step.step_row``) and hands it to :func:`embedding_ends`,
    :func:`embedding_parts_of` and ``bubble_last`` / ``host_step``."""
    if row[C_PP] <= 1.0:
        return 0.0, 0.0, 0.0
    forward, backward = embedding_stage_tp(row)
    table_f, table_b = position_lookup_s(row)       # a learned position table's lookup, add, gradient (§11.56)
    dense = embedding_dense_grad_s(row) + table_b
    return forward + table_f, backward + dense, dense + table_f


@njit
def embedding_stage(row):
    """(forward, backward) seconds of the word embedding one micro-batch on the first rank at pp > 1: its TP
    collectives (:func:`embedding_stage_tp`) and, in the backward, its dense gradient ``g``
    (:func:`embedding_dense_grad_s`): ``(e_F, e_B + g)``; (0, 0) at pp 1 (``layer.head_costs``)."""
    forward, backward, _ = embedding_terms(row)
    return forward, backward


@njit
def embedding_parts(row, emb):
    """(TP, memory-bound) seconds of ``emb``, the busiest rank's embedding seconds a micro-batch (one of
    :func:`embedding_ends`' first two: ``e + g``, its half under DualPipe, or 0): ``emb`` split in the ratio of the
    TP collectives ``e`` to the dense gradient ``g``, for the step's breakdown (``comm_tp``/``exposed_tp`` and
    ``time_memory_bound``); ``(emb, 0)`` without the dense gradient."""
    return embedding_parts_of(emb, embedding_terms(row))


@njit
def embedding_parts_of(emb, terms):
    """:func:`embedding_parts` of the configuration's :func:`embedding_terms` ``terms``."""
    forward, backward, dense_grad = terms
    total = forward + backward
    if total <= 0.0:
        return 0.0, 0.0
    dense = dense_grad * (emb / total)
    return emb - dense, dense


@njit
def embedding_ends(row, terms):
    """(first rank's, last rank's, forward, all) seconds of the embedding a micro-batch (:func:`embedding_stage`:
    forward ``e_F``, all ``e + g``, its TP collectives and its dense gradient): ``(e + g, 0, e_F, e + g)``; under
    DualPipe (``model_copies`` 2) rank 0 holds stage 0 and stage p - 1 (``pipeline.mirror_stage``), so the rank
    that holds the head embeds half the micro-batches, as it runs half the heads: ``(0, (e + g) / 2, e_F,
    e + g)``, beside the head's share on the last rank's micro-batch. ``terms``: the configuration's
    :func:`embedding_terms`."""
    forward, backward, _ = terms
    copies = model_copies(row)
    if copies > 1.0:
        return 0.0, (forward + backward) / copies, forward, forward + backward
    return forward + backward, 0.0, forward, forward + backward


@njit
def first_rank_mb(row, t_layer, first_bf16, n_first, emb):
    """(seconds, layers) of one micro-batch on the first pipeline rank: its layers (:func:`first_rank_layers`) at
    the average layer's ``t_layer``, its BF16 layers' excess ``first_bf16`` (§11.39) and the embedding's ``emb``
    (:func:`embedding_ends`); (0, 0) when the rank holds neither BF16 layers nor the embedding's costs (it is
    then a middle rank's equal or lighter)."""
    if n_first <= 0.0 and emb <= 0.0:
        return 0.0, 0.0
    layers = first_rank_layers(row)
    return layers * t_layer + first_bf16 + emb, layers


@njit
def first_rank_layers(row):
    """Decoder layers on the first pipeline rank: ``stage_layers`` of rank 0 (one fewer with the embedding in the
    split), and under an explicit layout (which states the last rank's count only) the other ranks' even split's
    ceiling (``layout_busiest_layers``) less one where that split is uneven: the layouts put the shortfall on the
    embedding's stage (Megatron-Bridge@b7b4e11 recipes, ``tests/data/recipe_plans.jsonl``: Kimi K2 H100
    ``Et|(tt|)*30L`` at pp 16 vp 2 gives rank 0 1 + 2 layers where 59 / 15 rounds up to 4; DeepSeek-V3 H100
    ``Et|(tt|)*30mL`` at pp 8 vp 4 1 + 2 + 2 + 2 = 7 of ceil(55 / 7) = 8; with an even split, ``Et*4|(t*4|)*14tmL``
    at pp 8 vp 2, the full 8), as the missing layers of uneven stages come off the first stage (Llama 3,
    Dubey et al. 2024 sec. 3.3.2; ``fastmodel/lm/pipeline.py`` ``chunk_layers``). A heuristic, assumed from those
    three recipe layouts: the layout string is not a column, so a layout with the shortfall on another rank, or
    more than one layer short on rank 0, is priced at this count all the same."""
    dense, moe, _ = stage_layers(row, 0.0)
    layers = dense + moe
    if explicit_layout(row) and (row[C_LAYERS] - row[C_LAST_STAGE_LAYERS]) % (row[C_PP] - 1.0) != 0.0:
        return max(layers - 1.0, 0.0)
    return layers
