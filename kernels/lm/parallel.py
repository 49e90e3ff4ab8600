"""Communication of the parallel dimensions around the layer: overlap, FSDP per layer, pipeline sends and the
data-parallel step of decoder-LM training under the real-world model (docs/model.md §11.6-§11.7).

Every collective is a ``kernels.network`` time on its own process group and stream; "exposed" is the part not
hidden behind the compute it overlaps with (:func:`exposed`).
"""

from fastmodel.kernels.roofline import memory_bound_time
from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.dp_window import collectives_per_step, dp_overlap_windows
from fastmodel.kernels.lm.layout import (
    BWD_PREFETCH_NONE, CP_ALLGATHER, CP_ALLTOALL, C_CP_ALGORITHM, C_FSDP_BACKWARD_PREFETCH, C_HEAD_DIM, C_KV_HEADS,
    C_COLLECTIVE_BUCKET_BYTES, C_COMM_SM_SHARE, C_FSDP1_GRAD_PASSES, C_FP8_PARAMS, C_FSDP_COPY_OUT, C_GRAD_ALLREDUCE, C_GRAD_REDUCE_BYTES,
    C_OVERLAP_GRAD_REDUCE, C_OVERLAP_PARAM_GATHER, C_PARAM_FETCH_BW, C_PP, C_REDUCE_EVERY_MICROBATCH, C_SHARDING,
    SHARD_DDP, SHARD_FSDP,
)
from fastmodel.kernels.lm.shape import ACT_BYTES
from fastmodel.kernels.nccl import allgather_time, allreduce_time, alltoall_time, bucketed_allgather_time


@njit
def exposed(row, comm, window):
    """Time a collective adds to the critical path when it overlaps ``window`` seconds of compute: what does
    not fit in the window, plus the compute slowed while they share the GPU (``comm_sm_share`` of its
    throughput goes to the communication kernels during the overlap)."""
    return max(0.0, comm - window) + row[C_COMM_SM_SHARE] * min(comm, window)


#: bytes per element of the unsharded gradient autograd produces for a 16-bit gathered parameter
GRAD_BYTES_16 = 2.0


@njit
def fsdp_copy_out_time(row, layer_params):
    """FSDP2 copy-out of one gathered layer: its parameters read from the all-gather buffer and written to
    their own tensors, memory-bound on the compute stream (0 unless ``fsdp_copy_out``)."""
    if row[C_FSDP_COPY_OUT] <= 0.0:
        return 0.0
    return memory_bound_time(row, 2.0 * layer_params * param_bytes(row))


@njit
def fsdp_reduce_copy_in_time(row, layer_params):
    """FSDP2 reduce-scatter copy-in of one layer's gradients: ``foreach_reduce`` concatenates the unsharded 16-bit
    gradients into the reduce-scatter buffer, cast to the reduce dtype (``chunk_cat`` with a widening cast: read
    2 B, write ``grad_reduce_bytes`` per element), on the compute stream before the reduce-scatter stream waits
    for it (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py); once per micro-batch, as FSDP2
    reduce-scatters every backward. 0 unless ``fsdp_copy_out`` (FSDP2)."""
    if row[C_FSDP_COPY_OUT] <= 0.0:
        return 0.0
    return memory_bound_time(row, layer_params * (GRAD_BYTES_16 + row[C_GRAD_REDUCE_BYTES]))


@njit
def fsdp1_grad_pass_time(row, layer_params):
    """FSDP1's passes over one unit's unsharded 16-bit gradient before its reduce-scatter, on the compute stream
    (docs/model.md §11.26): ``fsdp1_grad_passes`` x (read + write 2 B) per element -- autograd's ``cat`` of the
    views' gradients into the FlatParameter's gradient (its views come from ``torch.split``) and the predivide
    ``div_`` of ``_reduce_grad``. 0 unless ``fsdp1_grad_passes``."""
    return memory_bound_time(row, row[C_FSDP1_GRAD_PASSES] * 2.0 * GRAD_BYTES_16 * layer_params)


