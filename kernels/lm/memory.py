"""Memory per device of the real-world LM model (``default`` semantics), by memory kind.

``memory_row(row, out)`` fills ``out[M_<KIND>]`` (bytes per device) for one
configuration at the peak over the step of the most loaded pipeline rank, over
every rank (``memory_row``; docs/model_memory.md "Every pipeline rank (issue 23)");
the phases of the step are in ``memory_peak``. It allocates nothing, so the fused pass can call it per
configuration inside ``prange``.
``memory_table(params)`` evaluates a whole ``(N_COLUMNS, n)`` table.

Every term is a small function named after what it computes; its docstring
gives the equation and its public source. ``docs/model_memory.md`` collects
them. The terms live by concern: ``memory_states`` (parameters per stage, shard
groups, weights, gradients, optimizer states), ``memory_activations`` (what a
rank stores for backward, recompute, micro-batches in flight), ``memory_peak`` (the phases of the step and
their transient tensors), and this module
(KV cache, communication buffers, the per-device assembly; the FSDP gather buffers and FSDP1's flat-gradient
copy are in ``memory_fsdp``).
Sizes are bytes; ``T`` is the tokens of one micro-batch on one device
before sequence-parallel sharding: ``T = micro_batch * seq_len / cp``.

The functions compile with numba's ``error_model='numpy'``: a division by zero yields inf/nan instead of
raising, so no division carries a zero check (1.5x faster on ``bench/bench_memory.py``) and an illegal
point of a sweep cannot raise inside the fused pass (legality is the rule table's job).
"""

import numpy as np

from fastmodel.kernels.jit import njit, prange, stack_vector
from fastmodel.kernels.lm.moe import expert_dp
from fastmodel.kernels.lm.layout import (
    C_CP, C_CP_ALGORITHM, C_EP, C_HEADS, C_HEAD_DIM, C_HIDDEN, C_KV_LORA_RANK, C_LAYERS, C_MLA, C_PP, C_PRECISION,
    C_QK_ROPE_HEAD_DIM, C_SEQUENCE_PARALLEL, C_TP, C_UB_COMMUNICATORS, C_UB_RING_EXCHANGE_RS,
    C_LOSS_IMPL, C_MTP_LAYERS, C_VOCAB,
    LOSS_COMPILED, LOSS_EAGER, M_ACTIVATIONS, M_BUFFERS, M_GRADIENTS, M_KV_CACHE, M_OPTIMIZER, M_OVERHEAD, M_WEIGHTS, N_MEMORY_KINDS,
    CP_ALLGATHER, CP_ALLTOALL, PRECISION_FP8, C_CUDA_CONTEXT_BYTES, C_CUBLAS_WORKSPACE_BYTES, C_DP, C_NCCL_CHANNELS,
    C_NCCL_P2P_CHANNELS_PER_PEER, C_MOE_DISPATCHER, DISPATCH_DEEPEP, C_PIPELINE_SCHEDULE, SCHED_ZB_H1, N_COLUMNS,
)
from fastmodel.kernels.lm.memory_deepep import deepep_buffer_bytes
from fastmodel.kernels.lm.memory_fsdp import fsdp_gather_buffer_bytes
from fastmodel.kernels.lm.memory_activations import (
    micro_batch_tokens, replicated_divisor, local_kv_width, routed_tokens, layer_activation_bytes,
)
from fastmodel.kernels.lm.memory_recompute import kept_mode, recompute_working_bytes, stored_layer_bytes
from fastmodel.kernels.lm.memory_offload import offloaded_layer_bytes
from fastmodel.kernels.lm.bf16_layers import bf16_row_into, bf16_stage_share
from fastmodel.kernels.lm.memory_peak import N_PHASES, backward_grad_bytes, phase_kinds, stage_peak, userbuffers_on
from fastmodel.kernels.lm.pipeline import mirror_stage
from fastmodel.kernels.lm.memory_states import is_moe, stage_layers, B16, B32
from fastmodel.registry.lm_overhead import NCCL_LL128_BYTES, NCCL_LL_BYTES, NCCL_SIMPLE_BYTES
from fastmodel.kernels.lm.memory_states import layers_per_stage  # noqa: F401 - re-exported for callers of the old layout


