"""Per-layer pass times of decoder-LM training under the real-world model (docs/model.md §11.4, §11.6).

The middle of the step's three parts (layer mix -> per-layer pass times -> step composition,
``kernels/lm/step.py``). For one micro-batch, the layer kinds of the mix (dense or MoE, full or sliding
attention; ``layer.layer_mix``) are weighted into the average layer's passes:

    forward          F  = gemm + attn + mem                                 (+ FSDP copy-out)
    backward, input  B  = BACKWARD_INPUT_GEMM gemm + BACKWARD_ATTN attn + BACKWARD_MEM mem (+ copy-out)
    backward, weight W  = BACKWARD_WEIGHT_GEMM gemm + wgrad                 (weight gradients: GEMMs only)
    recompute        R  = r_full F + r_sel (attention core, or the cheap ops under op-level checkpointing)

and the communication of the layer's process groups: each forward collective runs once more per backward
(``*_BACKWARD_PASSES``) and once more under full recompute; the exposed part is what its overlap window
leaves (``parallel.exposed``). Results accumulate into the ``A_*`` slots of the scratch vector ``work``
(after the per-layer cost slots ``W_*`` of ``kernels/lm/layer.py``). The LM head's passes are
:func:`head_passes`. The pass ratios are constants the per-op timeline (``fastmodel/lm/timeline.py``) reads.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layer import (
    N_WORK as N_LAYER_WORK,
)
from fastmodel.kernels.lm.layer import (
    W_AGAIN, W_AGAIN_EP, W_AGAIN_GEMM, W_ATTN, W_ATTN_BACKWARD, W_ATTN_CORE_MEM, W_CP, W_EP, W_EP_REMOTE, W_EXPERT_PARAMS, W_FLOPS, W_GEMM,
    W_BACKWARD_MEM, W_MEM, W_PARAMS, W_SHARED, W_FORWARD_ONLY, W_TP, W_TP_BACKWARD, W_TP_HIDDEN, W_WGRAD, head_costs, layer_costs, layer_mix, recompute_share,
)
from fastmodel.kernels.lm.recompute import core_attention_recomputed
from fastmodel.kernels.lm.layout import (
    CP_ALLGATHER, CP_ALLTOALL, C_COLLECTIVE_BUCKET_BYTES, C_CP, C_CP_ALGORITHM, C_DP, C_GLOBAL_BATCH, C_GRAD_ACCUM_BYTES,
    C_GRAD_REDUCE_BYTES, C_LAYERS, C_MICRO_BATCH,
    C_MOE_A2A_OVERLAP, C_MOE_SHARED_EXPERT_OVERLAP, C_PP,
    C_FSDP_UNITS_IN_CHECKPOINT, C_PARAM_FETCH_BW, C_SELECTIVE_POLICY, C_SHARDING, C_SHARD_DEGREE, C_TP, C_TP_COMM_OVERLAP, SHARD_FSDP,
    C_GATED_MLP, C_SEQUENCE_PARALLEL, C_TP_PER_PROJECTION,
)
from fastmodel.kernels.lm.parallel import (
    exposed, fsdp1_grad_pass_time, fsdp_copy_out_time, fsdp_layer_exposed, fsdp_reduce_copy_in_time, hook_fetch_time, param_bytes,
)
from fastmodel.kernels.lm.fsdp1_cast import fsdp1_grad_cast_time, fsdp1_shard_cast_time
from fastmodel.kernels.nccl import bucketed_allgather_time
from fastmodel.kernels.roofline import memory_bound_time

# --- pass ratios: backward seconds per forward second of each kernel kind -----------------------------------
BACKWARD_INPUT_GEMM = 1.0    # data-gradient GEMM: one GEMM of the forward's size
BACKWARD_WEIGHT_GEMM = 1.0   # weight-gradient GEMM: one more
BACKWARD_GEMM = BACKWARD_INPUT_GEMM + BACKWARD_WEIGHT_GEMM
BACKWARD_ATTN = 2.5          # flash-attention backward (Dao 2023: 2.5x the forward's matmul FLOPs)
BACKWARD_MEM = 2.0           # element-wise backward: read the saved input and the gradient, write one
TP_BACKWARD_PASSES = 1.0     # TP: the conjugate collective of each forward one (Megatron f/g operators)
CP_BACKWARD_PASSES = 2.0     # ring CP: K, V again for dQ and dK, dV back to their owners; all-gather CP (Llama 3):
                             # K, V gathered again and dK, dV reduce-scattered, the same bytes [A]
EP_BACKWARD_PASSES = 1.0     # EP: dispatch and combine all-to-alls mirrored
GATHER_BACKWARD_PASSES = 1.0  # ZeRO-3/FSDP: the layer is gathered again for its backward

# --- accumulator slots (average layer, one micro-batch), after the per-layer cost slots ---------------------
A_FORWARD = N_LAYER_WORK          # F: forward compute (s)
A_BACKWARD_INPUT = A_FORWARD + 1  # B: backward compute for inputs, recompute excluded
A_BACKWARD_WEIGHT = A_FORWARD + 2  # W: backward compute for weights
A_RECOMPUTE = A_FORWARD + 3       # R: recomputed forward
A_EXPOSED_F = A_FORWARD + 4       # exposed TP/CP/EP seconds of the forward
A_EXPOSED_B = A_FORWARD + 5       # exposed TP/CP/EP seconds of the backward (with recompute)
A_GEMM = A_FORWARD + 6            # GEMM seconds, forward + backward + recompute
A_ATTN = A_FORWARD + 7            # attention-kernel seconds, all passes
A_MEM = A_FORWARD + 8             # memory-bound seconds, all passes
A_TP_COMM = A_FORWARD + 9         # TP collective seconds, all passes
A_CP_COMM = A_FORWARD + 10
A_EP_COMM = A_FORWARD + 11
A_TP_EXPOSED = A_FORWARD + 12
A_CP_EXPOSED = A_FORWARD + 13
A_FSDP_COMM = A_FORWARD + 14      # ZeRO-3/FSDP per-layer gathers and reduce-scatter
A_FSDP_EXPOSED = A_FORWARD + 15
A_PARAMS = A_FORWARD + 16         # parameters of the layer per device
A_FLOPS = A_FORWARD + 17          # executed forward FLOPs of the layer
A_FSDP_GATHER = A_FORWARD + 18    # ZeRO-3/FSDP: one gather of the layer (s), for the stage's first layer
A_FSDP_REDUCE = A_FORWARD + 19    # one reduce-scatter of the layer's gradients (s)
A_FSDP_WINDOW = A_FORWARD + 20    # the layer's backward gather's window (s): fsdp_backward_window
A_FSDP_REFETCH = A_FORWARD + 21   # the exposed share of the recompute's re-gather (recompute_gather) (s)
A_EP_EXPOSED = A_FORWARD + 22     # EP dispatch and combine not hidden (kernels/lm/moe.py overlap modes)
A_EXPERT_PARAMS = A_FORWARD + 23  # routed-expert parameters of the layer per device (reduced over edp)
A_EP_SCALE_OUT = A_FORWARD + 24   # EP seconds of scale-out (tier-1) traffic, all passes
A_MTP_PARAMS = A_FORWARD + 25     # non-expert parameters of the MTP module's layer per device (mtp_breakdown.mtp_layer)
A_MTP_EXPERT_PARAMS = A_FORWARD + 26   # its routed-expert parameters per device
N_ACCUMULATORS = 27
#: scratch slots the step needs: per-layer costs, then the accumulators
N_WORK = A_FORWARD + N_ACCUMULATORS
#: a by-kind step's kept ``layer.layer_costs``, one ``W_*`` block per kind of ``shape.layer_mix`` (``_kinds_into``)
N_KIND_COSTS = 4 * N_LAYER_WORK
KIND_COSTS_COMPUTE = 0   # _kinds_into: each kind's layer costs computed,
KIND_COSTS_KEEP = 1      # computed and kept,
KIND_COSTS_READ = 2      # or read from the kept ones


@njit(inline="always")
def tp_pass_factors(row):
    """(forward, backward) TP seconds of a layer per forward TP time ``W_TP`` (two collectives per direction, one
    before attention and one before the MLP, and their conjugates). With ``tp_per_projection`` the plan
    redistributes the input of each column-parallel projection on its own, n = 3 (q, k, v) + 2 (gate, up; 1
    without a gate) per layer: without SP each input's gradient is all-reduced in backward (n all-reduces, the
    forward's two row-parallel all-reduces unchanged); with SP ``tp_layer.tp_layer_time`` prices the n all-gathers and
    2 reduce-scatters forward, 2 all-gathers and n reduce-scatters backward, each at its own bytes (docs/model.md
    §11.6 "Per-projection TP", §11.42), so the factors are 1."""
    if row[C_TP_PER_PROJECTION] <= 0.0 or row[C_SEQUENCE_PARALLEL] > 0.0:
        return 1.0, TP_BACKWARD_PASSES
    inputs = 3.0 + (2.0 if row[C_GATED_MLP] > 0.0 else 1.0)
    return 1.0, inputs / 2.0 * TP_BACKWARD_PASSES


@njit
def per_layer_fsdp(row):
    """True when ZeRO-3/FSDP gathers each layer per micro-batch: under pipeline parallelism frameworks keep the
    gathered stage across the step's micro-batches instead (TorchTitan's default with PP; Llama 3 sec. 3.3.2)."""
    return row[C_SHARDING] == SHARD_FSDP and row[C_PP] <= 1.0


@njit
def fsdp_shard_group(row):
    """Devices a ZeRO-3/FSDP shard spans: ``shard_degree`` (HSDP) capped at dp, else dp."""
    d = row[C_DP]
    return min(row[C_SHARD_DEGREE], d) if row[C_SHARD_DEGREE] > 0.0 else d


@njit
def expert_parallel_exposed(row, ep, shared, window):
    """Seconds the expert-parallel dispatch and combine ``ep`` of one layer and micro-batch add to the critical
    path (docs/model.md §11.14).

    ``moe_a2a_overlap`` none (Megatron-Core's default): all of it, less the part hidden behind the shared
    experts' ``shared`` seconds with ``moe_shared_expert_overlap``. Batch-level (Megatron-Core
    ``--overlap-moe-expert-parallel-comm``) and DualPipe (DeepSeek-V3 report sec. 3.2.1) pair one micro-batch's
    forward with another's backward and hide each one's communication behind the other's ``window`` of compute;
    the first stage's ``max(1, pp - 1)`` warm-up forwards and cool-down backwards of the ``m`` micro-batches
    have no partner and stay exposed.
    """
    if ep <= 0.0:
        return 0.0
    micro_batches = row[C_GLOBAL_BATCH] / (row[C_MICRO_BATCH] * row[C_DP])
    if row[C_MOE_A2A_OVERLAP] <= 0.0:
        if row[C_MOE_SHARED_EXPERT_OVERLAP] > 0.0:
            return exposed(row, ep, shared)
        return ep
    unpaired = min(1.0, max(1.0, row[C_PP] - 1.0) / micro_batches)
    return unpaired * ep + (1.0 - unpaired) * exposed(row, ep, window)


@njit
def recompute_gather(row, gather, recompute):
    """(seconds, exposed seconds) of the all-gather a layer's recomputed forward repeats, ``gather`` the layer's
    all-gather times its share of fully recomputed passes, ``recompute`` the recomputed forward's seconds.

    DeepSpeed ZeRO-3 of 2021 (``param_fetch_bw`` > 0) fetches per sub-module in hooks, so the recompute fetches
    again, synchronously: all of it exposed (docs/model.md §11.33). FSDP units inside the checkpointed block
    (``fsdp_units_in_checkpoint``; reshard_after_forward) are gathered again by the recompute's forward, issued
    ahead on the all-gather stream as in the forward: the first unit's gather waits behind the previous layer's
    reduce-scatter, but it takes the exposed place of the backward gather the model already counts (the backward
    gathers then follow on the NCCL stream during the recompute), so the layer's extra gather overlaps its
    recompute (:func:`~fastmodel.kernels.lm.parallel.exposed`; docs/model_memory.md "PyTorch FSDP1: the
    recompute's re-gather"). (0, 0) otherwise, and where the checkpoint sits inside the FSDP unit."""
    if row[C_PARAM_FETCH_BW] > 0.0:
        return gather, gather
    if row[C_FSDP_UNITS_IN_CHECKPOINT] > 0.0:
        return gather, exposed(row, gather, recompute)
    return 0.0, 0.0


@njit
def fsdp_backward_window(row, refetch, backward, recompute):
    """Compute seconds a layer's backward gather and gradient reduce-scatter overlap (:func:`fsdp_layer_exposed`),
    ``backward`` its backward's seconds, ``recompute`` its recomputed forward's, ``refetch`` the re-gather of
    :func:`recompute_gather`. Where that re-gather overlaps the recompute (FSDP units in the checkpoint), the
    recompute's seconds are its window and the backward collectives keep the backward's alone, so no second of
    compute hides two collectives of the one NCCL stream (under ``none`` the reduce-scatters run beside the
    backward, docs/model_memory.md "PyTorch FSDP1: the recompute's re-gather"; ``pre``/``post`` take the same
    split, not derived). Otherwise backward and recompute together."""
    if refetch > 0.0 and row[C_PARAM_FETCH_BW] <= 0.0 and row[C_FSDP_UNITS_IN_CHECKPOINT] > 0.0:
        return backward
    return backward + recompute


@njit
def _add_layer_kind(row, weight, full, selective, fsdp, group, work):
    """Add one layer kind's passes (``work[W_*]`` filled by ``layer_costs``), weighted, to the accumulators;
    ``group``: :func:`fsdp_shard_group`, computed once per row by the caller."""
    g, a_, m_ = work[W_GEMM], work[W_ATTN], work[W_MEM]
    # the attention backward: BACKWARD_ATTN x the forward at the measured rate (§11.58: no exponential-rate factor);
    # a_extra is 0.0 exactly where the forward carries no factor (every device but B300/GB300)
    a_back = BACKWARD_ATTN * work[W_ATTN_BACKWARD]
    a_extra = BACKWARD_ATTN * (work[W_ATTN_BACKWARD] - a_)
    # FSDP2 copies: each gather out of its buffer, the gradients into the reduce-scatter buffer (a real shard group)
    sharded = fsdp and group > 1.0
    copy = fsdp_copy_out_time(row, work[W_PARAMS]) if sharded else 0.0
    # FSDP1: the flat gradient's cat and predivide passes (fsdp1_grad_passes, 0 otherwise); with FP32 flat
    # parameters each gather's shard cast to 16 bits and the reduced shard's cast to FP32 (§11.63, second note)
    copy_in = cast = 0.0
    if sharded:
        cast = fsdp1_shard_cast_time(row, work[W_PARAMS], group)
        copy += cast
        copy_in = fsdp_reduce_copy_in_time(row, work[W_PARAMS]) + fsdp1_grad_pass_time(row, work[W_PARAMS]) \
            + fsdp1_grad_cast_time(row, work[W_PARAMS], group)
    # forward-only seconds (a MoE layer's GPU idle after host syncs and einsum gating, ALiBi's bias pass) run in
    # each forward the layer runs (forward, recomputed forward); a MoE layer's backward-only memory-bound seconds (W_BACKWARD_MEM) in the backward
    forward_only = work[W_FORWARD_ONLY]
    forward = g + a_ + m_ + copy + forward_only
    backward_input = BACKWARD_INPUT_GEMM * g + a_back + BACKWARD_MEM * m_ + copy + work[W_BACKWARD_MEM]
    # a gradient accumulation outside the weight-gradient GEMM streams the layer's parameters once per micro-batch
    accumulate = memory_bound_time(row, work[W_PARAMS] * row[C_GRAD_ACCUM_BYTES]) + copy_in
    backward_weight = BACKWARD_WEIGHT_GEMM * g + work[W_WGRAD] + accumulate
    # selective recompute: Megatron re-runs the attention core; op-level checkpointing (TorchTitan,
    # selective_policy 1) keeps attention and every other matmul output and re-runs the rest
    # Megatron-Core re-runs the recompute_modules it lists: core_attn (the default) and the others' forwards
    # (W_AGAIN, kernels/lm/recompute.py), a recomputed MoE layer's dispatch and combine too (W_AGAIN_EP)
    megatron = row[C_SELECTIVE_POLICY] <= 0.0
    core = core_attention_recomputed(row) if selective > 0.0 else 0.0
    cheap = core * (a_ + work[W_ATTN_CORE_MEM]) + work[W_AGAIN] if megatron else 0.5 * g + m_
    # FSDP units in the checkpoint: the recompute gathers them again, one more shard cast (0 otherwise)
    recast = full * cast if row[C_FSDP_UNITS_IN_CHECKPOINT] > 0.0 else 0.0
    again = full * (g + a_ + m_ + forward_only) + selective * cheap + recast
    tp_forward, tp_backward = tp_pass_factors(row)
    tp = work[W_TP] * tp_forward * (1.0 + full) + work[W_TP_BACKWARD] * tp_backward
    cp = work[W_CP] * (1.0 + CP_BACKWARD_PASSES + full)
    ep = work[W_EP] * (1.0 + EP_BACKWARD_PASSES + full) + selective * work[W_AGAIN_EP]
    passes = 1.0 + BACKWARD_GEMM + full
    ep_left = expert_parallel_exposed(row, ep, work[W_SHARED] * passes, forward + backward_input + backward_weight
                                      + again)
    # without TP overlap the wgrad re-gathers still run under their dgrad GEMMs (async, §11.41): W_TP_HIDDEN
    tp_left = exposed(row, tp, g * passes) if row[C_TP_COMM_OVERLAP] > 0.0 else tp - work[W_TP_HIDDEN] * tp_backward
    if row[C_CP_ALGORITHM] == CP_ALLTOALL or row[C_CP_ALGORITHM] == CP_ALLGATHER:
        cp_left = cp                    # the all-to-alls / K-V all-gathers sit between the projections and attention
    else:
        cp_left = exposed(row, cp, a_ * (1.0 + BACKWARD_ATTN + full) + a_extra)
    if fsdp:
        t, c = row[C_TP], row[C_CP]
        bucket = row[C_COLLECTIVE_BUCKET_BYTES]
        gather = bucketed_allgather_time(row, work[W_PARAMS] * param_bytes(row), group, t * c, bucket)
        gather = hook_fetch_time(row, gather, work[W_PARAMS], group)
        reduce = bucketed_allgather_time(row, work[W_PARAMS] * row[C_GRAD_REDUCE_BYTES], group, t * c, bucket)
        refetch, refetch_exposed = recompute_gather(row, full * gather, again)
        window = fsdp_backward_window(row, refetch, backward_input + backward_weight, again)
        work[A_FSDP_COMM] += weight * ((1.0 + GATHER_BACKWARD_PASSES) * gather + reduce + refetch)
        work[A_FSDP_EXPOSED] += weight * (fsdp_layer_exposed(row, gather, reduce, forward, window) + refetch_exposed)
        work[A_FSDP_GATHER] += weight * gather
        work[A_FSDP_REDUCE] += weight * reduce
        work[A_FSDP_WINDOW] += weight * window
        work[A_FSDP_REFETCH] += weight * refetch_exposed
    # the exposed collectives split over the passes in the ratio of their runs (forward : backward)
    comm_left = tp_left + cp_left + ep_left
    # (the re-gathers' hidden share, W_TP_HIDDEN, is all backward: without TP overlap the forward stays exposed)
    tp_share = tp_left / tp if row[C_TP_COMM_OVERLAP] > 0.0 else 1.0
    forward_runs = work[W_TP] * tp_forward * tp_share if tp > 0.0 else 0.0
    forward_runs += work[W_CP] * cp_left / cp if cp > 0.0 else 0.0
    forward_runs += work[W_EP] * ep_left / ep if ep > 0.0 else 0.0
    work[A_FORWARD] += weight * forward
    work[A_BACKWARD_INPUT] += weight * backward_input
    work[A_BACKWARD_WEIGHT] += weight * backward_weight
    work[A_RECOMPUTE] += weight * again
    work[A_EXPOSED_F] += weight * forward_runs
    work[A_EXPOSED_B] += weight * (comm_left - forward_runs)
    again_gemm = selective * work[W_AGAIN_GEMM] if megatron else 0.0
    again_mem = selective * (core * work[W_ATTN_CORE_MEM] + work[W_AGAIN] - work[W_AGAIN_GEMM]) if megatron \
        else selective * m_
    work[A_GEMM] += weight * (g * (passes + (0.0 if megatron else 0.5 * selective)) + again_gemm + work[W_WGRAD])
    work[A_ATTN] += weight * (a_ * (1.0 + BACKWARD_ATTN + full + (selective * core if megatron else 0.0)) + a_extra)
    work[A_MEM] += weight * (m_ * (1.0 + BACKWARD_MEM + full) + again_mem + 2.0 * copy + accumulate + recast
                             + forward_only * (1.0 + full) + work[W_BACKWARD_MEM])
    work[A_TP_COMM] += weight * tp
    work[A_CP_COMM] += weight * cp
    work[A_EP_COMM] += weight * ep
    work[A_EP_EXPOSED] += weight * ep_left
    work[A_EXPERT_PARAMS] += weight * work[W_EXPERT_PARAMS]
    again_remote = selective * work[W_EP_REMOTE] if work[W_AGAIN_EP] > 0.0 else 0.0
    work[A_EP_SCALE_OUT] += weight * (work[W_EP_REMOTE] * (1.0 + EP_BACKWARD_PASSES + full) + again_remote)
    work[A_TP_EXPOSED] += weight * tp_left
    work[A_CP_EXPOSED] += weight * cp_left
    work[A_PARAMS] += weight * work[W_PARAMS]
    work[A_FLOPS] += weight * work[W_FLOPS]


# The one-line wrappers below are inlined into their callers (numba IR): compiled on their own, each was a library
# that linked and re-optimised the ~70 functions of the layer costs under it, ~0.6 s of LLVM apiece on a cold
# compile (docs/performance.md "Thin wrappers inlined").
@njit(inline="always")
def layer_passes(row, work):
    """The average layer's passes and communication for one micro-batch, over the layer mix, into
    ``work[A_*]``."""
    _layer_kinds(row, work, 0, 4, work, KIND_COSTS_COMPUTE)    # layer_passes_of's body, one call fewer a step


@njit(inline="always")
def layer_passes_of(row, work, moe_only):
    """The average layer's passes over the layer mix, or over the MoE layers alone (``moe_only``: the layers of
    a pipeline rank that holds no leading dense layer, ``last_rank_all_moe``), into ``work[A_*]``."""
    _layer_kinds(row, work, 2 if moe_only else 0, 4, work, KIND_COSTS_COMPUTE)     # layer_kinds_passes' body


@njit(inline="always")
def layer_kinds_passes(row, work, first, end):
    """The average over layer kinds ``first .. end - 1`` of ``shape.layer_mix`` (0, 1: dense full and sliding; 2, 3:
    MoE full and sliding) of their passes, each weighted by its share of those layers, into ``work[A_*]``: all
    four the mix's average layer, ``2, 4`` the MoE layer, ``0, 2`` the dense layer of a MoE model (an MTP module's
    when the decoder's last layer is dense, ``mtp_breakdown.mtp_layer``)."""
    _layer_kinds(row, work, first, end, work, KIND_COSTS_COMPUTE)


@njit
def _layer_kinds(row, work, first, end, costs, use):
    """:func:`layer_kinds_passes`, each kind's costs taken as :func:`_kinds_into`'s ``use`` says."""
    counts = layer_mix(row)
    if first == 0 and end == 4:
        layers = row[C_LAYERS]
    else:
        layers = 0.0
        for kind in range(first, end):
            layers += counts[kind]
    dense = 1.0 if first == 0 else 0.0         # kinds 0-1 in range (first is 0 or 2, end 2 or 4)
    moe = 1.0 if end == 4 else 0.0
    _kinds_into(row, work, counts, dense, layers, moe, layers, costs, use)


@njit(inline="always")
def layer_passes_keeping(row, work, costs):
    """:func:`layer_passes`, each kind's ``layer.layer_costs`` (``work[W_*]``) also kept in ``costs``
    (``N_KIND_COSTS``), for :func:`rank_layer_passes_kept` and :func:`moe_layer_passes_kept` on the same row."""
    _layer_kinds(row, work, 0, 4, costs, KIND_COSTS_KEEP)


@njit(inline="always")
def moe_layer_passes_kept(row, work, costs):
    """``layer_passes_of(row, work, True)`` (the MoE layer) from the kinds' costs :func:`layer_passes_keeping` kept,
    bit for bit."""
    _layer_kinds(row, work, 2, 4, costs, KIND_COSTS_READ)


@njit(inline="always")
def rank_layer_passes(row, work, dense, moe):
    """The average layer of a pipeline rank that holds ``dense`` dense and ``moe`` MoE layers (``memory_states
    .stage_layers``) into ``work[A_*]``: each kind of ``shape.layer_mix`` weighted by its share of the rank's layers
    (the dense kinds share ``dense`` in the model's dense full / sliding proportion, the MoE kinds ``moe``), as
    :func:`layer_kinds_passes` weights them over the model; returns the rank's micro-batch of layers,
    ``(dense + moe) x layer_time`` (docs/model.md §11.44 item 1d, "by layer kind")."""
    return _rank_layers(row, work, dense, moe, work, KIND_COSTS_COMPUTE)


@njit(inline="always")
def rank_layer_passes_kept(row, work, dense, moe, costs):
    """:func:`rank_layer_passes` from the kinds' costs :func:`layer_passes_keeping` kept for this row (no
    ``layer_costs`` again: a by-kind step prices up to four ranks, ``rank_lead.py``), bit for bit."""
    return _rank_layers(row, work, dense, moe, costs, KIND_COSTS_READ)


@njit
def _rank_layers(row, work, dense, moe, costs, use):
    """:func:`rank_layer_passes`, each kind's costs taken as :func:`_kinds_into`'s ``use`` says."""
    layers = dense + moe
    if layers <= 0.0:
        for k in range(A_FORWARD, A_MTP_PARAMS):
            work[k] = 0.0
        return 0.0
    counts = layer_mix(row)
    _kinds_into(row, work, counts, dense, (counts[0] + counts[1]) * layers, moe, (counts[2] + counts[3]) * layers,
                costs, use)
    return layers * layer_time(work)


@njit
def _kinds_into(row, work, counts, held_dense, per_dense, held_moe, per_moe, costs, use):
    """Zero ``work[A_*]`` and add each kind of ``shape.layer_mix`` (``counts``) weighted ``counts[kind] x held /
    per`` of its class (dense kinds 0-1, MoE kinds 2-3; a class with ``per`` <= 0 or ``held`` 0 adds nothing): the
    shared body of :func:`layer_kinds_passes` and :func:`rank_layer_passes` (review 2 finding 4). A kind's
    ``layer.layer_costs`` (``work[W_*]``, every slot written from ``row`` alone) per ``use``: computed
    (``KIND_COSTS_COMPUTE``); computed and kept in ``costs[kind N_LAYER_WORK ...]`` (``KIND_COSTS_KEEP``); or
    copied from there (``KIND_COSTS_READ``: kept for this row with every kind of weight > 0 here), the same
    values, so the same bits."""
    for k in range(A_FORWARD, A_MTP_PARAMS):
        work[k] = 0.0
    full, selective = recompute_share(row)
    fsdp = per_layer_fsdp(row)
    group = fsdp_shard_group(row)         # once per row, not per kind and term
    for kind in range(4):
        held, per = (held_moe, per_moe) if kind >= 2 else (held_dense, per_dense)
        weight = counts[kind] * held / per if per > 0.0 else 0.0
        if weight <= 0.0:
            continue
        base = kind * N_LAYER_WORK
        if use == KIND_COSTS_READ:
            for k in range(N_LAYER_WORK):
                work[k] = costs[base + k]
        else:
            layer_costs(row, kind >= 2, kind % 2 == 1, work)
            if use == KIND_COSTS_KEEP:
                for k in range(N_LAYER_WORK):
                    costs[base + k] = work[k]
        _add_layer_kind(row, weight, full, selective, fsdp, group, work)


@njit
def layer_time(work):
    """Critical-path seconds of the average layer, one micro-batch: F + B + W + R + exposed TP/CP/EP (FSDP's
    per-layer collectives are charged per step)."""
    return (work[A_FORWARD] + work[A_BACKWARD_INPUT] + work[A_BACKWARD_WEIGHT] + work[A_RECOMPUTE]
            + work[A_EXPOSED_F] + work[A_EXPOSED_B])


@njit
def head_passes(row, work):
    """(forward, backward for inputs, backward for weights) seconds of the LM head and loss for one micro-batch
    on the last stage (not recomputed); ``work[W_*]`` keeps the head's forward costs (``layer.head_costs``), its
    backward TP ``W_TP_BACKWARD`` with the SP re-gathers and of them ``W_TP_HIDDEN`` hidden under their dgrad GEMMs
    (docs/model.md §11.42)."""
    head_costs(row, work)
    gemm, mem, tp = work[W_GEMM], work[W_MEM], work[W_TP]
    forward = gemm + mem + tp
    backward_tp = TP_BACKWARD_PASSES * (work[W_TP_BACKWARD] - work[W_TP_HIDDEN])
    backward_input = BACKWARD_INPUT_GEMM * gemm + mem + backward_tp   # loss and logits gradient
    backward_weight = BACKWARD_WEIGHT_GEMM * gemm + work[W_WGRAD]    # + the fused wgrads' main-gradient read (§11.46)
    return forward, backward_input, backward_weight
