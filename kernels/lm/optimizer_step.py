"""HBM traffic of the optimizer step of decoder-LM training (docs/model.md §11.7, "Optimizer step"): the optimizer
kernel's bytes per local parameter and the stack's passes around it. ``kernels/lm/step.py`` times them."""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_CP,
    C_DP,
    C_MASTER_WEIGHTS,
    C_OPTIMIZER,
    C_STEP_GRAD_CHECK,
    C_STEP_GRAD_PASSES,
    C_STEP_GRAD_PRESCALE,
    C_STEP_MASTER_COPY,
    C_STEP_ZERO_GRAD,
    OPT_ADAM,
    OPT_MUON,
    OPT_SGD,
    OPT_SGD_NO_MOMENTUM,
)
from fastmodel.kernels.lm.memory_optimizer import moment_bytes
from fastmodel.kernels.lm.memory_states import stored_grad_bytes


@njit
def optimizer_bytes_per_param(row):
    """HBM traffic of the optimizer step per local parameter: FP32 master and states read and written,
    gradient read, 16-bit weight copy written (Adam: 4+4 master, 8+8 moments; 4+4 with BF16 moments,
    ``moment_bytes``). A 16-bit model (``master_weights = 0``) reads and writes its 16-bit parameters instead
    (2+2), writes no copy, and its states are 16-bit (AdamW: 2 + 2 + 8 + 2 = 14 bytes with 16-bit gradients)."""
    master = row[C_MASTER_WEIGHTS] > 0
    grad = stored_grad_bytes(row)
    params = 8.0 + 2.0 if master else 2.0 + 2.0
    # FP32 moments: 1; BF16 moments or a 16-bit model's (torch.optim zeros_like(p)): 0.5
    states = moment_bytes(row) / 4.0 if master else 0.5
    if row[C_OPTIMIZER] == OPT_ADAM or row[C_OPTIMIZER] == OPT_MUON:  # Muon: its AdamW part (muon_step)
        return params + 16.0 * states + grad
    if row[C_OPTIMIZER] == OPT_SGD:
        return params + 8.0 * states + grad
    if row[C_OPTIMIZER] == OPT_SGD_NO_MOMENTUM:
        return params + grad
    return params + 2.0 + grad  # Adafactor: factored second moment, no first moment


@njit
def optimizer_step_bytes(row, local_params, held_params):
    """HBM bytes of one optimizer step (docs/model.md §11.7, optimizer step): the optimizer kernel's traffic over
    the ``local_params`` it updates (:func:`optimizer_bytes_per_param`) and the stack's passes around it --
    ``step_grad_passes`` reads of the local gradient shard (the gradient norm), the FP32 master shard read again
    by a separate copy into the 16-bit parameters (``step_master_copy``, with master weights), and the passes
    over all ``held_params`` whose gradients the rank holds: zeroed (``step_zero_grad``, a write), and before
    the data-parallel reduction read for the NaN check of its norm (``step_grad_check``) and, with dp x cp > 1,
    scaled by 1 / (dp cp) in place (``step_grad_prescale``, a read and a write)."""
    grad = stored_grad_bytes(row)
    per_local = optimizer_bytes_per_param(row) + row[C_STEP_GRAD_PASSES] * grad
    if row[C_MASTER_WEIGHTS] > 0:
        per_local += 4.0 * row[C_STEP_MASTER_COPY]
    held_passes = row[C_STEP_ZERO_GRAD] + row[C_STEP_GRAD_CHECK]
    if row[C_DP] * row[C_CP] > 1.0:
        held_passes += 2.0 * row[C_STEP_GRAD_PRESCALE]
    return local_params * per_local + held_passes * grad * held_params