@njit
def fsdp_layer_exposed(row, gather, reduce, forward, backward):
    """ZeRO-3/FSDP time one layer adds to the critical path: its forward gather overlaps the forward compute
    and its backward gather and gradient reduce-scatter the backward compute, each only where the framework
    prefetches parameters (``overlap_param_gather``) or overlaps the reduction (``overlap_grad_reduce``);
    otherwise the collective runs between the layers' kernels (DeepSpeed's ``overlap_comm`` was off by default).
    FSDP1 with ``backward_prefetch = None`` (``fsdp_backward_prefetch = none``) hides its forward gathers all the
    same and exposes only the backward's."""
    overlap_gather = row[C_OVERLAP_PARAM_GATHER] > 0.0
    overlap_reduce = row[C_OVERLAP_GRAD_REDUCE] > 0.0
    # FSDP1 without backward prefetch still overlaps its forward gathers: the CPU issues the next unit's all-gather
    # on the unshard stream before the GPU has finished the current unit, and no reduce-scatter is queued ahead of
    # it on the NCCL stream in the forward (docs/model_memory.md "PyTorch FSDP1: prefetch and the rate limiter")
    implicit_forward = int(row[C_FSDP_BACKWARD_PREFETCH]) == BWD_PREFETCH_NONE
    hidden_forward = gather if overlap_gather or implicit_forward else 0.0
    hidden_backward = (gather if overlap_gather else 0.0) + (reduce if overlap_reduce else 0.0)
    serial = (2.0 * gather + reduce) - hidden_forward - hidden_backward
    return serial + exposed(row, hidden_forward, forward) + exposed(row, hidden_backward, backward)


@njit
def hook_fetch_time(row, gather, layer_params, shard_group):
    """One layer's ZeRO-3 parameter gather where the framework fetches each parameter itself
    (``param_fetch_bw`` > 0, DeepSpeed <= 0.4.1: a device-wide synchronize before each parameter's all-gather,
    a zero-filled buffer, a copy out of it and a debug-print norm per parameter, stage3.py and
    partition_parameters.py at v0.3.15): the longer of NCCL's time ``gather`` and the bytes each device
    receives at ``param_fetch_bw``."""
    bw = row[C_PARAM_FETCH_BW]
    if bw <= 0.0 or shard_group <= 1.0:
        return gather
    received = (shard_group - 1.0) / shard_group * layer_params * param_bytes(row)
    return max(gather, received / bw)


@njit
def fsdp_first_layer_exposed(row, gather, reduce, backward):
    """ZeRO-3/FSDP time the stage's first layer adds per micro-batch: its forward gather has no earlier layer's
    compute to hide behind and its gradient reduce-scatter, the last of the backward pass, no later layer's;
    only its backward gather (prefetched during the layer after it) overlaps compute. The other layers are
    :func:`fsdp_layer_exposed`, so each layer's collectives are counted once."""
    back_gather = exposed(row, gather, backward) if row[C_OVERLAP_PARAM_GATHER] > 0.0 else gather
    return gather + back_gather + reduce


@njit
def param_bytes(row):
    """Bytes per gathered weight element: 1 with FP8 weight copies, else 2."""
    return 1.0 if row[C_FP8_PARAMS] > 0.0 else 2.0


@njit
def microbatch_reduce(row, stage_params, shard_group, stride, micro_batches, stage_mb):
    """(seconds, exposed seconds) of the gradient reduce-scatters of the first m - 1 micro-batches under FSDP with
    pipeline stages and ``reduce_every_microbatch`` (Llama 3, docs/model.md §11.20): each micro-batch's gradient
    of the stage, ``grad_reduce_bytes`` per element, reduce-scattered over the shard group while the next
    micro-batch computes (``stage_mb`` seconds); the last one is the once-per-step reduction of
    :func:`data_parallel`. 0 otherwise."""
    if row[C_REDUCE_EVERY_MICROBATCH] <= 0.0 or row[C_SHARDING] != SHARD_FSDP or row[C_PP] <= 1.0 \
            or micro_batches <= 1.0:
        return 0.0, 0.0
    reduce = bucketed_allgather_time(row, stage_params * row[C_GRAD_REDUCE_BYTES], shard_group, stride,
                                     row[C_COLLECTIVE_BUCKET_BYTES])
    return (micro_batches - 1.0) * reduce, (micro_batches - 1.0) * exposed(row, reduce, stage_mb)


@njit
def reduce_tail(row, comm, window, idle):
    """(exposed seconds, idle seconds left) of a gradient reduction that overlaps ``window`` seconds of the rank's
    backward and then runs while the rank waits ``idle`` seconds for the other pipeline ranks to finish theirs (the
    drain, docs/model.md §11.27): the part that outlasts the window runs in the idle time first; the compute slowed
    during the overlap (:func:`exposed`) stays. ``idle = 0``: :func:`exposed`."""
    late = max(0.0, comm - window)
    return max(0.0, late - idle) + row[C_COMM_SM_SHARE] * min(comm, window), max(0.0, idle - late)


