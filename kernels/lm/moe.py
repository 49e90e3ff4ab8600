"""Mixture-of-experts terms of decoder-LM training under the real-world model (docs/model.md §11.14).

The expert mesh (Megatron-Core MoE parallel folding): expert layers run on their own mesh
``etp x ep x edp = tp x cp x dp`` laid out ``tp-ep-dp-pp`` (Megatron-LM megatron/core/transformer/moe/README.md,
"MoE Parallel Folding"; ``--expert-tensor-parallel-size`` defaults to ``--tensor-model-parallel-size``), so an
expert-parallel group is ``ep`` ranks ``etp`` apart and expert gradients and optimizer states are reduced and
sharded over ``edp``. Tokens enter the MoE block sequence-parallel-sharded, ``b s / (cp tp)`` per rank
(Megatron-Core requires sequence parallelism for MoE with TP, same README), are gathered over the ``etp`` ranks
of an expert-TP group and sent to ``k`` experts each.

Per device and micro-batch: the routed rows of the busiest rank (``expert_rows``), the grouped-GEMM, router,
permutation and shared-expert compute (``moe_compute``) and the dispatch + combine communication of the three
dispatchers (``dispatch_time``).
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_CP, C_DP, C_EP, C_GATED_MLP, C_HIDDEN, C_KERNEL_OVERHEAD_S, C_MICRO_BATCH, C_MOE_CAPACITY_FACTOR,
    C_MOE_DISPATCHER, C_MOE_EXPERTS, C_MOE_FFN, C_MOE_GROUPED_GEMM, C_MOE_IMBALANCE, C_MOE_MEM_KERNELS,
    C_MOE_EXPERT_MAXVIO, C_MOE_ROUND_ROBIN, C_MOE_SYNC_ISSUE_OPS, C_HOST_OP_S, C_MOE_PAD_TO_CAPACITY,
    C_MOE_PERMUTE_BWD_BYTES, C_MOE_PERMUTE_FWD_BYTES, C_MOE_SHARED_EXPERTS, C_MOE_TOPK, C_SEQ_LEN, C_STACK_COMPUTE_EFF,
    C_TP, DISPATCH_ALLGATHER, DISPATCH_DEEPEP, DISPATCH_EINSUM,
)
from fastmodel.kernels.lm.shape import expert_tp as shape_expert_tp, wgrad_source_bytes
from fastmodel.kernels.roofline import expert_gemm_time, expert_wgrad_time, gemm_time, memory_bound_time

#: bytes per dispatched element in FP8: 1 byte plus one FP32 scale per 128 elements (DeepEP's FP8 dispatch,
#: DeepSeek-V3 report sec. 3.3: 1x128 activation tiles)
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0
#: HBM bytes per (token, expert) score of the router's memory-bound kernels: FP32 logits written (4) and read by
#: the score function (4), scores written (4) and read by top-k and the auxiliary loss (4 + 4)
ROUTER_BYTES_PER_SCORE = 20.0
#: HBM bytes per hidden element of one routed row: permutation reads and writes it (2 + 2), unpermutation reads
#: the expert output and writes the probability-weighted sum (2 + 2)
PERMUTE_BYTES_PER_ELEMENT = 8.0


@njit(inline="always")
def permutation_pairs(row):
    """Permute + unpermute pairs a routed row goes through per MoE layer forward: 1, and 2 for the ``alltoall``
    dispatcher with more than one local expert, which sorts the received rows by local expert after the
    all-to-all and back before the combine (Megatron-Core ``MoEAlltoAllTokenDispatcher`` at 23e00ed,
    token_dispatcher.py: "Permutation 2: Sort tokens by local expert", ``sort_chunks_by_idxs`` or, padded to
    capacity, a transposed copy, and "Unpermutation 2"; TorchTitan ``ExpertParallel._token_dispatch`` /
    ``_token_combine``: ``_permute`` after the all-to-all, ``_unpermute`` before it)."""
    local = row[C_MOE_EXPERTS] / row[C_EP]
    if row[C_MOE_DISPATCHER] == DISPATCH_EINSUM:
        return 0.0              # the dense dispatch and combine GEMMs (``einsum_time``) place the rows themselves
    if row[C_MOE_DISPATCHER] != DISPATCH_ALLGATHER and row[C_MOE_DISPATCHER] != DISPATCH_DEEPEP and local > 1.0:
        return 2.0
    return 1.0


@njit
def einsum_time(row):
    """(dispatch, combine) GEMM seconds of one MoE layer forward on one device per micro-batch under the
    ``einsum`` dispatcher: DeepSpeed-MoE's GShard-style dense dispatch and combine (DeepSpeed v0.5.8
    deepspeed/moe/sharded_moe.py ``MOELayer.forward``: ``einsum("sec,sm->ecm", dispatch_mask, input)`` before the
    all-to-all and ``einsum("sec,ecm->sm", combine_weights, expert_output)`` after it, in the activations'
    16-bit dtype). With ``S`` = ``rank_tokens`` tokens and ``E C`` = ``S k cf`` capacity slots
    (``top1gating``: ``capacity = ceil(S / E cf)``) each is one ``(E C x S) @ (S x h)`` or ``(S x E C) @ (E C x h)``
    GEMM, ``2 S E C h`` FLOPs: at capacity factor 1 and top-1 each costs as much as one expert GEMM of width
    ``h``. 0 for the other dispatchers (docs/model.md §11.14.4)."""
    if row[C_MOE_DISPATCHER] != DISPATCH_EINSUM:
        return 0.0, 0.0
    tokens = rank_tokens(row)
    slots = tokens * row[C_MOE_TOPK] * load_factor(row)
    h = row[C_HIDDEN]
    return gemm_time(row, slots, h, tokens, 0.0), gemm_time(row, tokens, h, slots, 0.0)


#: HBM bytes per (token, capacity slot) element of DeepSpeed-MoE's S x E x C gating tensors in one MoE layer forward
#: (v0.5.8 deepspeed/moe/sharded_moe.py): ``einsum("se,sc->sec")`` writes the FP32 combine weights (4),
#: ``combine_weights.bool()`` reads them (4) and writes the mask (1), ``dispatch_mask.type_as(input)`` reads it (1)
#: and writes it in 16 bits (2), ``combine_weights.type_as(input)`` reads them (4) and writes 16 bits (2); the two
#: einsum GEMMs' reads of the 16-bit operands are their own traffic (``einsum_time``)
EINSUM_GATING_FORWARD_BYTES = 4.0 + (4.0 + 1.0) + (1.0 + 2.0) + (4.0 + 2.0)
#: ... and in its backward: ``type_as``'s gradient reads the 16-bit combine-weight gradient (2) and writes it in FP32
#: (4), the ``se,sc->sec`` einsum's gradient with respect to the gates reads it (4); the mask has no gradient
EINSUM_GATING_BACKWARD_BYTES = (2.0 + 4.0) + 4.0


@njit
def einsum_gating_time(row):
    """(forward, backward) memory-bound seconds of DeepSpeed-MoE's S x E x C gating tensors in one MoE layer and
    micro-batch under the ``einsum`` dispatcher: ``EINSUM_GATING_FORWARD_BYTES`` and ``EINSUM_GATING_BACKWARD_BYTES``
    per element of ``S x E C``, ``S`` = ``rank_tokens``, ``E C`` = ``S k cf`` slots as in ``einsum_time``
    (top-2 gating's extra tensors are not counted) (docs/model.md §11.14.9). 0 for the other dispatchers."""
    if row[C_MOE_DISPATCHER] != DISPATCH_EINSUM:
        return 0.0, 0.0
    tokens = rank_tokens(row)
    elements = tokens * tokens * row[C_MOE_TOPK] * load_factor(row)
    return (memory_bound_time(row, EINSUM_GATING_FORWARD_BYTES * elements),
            memory_bound_time(row, EINSUM_GATING_BACKWARD_BYTES * elements))


#: HBM bytes per element of SequentialMLP's ``torch.cat`` of its local experts' outputs (read 2, write 2), and of the
#: backward's ``cat`` of the input gradients that ``torch.split``'s autograd forms (docs/model.md §11.57)
SEQUENTIAL_CAT_BYTES = 4.0


@njit
def sequential_mlp_time(row):
    """Seconds Megatron-Core's SequentialMLP (``moe_grouped_gemm`` 0) adds to one MoE layer's forward, and as much
    to its backward, beside its per-expert GEMMs (``roofline.expert_gemm_roofline``): with L = E / ep > 1 local
    experts each runs its own fused activation and the outputs are concatenated (``torch.cat``,
    ``SEQUENTIAL_CAT_BYTES`` per routed row and hidden element): ``L`` launches, the L - 1 activations beyond the
    grouped MLP's one plus the cat, and the cat's bytes. Backward: L activation backwards and the cat of the input gradients of ``torch.split``. 0 with
    grouped GEMMs or one local expert (SequentialMLP then calls the expert directly). Megatron-LM 23e00ed
    megatron/core/transformer/moe/experts.py lines 1051-1083 (docs/model.md §11.57)."""
    local = row[C_MOE_EXPERTS] / row[C_EP]
    if row[C_MOE_GROUPED_GEMM] > 0.0 or local <= 1.0:
        return 0.0
    launches = local * row[C_KERNEL_OVERHEAD_S] / row[C_STACK_COMPUTE_EFF]
    return memory_bound_time(row, SEQUENTIAL_CAT_BYTES * expert_rows(row) * row[C_HIDDEN]) + launches


@njit
def stack_permute_time(row):
    """(forward, backward) memory-bound seconds of a stack's own token permutation path in one MoE layer and
    micro-batch: ``moe_permute_fwd_bytes`` and ``moe_permute_bwd_bytes`` per routed row and hidden element (the
    busiest rank's ``expert_rows``), counted op by op from the stack's source (TorchTitan's all-to-all path:
    docs/model.md §11.61). 0 when the stack states none; ``moe_compute`` then charges the generic count."""
    if row[C_MOE_PERMUTE_FWD_BYTES] <= 0.0:
        return 0.0, 0.0
    elements = expert_rows(row) * row[C_HIDDEN]
    return (memory_bound_time(row, row[C_MOE_PERMUTE_FWD_BYTES] * elements),
            memory_bound_time(row, row[C_MOE_PERMUTE_BWD_BYTES] * elements))


@njit
def moe_pass_extras(row):
    """(forward, backward) seconds of one MoE layer and micro-batch that are not the forward's multiples:
    ``einsum_gating_time``, ``stack_permute_time`` and ``sequential_mlp_time`` (the latter in both passes)."""
    forward, backward = einsum_gating_time(row)
    permute_forward, permute_backward = stack_permute_time(row)
    sequential = sequential_mlp_time(row)
    return forward + permute_forward + sequential, backward + permute_backward + sequential


@njit(inline="always")
def moe_launch_time(row):
    """Launch + tail seconds of the small memory-bound kernels of one MoE layer forward:
    ``moe_mem_kernels x kernel_overhead_s`` (the stack's count, docs/model.md §11.14; 0 when not counted)."""
    return row[C_MOE_MEM_KERNELS] * row[C_KERNEL_OVERHEAD_S] / row[C_STACK_COMPUTE_EFF]


@njit(inline="always")
def moe_sync_idle_time(row):
    """Seconds the GPU idles in one MoE layer forward while the host, released by a blocking sync, issues the
    operators that precede the next kernel long enough to hide its issue: ``moe_sync_issue_ops x host_op_s``
    (the stack's count, docs/model.md §11.14.6; 0 when not counted). The backward has no sync."""
    return row[C_MOE_SYNC_ISSUE_OPS] * row[C_HOST_OP_S]


@njit(inline="always")
def expert_tp(row):
    """Expert tensor-parallel degree of training: ``etp``, or ``tp`` when 0 (Megatron-Core's default;
    ``shape.expert_tp``, the one expert-sharding rule)."""
    return shape_expert_tp(row, 0.0)


@njit(inline="always")
def expert_dp(row):
    """Expert data-parallel degree ``edp = tp cp dp / (etp ep)`` (MoE parallel folding)."""
    return max(1.0, row[C_TP] * row[C_CP] * row[C_DP] / (expert_tp(row) * row[C_EP]))


@njit(inline="always")
def rank_tokens(row):
    """Tokens one rank brings to a MoE block per micro-batch: ``b s / (cp tp)`` (sequence-parallel shard)."""
    return row[C_MICRO_BATCH] * row[C_SEQ_LEN] / (row[C_CP] * row[C_TP])


@njit(inline="always")
def rank_imbalance(row):
    """Routed tokens of the busiest expert-parallel rank over the mean: ``moe_imbalance``, or, where the plan's
    balancing method set a per-expert ``moe_expert_maxvio`` m (``fastmodel/lm/router_balance.py``) and routing is
    not forced round robin, ``1 + m sqrt(ep ln ep / (E ln E))``: expert loads ``1 + sigma z_i`` with independent
    standard normal ``z_i`` whose largest of N is ``sigma sqrt(2 ln N)`` (David and Nagaraja, Order Statistics,
    sec. 10.5), a rank the mean of ``E / ep`` of them (docs/model.md §11.14.5). 0 at ep = 1, m at ep = E.
    A ``moe_imbalance`` above 1 (stated, or a sweep axis) wins over the method's figure."""
    if row[C_MOE_IMBALANCE] > 1.0:
        return row[C_MOE_IMBALANCE]
    maxvio = row[C_MOE_EXPERT_MAXVIO]
    experts = row[C_MOE_EXPERTS]
    ep = min(row[C_EP], experts)
    if maxvio <= 0.0 or row[C_MOE_ROUND_ROBIN] > 0.0 or ep <= 1.0 or experts <= 1.0:
        return max(1.0, row[C_MOE_IMBALANCE])
    return 1.0 + maxvio * math.sqrt(ep * math.log(ep) / (experts * math.log(experts)))


@njit
def load_factor(row):
    """Rows of the busiest expert-parallel rank over the balanced share ``k T``.

    Padded to capacity: ``cf`` (every expert gets ``capacity = T k cf / E`` rows, Megatron-Core MoE README);
    capacity without padding: the busiest rank's imbalance (``rank_imbalance``) cut at ``cf`` (tokens above
    capacity are dropped); dropless (``cf = 0``): the imbalance.
    """
    cf = row[C_MOE_CAPACITY_FACTOR]
    imbalance = rank_imbalance(row)
    if cf > 0.0 and row[C_MOE_PAD_TO_CAPACITY] > 0.0:
        return cf
    if cf > 0.0:
        return min(imbalance, cf)
    return imbalance


@njit
def expert_rows(row):
    """Routed rows one device computes per micro-batch (busiest rank): ``T_r etp k x load_factor``.

    An expert-TP group gathers its ``etp`` ranks' tokens; with balanced routing an expert-parallel group of
    ``ep`` such groups sends each group ``etp T_r k`` of the ``ep etp T_r k`` assignments; every device of the
    group computes them all at width ``moe_ffn / etp``, so the expert FLOPs per device do not depend on
    ``etp`` or ``ep``.
    """
    return rank_tokens(row) * expert_tp(row) * row[C_MOE_TOPK] * load_factor(row)


@njit
def expert_flops(row):
    """Forward FLOPs of the routed experts on one device per micro-batch: ``2 nm h (moe_ffn / etp) rows``."""
    nm = 3.0 if row[C_GATED_MLP] > 0.0 else 2.0
    return 2.0 * nm * row[C_HIDDEN] * row[C_MOE_FFN] / expert_tp(row) * expert_rows(row)


@njit
def moe_compute(row, fp8):
    """(GEMM seconds, memory-bound seconds, shared-expert seconds, FLOPs, MLP-output elements, routed-expert
    GEMM seconds) of one MoE block's forward on one device per micro-batch.

    Router: a ``T_r x h x E`` GEMM (16-bit). Routed experts: two grouped GEMMs over ``E / ep`` local experts of
    ``rows / local`` rows each at width ``moe_ffn / etp`` (tile and wave quantization per expert,
    ``roofline.expert_gemm_roofline``: exposed weight stream at few rows per expert). Shared experts: a dense MLP
    of width ``shared moe_ffn`` split over TP on the TP group's ``b s / cp`` tokens (Megatron-Core: shared experts
    follow the dense layers' parallelism). Both read their weights at the training GEMM format's bytes
    (``roofline.gemm_weight_bytes``: 2, 1, or 0.5625 under NVFP4; ``roofline.expert_gemm_time``, ``gemm_time``), as the dense layer GEMMs do.
    Memory-bound: router scores, top-k and auxiliary loss (``ROUTER_BYTES_PER_SCORE`` per token and expert),
    permutation and unpermutation (``PERMUTE_BYTES_PER_ELEMENT`` per routed element and ``permutation_pairs``;
    none where the stack counts its own path, ``stack_permute_time``),
    and the launch time of the stack's small router and dispatcher kernels (``moe_launch_time``).
    """
    h = row[C_HIDDEN]
    t = row[C_TP]
    nm = 3.0 if row[C_GATED_MLP] > 0.0 else 2.0
    experts = row[C_MOE_EXPERTS]
    local = experts / row[C_EP]
    tokens_r = rank_tokens(row)
    rows = expert_rows(row)
    width = row[C_MOE_FFN] / expert_tp(row)
    # weights at the GEMM format's bytes (roofline.gemm_weight_bytes): 0.5625 under NVFP4 (docs/model.md §11.38)
    routed = expert_gemm_time(row, local, rows / local, (nm - 1.0) * width, h, fp8) \
        + expert_gemm_time(row, local, rows / local, h, width, fp8)
    gemm = gemm_time(row, tokens_r, experts, h, 0.0) + routed
    shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN]
    tokens = tokens_r * t
    shared_time = gemm_time(row, tokens, (nm - 1.0) * shared / t, h, fp8) + gemm_time(row, tokens, h, shared / t, fp8)
    # a stack that counts its own permutation path charges it in ``stack_permute_time`` instead (§11.61)
    generic = row[C_MOE_PERMUTE_FWD_BYTES] <= 0.0
    permute = PERMUTE_BYTES_PER_ELEMENT * permutation_pairs(row) * rows * h if generic else 0.0
    mem = memory_bound_time(row, ROUTER_BYTES_PER_SCORE * tokens_r * experts + permute) + moe_launch_time(row)
    flops = expert_flops(row) + 2.0 * tokens * nm * h * shared / t + 2.0 * tokens_r * h * experts
    return gemm, mem, shared_time, flops, rows * width + tokens * shared / t, routed