# --- KV cache --------------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def kv_cache_bytes_per_token(row):
    """KV-cache bytes per token on one device (serving; zero in training).

    ``2 * L/pp * max(kv_heads/tp, 1) * head_dim * bytes`` (K and V of every layer; Pope et al. 2022,
    Sec. 3.1; KV heads replicated once tp exceeds them, as vLLM does). MLA caches the compressed latent and
    the shared rotary key, ``(kv_lora_rank + qk_rope_head_dim) * L/pp * bytes``, the same on every TP rank
    (DeepSeek-V2 report, Sec. 2.1.2). ``bytes`` = 1 under FP8, else 2.
    """
    per = 1.0 if int(row[C_PRECISION]) == PRECISION_FP8 else B16
    layers = row[C_LAYERS] / row[C_PP]
    if row[C_MLA] > 0:
        return (row[C_KV_LORA_RANK] + row[C_QK_ROPE_HEAD_DIM]) * layers * per
    return 2.0 * layers * local_kv_width(row) * per


# --- buffers ---------------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def cp_comm_buffer_bytes(row):
    """Context-parallel exchange buffers of one attention, one micro-batch (zero without CP).

    Ring attention (``cp_algorithm = ring``; Liu et al. 2023, Megatron-Core/Transformer Engine
    ``AttnFuncWithCPAndKVP2P``): the K and V chunk being received while the current one is used, and the
    chunk being sent, ``2 * 2 * 2 T kv d / t`` (``kv d / t`` = ``local_kv_width``). All-to-all
    (DeepSpeed-Ulysses, Jacobs et al. 2023, Sec. 3): Q, K and V are re-partitioned from ``s / cp`` tokens of
    every head to all ``s`` tokens of ``1 / cp`` of the heads, into new tensors of the same size as the
    local ones: ``2 T (a d / t + 2 kv d / t)`` live beside the projections' outputs until they are freed.
    Both are per device functions of ``T = b s / cp``: fixed tokens per device, fixed buffers. K/V all-gather
    (``cp_algorithm = allgather``, Llama 3 sec. 3.3.2): every rank's K and V chunk gathered, ``2 cp T kv d / t``
    per device (with GQA small: the paper's reason to gather K and V rather than pass them around).
    """
    if row[C_CP] <= 1:
        return 0.0
    t_tok = micro_batch_tokens(row)
    if int(row[C_CP_ALGORITHM]) == CP_ALLTOALL:
        return B16 * t_tok * (row[C_HEADS] / row[C_TP] * row[C_HEAD_DIM] + 2.0 * local_kv_width(row))
    if int(row[C_CP_ALGORITHM]) == CP_ALLGATHER:
        return 2.0 * B16 * row[C_CP] * t_tok * local_kv_width(row)
    return 2.0 * 2.0 * B16 * t_tok * local_kv_width(row)


#: the reduce-scatter overlaps among Transformer Engine's Userbuffers communicators (proj_fprop, fc2_fprop, qkv_wgrad,
#: fc1_wgrad; TE@d64bc14d base.py line 285, ``layers_reduce_scatter_overlap``): their buffers stay 16-bit under FP8
UB_REDUCE_SCATTER_BUFFERS = 4.0


@njit(error_model='numpy')
def userbuffer_bytes(row):
    """Transformer Engine's Userbuffers on one device under ``tp_comm_overlap`` (``tp > 1``, a stack with
    ``ub_communicators`` > 0), else 0: ``T h [(n - 4) e + 2 (4 + r (t - 1) / t)]``.

    ``initialize_ub`` makes ``n`` = ``ub_communicators`` communicators (12 from TE 2.7, 10 before), each with one
    buffer of the shape Megatron passes, ``T = b s / cp`` rows of ``h`` (Megatron-Bridge@b7b4e11b
    training/initialize.py lines 356-359), allocated by ``cudaMalloc`` or ``cuMemCreate`` outside PyTorch's caching
    allocator (TE@d64bc14d userbuffers-host.cpp lines 557, 660). The ``n - 4`` all-gather buffers hold FP8
    (``e`` = 1 byte) under an FP8 recipe, else 16-bit (``e`` = 2; base.py lines 405-408, 472-476); the 4
    reduce-scatter ones stay 16-bit, and each of the ``r`` = ``ub_ring_exchange_rs`` forward reduce-scatters run
    as ring exchange holds ``2 t - 1`` chunks of ``T / t`` rows (comm_gemm_overlap.cpp lines 688-696).
    docs/model_memory.md "Overhead" (Userbuffers)."""
    if not userbuffers_on(row):
        return 0.0
    n = row[C_UB_COMMUNICATORS]
    t = row[C_TP]
    gather = 1.0 if int(row[C_PRECISION]) == PRECISION_FP8 else B16
    scatter = B16 * (UB_REDUCE_SCATTER_BUFFERS + row[C_UB_RING_EXCHANGE_RS] * (t - 1.0) / t)
    return micro_batch_tokens(row) * row[C_HIDDEN] * ((n - UB_REDUCE_SCATTER_BUFFERS) * gather + scatter)


