"""Megatron-Core's blocking host syncs on the step's critical path and the optimizer step's per-tensor host loops
(docs/model.md §11.64).

After a host sync (``.item()``, ``torch.cuda.synchronize()``, a 0-d tensor read as a ``bool``) the GPU has drained
its queue and waits until the host issues its next kernel: the calls issued before that kernel are GPU idle
time. They run under ``torch.no_grad()`` (the optimizer) or before any long kernel (the loss tail), so each is
priced as a no-grad tensor call: ``HOST_LAUNCH_S`` where it launches a kernel, ``HOST_VIEW_S`` where it only makes
a tensor (``detach``, ``view``, a slice, ``.data``), plus ``HOST_PY_TENSOR_S`` of Python per tensor and loop.
Read at Megatron-LM 23e00ed (the SimuMax B200 records' commit) with TransformerEngine v2.11 (c188b533).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_CP, C_DP, C_EP, C_KV_LORA_RANK, C_LEARNED_POSITIONS, C_MASTER_WEIGHTS, C_MOE_EXPERTS, C_MOE_SHARED_EXPERTS,
    C_P2P_HOST_SYNC, C_PP, C_Q_LORA_RANK, C_RMS_NORM, C_SHARDING, C_STEP_GRAD_CHECK, C_STEP_HOST_LOOPS,
    C_STEP_MASTER_COPY, C_TIED_EMBEDDINGS, C_VP, SHARD_ZERO1,
)
from fastmodel.kernels.lm.memory_states import is_moe, stage_layers
from fastmodel.kernels.lm.moe import expert_dp
from fastmodel.kernels.lm.optimizer_step import optimizer_bytes_per_param
from fastmodel.kernels.roofline import memory_bound_time

#: host seconds of a no-grad tensor call that launches a CUDA kernel [A]: 8 µs per ``add`` of 512 x 512 submitted
#: back to back without autograd on an A100 host, as flagos-ai/Torch-FL PR #27 ("cuda_sub") was cited, a fork's PR the
#: search tools could not find again (review17 F8); a checkable floor: pytorch/pytorch #122029 (jansel, 2024-03-16),
#: overheads.py's eager call 4.6 µs without autograd and without a CUDA launch. Sensitivity 5 / 20 µs (§11.64)
HOST_LAUNCH_S = 8e-6
#: host seconds of a no-grad tensor call that launches nothing (``detach``, ``view``, a slice, ``.data``): about
#: 2 µs for a 1-element ``x * x`` without autograd, half of it Python's argument parsing (pytorch/pytorch issue
#: #41383, the maintainer's reply); an upper bound, as it includes a tiny CPU kernel [F]
HOST_VIEW_S = 2e-6
#: Python seconds per tensor and loop besides its tensor calls (attribute and dict look-ups, ``isinstance``, list
#: appends: 10-30 statements a tensor in the loops below) [A]; sensitivity in docs/model.md §11.64
HOST_PY_TENSOR_S = 1e-6

#: tensor calls per parameter tensor in the optimizer step's loops after the gradient norm's ``.item()``
#: (Megatron-LM 23e00ed megatron/core/optimizer/clip_grads.py line 133): the clip's list, a ``detach`` each
#: (clip_grads.py 159-169); TE FusedAdam's lists, ``p.data`` and ``p_grad.data`` of an FP32 main shard
#: (TransformerEngine v2.11 optimizers/fused_adam.py 538-597; its third ``.data`` a tensor, ``p_grad.data.is_sparse``
#: at line 556, and the ``get_unscaled_state`` calls are not counted: inside the [A] ``HOST_PY_TENSOR_S``, review17 F9);
#: the copy of each main shard into the parameter buffer,
#: ``view(-1)``, a slice and ``.data`` beside one ``copy_`` launch (distrib_optimizer.py 2127-2147)
CLIP_VIEWS = 1.0
ADAM_LIST_VIEWS = 2.0
COPY_VIEWS = 3.0
COPY_LAUNCHES = 1.0

#: calls the host issues after each blocking exchange (p2p_communication.py 395-398, ``torch.cuda.synchronize()``)
#: before the GPU runs again: the next pass's first kernel; its Python (``get_batch``, module prologues) is not
#: counted, so this is a lower bound
P2P_SYNC_LAUNCHES = 1.0
#: the loss's NaN and Inf checks, each a 0-d tensor read as a bool (pretrain_gpt.py 250-264; rerun_state_machine.py
#: line 558, ``--rerun-mode validate_results`` by default, arguments.py 2051): after the first, ``isinf`` (1 launch);
#: after the second, loss_func's tail (pretrain_gpt.py 279-280: ``sum``, two ``clone``, ``to``, ``cat``; two ``detach``
#: and two ``view``) and the loss scaling (schedules.py 239-240, two in-place divisions): 8 launches, 4 views
LOSS_CHECK_LAUNCHES = 8.0
LOSS_CHECK_VIEWS = 4.0
#: each bucket's NaN and Inf checks of its norm before the data-parallel reduction (param_and_grad_buffer.py 182-200):
#: ``isinf`` after the first, the next bucket's norm or the 1/dp scaling (345-346) after the second; one bucket per
#: buffer (dense, expert) when ``overlap_grad_reduce`` is off (distributed_data_parallel.py 67-68)
BUCKET_CHECK_LAUNCHES = 2.0


@njit
def norm_tensors(row):
    """Parameter tensors of one norm: an RMSNorm's weight (1), a LayerNorm's weight and bias (2)."""
    return 1.0 if row[C_RMS_NORM] > 0.0 else 2.0


@njit
def layer_tensors(row, moe):
    """(dense, expert) parameter tensors of one transformer layer under Megatron-Core's TE layer specs: norms (a
    LayerNorm's bias a second tensor) and linear weights, no linear biases (``--disable-bias-linear``) [A].
    Attention: the input norm fused into QKV, QKV and the output projection (3); MLA with query and KV latent norms
    fused into their up-projections, input norm, q down/up, kv down/up, output (8; 6 with a full-rank query). MLP:
    the norm fused into fc1, fc1, fc2 (3). MoE: its norm, the router, the shared experts' fc1 and fc2, and fc1 and fc2
    of each local expert (TE ``GroupedLinear`` registers one ``weight{i}`` per expert, module/grouped_linear.py
    670-671; SequentialMLP one MLP per expert)."""
    ln = norm_tensors(row)
    if row[C_KV_LORA_RANK] > 0.0:
        attention = (3.0 * ln + 5.0) if row[C_Q_LORA_RANK] > 0.0 else (2.0 * ln + 4.0)
    else:
        attention = ln + 2.0
    if not moe:
        return attention + ln + 2.0, 0.0
    shared = 2.0 if row[C_MOE_SHARED_EXPERTS] > 0.0 else 0.0
    return attention + ln + 1.0 + shared, 2.0 * row[C_MOE_EXPERTS] / row[C_EP]


@njit
def rank_tensors(row, stage):
    """(dense, expert) parameter tensors pipeline rank ``stage`` holds: its layers (``stage_layers``), the word
    embedding (and a learned position table) on the first, the final norm and the output layer on the last (a
    tied head at pp 1 is the embedding itself), each MTP module's layer, three norms, ``eh_proj`` and the
    embedding's copy on the last."""
    p = row[C_PP]
    dense, moe, mtp = stage_layers(row, stage)
    d_dense, _ = layer_tensors(row, False)
    d_moe, e_moe = layer_tensors(row, True)
    n_dense = dense * d_dense + moe * d_moe
    n_expert = moe * e_moe
    ln = norm_tensors(row)
    if mtp > 0.0:
        d_mtp, e_mtp = (d_moe, e_moe) if is_moe(row) else (d_dense, 0.0)
        n_dense += mtp * (d_mtp + 3.0 * ln + 1.0) + 1.0
        n_expert += mtp * e_mtp
    if stage <= 0.0:
        n_dense += 1.0 + (1.0 if row[C_LEARNED_POSITIONS] > 0.0 else 0.0)
    if stage >= p - 1.0:
        n_dense += ln + (1.0 if row[C_TIED_EMBEDDINGS] <= 0.0 or p > 1.0 else 0.0)
    return n_dense, n_expert


