"""The first and a middle pipeline rank as candidates for the busiest stage, priced by layer kind (docs/model.md
§11.44 item 1d, "by layer kind").

``kernels/lm/step.py`` ``busiest_stage_into`` compares the last rank (its layers, the LM head, the MTP modules)
with the first rank (its layers, its BF16 layers' excess (§11.39) and the word embedding's TP collectives,
``first_rank.first_rank_mb``) and with the busiest middle rank (``lead``, §11.22). In a MoE model with leading
dense layers (DeepSeek-V3's ``first_k_dense_replace`` 3) the ranks do not hold the mix's average layer: the
dense layers sit on the first rank(s) (``memory_states.stage_layers``), the middle and last ranks hold MoE layers
only. Priced at the average layer, a first rank of as many layers as a middle one beat it by exactly the
embedding's ``e``, though its dense layers make it the lighter (Megatron-Bridge DeepSeek-V3 H100 FP8 sc V2, tp 2
pp 8 vp 2: 3 dense + 5 MoE + e = 151.9 ms against a middle rank's 8 MoE layers, 182.5 ms; at the average layer
178.6 and 178.4 ms). Here each rank's layers are priced at their kinds' passes (``passes.rank_layer_passes``),
from each kind's ``layer.layer_costs`` the step computed once for the average layer and kept
(``passes.layer_passes_keeping``, ``rank_layer_passes_kept``): the same bits, no layer costed twice.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.first_rank import first_rank_layers, first_rank_mb
from fastmodel.kernels.lm.layout import (
    C_DENSE_LAYERS, C_LAYERS, C_MOE_EXPERTS, C_MOE_LAYER_FREQ, C_PP, C_UNEVEN_STAGES, C_VP,
)
from fastmodel.kernels.lm.memory_states import (
    explicit_layout, is_moe, layout_busiest_layers, split_slots, stage_layers,
)
from fastmodel.kernels.lm.passes import (
    head_passes, layer_passes, layer_passes_of, layer_time, moe_layer_passes_kept, rank_layer_passes_kept,
)
from fastmodel.kernels.lm.pipeline import model_copies


@njit
def priced_by_kind(row):
    """True when the first and the middle ranks hold other layer kinds than the mix's average: a MoE model with
    leading dense layers in a pipeline of one model copy a rank (DualPipe's ranks hold mirror stages: both ends'
    kinds, left at the average)."""
    return row[C_PP] > 1.0 and is_moe(row) and row[C_DENSE_LAYERS] > 0.0 and model_copies(row) <= 1.0


@njit
def first_rank_kinds(row):
    """(dense, MoE) layers of the first rank's ``first_rank.first_rank_layers`` ``L_0``. Megatron-Core gives rank 0
    the virtual stages 0, p, 2p, ... (``get_transformer_layer_offset``, megatron/core/transformer/
    transformer_layer.py, Megatron-LM 23e00ed): chunks of ``c = n_mid / v`` layers (``layout_busiest_layers``, a
    full rank's), its chunk 0 the ``s_0 = L_0 - (v - 1) c`` they leave (the embedding's short chunk), so of the
    ``k`` leading dense layers it holds ``min(k, s_0)`` in chunk 0 and, in chunk ``i p``, those of layers
    ``s_0 + (i p - 1) c`` onwards (``c`` of them) below ``k``: exact where the other virtual stages hold ``c`` each
    (DeepSeek-V3 H100 ``Et|(tt|)*30mL``, pp 8 vp 4: ``s_0 = 1``, layer 0 only, 1 dense of 7, where the rank's
    layers counted as one block gave ``min(k, L_0) = 3``); ``min(k, L_0)`` at v = 1. With ``moe_layer_freq`` N > 1
    the other layers are dense ``1 - 1/N`` of them, as ``stage_layers`` counts them."""
    layers = first_rank_layers(row)
    k = row[C_DENSE_LAYERS]
    v = max(row[C_VP], 1.0)
    if v <= 1.0:
        lead = min(k, layers)
    else:
        p = row[C_PP]
        chunk = layout_busiest_layers(row) / v
        first = max(layers - (v - 1.0) * chunk, 0.0)    # chunk 0's layers
        lead = min(k, first)
        for i in range(1, int(v)):
            lead += min(max(k - (first + (i * p - 1.0) * chunk), 0.0), chunk)
        lead = min(lead, layers)
    dense = lead + (layers - lead) * (1.0 - 1.0 / max(1.0, row[C_MOE_LAYER_FREQ]))     # --moe-layer-freq N
    return dense, layers - dense


@njit
def middle_rank_kinds(row, middle):
    """(dense, MoE) of ``middle`` layers on the busiest middle rank: the kinds of rank ``p - 2`` (the last before
    the head's, the one farthest from the leading dense layers; rank 0 at pp 2), ``middle`` of them, dense first."""
    p = row[C_PP]
    dense, _, _ = stage_layers(row, p - 2.0 if p > 2.0 else 0.0)
    dense = min(dense, middle)
    return dense, middle - dense


@njit
def other_ranks_mb(row, work, t_layer, first_bf16, n_first, emb_first, can_lead, costs):
    """(first rank's micro-batch, its layers, the busiest middle rank's micro-batch, its layers): the first rank by
    ``first_rank.first_rank_mb``, the middle rank (when ``can_lead``) its ``layout_busiest_layers``; each at the
    average layer's ``t_layer``, or by kind where :func:`priced_by_kind` (then ``work[A_*]`` is overwritten), from
    the kinds' costs ``costs`` the step kept (``passes.rank_layer_passes_kept``). A by-kind rank 0's BF16 layers
    keep ``first_bf16``, their excess over the mix's average layer (``bf16_layers.bf16_end_work_into``), not over
    their own kind's: no plan holds BF16 first layers in a model with leading dense layers (review 2 finding 3)."""
    middle = layout_busiest_layers(row)
    kinds = priced_by_kind(row)
    t_first = t_layer
    if kinds and (n_first > 0.0 or emb_first > 0.0):
        dense, moe = first_rank_kinds(row)
        t_first = rank_layer_passes_kept(row, work, dense, moe, costs) / max(dense + moe, 1.0)
    first_mb, first_layers = first_rank_mb(row, t_first, first_bf16, n_first, emb_first)
    lead = 0.0
    if can_lead:
        if kinds:
            dense, moe = middle_rank_kinds(row, middle)
            lead = rank_layer_passes_kept(row, work, dense, moe, costs)
        else:
            lead = middle * t_layer
    return first_mb, first_layers, lead, middle


@njit
def last_rank_layer_time(row, work, t_layer, all_moe, costs):
    """Seconds of the last rank's average layer, its passes left in ``work[A_*]`` for the step's breakdown: the MoE
    layer where :func:`last_rank_all_moe`; by its own kinds (``stage_layers`` of rank ``p - 1``, its MTP modules
    apart, as the first and middle ranks are) where :func:`priced_by_kind` (an explicit layout's last rank, all
    MoE: DeepSeek-V3 GB300 BF16 V2, pp 4 vp 4 ``Et*4|(t*4|)*14tmL``, 13 MoE layers + head + MTP, 338.2 ms; at the
    mix's average layer 335.2 ms, behind the by-kind middle rank's 16 MoE layers, 336.7 ms, which it outweighs);
    else the mix's average ``t_layer``, already in ``work``. Where :func:`priced_by_kind`, from the kinds' costs
    ``costs`` the step kept."""
    kinds = priced_by_kind(row)
    if all_moe:
        if kinds:
            moe_layer_passes_kept(row, work, costs)
        else:
            layer_passes_of(row, work, True)
        return layer_time(work)
    if kinds:
        dense, moe, _ = stage_layers(row, row[C_PP] - 1.0)
        return rank_layer_passes_kept(row, work, dense, moe, costs) / max(dense + moe, 1.0)
    return t_layer


@njit
def leader_passes(row, work, first, all_moe, costs):
    """Leave the leading first (``first``) or middle rank's layer passes in ``work[A_*]`` for the step's breakdown
    and the head's costs in ``work[W_*]`` (the layer passes overwrite them; ``head_passes`` writes them again),
    with no copy (docs/performance.md): by kind where :func:`priced_by_kind`; else the average layer for the first
    rank (its layers are the average's) and the passes already there for a middle rank; ``costs``: the kinds'
    costs the step kept where :func:`priced_by_kind`."""
    if priced_by_kind(row):
        dense, moe = first_rank_kinds(row) if first else middle_rank_kinds(row, layout_busiest_layers(row))
        rank_layer_passes_kept(row, work, dense, moe, costs)
    elif first and all_moe:
        layer_passes(row, work)
    else:
        return
    head_passes(row, work)


@njit
def middle_rank_can_lead(row):
    """True when a rank without the LM head may be the busiest: the loss takes a layer's slot in the split, or an
    explicit layout gives the last rank fewer layers than the others (docs/model.md §11.22)."""
    return split_slots(row) > 0.0 or explicit_layout(row)


@njit
def last_rank_all_moe(row):
    """True when the busiest (last) pipeline rank holds only MoE layers while the model's leading dense layers sit
    on earlier ranks: Megatron-Core builds the decoder's layers in order, L / (p v) per virtual stage, rank r
    holding virtual stages r, r + p, ... (``get_transformer_layer_offset``, megatron/core/transformer/
    transformer_layer.py, Megatron-LM 23e00ed), and ``--moe-layer-freq`` / ``first_k_dense_replace`` make layers
    0 .. k-1 dense, so the last rank holds a dense layer only when k > (p - 1) L / (p v). Even stages, every layer
    after the dense ones MoE (``moe_layer_freq`` <= 1), one model copy per rank (not DualPipe), no embedding or
    loss slots in the split (docs/model.md §11.14)."""
    p = row[C_PP]
    if p <= 1.0 or row[C_MOE_EXPERTS] <= 0.0 or row[C_DENSE_LAYERS] <= 0.0 or row[C_MOE_LAYER_FREQ] > 1.0:
        return False
    if row[C_UNEVEN_STAGES] > 0.0 or model_copies(row) > 1.0 or split_slots(row) > 0.0:
        return False
    return row[C_DENSE_LAYERS] <= (p - 1.0) * row[C_LAYERS] / (p * max(row[C_VP], 1.0))
