"""NeMo's FP32 gradients of the embeddings under Apex's distributed Adam (plan column ``embedding_fp32_grads``;
docs/model.md §11.54).

NeMo marks the word embedding (its tied copy on the last stage) and a learned position table
``_with_fp32_optimizer`` so that their gradients are reduced in FP32. Two implementations ran:

1. ``allreduce``, NeMo r1.20 (bd0b818, the MLPerf GPT-3 v3.1 image): ``MegatronDistributedFusedAdam``
   (``nemo/core/optim/distributed_adam.py``) keeps them out of Apex's ``DistributedFusedAdam`` buckets with a
   ``torch.optim.AdamW`` of their own and an FP32 main gradient. Once a step the gradient norm (``grad_norm`` ->
   ``_fp32_optim_grad_sync``) all-reduces that whole FP32 gradient over the data-parallel group and reads it for
   its norm (``torch.linalg.norm``), before the norm's all-reduce every rank waits for; after Apex's step has
   launched the first chunk's parameter all-gather, the compute stream runs the AdamW (foreach: 8 passes, 80 B an
   element), the gradient's scale by the clip coefficient (8 B), the copy into the 16-bit parameter (6 B) and, at
   the next step's start, the FP32 gradient's zeroing (4 B): ``EMBEDDING_STEP_BYTES`` = 98 B an element, hidden
   behind the part of that all-gather the first forward waits for.
2. ``sharded``, NeMo 2.0 (b2eccd27, the v4.0 image): ``init_params_bucket`` gives them FP32 buckets of the
   distributed optimizer (``grad_sync_dtype=torch.float32``) in the group of the parameters that are not the
   layers' (``configure_optimizers``: ``buckets[-1]``, the first chunk's), so their FP32 reduce-scatter and their
   16-bit all-gather run with the first chunk's, which nothing hides (§11.28), and their step is the sharded one.

Either way the tied all-reduce between the first and the last stage (``allreduce_first_last_embeddings``) moves
the FP32 main gradient (4 B an element), and the embedding leaves the stage's BF16 reduce-scatter, all-gather and
sharded step, which ``parallel.data_parallel`` spreads over the model chunks (``step._data_parallel_step``
subtracts it from the stage's parameters).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_CP, C_DP, C_EMBEDDING_FP32_GRADS, C_GRAD_REDUCE_BYTES, C_HIDDEN, C_LEARNED_POSITIONS, C_OVERLAP_PARAM_GATHER,
    C_PP, C_SEQ_LEN, C_SHARDING, C_TIED_EMBEDDINGS, C_TP, C_VOCAB, EMB32_ALLREDUCE, EMB32_SHARDED, SHARD_ZERO1,
)
from fastmodel.kernels.lm.memory_optimizer import optimizer_bytes_per_param
from fastmodel.kernels.lm.memory_states import gradients_bytes, sharded_params
from fastmodel.kernels.lm.dp_window import collectives_per_step
from fastmodel.kernels.lm.parallel import param_bytes
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.kernels.roofline import memory_bound_time

#: bytes of an FP32 main-gradient element
FP32_GRAD_BYTES = 4.0
#: bytes per element of ``allreduce``'s own ``torch.optim.AdamW`` over FP32 main parameters, on every DP rank:
#: master 4 + ``exp_avg`` 4 + ``exp_avg_sq`` 4 (torch/optim/adamw.py ``_init_group``: ``zeros_like`` the FP32 param)
FP32_ADAMW_STATE_BYTES = 12.0
#: bytes of a gathered embedding element: the 16-bit ``param_sync_dtype`` (the embeddings are no FP8 tensors)
EMBEDDING_GATHER_BYTES = 2.0
#: the norm's read of the FP32 gradient (torch.linalg.norm over main_param.grad)
EMBEDDING_NORM_BYTES = 4.0
#: HBM bytes per element of the FP32 AdamW's step after the norm (module docstring; torch
#: ``_multi_tensor_adamw``: weight decay mul 8, lerp 12, mul 8, addcmul 12, sqrt 8, div 8, add 8, addcdiv 16 = 80;
#: ``main_param.grad *= _grad_scale`` 8; ``model_param.copy_(main_param)`` 4 + 2; ``zero_grad`` 4)
EMBEDDING_STEP_BYTES = 80.0 + 8.0 + 6.0 + 4.0
#: HBM bytes per element of Apex's sharded step of an FP32 bucket (``multi_tensor_fused_adam`` with
#: ``store_params``: FP32 master 4 + 4, moments 8 + 8, FP32 gradient 4, 16-bit parameter written 2)
SHARDED_STEP_BYTES = 30.0


@njit
def shared_grad_bytes(row):
    """Bytes per element of the tied embedding's all-reduce between the first and the last stage: the FP32 main
    gradient under ``embedding_fp32_grads``, else ``grad_reduce_bytes``."""
    return FP32_GRAD_BYTES if row[C_EMBEDDING_FP32_GRADS] > 0.0 else row[C_GRAD_REDUCE_BYTES]


@njit
def fp32_embedding_params(row, last_only, embedding_params, tied_copy):
    """(parameters that leave the stage's buffer, parameters with FP32 gradients) on a rank: 0, 0 without
    ``embedding_fp32_grads``. ``last_only``: the rank holds the last stage and not the first (its tied copy of the
    word embedding, ``tied_copy``; an untied output layer is not an embedding); else the word embedding
    (``embedding_params``, with a learned position table of ``s x h``, whole on every TP rank, since §11.56 among
    the step's stage parameters too: both leave)."""
    if row[C_EMBEDDING_FP32_GRADS] <= 0.0:
        return 0.0, 0.0
    if last_only:
        return tied_copy, tied_copy
    return embedding_params, embedding_params


@njit
def fp32_embedding_step(row, fp32_params, stage_params, first_forward):
    """(seconds of communication, exposed seconds before the gradient norm's all-reduce, exposed seconds of
    communication and of the optimizer's kernels after it) of the ``fp32_params`` with FP32 gradients (module
    docstring). ``allreduce``: their
    data-parallel all-reduce and the norm's read, then their AdamW on the compute stream beside the distributed
    optimizer's all-gather of the ``stage_params`` left to it, of which the part beyond the ``first_forward``
    window is exposed anyway (without ``overlap_param_gather`` Apex gathers inside its step, before the AdamW: none
    hides it). ``sharded``: their FP32 reduce-scatter and 16-bit all-gather with the first chunk's, and their
    sharded step."""
    code = row[C_EMBEDDING_FP32_GRADS]
    if fp32_params <= 0.0 or (code != EMB32_ALLREDUCE and code != EMB32_SHARDED):
        return 0.0, 0.0, 0.0, 0.0
    d = row[C_DP]
    stride = row[C_TP] * row[C_CP]
    if code == EMB32_SHARDED:
        reduce = allgather_time(row, FP32_GRAD_BYTES * fp32_params, d, stride)
        gather = allgather_time(row, EMBEDDING_GATHER_BYTES * fp32_params, d, stride)
        return reduce + gather, reduce, gather, memory_bound_time(row, SHARDED_STEP_BYTES * fp32_params / d)
    comm = allreduce_time(row, FP32_GRAD_BYTES * fp32_params, d, stride)
    before = comm + memory_bound_time(row, EMBEDDING_NORM_BYTES * fp32_params)
    late = 0.0
    if row[C_OVERLAP_PARAM_GATHER] > 0.0:
        v = collectives_per_step(row, True)        # the gather as parallel.data_parallel times it (§11.65)
        late = max(0.0, v * allgather_time(row, stage_params * param_bytes(row) / v, d, stride) - first_forward)
    return comm, before, 0.0, max(0.0, memory_bound_time(row, EMBEDDING_STEP_BYTES * fp32_params) - late)


@njit
def _model_stage_fp32_params(row, stage):
    """Parameters with FP32 gradients that model stage ``stage`` holds (as ``memory_states.model_stage_params``
    counts them): the word embedding and a learned position table on the first, the tied copy of the word
    embedding on the last (``pp > 1``)."""
    embedding = row[C_VOCAB] * row[C_HIDDEN] / row[C_TP]
    params = 0.0
    if stage == 0.0:
        params += embedding + row[C_LEARNED_POSITIONS] * row[C_SEQ_LEN] * row[C_HIDDEN]
    if stage == row[C_PP] - 1.0 and row[C_PP] > 1.0 and row[C_TIED_EMBEDDINGS] > 0.0:
        params += embedding
    return params


@njit
def fp32_embedding_memory(row, stage, mirror):
    """(gradient bytes, optimizer bytes) that ``embedding_fp32_grads`` adds on a rank holding model stage ``stage``
    (and ``mirror``, DualPipe's, if >= 0): 0, 0 without the field. With ``E`` those stages' FP32 parameters
    (:func:`_model_stage_fp32_params`) and ``G(E)``, ``O(E)`` what the stage's gradient and optimizer kinds
    already charge for them (``memory_states.gradients_bytes``; ``optimizer_bytes_per_param`` over the shard):
    ``allreduce`` (NeMo r1.20 ``MegatronDistributedFusedAdam``, distributed_adam.py lines 77-116, 218-236: out of
    Apex's buckets, an FP32 main gradient and a ``torch.optim.AdamW`` of their own, unsharded on every DP rank):
    ``4 E - G(E)`` and ``12 E - O(E)``; ``sharded`` (NeMo 2.0 ``init_params_bucket`` with
    ``grad_sync_dtype=torch.float32``: FP32 buckets of Apex's contiguous gradient buffer, the sharded state
    unchanged): ``4 E - G(E)`` and 0. docs/model_memory.md "Gradients" (FP32 embedding gradients)."""
    code = int(row[C_EMBEDDING_FP32_GRADS])
    if code != EMB32_ALLREDUCE and code != EMB32_SHARDED:
        return 0.0, 0.0
    e = _model_stage_fp32_params(row, stage)
    if mirror >= 0.0:
        e += _model_stage_fp32_params(row, mirror)
    if e <= 0.0:
        return 0.0, 0.0
    grads = FP32_GRAD_BYTES * e - gradients_bytes(row, e, 0.0)
    if code == EMB32_SHARDED:
        return grads, 0.0
    held = sharded_params(row, e, 0.0) if int(row[C_SHARDING]) >= SHARD_ZERO1 else e
    return grads, FP32_ADAMW_STATE_BYTES * e - optimizer_bytes_per_param(row) * held
