"""Memory of the real-world LM model, part 1b: the optimizer states a device holds (docs/model_memory.md
"Optimizer states"): bytes per parameter by optimizer, moments and master copy (:func:`optimizer_bytes_per_param`,
:func:`moment_bytes`), Adafactor's factored second moment, Muon's momentum on the owning rank, and the states of a
pipeline rank sharded as ZeRO / FSDP shard them (:func:`optimizer_bytes`). The parameters, weights and gradients
are ``kernels/lm/memory_states.py``; the optimizer step's HBM traffic is ``kernels/lm/optimizer_step.py``. Moved out
of ``memory_states.py`` when it neared the 450-line limit; no change to any function. Compiled with
``error_model='numpy'`` (see kernels/lm/memory.py).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.pipeline import mirror_stage
from fastmodel.kernels.lm.shape import expert_tp, mtp_stage_layers
from fastmodel.kernels.lm.layout import (
    C_EP, C_FFN, C_GATED_MLP, C_HEADS, C_HEAD_DIM, C_HIDDEN, C_MOE_EXPERTS, C_MOE_FFN, C_MASTER_WEIGHTS, C_OPTIMIZER,
    C_OPTIMIZER_MOMENTS, C_SHARDING, C_TP, OPT_ADAFACTOR, OPT_SGD, OPT_MUON, OPT_SGD_NO_MOMENTUM, SHARD_FSDP,
    SHARD_ZERO1,
)
from fastmodel.kernels.lm.muon import muon_state_bytes, owned_share, stage_matrices
from fastmodel.kernels.lm.memory_states import B16, B32, shard_group, sharded_params, stage_layers


@njit(error_model='numpy')
def moment_bytes(row):
    """Bytes per element of the optimizer's moments beside an FP32 master copy: 4 (FP32, ZeRO paper Sec. 3.1),
    2 under ``optimizer_moments = bf16`` (DeepSeek-V3 report sec. 3.3.3: "we adopt the BF16 data format instead
    of FP32 to track the first and second moments in the AdamW optimizer"; master weights and gradients stay
    FP32)."""
    return B16 if row[C_OPTIMIZER_MOMENTS] > 0 else B32


@njit(error_model='numpy')
def optimizer_bytes_per_param(row):
    """Optimizer bytes per parameter, FP32 master copy included.

    Adam(W): 4 (master) + 4 (m) + 4 (v) = 12 (ZeRO paper, Sec. 3.1, K = 12). SGD with momentum: 4 + 4 = 8.
    SGD without momentum (``torch.optim.SGD`` at its default ``momentum=0`` keeps no ``momentum_buffer``): 4,
    the master alone. Adafactor without momentum (Shazeer & Stern 2018; beta1 = 0 default): 4 (master) plus
    the factored second moment (``adafactor_factored_bytes``). BF16 moments (``moment_bytes``): Adam 4 + 2 + 2
    = 8. Under FSDP the sharded FP32 parameters are the master copy, so 4 bytes less; a 16-bit model (``master_weights = 0``) has no master copy at all and its
    states are 16-bit like its parameters (Adam 2 + 2, SGD with momentum 2).
    """
    opt = int(row[C_OPTIMIZER])
    moments = 2.0
    if opt == OPT_SGD:
        moments = 1.0
    elif opt == OPT_ADAFACTOR or opt == OPT_SGD_NO_MOMENTUM:
        moments = 0.0
    if row[C_MASTER_WEIGHTS] <= 0:
        # PyTorch optimizers create their states like the parameter (torch/optim/adamw.py ``_init_group``:
        # ``exp_avg = torch.zeros_like(p)``), so a 16-bit model keeps 16-bit moments
        return moments * B16
    states = moments * moment_bytes(row)
    if int(row[C_SHARDING]) == SHARD_FSDP:
        return states
    return states + B32


@njit(error_model='numpy')
def adafactor_factored_bytes(row, stage):
    """Adafactor's factored second moment: one FP32 row and one column vector per weight matrix.

    ``4 * (rows + cols)`` per matrix (Shazeer & Stern 2018, Sec. 3); per layer the attention's four
    ``h x a*d`` matrices and the MLP's two or three ``h x ffn`` matrices, on the local TP shard. An MTP module's
    layer counts as its kind (``shape.mtp_stage_layers``), plus its ``eh_proj`` ``2h x h/t`` (docs/model_memory.md
    "MTP module").
    """
    if int(row[C_OPTIMIZER]) != OPT_ADAFACTOR:
        return 0.0
    h = row[C_HIDDEN]
    tp = row[C_TP]
    dense, moe, mtp = stage_layers(row, stage)
    dense, moe = mtp_stage_layers(row, dense, moe, mtp)
    n_mlp = 3.0 if row[C_GATED_MLP] > 0 else 2.0
    attn = 4.0 * (h + row[C_HEADS] * row[C_HEAD_DIM] / tp)
    dense_mlp = n_mlp * (h + row[C_FFN] / tp)
    expert_mlp = row[C_MOE_EXPERTS] / row[C_EP] * n_mlp * (h + row[C_MOE_FFN] / expert_tp(row, 0.0))
    return B32 * ((dense + moe) * attn + dense * dense_mlp + moe * expert_mlp + mtp * (2.0 * h + h / tp))


@njit(error_model='numpy')
def optimizer_bytes(row, stage, non_expert, expert):
    """Optimizer states: ``optimizer_bytes_per_param`` per parameter (+ Adafactor's factors).

    Replicated under DDP; sharded by the shard group under ZeRO-1 / distributed optimizer, ZeRO-2 and
    FSDP/HSDP (ZeRO paper, Sec. 5.1; Megatron-LM ``docs/distrib_optimizer.md``: ``12/d`` bytes per parameter).
    Under DualPipe the rank's mirror stage (``pipeline.mirror_stage``) keeps its factors and momenta too.
    """
    per = optimizer_bytes_per_param(row)
    factored = adafactor_factored_bytes(row, stage) + muon_momentum_bytes(row, stage)
    mirror = mirror_stage(row, stage)
    if mirror >= 0.0:
        factored += adafactor_factored_bytes(row, mirror) + muon_momentum_bytes(row, mirror)
    if int(row[C_SHARDING]) >= SHARD_ZERO1:
        return per * sharded_params(row, non_expert, expert) + factored / shard_group(row)
    return per * (non_expert + expert) + factored


@njit(error_model='numpy')
def muon_momentum_bytes(row, stage):
    """Muon (``optimizer = muon``): the layers' matrices keep one momentum buffer instead of AdamW's two moments,
    and only on the rank that orthogonalizes them (kernels/lm/muon.py ``owned_share``; muon.py creates
    ``state["momentum_buffer"]`` on the owner alone): ``P_muon x (s x share - 2 x moment)`` beside the AdamW
    ``optimizer_bytes_per_param`` every parameter is counted at (s: the momentum's bytes, the parameter's dtype).
    Under ZeRO/FSDP the difference is divided by the shard group like the rest. 0 for other optimizers."""
    if int(row[C_OPTIMIZER]) != OPT_MUON:
        return 0.0
    dense, moe, mtp = stage_layers(row, stage)
    dense, moe = mtp_stage_layers(row, dense, moe, mtp)
    matrices, params = stage_matrices(row, dense, moe, mtp)       # + the MTP modules' eh_proj matrices
    moments = 2.0 * (moment_bytes(row) if row[C_MASTER_WEIGHTS] > 0 else B16)
    state = muon_state_bytes(row) * owned_share(row, matrices)
    if int(row[C_SHARDING]) >= SHARD_ZERO1:
        state *= shard_group(row)       # the owner's buffer is whole; the caller divides by the shard group
    return params * (state - moments)