@njit(error_model='numpy')
def comm_buffer_bytes(row):
    """The largest in-flight collective of each process group, summed over groups (each has its stream).

    TP with SP: the all-gathered sequence ``2 T h`` (Megatron's global all-gather buffer), none under Transformer
    Engine's Userbuffers (``userbuffer_bytes`` > 0), whose all-gather overlaps gather into their own buffer, the
    GEMM's input (TE@d64bc14d layernorm_linear.py lines 275-287: ``fill_userbuffers_buffer_for_all_gather`` in
    place of ``gather_along_first_dim``; the LM head's, a Megatron linear, is kept on its rank by
    memory_peak.py ``head_gather_buffer_bytes``); EP: dispatch send + receive ``2 * 2 R h``; CP (``cp_comm_buffer_bytes``);
    PP: one activation sent and one received ``2 * 2 T h / t_sp``. DP gradient buckets are views of the gradient
    buffer (Megatron-Core DDP) and cost nothing extra; FSDP's are in ``fsdp_gather_buffer_bytes``.
    """
    t_tok = micro_batch_tokens(row)
    h = row[C_HIDDEN]
    total = 0.0
    if row[C_TP] > 1 and row[C_SEQUENCE_PARALLEL] > 0 and not userbuffers_on(row):
        total += B16 * t_tok * h
    if is_moe(row) and row[C_EP] > 1:
        total += 2.0 * B16 * routed_tokens(row) * h
    total += cp_comm_buffer_bytes(row)
    if row[C_PP] > 1:
        total += 2.0 * B16 * t_tok * h / replicated_divisor(row)
    return total


# --- overhead: what is not a model tensor ------------------------------------------------------------------------------

#: one NCCL connection's buffers, LL + LL128 + Simple (NVIDIA/nccl src/init.cc; fastmodel/registry/lm_overhead.py)
NCCL_RING_CONNECTION_BYTES = float(NCCL_LL_BYTES + NCCL_LL128_BYTES + NCCL_SIMPLE_BYTES)
#: cuBLAS handles PyTorch uses per device in training: the forward's thread and autograd's device thread each
#: reserve a handle from the per-thread pool, both on the compute stream (CublasHandlePool.cpp, a workspace per
#: (handle, stream); torch/csrc/autograd/engine.cpp runs the backward on one worker thread per device)
CUBLAS_HANDLES = 2.0