@njit
def data_parallel(row, stage_params, last_backward, first_forward, shard_group, d, stride, idle, chunked):
    """(seconds, exposed seconds before the optimizer step, exposed seconds after it, parameters the optimizer steps
    per device, backward window, forward window) of the data-parallel work once per step: gradient reduction
    (allreduce under DDP; reduce-scatter under sharded optimizers and ZeRO-3 with pipelining; the replica allreduce
    of HSDP), each hidden behind the last backward where the framework overlaps it and in the ``idle`` seconds the
    rank then waits for the other pipeline ranks (:func:`reduce_tail`), and the parameter all-gather after the
    step, behind the first forward where overlapped. Per-layer FSDP collectives are in the layer loop.
    ``d`` devices ``stride`` apart hold replicas: the data-parallel group (``dp``, ``tp cp`` apart) for the dense
    parameters, the expert-data-parallel group (``edp``, ``etp ep`` apart) for the routed experts.
    ``last_backward`` and ``first_forward`` are the stage's backward and forward of one micro-batch; with
    ``chunked`` (the dense parameters' call) the collectives timed here may run per model chunk and the windows
    they overlap are ``dp_window.dp_overlap_windows``'s (docs/model.md §11.28). The windows used are returned."""
    sharded = row[C_SHARDING] == SHARD_FSDP
    fsdp = sharded and row[C_PP] <= 1.0
    grad_bytes = row[C_GRAD_REDUCE_BYTES]
    bucket = row[C_COLLECTIVE_BUCKET_BYTES]
    dp_comm = 0.0
    before = 0.0
    after = 0.0
    sharding = row[C_SHARDING]
    if sharded:
        if not fsdp:
            reduce = bucketed_allgather_time(row, stage_params * grad_bytes, shard_group, stride, bucket)
            gather = bucketed_allgather_time(row, stage_params * param_bytes(row), shard_group, stride, bucket)
            dp_comm = reduce + gather
            before, idle = reduce_tail(row, reduce, last_backward, idle)
            after = exposed(row, gather, first_forward)
        replicas = d / shard_group
        if replicas > 1.0:
            replica = allreduce_time(row, stage_params * grad_bytes / shard_group, replicas, stride * shard_group)
            dp_comm += replica
            before += reduce_tail(row, replica, last_backward, idle)[0]
        local_params = stage_params / shard_group
    elif d > 1.0:
        overlap = row[C_OVERLAP_GRAD_REDUCE] > 0.0      # else launched when the rank's backward has ended
        # launched per model chunk (§11.28): v collectives of a chunk's bytes, each with its own latency (§11.65)
        v = collectives_per_step(row, chunked)
        if sharding == SHARD_DDP:
            dp_comm = v * allreduce_time(row, stage_params * grad_bytes / v, d, stride)
            if chunked:
                last_backward, first_forward = dp_overlap_windows(row, dp_comm, 0.0, last_backward, first_forward)
            before = reduce_tail(row, dp_comm, last_backward if overlap else 0.0, idle)[0]
        else:
            # a reduce-scatter, or the whole gradient all-reduced (DeepSpeed ZeRO-1, BF16_Optimizer: grad_allreduce)
            if row[C_GRAD_ALLREDUCE] > 0.0:
                reduce = v * allreduce_time(row, stage_params * grad_bytes / v, d, stride)
            else:
                reduce = v * allgather_time(row, stage_params * grad_bytes / v, d, stride)
            gather = v * allgather_time(row, stage_params * param_bytes(row) / v, d, stride)
            if chunked:
                last_backward, first_forward = dp_overlap_windows(row, reduce, gather, last_backward, first_forward)
            dp_comm = reduce + gather
            before = reduce_tail(row, reduce, last_backward if overlap else 0.0, idle)[0]
            after = exposed(row, gather, first_forward) if row[C_OVERLAP_PARAM_GATHER] > 0.0 else gather
        local_params = stage_params / d if sharding != SHARD_DDP else stage_params
    else:
        local_params = stage_params
    return dp_comm, before, after, local_params, last_backward, first_forward


@njit
def cp_forward_time(row, tokens, a, dqk, dv, t, c):
    """Context-parallel exchange of one layer's forward, ``tokens`` per rank (0 without CP; docs/model.md §11.6):
    DeepSpeed-Ulysses' all-to-alls of Q, K, V by heads and of the output back; Llama 3's all-gather of every
    rank's K and V over the cp group before attention (sec. 3.3.2, §11.20); or ring attention's c - 1 exchanges
    of this rank's K and V blocks with its ring neighbour."""
    if c <= 1.0:
        return 0.0
    if row[C_CP_ALGORITHM] == CP_ALLTOALL:
        heads_width = (a + 2.0 * row[C_KV_HEADS]) * dqk / t + a * dv / t
        return alltoall_time(row, ACT_BYTES * tokens * heads_width, c, t)
    kv_block = 2.0 * ACT_BYTES * tokens * row[C_KV_HEADS] * row[C_HEAD_DIM] / t
    if row[C_CP_ALGORITHM] == CP_ALLGATHER:
        return allgather_time(row, c * kv_block, c, t)
    return (c - 1.0) * allgather_time(row, kv_block * 2.0, 2.0, t)