@njit
def expert_wgrad_extra(row, fp8, forward):
    """Seconds the routed experts' weight-gradient GEMMs of one MoE layer and micro-batch take beyond their
    forward GEMMs' ``forward`` seconds (``moe_compute``'s last value), which the weight-gradient pass already
    charges once (``passes.BACKWARD_WEIGHT_GEMM``).

    Each local expert's gradient (``h x (nm - 1) moe_ffn / etp`` and ``moe_ffn / etp x h``) is reduced over its
    ``rows / local`` routed rows (``roofline.expert_wgrad_time``); with ``wgrad_fused_accumulation`` the GEMM
    reads the main gradient it accumulates into, ``grad_reduce_bytes`` per element (docs/model.md §11.3,
    "Weight gradients of routed experts"). May be negative: the forward's exposed weight stream at few rows per
    expert has no counterpart in the weight gradient, whose operands are the routed rows.

    The ``einsum`` dispatcher's two GEMMs (``einsum_time``) are among the layer's GEMMs, so the weight-gradient
    pass charges them once too; only the combine has a weight gradient (its routing weights, which carry the
    gate's gradient), the dispatch mask none (``one_hot``, cast): the dispatch's share comes off here.
    """
    nm = 3.0 if row[C_GATED_MLP] > 0.0 else 2.0
    local = row[C_MOE_EXPERTS] / row[C_EP]
    per_expert = expert_rows(row) / local
    width = row[C_MOE_FFN] / expert_tp(row)
    h = row[C_HIDDEN]
    source = wgrad_source_bytes(row)
    wgrad = expert_wgrad_time(row, local, per_expert, (nm - 1.0) * width, h, fp8, source) \
        + expert_wgrad_time(row, local, per_expert, h, width, fp8, source)
    return wgrad - forward - einsum_time(row)[0]