@njit
def optimizer_tensors(tensors, shard):
    """Tensors of a buffer of ``tensors`` parameters whose range meets one rank's 1/``shard`` slice of it (the
    distributed optimizer's main shards): ``n / s + 1 - 1/s`` on average, a parameter straddling the slice's edge
    counted once; ``n`` unsharded."""
    if tensors <= 0.0:
        return 0.0
    return tensors / shard + 1.0 - 1.0 / shard


@njit
def optimizer_host_s(row, holds_last, local_params):
    """Seconds the optimizer step lasts beyond its kernels' GPU time on a rank (the last pipeline stage's where
    ``holds_last``, else the first's) that updates ``local_params``: after the norm's ``.item()`` the GPU idles
    while the host builds the clip's and the Adam kernels' lists, ``n (c_clip + c_list)``; the copy loop then runs
    behind the Adam kernels and is exposed only beyond them, ``max(0, n c_copy - G)``, G the Adam and copy traffic
    (docs/model.md §11.64). ``n``: the rank's dense tensors over its dp x cp slice and its expert tensors over the
    expert-data-parallel slice (``optimizer_tensors``; unsharded under plain DDP). 0 unless ``step_host_loops``."""
    if row[C_STEP_HOST_LOOPS] <= 0.0:
        return 0.0
    n_dense, n_expert = rank_tensors(row, row[C_PP] - 1.0 if holds_last else 0.0)
    sharded = row[C_SHARDING] >= SHARD_ZERO1
    n = optimizer_tensors(n_dense, row[C_DP] * row[C_CP] if sharded else 1.0) \
        + optimizer_tensors(n_expert, expert_dp(row) if sharded else 1.0)
    lists = (CLIP_VIEWS + ADAM_LIST_VIEWS) * HOST_VIEW_S + 2.0 * HOST_PY_TENSOR_S
    copy = COPY_VIEWS * HOST_VIEW_S + COPY_LAUNCHES * HOST_LAUNCH_S + HOST_PY_TENSOR_S
    master = 4.0 * row[C_STEP_MASTER_COPY] if row[C_MASTER_WEIGHTS] > 0.0 else 0.0
    gpu = memory_bound_time(row, local_params * (optimizer_bytes_per_param(row) + master))
    return n * lists + max(0.0, n * copy - gpu)