@njit(error_model='numpy')
def nccl_buffer_bytes(row):
    """NCCL communicator buffers on one device: ``n_ring * C * (LL + LL128 + Simple) + n_p2p * C_p * Simple``.

    A collective communicator connects, per ring channel (``C`` = ``nccl_channels``), one receive connection with
    a buffer per protocol (LL 512 KiB, LL128 4.69 MiB, Simple 4 MiB; NVIDIA/nccl src/init.cc); only the ring is
    counted (NCCL >= 2.22 connects an algorithm when first used, NCCL_RUNTIME_CONNECT=1, and large collectives
    use the ring). Point-to-point traffic keeps ``C_p`` (``nccl_p2p_channels_per_peer``) Simple buffers per peer.
    Communicators a rank uses: tensor parallel (``tp > 1``), data parallel over ``dp cp`` (gradients, FSDP
    gathers), the expert data-parallel group ``dp cp t / (ep etp)`` of a MoE with ``ep > 1``; point to point:
    the pipeline's previous and next rank (one when ``pp = 2``), the ``ep - 1`` all-to-all peers of expert
    parallelism (none under DeepEP, whose dispatch and combine use its own buffers, ``memory_deepep``), context
    parallelism's ring neighbours (2) or all-to-all peers (``cp - 1``).
    """
    channels = row[C_NCCL_CHANNELS]
    per_peer = row[C_NCCL_P2P_CHANNELS_PER_PEER] * NCCL_SIMPLE_BYTES
    rings = 0.0
    peers = 0.0
    if row[C_TP] > 1:
        rings += 1.0
    if row[C_DP] * row[C_CP] > 1:
        rings += 1.0
    if is_moe(row) and row[C_EP] > 1:
        if int(row[C_MOE_DISPATCHER]) != DISPATCH_DEEPEP:   # DeepEP moves tokens through its own buffers
            peers += row[C_EP] - 1.0
        if expert_dp(row) > 1.0:
            rings += 1.0
    if row[C_PP] > 1:
        peers += min(2.0, row[C_PP] - 1.0)
    if row[C_CP] > 1:
        peers += row[C_CP] - 1.0 if int(row[C_CP_ALGORITHM]) == CP_ALLTOALL else min(2.0, row[C_CP] - 1.0)
    return rings * channels * NCCL_RING_CONNECTION_BYTES + peers * per_peer


@njit(error_model='numpy')
def overhead_bytes(row):
    """Device memory that is no model tensor (the ``overhead`` kind): the CUDA context (``cuda_context_bytes``),
    PyTorch's cuBLAS workspaces ``CUBLAS_HANDLES * cublas_workspace_bytes``, the NCCL buffers
    (``nccl_buffer_bytes``), DeepEP's buffers (``memory_deepep.deepep_buffer_bytes``) and Transformer Engine's
    Userbuffers (``userbuffer_bytes``)."""
    return (row[C_CUDA_CONTEXT_BYTES] + CUBLAS_HANDLES * row[C_CUBLAS_WORKSPACE_BYTES]
            + nccl_buffer_bytes(row) + deepep_buffer_bytes(row) + userbuffer_bytes(row))


@njit(error_model='numpy')
def loss_workspace_bytes_per_logit(row):
    """Bytes per logit live at the loss's peak, by how the stack computes it (``loss_impl``):

    - ``vocab_parallel`` (Megatron ``vocab_parallel_cross_entropy``): the BF16 logits and their FP32 copy,
      which the function turns into the softmax in place and saves for backward: ``2 + 4 = 6``
      (Korthikanti Sec. 4.3, ``4 s b v / t`` for the FP32 part).
    - ``eager`` (``F.cross_entropy(logits.float(), labels)``, PyTorch autograd; tools/autograd/derivatives.yaml:
      ``_log_softmax`` saves its ``result``, ``nll_loss_forward`` saves ``self`` = that result, ``_to_copy``
      saves nothing): in the backward, the saved FP32 log-softmax ``4``, the NLL gradient ``4`` and the
      log-softmax gradient ``4`` are live at once, ``12``; the BF16 logits are freed before the backward when
      the caller drops them (TorchTitan ``del pred`` before ``loss.backward()``, torchtitan/train.py). The
      forward holds ``2 + 4 + 4 = 10`` (BF16 logits, FP32 copy, log-softmax), less.
    - ``compiled`` (the same function under torch.compile): Inductor saves the BF16 logits and one FP32
      statistic per token, and its backward writes the BF16 input gradient in one kernel (the NLL gradient's
      ``full`` + ``scatter`` becomes a pointwise ``where``: ``scatter_upon_const_tensor``,
      torch/_inductor/fx_passes): ``2 + 2 = 4``."""
    impl = int(row[C_LOSS_IMPL])
    if impl == LOSS_EAGER:
        return 3.0 * B32
    if impl == LOSS_COMPILED:
        return 2.0 * B16
    return B16 + B32


@njit(error_model='numpy')
def mtp_loss_saved_bytes_per_logit(row):
    """Bytes per logit an MTP module's loss keeps until the backward (``loss_impl``): Megatron-Core's
    ``process_mtp_loss`` runs every depth's output layer and loss before the main head's and drops each depth's
    BF16 logits when the next replaces them, so what stays is what the loss saved: ``vocab_parallel`` the FP32
    softmax ``exp_logits`` (megatron/core/tensor_parallel/cross_entropy.py ``ctx.save_for_backward``) 4; ``eager``
    the FP32 log-softmax 4; ``compiled`` the BF16 logits 2 (and one FP32 statistic per token, not counted)."""
    return B16 if int(row[C_LOSS_IMPL]) == LOSS_COMPILED else B32


