"""FSDP1's mixed-precision casts of the local shards (docs/model.md §11.63, second note; docs/model_memory.md
"PyTorch FSDP1: the FP32 gradient shard and the shard casts").

FSDP1 under ``MixedPrecision(param_dtype=bf16)`` keeps each flat parameter sharded in its own dtype (FP32, the
master) and computes in 16 bits. Read at PyTorch v2.3.0 = pytorch/pytorch@97ff6cfd (the tag's commit, the
release wheel's ``torch.version.git_version``; torch/distributed/fsdp/, line numbers of that release):

- before every all-gather, ``_unshard`` (``_runtime_utils.py`` lines 271-300) runs ``FlatParamHandle.pre_unshard``
  on the pre-unshard stream, which the unshard stream then waits for; ``pre_unshard`` calls
  ``_use_low_precision_shard`` (``_flat_param.py`` lines 1234-1283), whose ``_mp_shard.copy_(_local_shard)`` casts
  the FP32 shard into a 16-bit buffer: per gather, ``4`` B read and ``c`` B written per element of the shard
  (``c`` the gathered dtype's bytes, ``parallel.param_bytes``). A unit still gathered (``needs_unshard`` false) is
  not cast again, so one cast per all-gather, the backward's re-gather and the recompute's included;
- after each reduce-scatter (and, under HYBRID_SHARD, the replica all-reduce), ``_accumulate_sharded_grad``
  (lines 889-911) calls ``_cast_grad_to_param_dtype`` (lines 1013-1040), ``sharded_grad.data.to(param.dtype)``,
  when the reduce dtype is not the parameter's: ``g`` B read, ``4`` B written per element of the shard, once per
  unit and micro-batch.

Both are memory-bound kernels of one shard (``U / s`` elements, ``s`` the shard group), on FSDP1's side streams,
priced like the other FSDP1 passes (§11.26): in the pass that issues them.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import C_GRAD_REDUCE_BYTES
from fastmodel.kernels.lm.parallel import param_bytes
from fastmodel.kernels.lm.shape import FP32_BYTES, fsdp1_fp32_shards
from fastmodel.kernels.roofline import memory_bound_time


@njit
def fsdp1_shard_cast_time(row, unit_params, shard_group):
    """Seconds of one all-gather's cast of a unit's FP32 shard to the gathered dtype:
    ``(4 + c) x unit_params / shard_group`` bytes, memory-bound; 0 unless :func:`shape.fsdp1_fp32_shards` and
    ``shard_group`` > 1."""
    if not fsdp1_fp32_shards(row) or shard_group <= 1.0:
        return 0.0
    return memory_bound_time(row, unit_params / shard_group * (FP32_BYTES + param_bytes(row)))


@njit
def fsdp1_grad_cast_time(row, unit_params, shard_group):
    """Seconds of one reduce-scatter's cast of a unit's reduced gradient shard to FP32:
    ``(g + 4) x unit_params / shard_group`` bytes (``g = grad_reduce_bytes``), memory-bound; 0 when the reduce
    dtype is FP32 already (no cast), and unless :func:`shape.fsdp1_fp32_shards` and ``shard_group`` > 1."""
    grad = row[C_GRAD_REDUCE_BYTES]
    if not fsdp1_fp32_shards(row) or shard_group <= 1.0 or grad == FP32_BYTES:
        return 0.0
    return memory_bound_time(row, unit_params / shard_group * (grad + FP32_BYTES))
