"""Memory of the real-world LM model, part 2b: what recompute keeps of a layer's activations and what recomputing
it holds again (docs/model_memory.md): a fully recomputed layer's checkpoint (:func:`checkpoint_bytes`), what one
layer stores per micro-batch under the recompute mode (:func:`stored_layer_bytes`, :func:`kept_mode`) and the
working memory of a layer recomputed in backward (:func:`recompute_working_bytes`). The activations themselves are
``kernels/lm/memory_activations.py``; ``kernels/lm/memory.py`` assembles the peak. Moved out of
``memory_activations.py`` when it neared the 450-line limit; no change to any function. Compiled with
``error_model='numpy'`` (see kernels/lm/memory.py).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_FUSED_KERNELS, C_HIDDEN, C_RECOMPUTE, C_RECOMPUTE_FRACTION, C_RMS_NORM, C_SELECTIVE_POLICY, RECOMPUTE_FULL,
    RECOMPUTE_NONE, RECOMPUTE_PARTIAL_LAYERS, RECOMPUTE_SELECTIVE,
)
from fastmodel.kernels.lm.memory_states import B16, is_moe
from fastmodel.kernels.lm.memory_activations import layer_activation_bytes, micro_batch_tokens, replicated_divisor


@njit(error_model='numpy')
def checkpoint_bytes(row):
    """A fully recomputed layer keeps only its input: ``2 T h`` (``/t`` with SP) (Korthikanti Sec. 4.3:
    ``2 s b h L`` for full recompute)."""
    return B16 * micro_batch_tokens(row) * row[C_HIDDEN] / replicated_divisor(row)


@njit(error_model='numpy')
def kept_mode(row):
    """The recompute mode a layer that is not fully recomputed stores under: selective or none."""
    return RECOMPUTE_SELECTIVE if int(row[C_RECOMPUTE]) == RECOMPUTE_SELECTIVE else RECOMPUTE_NONE


@njit(error_model='numpy')
def stored_layer_bytes(row, layer_bytes):
    """What one layer keeps per micro-batch, given its ``layer_activation_bytes`` under ``kept_mode``.

    none / selective: all of them; full: ``checkpoint_bytes``; partial layers: a share
    ``recompute_fraction`` of layers keeps the checkpoint, the others everything (Megatron
    ``--recompute-num-layers``, the remaining layers are not recomputed).
    """
    mode = int(row[C_RECOMPUTE])
    if mode == RECOMPUTE_FULL:
        return checkpoint_bytes(row)
    if mode == RECOMPUTE_PARTIAL_LAYERS:
        r = row[C_RECOMPUTE_FRACTION]
        return r * checkpoint_bytes(row) + (1.0 - r) * layer_bytes
    return layer_bytes


@njit(error_model='numpy')
def recomputed_input_bytes(row):
    """The part of a recomputed layer's activations that is its checkpoint: the recomputed forward starts from
    the saved layer input (torch.utils.checkpoint ``detach_variable(ctx.saved_tensors)``, Megatron's
    ``CheckpointFunction`` alike: a detached view of the same storage), and the layer's first norm saves that
    tensor, so it is one allocation, already counted as ``checkpoint_bytes``. An eager RMSNorm
    (``fused_kernels = 0``, ``rms_norm``) saves an FP32 copy instead (``eager_elementwise_bytes``): 0."""
    if row[C_FUSED_KERNELS] <= 0 and row[C_RMS_NORM] > 0:
        return 0.0
    return checkpoint_bytes(row)


@njit(error_model='numpy')
def recompute_working_bytes(row, largest_layer_bytes):
    """While a checkpointed layer is recomputed in backward, its full activations for one micro-batch are
    live again (Chen et al. 2016, Sec. 3): under full or partial recompute one layer of
    ``layer_activation_bytes`` (the larger of dense and MoE, ``largest_layer_bytes``, computed without
    recompute) less its input, which is the checkpoint (``recomputed_input_bytes``); under op-level selective
    checkpointing a whole layer, computed here."""
    mode = int(row[C_RECOMPUTE])
    if mode == RECOMPUTE_FULL or (mode == RECOMPUTE_PARTIAL_LAYERS and row[C_RECOMPUTE_FRACTION] > 0):
        return largest_layer_bytes - recomputed_input_bytes(row)
    if mode == RECOMPUTE_SELECTIVE and row[C_SELECTIVE_POLICY] > 0:
        dense = layer_activation_bytes(row, False, RECOMPUTE_NONE)
        if is_moe(row):
            return max(dense, layer_activation_bytes(row, True, RECOMPUTE_NONE))
        return dense
    return 0.0
