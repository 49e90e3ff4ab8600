"""The Muon optimizer's step: Newton-Schulz GEMMs, update passes, the update gather and its momentum
(docs/model.md §11.7 "Muon", docs/model_memory.md "Optimizer states").

Muon (KellerJordan/Muon@00ba60d ``muon.py``) updates each 2-D weight matrix of the hidden layers with SGD-momentum
(Nesterov) whose update is orthogonalized by a quintic Newton-Schulz iteration run in bfloat16
(``zeropower_via_newtonschulz5``, coefficients a, b, c = 3.4445, -4.7750, 2.0315); every other parameter (the
embedding, the LM head, gains and biases) is stepped by AdamW (the class docstring; ``MuonWithAuxAdam``). For an
m x n update with m <= n (the iteration transposes a tall one) one iteration costs

    muon_ns_gram_square = 1 (muon.py):         A = X X^T (m m n), B = b A + c A A (m m m), X = a X + B X (m m n)
                                               -> 2 (2 m^2 n + m^3) FLOPs
    muon_ns_gram_square = 0 (records 2024-10): A = X X^T, B = A X, X = a X + b B + c A B  -> 3 x 2 m^2 n FLOPs

each GEMM at the device's efficiency for its shape (``roofline.gemm_time``). The layer's matrices are those of
``kernels/lm/shape.py`` on the local TP shard: Q (h x a d), K and V (h x kv d), O (a d x h) and the MLP's 2 or 3
h x ffn (MoE layers: the shared experts and the local routed experts, h x f_e each). A fused QKV matrix is split
before the iteration in the 2024-10-10 record (``g.split(g.size(1))``), so the separate shapes are what runs.
"""

import math

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_CP, C_DP, C_FFN, C_HEAD_DIM, C_HEADS, C_HIDDEN, C_KV_HEADS, C_MASTER_WEIGHTS, C_MLA, C_MOE_EXPERTS, C_MOE_FFN,
    C_MOE_SHARED_EXPERTS, C_EP, C_MUON_DISTRIBUTED, C_MUON_NS_GRAM_SQUARE, C_MUON_NS_STEPS, C_TP,
)
from fastmodel.kernels.lm.shape import attention_params, expert_tp, mlp_matrices
from fastmodel.kernels.nccl import allgather_time
from fastmodel.kernels.roofline import gemm_time, memory_bound_time

#: bytes of a bfloat16 element (the Newton-Schulz iterate and its products)
NS_BYTES = 2.0


@njit
def ns_iteration_flops(row, rows, cols):
    """FLOPs of one Newton-Schulz iteration on a ``rows x cols`` update (m = min, n = max of the two)."""
    m = min(rows, cols)
    n = max(rows, cols)
    if row[C_MUON_NS_GRAM_SQUARE] > 0.0:
        return 4.0 * m * m * n + 2.0 * m * m * m
    return 6.0 * m * m * n


@njit
def ns_flops(row, rows, cols):
    """FLOPs of orthogonalizing one ``rows x cols`` update: ``muon_ns_steps`` iterations."""
    return row[C_MUON_NS_STEPS] * ns_iteration_flops(row, rows, cols)


@njit
def ns_time(row, rows, cols, count):
    """Seconds of orthogonalizing ``count`` updates of ``rows x cols``: the iterations' GEMMs (``gemm_time`` of
    (m x k) @ (k x n)) and their element-wise combinations streamed in bfloat16 -- muon.py: B = b A + c A A reads
    two m x m and writes one, X = a X + B X reads two m x n and writes one; the records' a X + b B + c (A B) reads
    three m x n and writes one -- plus the bfloat16 cast and the norm before the loop (read the update, write and
    read the bfloat16 copy)."""
    if count <= 0.0 or rows <= 0.0 or cols <= 0.0:
        return 0.0
    m = min(rows, cols)
    n = max(rows, cols)
    gram = gemm_time(row, m, m, n, 0.0)                       # A = X X^T
    if row[C_MUON_NS_GRAM_SQUARE] > 0.0:
        products = gemm_time(row, m, m, m, 0.0) + gemm_time(row, m, n, m, 0.0)
        elementwise = NS_BYTES * (3.0 * m * m + 3.0 * m * n)
    else:
        products = 2.0 * gemm_time(row, m, n, m, 0.0)
        elementwise = NS_BYTES * 4.0 * m * n
    iteration = gram + products + memory_bound_time(row, elementwise)
    prologue = memory_bound_time(row, (muon_state_bytes(row) + 2.0 * NS_BYTES) * m * n)
    return count * (row[C_MUON_NS_STEPS] * iteration + prologue)


@njit
def muon_state_bytes(row):
    """Bytes of a Muon momentum element: ``torch.zeros_like(p)`` (muon.py ``state["momentum_buffer"]``), the
    parameter's dtype -- FP32 beside mixed precision (the records keep FP32 parameters under bf16 autocast), 2 in a
    16-bit model."""
    return 4.0 if row[C_MASTER_WEIGHTS] > 0.0 else 2.0


@njit
def _attention_shapes(row):
    """(rows, q_cols, kv_cols, equivalent square count): the attention's Muon matrices on the local TP shard.
    MLA's projections are priced as ``attention_params / h^2`` square h x h matrices (an approximation)."""
    h = row[C_HIDDEN]
    tp = row[C_TP]
    if row[C_MLA] > 0.0:
        return h, 0.0, 0.0, attention_params(row) / (h * h * tp)
    return h, row[C_HEADS] * row[C_HEAD_DIM] / tp, row[C_KV_HEADS] * row[C_HEAD_DIM] / tp, 0.0