@njit(error_model='numpy')
def logits_workspace_bytes(row):
    """The LM head's logits and loss workspace for one micro-batch, ``loss_workspace_bytes_per_logit * T V / t``,
    live at once at the peak; one set per micro-batch, since the last rank runs each micro-batch's backward
    right after its forward. The MTP modules' losses, computed before the main head's, add
    ``mtp_layers x mtp_loss_saved_bytes_per_logit x T V / t`` (docs/model_memory.md "MTP module")."""
    per_logit = loss_workspace_bytes_per_logit(row) + row[C_MTP_LAYERS] * mtp_loss_saved_bytes_per_logit(row)
    return per_logit * micro_batch_tokens(row) * row[C_VOCAB] / row[C_TP]


# --- per device -------------------------------------------------------------------------------------------------------

@njit(error_model='numpy')
def memory_row(row, out):
    """Fill ``out[M_*]`` with the bytes per device of each memory kind at the peak of the worst pipeline rank;
    return that rank (0 = first).

    Every pipeline rank is evaluated (1F1B: rank ``i`` holds ``pp - i`` micro-batches, but an uneven layer
    split, the embedding on the first rank and the head and MTP modules on the last can make any rank the
    largest; DualPipe: every rank holds ``pp + 1``); each rank's peak is the largest total over the phases of
    the step (kernels/lm/memory_peak.py), and the rank with the largest peak is reported, by kind at that
    moment. KV cache is zero in training;
    ``overhead`` is ``overhead_bytes``: what is not a live tensor (CUDA context, cuBLAS workspaces, NCCL
    buffers). The allocator's cache of free blocks is not counted: PyTorch's caching allocator releases
    it and retries when a device allocation fails (``num_alloc_retries`` in ``torch.cuda.memory_stats``), so
    it is reported as ``memory_reserved`` but does not decide what fits.
    """
    dense_layer, moe_layer, resident, working, gather, comm, grad_work, logits = peak_terms(row)
    best = -1.0
    best_stage = 0.0
    w = g = o = a = b = 0.0
    last = row[C_PP] - 1.0
    # every rank, in the order first, last, 1, 2, ..., pp - 2 (a tie keeps the earlier): an uneven layer split
    # or the embedding's and head's placement can make a middle rank the worst. A middle rank that holds the same
    # layers as the rank before it is skipped: it holds no more micro-batches in flight (1F1B: pp - r;
    # interleaved: 2 (pp - r - 1) + (v - 1) pp + 1; GPipe: m on every rank), so it cannot be worse
    # (docs/model_memory.md "Every pipeline rank (issue 23)"; tests/lm/test_memory_every_rank.py checks the result
    # against every rank). Not under ZB-H1: rank r holds pp - r micro-batches and r deferred weight gradients
    # (memory_chunks.zb_h1_held_bytes), more where those are larger. Not under DualPipe either: rank r holds pp - r
    # micro-batches of its stage and r + 1 of its mirror stage, more than rank r - 1 where the mirror's are larger
    skip = int(row[C_PIPELINE_SCHEDULE]) != SCHED_ZB_H1
    mirrored = mirror_stage(row, 0.0) >= 0.0
    # ranks 1 .. pp - 2 of a model without routed experts all hold the busiest count, no split slot, no MTP
    # (stage_layers), so they are the same without asking stage_layers twice per rank (pp up to the layer count);
    # under DualPipe their mirror stages too, so they hold pp + 1 micro-batches of the same bytes
    uniform = not is_moe(row)
    for k in range(int(row[C_PP])):
        stage = 0.0 if k == 0 else (last if k == 1 else k - 1.0)
        if skip and k >= 3 and (uniform or (not mirrored and _layers_equal(row, stage, stage - 1.0))):
            continue
        w1, g1, o1, a1, b1 = stage_peak(row, stage, dense_layer, moe_layer, working, gather, comm, grad_work, logits,
                                          resident)
        s = bf16_stage_share(row, stage)
        if s > 0.0:         # the recipe's BF16 layers: 16-bit weights and saved GEMM inputs (docs/model.md §11.39)
            w1, g1, o1, a1, b1 = _with_bf16_layers(row, stage, s)
        total = w1 + g1 + o1 + a1 + b1
        if total > best:
            best = total
            best_stage = stage
            w, g, o, a, b = w1, g1, o1, a1, b1
    out[M_WEIGHTS] = w
    out[M_GRADIENTS] = g
    out[M_OPTIMIZER] = o
    out[M_ACTIVATIONS] = a
    out[M_KV_CACHE] = 0.0
    out[M_BUFFERS] = b
    out[M_OVERHEAD] = overhead_bytes(row)
    return best_stage