@njit
def exchange_sync_s(row, micro_batches):
    """GPU idle seconds per step after the pipeline exchanges' ``synchronize()`` (p2p_communication.py 395-398;
    ``p2p_host_sync`` 1 at vp 1, 2 at any vp: batched p2p, arguments.py 548, 1165, 2348-2350): ``m v + 2 p v - 3``
    on the critical path through an end rank (``p v - 1`` forward and as many backward crossings of the chunk
    chain, the busiest end rank's other ``m v - 1`` receives; 1F1B's ``m + 2p - 3``), each the next pass's first
    launch: a layer operator (docs/model.md §11.64)."""
    p = row[C_PP]
    v = row[C_VP]
    sync = row[C_P2P_HOST_SYNC]
    if p > 1.0 and (sync >= 2.0 or (sync > 0.0 and v <= 1.0)):
        return (micro_batches * v + 2.0 * p * v - 3.0) * P2P_SYNC_LAUNCHES * HOST_LAUNCH_S
    return 0.0


@njit
def check_sync_s(row, micro_batches, last_busiest):
    """GPU idle seconds per step after the loss's and the buckets' NaN and Inf checks (``step_grad_check``, the
    same ``--check-for-nan-in-loss-and-grad``): the loss checks of every micro-batch where the last rank is the
    busiest (or pp 1), the buckets' once; the calls after them (loss_func's tail and scaling, ``isinf``, the next
    bucket's norm) are no layer operator (docs/model.md §11.64)."""
    if row[C_STEP_GRAD_CHECK] <= 0.0:
        return 0.0
    wait = 0.0
    if last_busiest or row[C_PP] <= 1.0:
        wait += micro_batches * (LOSS_CHECK_LAUNCHES * HOST_LAUNCH_S + LOSS_CHECK_VIEWS * HOST_VIEW_S)
    buffers = 2.0 if is_moe(row) else 1.0
    return wait + buffers * BUCKET_CHECK_LAUNCHES * HOST_LAUNCH_S


@njit
def host_sync_s(row, micro_batches, last_busiest):
    """GPU idle seconds per step after Megatron-Core's blocking syncs in the pipeline and the loss on a GPU-bound
    stage: :func:`exchange_sync_s` + :func:`check_sync_s` (docs/model.md §11.64)."""
    return exchange_sync_s(row, micro_batches) + check_sync_s(row, micro_batches, last_busiest)


@njit
def host_wait_s(row, micro_batches, last_busiest, issue_s):
    """The step's host wait: ``issue_s``, the seconds the busiest stage's micro-batches last beyond their GPU time
    while the host issues their layers (``micro_batches x host_step.host_wait_per_microbatch``, §11.7), and the
    syncs' idle. After an exchange the GPU waits for the next pass's first launch, a layer operator already in the
    issue time: a micro-batch lasts max(GPU + exchange idle, issue), so the two give their longer; the checks'
    calls are no layer operator and add (docs/model.md §11.64, review17 F6: continuous and non-decreasing in the
    issue time, where dropping every sync on a host-bound stage made a slower host up to 0.36 ms faster)."""
    return max(issue_s, exchange_sync_s(row, micro_batches)) + check_sync_s(row, micro_batches, last_busiest)
