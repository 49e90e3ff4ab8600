"""Memory of the real-world LM model, part 4: what a pipeline rank holds, chunk by chunk, at the moments of its peak.

Under the interleaved schedule a rank's ``v`` model chunks need not be alike: Megatron-Core builds
``(L + e) / (p v)`` layers per chunk, less the embedding's slot in the first chunk of the first rank and the loss's
in the last chunk of the last rank (``get_num_layers_to_build``, kernels/lm/memory_states.py ``split_slots``); the
embedding's inputs live in chunk 0 of rank 0 and the LM head's (and the MTP modules') in chunk ``v - 1`` of rank
``p - 1``. Which chunks are in flight changes over the step, so the held bytes do too; this module gives them in
closed form (no loop over micro-batches: ``memory_row`` runs per configuration in every sweep).
``docs/model_memory.md`` ("Chunks in flight under the interleaved schedule") gives the derivation; the memory
timeline (fastmodel/lm/memory_timeline.py) walks the same op orders and must agree. Compiled with
``error_model='numpy'`` (see kernels/lm/memory.py).
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_FFN, C_GATED_MLP, C_HEADS, C_HEAD_DIM, C_HIDDEN, C_KV_LORA_RANK, C_MLA, C_MOE_FFN,
    C_MOE_SHARED_EXPERTS, C_PIPELINE_SCHEDULE, C_PP, C_QK_NOPE_HEAD_DIM, C_QK_ROPE_HEAD_DIM, C_Q_LORA_RANK, C_TP,
    C_LAST_STAGE_LAYERS, C_V_HEAD_DIM, C_VP, SCHED_INTERLEAVED, SCHED_ZB_H1,
)
from fastmodel.kernels.lm.memory_activations import (
    embedding_activation_bytes, gemm_input_bytes, head_activation_bytes, local_kv_width, micro_batch_tokens,
    mtp_activation_bytes, rank_microbatch_bytes, replicated_divisor, routed_tokens,
)
from fastmodel.kernels.lm.moe import expert_tp
from fastmodel.kernels.lm.memory_states import (
    B16, explicit_layout, is_moe, layout_busiest_layers, split_slots, stage_layers,
)
from fastmodel.kernels.lm.pipeline import microbatches, microbatches_in_flight
from fastmodel.kernels.lm.shape import mtp_layer_is_moe, mtp_stage_layers


@njit(inline="always")
def is_interleaved(row):
    """True under the interleaved schedule with ``v > 1`` chunks and a pipeline."""
    return int(row[C_PIPELINE_SCHEDULE]) == SCHED_INTERLEAVED and row[C_VP] > 1.0 and row[C_PP] > 1.0


@njit(error_model='numpy')
def chunk_microbatch_bytes(row, stage, chunk, dense_layer, moe_layer):
    """What one micro-batch keeps in model chunk ``chunk`` of rank ``stage``.

    Interleaved (``v > 1``): ``n_c`` decoder layers at the rank's mean layer bytes (its dense and MoE layers,
    ``dense_layer`` / ``moe_layer`` each), ``n_c = (L + e) / (p v)`` less 1 in chunk 0 of rank 0 and in chunk
    ``v - 1`` of rank ``p - 1`` when the embedding and the loss take a slot of the split (Megatron-Core
    ``get_num_layers_to_build``, megatron/core/transformer/transformer_block.py @d98e8a6: ``num_layers_to_build
    -= 1`` on ``is_vp_first_stage and is_pipeline_first_stage`` / ``is_vp_last_stage and is_pipeline_last_stage``);
    plus the embedding's inputs in chunk 0 of rank 0 and the head's, the MTP modules' layers and inputs in chunk
    ``v - 1`` of rank ``p - 1`` (Megatron-Core ``GPTModel`` builds the embedding in the pre-process chunk, the
    output layer and MTP in the post-process one). Otherwise the rank is one chunk:
    ``rank_microbatch_bytes``."""
    if not is_interleaved(row):
        return rank_microbatch_bytes(row, stage, dense_layer, moe_layer)
    v = row[C_VP]
    last = row[C_PP] - 1.0
    dense, moe, mtp = stage_layers(row, stage)
    decoder = dense + moe
    mean = (dense * dense_layer + moe * moe_layer) / decoder if decoder > 0.0 else 0.0
    layers = layout_busiest_layers(row) / v
    if stage == last and explicit_layout(row):
        layers = layout_chunk_layers(row, chunk, layers)
    total = 0.0
    if stage == 0.0 and chunk == 0.0:
        layers -= 0.5 * split_slots(row)            # split_slots is 2 (embedding + loss) or 0
        total += embedding_activation_bytes(row)
    if stage == last and chunk == v - 1.0:
        layers -= 0.5 * split_slots(row)
        total += mtp * (moe_layer if mtp_layer_is_moe(row) else dense_layer) + head_activation_bytes(row)
        total += mtp_activation_bytes(row)
    return total + max(layers, 0.0) * mean


@njit(error_model='numpy')
def layout_chunk_layers(row, chunk, full):
    """Decoder layers of chunk ``chunk`` of the last rank under an explicit layout, whole layers as a layout string
    states them (Megatron-Core ``get_num_layers_to_build`` counts the ``t``s of one virtual stage,
    megatron/core/transformer/pipeline_parallel_layer_layout.py@0823c73 line 167). Its ``last_stage_layers`` ``n``
    fill the chunks in order, ``ceil(full)`` each (``full``: the busiest rank's per chunk), and chunk ``v - 1`` (the
    loss's) takes the rest, as the recipes' layouts do (DeepSeek-V3 ``Et*4|(t*4|)*14tmL`` at PP 4 x VP 4: 4, 4, 4, 1). Filling
    the earlier chunks first is the most a layout of that count can hold in flight: a rank holds more micro-batches
    of its earlier chunks than of the loss's (:func:`held_bytes`). A last rank that holds more than the others
    (``n > v full``, docs/model.md §11.25) spreads them as evenly as whole layers allow, ``floor(n / v)`` per chunk
    and one more in each of the first ``n mod v`` chunks (docs/model.md §11.27), rather than piling the excess onto
    the loss's chunk."""
    n = row[C_LAST_STAGE_LAYERS]
    v = row[C_VP]
    if n > v * full + 1e-9:
        base = math.floor(n / v + 1e-9)
        return base + (1.0 if chunk < n - base * v - 1e-9 else 0.0)
    full = math.ceil(full - 1e-9)               # a chunk holds whole layers: at most the others' largest chunk
    if chunk < v - 1.0:
        return min(max(n - chunk * full, 0.0), full)
    return max(n - (v - 1.0) * full, 0.0)


@njit(inline="always")
def _count(n, chunk, p, v):
    """Of the first ``n`` forwards of an interleaved rank, those of chunk ``chunk``: forward ``k`` runs chunk
    ``(k // p) mod v`` (Megatron-Core ``get_model_chunk_id``, groups of ``p`` micro-batches per chunk); backward
    ``k`` runs chunk ``v - 1 - (k // p) mod v``, so of the first ``n`` backwards ``_count(n, v - 1 - chunk)``."""
    group = p * v
    return p * (n // group) + min(max(n % group - chunk * p, 0.0), p)


@njit(error_model='numpy')
def held_bytes(row, stage, dense_layer, moe_layer, passed_head):
    """Bytes of activations rank ``stage`` holds (at the loss, at a backward's start, when a backward has reached
    the embedding), each the largest over the step's moments of that kind. ``passed_head``: the head inputs the
    micro-batch whose backward starts on the last rank's last chunk has already released
    (``memory_peak.backward_passed_head_bytes``).

    One chunk per rank (every schedule but the interleaved one): ``n = microbatches_in_flight`` micro-batches of
    ``b = rank_microbatch_bytes`` at the loss and the backward, ``(n - 1) b`` once one has left. Interleaved: a rank
    runs ``W + 1`` forwards, ``W = 2 (p - r - 1) + (v - 1) p`` (Megatron-Core ``get_pp_rank_microbatches``,
    megatron/core/pipeline_parallel/schedules.py), then forward ``k + W`` and backward ``k`` in turn (``_count``
    gives the chunks). Before backward ``k`` it holds ``n = W + 1`` chunks; without an explicit layout only rank
    0's chunk 0 and rank ``p - 1``'s chunk ``v - 1`` differ from the others (``chunk_microbatch_bytes``; under a
    layout every chunk of rank ``p - 1`` can, :func:`layout_last_rank_held`), and how many of that odd chunk are
    in flight, ``D(k)``, is, with ``j = k mod p v``: on rank 0 ``2 p - 1`` at ``j = 0`` and ``j > (v - 1) p``,
    else ``2 p``; on rank ``p - 1`` 1 for ``j < p`` (the backward is of chunk ``v - 1``, the loss's micro-batch,
    whose head inputs are released), else 0. The moments are ``n b + D (b_odd - b)`` for the ``D`` the run
    reaches (``k < m v - W``). Rank 0 reaches the embedding first after backward ``k = (v - 1) p`` (then ``k +
    1``): what is in flight then, from ``_count``. With ``W + 1 >= m v`` every forward precedes every backward."""
    b0 = chunk_microbatch_bytes(row, stage, 0.0, dense_layer, moe_layer)
    if int(row[C_PIPELINE_SCHEDULE]) == SCHED_ZB_H1 and row[C_PP] > 1.0:
        held = zb_h1_held_bytes(row, stage, b0)
        return held, held - passed_head, max(held - b0, 0.0)     # rank 0 runs each W right after its I
    if not is_interleaved(row):
        held = microbatches_in_flight(row, stage) * b0
        return held, held - passed_head, max(held - b0, 0.0)
    p = row[C_PP]
    v = row[C_VP]
    m = microbatches(row)
    warmup = 2.0 * (p - stage - 1.0) + (v - 1.0) * p
    steady = m * v - warmup                     # backwards run in the steady state: k = 0 .. steady - 1
    mid = chunk_microbatch_bytes(row, stage, 1.0 if stage == 0.0 else 0.0, dense_layer, moe_layer)   # a plain chunk
    embedding = 0.0
    if stage == 0.0:
        odd = b0 - mid
        for k in ((v - 1.0) * p, (v - 1.0) * p + 1.0):       # the first backwards that reach the embedding
            if k < m * v:
                forwards = min(m * v, k + warmup + 1.0)
                embedding = max(embedding, mid * (forwards - k - 1.0) + odd * (_count(forwards, 0.0, p, v)
                                                                               - _count(k + 1.0, v - 1.0, p, v)))
    if steady <= 1.0:                           # every forward before the first backward
        held = m * rank_microbatch_bytes(row, stage, dense_layer, moe_layer)
        return held, held - passed_head, embedding
    n = warmup + 1.0
    if stage == 0.0:
        low = n * mid + (2.0 * p - 1.0) * odd
        high = n * mid + 2.0 * p * odd if steady >= 2.0 else low
        largest = max(low, high)
        return largest, largest, embedding
    if stage == p - 1.0 and explicit_layout(row):
        at_loss, backward = layout_last_rank_held(row, stage, dense_layer, moe_layer, passed_head, steady)
        return at_loss, backward, embedding
    if stage == p - 1.0:
        with_odd = n * mid + chunk_microbatch_bytes(row, stage, v - 1.0, dense_layer, moe_layer) - mid
        backward = with_odd - passed_head       # the first backward (of chunk v - 1), right after the loss
        if steady > p:                          # a backward of another chunk: D = 0
            backward = max(backward, n * mid)
        return with_odd, backward, embedding
    return n * mid, n * mid, embedding


@njit(error_model='numpy')
def layout_last_rank_held(row, stage, dense_layer, moe_layer, passed_head, steady):
    """(at the loss, at a backward's start) of the last rank ``stage = p - 1`` under the interleaved schedule with an
    explicit layout, whose chunks hold different layer counts (:func:`layout_chunk_layers`), ``b_c`` bytes each.

    The rank warms up ``W = (v - 1) p`` forwards (:func:`held_bytes`). Before backward ``k = a p + r`` of a period
    (``0 <= a < v``, ``0 <= r < p``; the counts repeat every ``p v`` backwards while forwards remain, ``k <
    steady``), counting the chunks' forwards and backwards so far (:func:`_count`), it holds of chunk ``c``:
    ``a = 0``: ``p`` for ``c < v - 1`` and 1 of chunk ``v - 1`` (the loss's micro-batch, just through the head;
    that backward has released its head inputs, ``passed_head``); ``a >= 1``: ``p + p [c <= a - 2] + (r + 1) [c =
    a - 1] - p [c >= v - a] - r [c = v - 1 - a]``, linear in ``r``, so its largest value is at ``r = 0`` or at the
    last ``r`` the step reaches. The loss comes right after a forward of chunk ``v - 1``: the ``a = 0`` moments.
    With every ``b_c`` alike (no explicit layout) this is ``held_bytes``' ``n b + D (b_odd - b)``."""
    p = row[C_PP]
    v = row[C_VP]
    total = 0.0
    for c in range(int(v)):
        total += chunk_microbatch_bytes(row, stage, float(c), dense_layer, moe_layer)
    last = chunk_microbatch_bytes(row, stage, v - 1.0, dense_layer, moe_layer)
    at_loss = p * (total - last) + last
    backward = at_loss - passed_head
    low = 0.0                                   # sum of b_c over c <= a - 2
    high = last                                 # sum of b_c over c >= v - a
    for a in range(1, int(v)):
        reach = steady - 1.0 - a * p            # the last r this a reaches
        if reach < 0.0:
            break
        if a >= 2:
            low += chunk_microbatch_bytes(row, stage, a - 2.0, dense_layer, moe_layer)
            high += chunk_microbatch_bytes(row, stage, v - a, dense_layer, moe_layer)
        rising = chunk_microbatch_bytes(row, stage, a - 1.0, dense_layer, moe_layer)
        falling = chunk_microbatch_bytes(row, stage, v - 1.0 - a, dense_layer, moe_layer)
        base = p * (total + low - high) + rising
        backward = max(backward, base + min(reach, p - 1.0) * (rising - falling))
        backward = max(backward, base)
    return at_loss, backward


# --- ZB-H1: the weight-gradient pass deferred ---------------------------------------------------------------------

@njit(inline="always")
def _linear_pending(rows, width_in, width_out, g):
    """One linear's deferred weight gradient: its input ``g rows width_in`` and its output's gradient ``2 rows
    width_out``."""
    return rows * (g * width_in + B16 * width_out)


@njit(error_model='numpy')
def wgrad_pending_layer_bytes(row, moe):
    """What one layer keeps for a micro-batch between its input-gradient pass ``I`` (ZB-H1's ``B``) and its
    weight-gradient pass ``W``: for every linear, its input and its output's gradient, ``dW = X^T dY`` (Qi et al.
    2024, "Zero Bubble Pipeline Parallelism", sec. 2 and Table 1: ``M_W = 32 b s h`` for a GPT layer, against
    ``M_B = 34 b s h + 5 a s^2 b``; sail-sg/zero-bubble-pipeline-parallelism ``WeightGradStore.put`` keeps each
    linear's input and output gradient until the W pass). Everything else the layer saved (norm inputs,
    attention's Q, K, V and statistics, the activation function's input) is released by the ``I`` pass.

    Inputs at their stored bytes ``g`` (``gemm_input_bytes``; replicated ones ``/t`` with SP), output gradients
    16-bit: attention (QKV ``h -> (a d + 2 kv d) / t``, or MLA's down-projections ``h -> d_c' + d_c + d_h^R``
    on one input and up-projections ``d_c' -> a (d_nope + d_rope) / t``, ``d_c -> a (d_nope + d_v) / t``; output
    projection ``a d_v / t -> h``), then the dense MLP (``h -> c1 f / t -> h``, ``c1`` = 2 gated), or for a MoE
    layer the routed experts over their ``R`` rows (``h -> c1 f_e / etp -> h``) and the shared experts
    (``h -> c1 s f_e / t -> h``). The router's small ``h x E`` GEMM is left out."""
    t_tok = micro_batch_tokens(row)
    rep = replicated_divisor(row)
    h = row[C_HIDDEN]
    tp = row[C_TP]
    g = gemm_input_bytes(row)
    heads = row[C_HEADS] / tp
    c1 = 2.0 if row[C_GATED_MLP] > 0 else 1.0
    total = _linear_pending(t_tok, 0.0, h / rep, g)                     # output projection's gradient
    if row[C_MLA] > 0:
        q_lora, kv_lora, rope = row[C_Q_LORA_RANK], row[C_KV_LORA_RANK], row[C_QK_ROPE_HEAD_DIM]
        total += _linear_pending(t_tok, h / rep, q_lora + kv_lora + rope, g)
        total += _linear_pending(t_tok, q_lora, heads * (row[C_QK_NOPE_HEAD_DIM] + rope), g)
        total += _linear_pending(t_tok, kv_lora, heads * (row[C_QK_NOPE_HEAD_DIM] + row[C_V_HEAD_DIM]), g)
        total += g * t_tok * heads * row[C_V_HEAD_DIM]                  # output projection's input
    else:
        total += _linear_pending(t_tok, h / rep, heads * row[C_HEAD_DIM] + 2.0 * local_kv_width(row), g)
        total += g * t_tok * heads * row[C_HEAD_DIM]
    if not moe:
        width = row[C_FFN] / tp
        return total + _linear_pending(t_tok, h / rep, c1 * width, g) + _linear_pending(t_tok, width, h / rep, g)
    rows = routed_tokens(row)
    expert = row[C_MOE_FFN] / expert_tp(row)
    total += _linear_pending(rows, h, c1 * expert, g) + _linear_pending(rows, expert, h, g)
    shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / tp
    if shared > 0.0:
        total += _linear_pending(t_tok, h / rep, c1 * shared, g) + _linear_pending(t_tok, shared, h / rep, g)
    return total


@njit(error_model='numpy')
def rank_wgrad_pending_bytes(row, stage):
    """``wgrad_pending_layer_bytes`` over rank ``stage``'s layers (its MTP layers as the decoder's last kind,
    ``shape.mtp_stage_layers``; the dense layers of ``moe_layer_freq`` > 1 too, not only leading ones)."""
    dense, moe, mtp = stage_layers(row, stage)
    dense, moe = mtp_stage_layers(row, dense, moe, mtp)
    if not is_moe(row):
        return dense * wgrad_pending_layer_bytes(row, False)
    total = moe * wgrad_pending_layer_bytes(row, True)
    return total + dense * wgrad_pending_layer_bytes(row, False) if dense > 0.0 else total


@njit(error_model='numpy')
def zb_h1_held_bytes(row, stage, per_microbatch):
    """The most rank ``s`` holds before an ``I`` pass (and on the last rank at the loss, right before it) under
    ZB-H1: ``n_F(i)`` micro-batches whose ``I`` has not run, ``per_microbatch`` each, and ``n_W(i)`` whose ``W``
    has not, ``rank_wgrad_pending_bytes`` each.

    The order (kernels/lm/pipeline_orders.py ``zb_h1_order``; Qi et al. 2024 Fig. 3): ``w = min(p - s - 1, m)``
    warm-up forwards, then for ``i = 0 .. m - 1``: ``F(w + i)`` while any is left, ``I(i)``, and ``W(i - s)``
    once ``i >= s``. Before ``I(i)``: ``n_F = min(w + i + 1, m) - i`` and ``n_W = min(i, s)``. The total is
    piecewise linear in ``i``: it rises while forwards come (``n_F = p - s``) up to ``i = s``, then stays; once
    the forwards have run out, it changes by ``pending - per_microbatch`` per step; so its largest value is at
    ``i = min(s, m - 1)`` or where the forwards run out, ``i = m - w - 1``. With ``m >= p``: ``(p - s)`` full
    micro-batches and ``s`` pending ones (rank 0: 1F1B's ``p``; Qi et al.: "the first worker ... does not exceed
    the peak memory of 1F1B", the others hold ``W`` residues beside their fewer micro-batches)."""
    p = row[C_PP]
    m = microbatches(row)
    warmup = min(p - stage - 1.0, m)
    pending = rank_wgrad_pending_bytes(row, stage)
    best = 0.0
    for i in (min(stage, m - 1.0), min(max(m - warmup - 1.0, 0.0), m - 1.0)):
        forwards = min(warmup + i + 1.0, m) - i
        best = max(best, forwards * per_microbatch + min(i, stage) * pending)
    return best