@njit
def _layer_groups(row, moe_layer):
    """One layer's Muon matrices on the local shard as (cols, count) groups of ``h x cols`` matrices: Q and O, K and
    V, MLA's squares, the MLP's (or the local routed experts') and the shared experts'; an empty group has 0 cols
    or 0 count."""
    h, q, kv, square = _attention_shapes(row)
    n_mlp = mlp_matrices(row)
    if moe_layer:
        shared = row[C_MOE_SHARED_EXPERTS]
        mlp = (row[C_MOE_FFN] / expert_tp(row, 0.0), n_mlp * row[C_MOE_EXPERTS] / row[C_EP])
        extra = (shared * row[C_MOE_FFN] / row[C_TP], n_mlp if shared > 0.0 else 0.0)
    else:
        mlp = (row[C_FFN] / row[C_TP], n_mlp)
        extra = (0.0, 0.0)
    return ((q, 2.0), (kv, 2.0), (h, square), mlp, extra)


@njit
def layer_matrices(row, moe_layer):
    """(matrices, parameters) of one layer that Muon steps, on the local shard."""
    h = row[C_HIDDEN]
    count = 0.0
    params = 0.0
    for cols, n in _layer_groups(row, moe_layer):
        if cols > 0.0:
            count += n
            params += n * h * cols
    return count, params


@njit
def layer_ns_time(row, moe_layer):
    """Seconds of orthogonalizing every Muon matrix of one layer on one rank (nothing distributed)."""
    h = row[C_HIDDEN]
    t = 0.0
    for cols, n in _layer_groups(row, moe_layer):
        t += ns_time(row, h, cols, n)
    return t


@njit
def mtp_projection(row):
    """(rows, cols) of an MTP module's ``eh_proj`` on the local shard: column-parallel 2h -> h, a ``2h x h/t``
    matrix (Megatron-Core ``MultiTokenPredictionLayer``; docs/model.md §11.4 "MTP module"). A hidden 2-D weight,
    neither embedding nor head: Muon steps it."""
    return 2.0 * row[C_HIDDEN], row[C_HIDDEN] / row[C_TP]


@njit
def stage_matrices(row, dense, moe, projections=0.0):
    """(matrices, parameters) Muon steps on one device of a stage with ``dense`` and ``moe`` layers (an MTP
    module's layer counted as its kind, ``shape.mtp_stage_layers``) and ``projections`` MTP ``eh_proj``
    matrices (:func:`mtp_projection`)."""
    dense_count, dense_params = layer_matrices(row, False)
    moe_count, moe_params = layer_matrices(row, True)
    rows, cols = mtp_projection(row)
    return (dense * dense_count + moe * moe_count + projections,
            dense * dense_params + moe * moe_params + projections * rows * cols)


@njit
def owned_share(row, matrices):
    """Share of a stage's Muon matrices one rank orthogonalizes: ceil(N / dp) / N dealt round-robin over the
    data-parallel ranks (muon.py ``params[base_i + rank]``; the records ``i % world_size == rank``), 1 when every
    rank does them all (``muon_distributed = 0``). The busiest rank's share; exact when the matrices' shapes
    repeat evenly over the ranks (the records: 72 matrices, 6 per layer, over 8 ranks: 9 each, 3 of each 24)."""
    group = row[C_DP] * row[C_CP]
    if row[C_MUON_DISTRIBUTED] <= 0.0 or group <= 1.0 or matrices <= 0.0:
        return 1.0
    return math.ceil(matrices / group - 1e-9) / matrices


#: HBM bytes per element of a Muon update on its owner, with s the momentum's and g the gradient's bytes and w the
#: parameter's (muon.py ``muon_update`` and ``Muon.step``): momentum.lerp_(grad) 2 s + g, grad.lerp_(momentum)
#: 2 g + s, p.mul_(1 - lr wd) 2 w, p.add_(update) 2 w + 2 (the bfloat16 update)
@njit
def owned_update_bytes(row, grad_bytes):
    """HBM bytes of one owned Muon element's update passes (see above): 3 s + 3 g + 4 w + 2."""
    s = muon_state_bytes(row)      # the parameter's dtype too: w = s
    return 3.0 * s + 3.0 * grad_bytes + 4.0 * s + 2.0


@njit
def muon_step(row, dense, moe, grad_bytes, projections=0.0):
    """(seconds outside the memory-bound optimizer pass, HBM bytes of the Muon update passes, Muon parameters on
    the device) of one Muon step on a device holding ``dense`` and ``moe`` layers: the owned share of the
    Newton-Schulz time, and the all-gather of the updated matrices over the data-parallel group (parameter
    bytes; the DistributedMuon record's bf16 all-reduce moves the same 4 (d-1)/d bytes per element).
    ``projections``: the stage's MTP ``eh_proj`` matrices (:func:`mtp_projection`), beside the layers'."""
    matrices, params = stage_matrices(row, dense, moe, projections)
    share = owned_share(row, matrices)
    rows, cols = mtp_projection(row)
    ns = share * (dense * layer_ns_time(row, False) + moe * layer_ns_time(row, True)
                  + ns_time(row, rows, cols, projections))
    gather = 0.0
    if share < 1.0:
        gather = allgather_time(row, muon_state_bytes(row) * params, row[C_DP] * row[C_CP], row[C_TP])
    return ns + gather, share * params * owned_update_bytes(row, grad_bytes), params
