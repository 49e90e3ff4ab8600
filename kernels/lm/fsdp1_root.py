"""FSDP1's root unit and the last replica all-reduces of an HSDP backward (docs/model.md §11.63).

An FSDP1 model wrapped per transformer block (``transformer_auto_wrap_policy``) keeps what no block holds -- the
word embedding, the final norm and the output layer -- in the root instance's own flat parameter. Read at
pytorch/pytorch@00ae0bc9 ``torch/distributed/fsdp/_runtime_utils.py`` (the FSDP1 copy docs/model_memory.md reads):

- ``_post_forward_reshard`` frees a unit after its forward only when ``not state._is_root``: the root is gathered
  once, by ``_root_pre_forward``/``_pre_forward_unshard`` before the first block's gather, with no compute of the
  step before it, and is not gathered again in the backward;
- its flat parameter's gradient is whole only once the embedding's backward, the last op of the backward, has run
  (the views come from ``torch.split``, §11.26), so its post-backward hook reduce-scatters it (and, under
  HYBRID_SHARD, all-reduces the shard over the replicas, ``default_hooks.allreduce_hook`` on
  ``_inter_node_state``) after every block's; ``_post_backward_final_callback`` makes the compute stream wait for
  that stream before the optimizer step.

So per micro-batch the root's all-gather and reduce-scatter over the shard group are exposed, and under HSDP the
replica all-reduces of the first block's and the root's gradient shards, issued after the backward's compute has
ended, are too (:func:`parallel.data_parallel` hides the whole replica all-reduce behind the backward, charging
only the ``comm_sm_share`` of it).

With ``fsdp_module_wrap`` the benchmark wraps the embedding, the final norm and the head as units of their own
(mrshenli/ptd_benchmark ``models.py`` ``ShardedGPT``: ``wrap(EmbeddingStem(...))``, ``wrap(nn.LayerNorm(...))``,
``wrap(nn.Linear(...))``; review16 #4): the root holds nothing, the head and norm are ordinary per-unit
collectives hidden like a block's, and the embedding unit, gathered first and reduced last with no compute to
overlap, takes the root's exposed place: the term is priced with the embedding's parameters alone.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.fsdp1_cast import fsdp1_grad_cast_time, fsdp1_shard_cast_time
from fastmodel.kernels.lm.layout import C_COMM_SM_SHARE, C_FSDP_MODULE_WRAP, C_FSDP_VERSION, C_GRAD_REDUCE_BYTES
from fastmodel.kernels.lm.parallel import fsdp1_grad_pass_time, param_bytes
from fastmodel.kernels.lm.passes import per_layer_fsdp
from fastmodel.kernels.nccl import allgather_time, allreduce_time
from fastmodel.registry.lm_fsdp1 import FSDP1


@njit
def fsdp1_root_step(row, dp_comm, before, root_params, layer_params, stage_params, last_backward, shard_group, d,
                    stride, micro_batches, embedding_params):
    """(``dp_comm``, ``before``) with FSDP1's root unit added: per micro-batch its all-gather of ``root_params``
    16-bit weights and its reduce-scatter of their ``grad_reduce_bytes`` gradients over the ``shard_group``
    (``stride`` apart), both exposed; with ``d / shard_group`` > 1 replicas (HSDP), the all-reduces of the first
    block's (``layer_params``) and the root's gradient shards after the backward, one after the other, exposed
    but for what :func:`parallel.data_parallel` already charged of them: the ``comm_sm_share`` of their
    seconds, and the part of the stage's (``stage_params``) replica all-reduce that outlasts the
    ``last_backward`` it overlaps; with FP32 flat parameters the root's two shard casts (:mod:`fsdp1_cast`),
    exposed in ``before``; and per micro-batch the root's own flat-gradient passes (autograd's ``cat``, the
    predivide ``div_``: :func:`parallel.fsdp1_grad_pass_time`, review16 #5), which run after the embedding's
    backward, the last op, with nothing to overlap. A block's passes and casts are memory-bound time of its
    backward; the root's, on the step's exposed path, are reported as ``exposed_dp`` (review16 #6). Unchanged
    unless the stack runs FSDP1 (``fsdp_version`` 1) per layer (``passes.per_layer_fsdp``). With ``fsdp_module_wrap`` the exposed unit is the embedding's
    (``embedding_params``), not the root (module docstring)."""
    if row[C_FSDP_MODULE_WRAP] > 0.0:
        root_params = embedding_params
    if row[C_FSDP_VERSION] != FSDP1 or not per_layer_fsdp(row) or root_params <= 0.0:
        return dp_comm, before
    grad_bytes = row[C_GRAD_REDUCE_BYTES]
    own = cast = 0.0
    passes = micro_batches * fsdp1_grad_pass_time(row, root_params)
    if shard_group > 1.0:
        own = micro_batches * (allgather_time(row, root_params * param_bytes(row), shard_group, stride)
                               + allgather_time(row, root_params * grad_bytes, shard_group, stride))
        # with FP32 flat parameters the root's shard casts (before its gather, after its reduce-scatter), as
        # exposed as the collectives they wait on or follow (0 otherwise; fsdp1_cast)
        cast = micro_batches * (fsdp1_shard_cast_time(row, root_params, shard_group)
                                + fsdp1_grad_cast_time(row, root_params, shard_group))
    tail = 0.0
    replicas = d / shard_group
    if replicas > 1.0:
        group_stride = stride * shard_group
        last = allreduce_time(row, layer_params * grad_bytes / shard_group, replicas, group_stride) \
            + allreduce_time(row, root_params * grad_bytes / shard_group, replicas, group_stride)
        late = max(0.0, allreduce_time(row, stage_params * grad_bytes / shard_group, replicas, group_stride)
                   - last_backward)
        tail = max(0.0, (1.0 - row[C_COMM_SM_SHARE]) * last - late)
    return dp_comm + own, before + own + cast + passes + tail