@njit(error_model='numpy')
def _with_bf16_layers(row, stage, s):
    """The kinds of rank ``stage`` at its peak with share ``s`` of its layers in BF16 (``bf16_stage_share``): at
    every phase of the step (``memory_peak.phase_kinds``) each kind is ``m + s (m16 - m)``,
    ``m16`` the kind at 16-bit GEMMs (``bf16_layers.bf16_row``; the embedding, head and optimizer terms are the
    same in both and cancel); the largest phase is the peak."""
    wide = bf16_row_into(row, stack_vector(N_COLUMNS))     # a frame vector: nothing allocated per configuration
    d, m, res, work, gather, comm, grads, logits = peak_terms(row)
    d16, m16, res16, work16, gather16, comm16, grads16, logits16 = peak_terms(wide)
    best = w0 = g0 = o0 = a0 = b0 = -1.0
    for phase in range(N_PHASES):
        w, g, o, a, b = phase_kinds(row, stage, phase, d, m, work, gather, comm, grads, logits, res)
        w16, g16, o16, a16, b16 = phase_kinds(wide, stage, phase, d16, m16, work16, gather16, comm16, grads16,
                                              logits16, res16)
        w, g, o, a, b = w + s * (w16 - w), g + s * (g16 - g), o + s * (o16 - o), a + s * (a16 - a), b + s * (b16 - b)
        if w + g + o + a + b > best:
            best = w + g + o + a + b
            w0, g0, o0, a0, b0 = w, g, o, a, b
    return w0, g0, o0, a0, b0


@njit(error_model='numpy')
def peak_terms(row):
    """The rank-independent terms of the peak, one tuple for ``memory_row`` and the memory timeline alike
    (fastmodel/lm/memory_timeline.py), so the two cannot drift: (what a dense / a MoE layer keeps per micro-batch,
    less what fine-grained offloading moves to the host; one layer's offloaded bytes back on the GPU; the recompute
    working set; FSDP gathers; communication buffers; activation gradients; logits and loss workspace)."""
    kept = kept_mode(row)
    dense_all = layer_activation_bytes(row, False, kept)
    moe_all = layer_activation_bytes(row, True, kept) if is_moe(row) else 0.0
    off_dense = offloaded_layer_bytes(row, False)
    off_moe = offloaded_layer_bytes(row, True) if is_moe(row) else 0.0
    return (stored_layer_bytes(row, dense_all) - off_dense, stored_layer_bytes(row, moe_all) - off_moe,
            max(off_dense, off_moe), recompute_working_bytes(row, max(dense_all, moe_all)),
            fsdp_gather_buffer_bytes(row), comm_buffer_bytes(row), backward_grad_bytes(row),
            logits_workspace_bytes(row))


@njit(inline="always")
def _layers_equal(row, stage, other):
    """True when pipeline ranks ``stage`` and ``other`` hold the same (dense, MoE, MTP) layers (:func:`stage_layers`)."""
    d1, m1, t1 = stage_layers(row, stage)
    d2, m2, t2 = stage_layers(row, other)
    return d1 == d2 and m1 == m2 and t1 == t2


@njit(parallel=True, error_model='numpy')
def memory_table(params):
    """``(N_MEMORY_KINDS, n)`` bytes per device for every configuration (column) of ``params``."""
    n = params.shape[1]
    result = np.empty((N_MEMORY_KINDS, n))
    for j in prange(n):
        out = result[:, j]
        memory_row(params[:, j], out)
    return result
