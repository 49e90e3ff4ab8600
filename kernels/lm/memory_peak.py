"""Memory of the real-world LM model, part 3: the peak over one training step, per pipeline rank.

A rank's memory changes over the step: states (weights, gradients, optimizer) stay, activations grow with
the micro-batches in flight and are freed by their backward, transient tensors live for one operation. The
peak is the largest total over the moments below (the *phases*), per rank; ``memory_row``
(kernels/lm/memory.py) reports the worst rank's, by kind. Each phase returns the five allocated kinds
``(weights, gradients, optimizer, activations, buffers)``; ``docs/model_memory.md`` ("Peak over the step")
gives the equations and their sources. Compiled with ``error_model='numpy'`` (see kernels/lm/memory.py).

Phases (``P_*``):

- ``P_LOSS``: the last rank has run a micro-batch's forward through the LM head; every micro-batch it holds
  is in flight, the logits and loss workspace are live.
- ``P_BACKWARD``: the backward of the oldest micro-batch in flight starts on its last layer: every
  micro-batch still in flight (on the last rank less that one's head inputs, ``backward_passed_head_bytes``),
  the layer recomputed (recompute working set), the gradients of its activations (``backward_grad_bytes``);
  under FSDP1 the larger of that and the moment its flat gradient is concatenated (``backward_moment``).
- ``P_EMBEDDING``: the first rank ends a micro-batch's backward at the word embedding: the other micro-batches
  in flight (``memory_chunks.held_bytes``), and the embedding's
  weight gradient (``embedding_grad_bytes``).
- ``P_OPTIMIZER``: the optimizer step: no activations, the states and the optimizer's transient copies.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.moe import expert_tp
from fastmodel.kernels.lm.layout import (
    C_ACTIVATION_OFFLOAD, C_COLLECTIVE_BUCKET_BYTES, C_CUDA_GRAPH_MICROBATCH_BUFFERS, C_DENSE_LAYERS, C_FFN,
    C_FSDP_MODULE_WRAP, C_GATED_MLP,
    C_GRAD_REDUCE_BYTES, C_HIDDEN, C_MOE_FFN,
    C_MOE_ACT_INPUT_FP8, C_MOE_SHARED_EXPERTS, C_PP, C_SEQUENCE_PARALLEL, C_SHARDING, C_STEP_GRAD_COPY_BYTES, C_TP,
    C_TP_COMM_OVERLAP, C_UB_COMMUNICATORS, C_VOCAB, RECOMPUTE_MODULE_MLP,
    RECOMPUTE_MODULE_MOE, RECOMPUTE_MODULE_MOE_ACT, RECOMPUTE_MODULE_SHARED_EXPERTS, SHARD_FSDP,
)
from fastmodel.kernels.lm.memory_activations import (
    gemm_input_bytes, head_activation_bytes, micro_batch_tokens, mtp_activation_bytes, module_recomputed,
    replicated_divisor, routed_tokens,
)
from fastmodel.kernels.lm.embedding_fp32 import fp32_embedding_memory
from fastmodel.kernels.lm.memory_chunks import held_bytes
from fastmodel.kernels.lm.memory_fsdp import fsdp_flat_grad_copy_bytes
from fastmodel.kernels.lm.pipeline import microbatches, mirror_stage
from fastmodel.kernels.lm.memory_states import (
    B16, is_moe, gradients_bytes, stage_layers, stage_params, stage_uncast_params, stored_grad_bytes,
    weights_bytes, accumulates_unsharded, holds_stage_gathered,
)
from fastmodel.kernels.lm.memory_optimizer import optimizer_bytes
from fastmodel.kernels.lm.parallel import param_bytes

P_LOSS = 0
P_BACKWARD = 1
P_EMBEDDING = 2
P_OPTIMIZER = 3
N_PHASES = 4
#: the phases in words, index = ``P_*`` (the timeline figure's labels)
PHASE_NAMES = ("loss (last rank)", "backward of a layer", "embedding backward (first rank)", "optimizer step")


@njit(error_model='numpy')
def mlp_grad_bytes(row, width, rows, fc2_input):
    """Gradients of one MLP's activations live during its backward, ``rows`` tokens at ``width`` per device,
    net of the second GEMM's input, which autograd frees before the largest of them is allocated.

    The MLP runs three autograd nodes, fc1, the activation, fc2 (Megatron-Core ``MLP.forward``). fc2's backward
    allocates the activation output's gradient (``2 width``) while its own saved input is still live; the engine
    then releases fc2's saved tensors (``fn.release_variables()`` after each node's backward, PyTorch
    torch/csrc/autograd/engine.cpp ``Engine::evaluate_function``), and only then does the activation's backward
    allocate the first GEMM's output gradient (``2 width`` gated, the fused gate+up output, else ``width``)
    beside it. ``fc2_input``: the bytes per element of fc2's input counted among the stored tensors or the
    recompute working set, 0 where it is recomputed in backward or not counted (``mlp_fc2_input_bytes``).
    The larger of the two moments, over the stored tensors, is the second: ``(2 (c1 + 1) - fc2_input) rows
    width``, ``c1`` = 2 gated, else 1 (the first is ``2 rows width``, never larger since ``fc2_input <= 2``, a
    16-bit or FP8 GEMM input: ``gemm_input_bytes``). PyTorch autograd
    gives each gradient its tensor's shape and dtype; Megatron-Core ``bias_swiglu_impl`` backward returns the
    ``[T, 2 f]`` input gradient."""
    fc1 = 2.0 if row[C_GATED_MLP] > 0 else 1.0
    return (B16 * (fc1 + 1.0) - fc2_input) * rows * width


@njit(error_model='numpy')
def mlp_fc2_input_bytes(row, kind):
    """Bytes per element of the second GEMM's input that the stored tensors (or the recompute working set) hold
    when the backward reaches it, for the dense MLP (``kind`` 0), the routed experts (1), the shared experts (2):
    ``gemm_input_bytes``, or 0 where that input is recomputed in backward and so not counted there
    (``recompute_modules`` ``mlp`` for the dense MLP, ``moe`` for both expert kinds, ``shared_experts`` for the
    shared ones, ``moe_act`` for the routed experts under 16-bit GEMMs; ``moe_act_input_fp8`` with a gated MLP
    for both expert kinds: kernels/lm/memory_activations.py ``moe_activation_bytes``)."""
    if kind == 0:
        return 0.0 if module_recomputed(row, RECOMPUTE_MODULE_MLP) else gemm_input_bytes(row)
    if module_recomputed(row, RECOMPUTE_MODULE_MOE) or (row[C_MOE_ACT_INPUT_FP8] > 0 and row[C_GATED_MLP] > 0):
        return 0.0
    if kind == 2:
        return 0.0 if module_recomputed(row, RECOMPUTE_MODULE_SHARED_EXPERTS) else gemm_input_bytes(row)
    if module_recomputed(row, RECOMPUTE_MODULE_MOE_ACT) and gemm_input_bytes(row) == B16:
        return 0.0
    return gemm_input_bytes(row)


@njit(error_model='numpy')
def backward_grad_bytes(row):
    """The activation gradients of one layer's backward, one micro-batch: the gradient flowing into the layer
    ``2 T h / t_sp`` and the largest block's, the MLP's (``mlp_grad_bytes``): the dense MLP at ``ffn / t``, or
    a MoE layer's routed experts over their ``R`` rows at ``moe_ffn / etp`` plus its shared experts (the
    larger of the two when the model has both kinds of layer)."""
    t_tok = micro_batch_tokens(row)
    incoming = B16 * t_tok * row[C_HIDDEN] / replicated_divisor(row)
    dense = mlp_grad_bytes(row, row[C_FFN] / row[C_TP], t_tok, mlp_fc2_input_bytes(row, 0))
    if not is_moe(row):
        return incoming + dense
    routed = mlp_grad_bytes(row, row[C_MOE_FFN] / expert_tp(row), routed_tokens(row), mlp_fc2_input_bytes(row, 1))
    shared = row[C_MOE_SHARED_EXPERTS] * row[C_MOE_FFN] / row[C_TP]
    experts = routed + mlp_grad_bytes(row, shared, t_tok, mlp_fc2_input_bytes(row, 2))
    if row[C_DENSE_LAYERS] > 0:
        return incoming + max(dense, experts)
    return incoming + experts


@njit(error_model='numpy')
def backward_moment(row, held, working, others, grad_work):
    """(activations, buffers) of a rank at ``P_BACKWARD``: the larger of two moments of a layer's backward.

    The compute moment (every plan): the activations the rank holds ``held``, the recomputed layer's working set
    ``working``, the buffers ``others`` (gathers, communication, CUDA-graph buffers) and the activation gradients
    ``grad_work`` (``backward_grad_bytes``). FSDP1's flat-gradient concatenation (``fsdp_flat_grad_copy_bytes``
    ``F > 0``, docs/model_memory.md "PyTorch FSDP1 on A100 40 GB: measured peaks"): the unit's per-parameter
    gradients and their ``cat`` are live with the gathered unit, ``others + F`` beside what the backward holds then:

    - module-wrapped (``fsdp_module_wrap``): the MLP's second matrix is its own unit and the first the backward
      reaches; its ``cat`` runs right after its GEMM's backward (autograd runs the ready node of the highest
      sequence number first, and the split that made the unit's views was recorded after the activation), so the
      working set is whole but for that GEMM's released input (``mlp_fc2_input_bytes``) and the gradients are the
      incoming ``2 T h / t_sp`` and that GEMM's input gradient ``2 T f / t``: ``incoming + (2 - fc2_in) T f / t``;
    - layer-wrapped: the unit's last gradient is the layer's first weight's, so the ``cat`` ends the layer's
      backward, its working set released: the gradient into the layer and the one out of it, ``2 x 2 T h / t_sp``.
    """
    flat = fsdp_flat_grad_copy_bytes(row)
    if flat <= 0.0:
        return held + working, others + grad_work
    t_tok = micro_batch_tokens(row)
    incoming = B16 * t_tok * row[C_HIDDEN] / replicated_divisor(row)
    if row[C_FSDP_MODULE_WRAP] > 0:
        cat_working = working
        cat_grads = incoming + (B16 - mlp_fc2_input_bytes(row, 0)) * t_tok * row[C_FFN] / row[C_TP]
    else:
        cat_working = 0.0
        cat_grads = 2.0 * incoming
    if cat_working + cat_grads + flat > working + grad_work:
        return held + cat_working, others + cat_grads + flat
    return held + working, others + grad_work


@njit(error_model='numpy')
def embedding_grad_bytes(row):
    """The word embedding's weight gradient at the end of the first rank's backward, ``V h / t`` elements.

    Not sharded (FSDP): the embedding lookup's backward writes a dense 16-bit gradient of the weight's shape
    (PyTorch ``embedding_dense_backward``), which Megatron-Core's gradient hook then adds into the FP32
    ``main_grad`` buffer and frees (``param.main_grad.add_(param.grad); param.grad = None``,
    megatron/core/distributed/distributed_data_parallel.py ``_make_backward_post_hook``): ``2 V h / t`` for
    the length of that addition. FSDP: the embedding is gathered for its backward and its unsharded gradient
    reduce-scattered, as a layer's (``fsdp_gather_buffer_bytes``): ``(c + g) V h / t`` with ``c`` the
    compute dtype and ``g`` = ``grad_reduce_bytes``; it replaces the layer gathers at that moment.
    """
    params = row[C_VOCAB] * row[C_HIDDEN] / row[C_TP]
    if int(row[C_SHARDING]) != SHARD_FSDP:
        return B16 * params
    # FSDP: the gathered weight, unless the stage is held gathered (a state); the gradient: the unsharded one to
    # reduce-scatter, or with one reduction per step (FSDP + PP: the unsharded gradient is a state) the lookup's
    # dense 16-bit one ((w + g) p equals w p + g p bit for bit: w, g are 0, 1, 2 or 4 bytes)
    weight = 0.0 if holds_stage_gathered(row) else param_bytes(row)
    grad = B16 if accumulates_unsharded(row) else row[C_GRAD_REDUCE_BYTES]
    return (weight + grad) * params


@njit(error_model='numpy')
def loss_gather_bytes(row, gather):
    """FSDP weights gathered at the loss, the end of the forward before any layer's backward: the LM head
    alone, ``c V h / t`` (``c`` the compute dtype). No unit is prefetched and no unsharded gradient waits for
    its reduce-scatter yet, and every layer is resharded after its forward: TorchTitan wraps ``[norm,
    output]`` as one unit that is not resharded after forward (so the backward finds it gathered) and every
    block with ``reshard_after_forward`` (pytorch/torchtitan@92ed8b3 torchtitan/models/llama3/infra/
    parallelize.py ``apply_fsdp``); FSDP2's backward prefetch starts in a unit's pre-backward hook, which runs
    once the loss's gradient has reached that unit's output. PyTorch FSDP1 never reshards the root after
    forward (torch/distributed/fsdp/_runtime_utils.py ``_post_forward_reshard``: ``not state._is_root``), where
    an unwrapped head lives; a head wrapped as its own unit is resharded, so this is an upper bound there.
    Not FSDP, or a stage held gathered (``holds_stage_gathered``, the head is in the states): 0; bucketed ZeRO-3
    (``collective_bucket_bytes > 0``): its ``gather`` term, unchanged."""
    if int(row[C_SHARDING]) != SHARD_FSDP or holds_stage_gathered(row):
        return 0.0
    if row[C_COLLECTIVE_BUCKET_BYTES] > 0:
        return gather
    return param_bytes(row) * row[C_VOCAB] * row[C_HIDDEN] / row[C_TP]


@njit(error_model='numpy')
def optimizer_transient_bytes(row, non_expert, expert):
    """Temporaries of the optimizer step. Fused multi-tensor Adam (Apex/Transformer Engine ``FusedAdam`` in
    Megatron-LM and NeMo; ``torch.optim.AdamW(fused=True)``) updates master weights and moments in place: 0.
    A step that first copies the gradients (``step_grad_copy_bytes`` = ``k`` per parameter: MegaBlocks' Megatron-LM
    fork under fp16, ``main_param.grad = model_param.main_grad.float()``, held until the next ``zero_grad``) holds
    ``k (P_ne + P_e) - g P_e``: the routed experts' ``g``-byte ``.grad`` (``stored_grad_bytes``), kept out of the
    contiguous buffer, is set to None as each is copied, so the peak is at the loop's end (docs/model_memory.md)."""
    copy = row[C_STEP_GRAD_COPY_BYTES]
    if copy <= 0.0:
        return 0.0
    return copy * (non_expert + expert) - stored_grad_bytes(row) * expert


@njit(error_model='numpy')
def backward_passed_head_bytes(row, stage):
    """At ``P_BACKWARD`` on the last rank, the micro-batch whose backward has reached its last layer has already
    run the LM head's and the final norm's backward, whose saved inputs autograd then released
    (``fn.release_variables()``, PyTorch torch/csrc/autograd/engine.cpp ``Engine::evaluate_function``): its
    ``head_activation_bytes``, ``(2 + g) T h / t_sp``, are no longer held. 0 on other ranks and under DualPipe
    (a rank holds both directions there, and which one's backward comes first is not modelled: an upper bound)."""
    if stage != row[C_PP] - 1 or mirror_stage(row, stage) >= 0.0:
        return 0.0
    return head_activation_bytes(row) + mtp_activation_bytes(row)   # the MTP modules' backward comes first too


@njit(error_model='numpy')
def userbuffers_on(row):
    """Whether Transformer Engine's Userbuffers carry the TP overlaps: ``tp_comm_overlap`` with ``tp > 1`` on a
    stack with ``ub_communicators`` > 0 (kernels/lm/memory.py ``userbuffer_bytes``, ``comm_buffer_bytes``)."""
    return row[C_UB_COMMUNICATORS] > 0.0 and row[C_TP_COMM_OVERLAP] > 0.0 and row[C_TP] > 1.0


@njit(error_model='numpy')
def head_gather_buffer_bytes(row, stage):
    """Under Userbuffers the TE linears gather into their own buffers (kernels/lm/memory.py ``comm_buffer_bytes``
    drops the TP all-gather ``2 T h``), but the LM head is Megatron's own ``tensor_parallel.ColumnParallelLinear``
    (megatron/core/models/gpt/gpt_model.py ``self.output_layer``), whose SP input all-gather still fills Megatron's
    global buffer (megatron/core/tensor_parallel/layers.py ``LinearWithGradAccumulationAndAsyncCommunication``:
    ``get_global_memory_buffer().get_tensor(dim_size, input.dtype, "mpu")``, forward and again for the weight
    gradient): ``2 T h`` on the rank that holds the head (the last; DualPipe: also the one whose mirror stage is
    the last; every rank at pp = 1), with SP, tp > 1 and Userbuffers on; else 0 (the term is then in ``comm``)."""
    if row[C_SEQUENCE_PARALLEL] <= 0.0 or not userbuffers_on(row):
        return 0.0
    last = row[C_PP] - 1.0
    if stage != last and mirror_stage(row, stage) != last:
        return 0.0
    return B16 * micro_batch_tokens(row) * row[C_HIDDEN]


@njit(error_model='numpy')
def cuda_graph_buffer_bytes(row, stage):
    """Static buffers of per-layer CUDA graphs captured once per (layer, micro-batch) of the step without buffer
    reuse (``cuda_graph_microbatch_buffers``: Transformer Engine ``make_graphed_callables`` with ``_order``, TE < 2.7),
    held by rank ``stage`` at every moment of the step: ``3 m L_r X``, ``X = 2 T h / t_sp`` one BF16 layer output,
    ``m`` micro-batches per step, ``L_r`` the rank's layers. Beyond what the eager run holds, every graph keeps its
    static output (the next layer copies it into its own static input), its static output gradient and its static
    input gradient (TE v1.6 transformer_engine/pytorch/graph.py ``per_callable_static_outputs``,
    ``static_grad_outputs``, ``static_grad_inputs``, none released); its static input is the layer input the eager
    run saves anyway. docs/model_memory.md "CUDA graphs (issue 23)"."""
    if row[C_CUDA_GRAPH_MICROBATCH_BUFFERS] <= 0.0:
        return 0.0
    dense, moe, _ = stage_layers(row, stage)           # decoder layers only: the MTP modules are not graphed
    layer_output = B16 * micro_batch_tokens(row) * row[C_HIDDEN] / replicated_divisor(row)
    return 3.0 * microbatches(row) * (dense + moe) * layer_output


@njit(error_model='numpy')
def _phase(row, stage, phase, state, shared):
    """(weights, gradients, optimizer, activations, buffers) at ``phase`` from the rank's ``state`` (``_stage_state``:
    states ``w, g, o``, optimizer ``transient``, the activations it holds at the loss, at a backward's start and at
    the embedding's backward, ``memory_chunks.held_bytes``) and the rank-independent ``shared`` terms (working set,
    gathers, comm, gradients, logits, and ``resident``: one layer's offloaded bytes, kernels/lm/memory_offload.py,
    back on the GPU once at the loss and the embedding backward, twice in a layer's backward -- that layer and the
    next one reloading)."""
    w, g, o, transient, at_loss, at_backward, at_embedding = state
    working, gather, comm, grad_work, logits, resident = shared
    comm += head_gather_buffer_bytes(row, stage)                # the LM head's TP gather under Userbuffers
    kept = 1.0 - row[C_ACTIVATION_OFFLOAD]
    graphs = cuda_graph_buffer_bytes(row, stage)               # held at every moment, as the states
    if phase == P_OPTIMIZER:
        return w, g, o + transient, 0.0, graphs
    last = row[C_PP] - 1
    if phase == P_LOSS:
        if stage != last and mirror_stage(row, stage) != last:   # DualPipe: rank 0 ends the reverse chain
            return w, g, o, 0.0, graphs
        return w, g, o, at_loss * kept + resident, loss_gather_bytes(row, gather) + comm + logits + graphs
    if phase == P_BACKWARD:
        a, b = backward_moment(row, at_backward * kept + 2.0 * resident, working * kept, gather + comm + graphs, grad_work)
        return w, g, o, a, b
    if stage != 0 and mirror_stage(row, stage) != 0:          # DualPipe: rank pp - 1 starts the reverse chain
        return w, g, o, 0.0, graphs
    held = at_embedding * kept                                 # the micro-batch's chunk 0 is freed
    held += resident if held > 0.0 else 0.0
    if int(row[C_SHARDING]) == SHARD_FSDP:
        return w, g, o, held, comm + embedding_grad_bytes(row) + graphs
    return w, g + embedding_grad_bytes(row), o, held, comm + graphs


@njit(error_model='numpy')
def _stage_state(row, stage, dense_layer, moe_layer):
    """(weights, gradients, optimizer, optimizer transient, activations held at the loss, at a backward's start
    and at the embedding's backward) of rank ``stage``."""
    non_expert, expert = stage_params(row, stage)
    at_loss, at_backward, at_embedding = held_bytes(row, stage, dense_layer, moe_layer,
                                                    backward_passed_head_bytes(row, stage))
    fp32_grads, fp32_optimizer = fp32_embedding_memory(row, stage, mirror_stage(row, stage))   # §11.54
    return (weights_bytes(row, non_expert, expert, stage_uncast_params(row, stage)),
            gradients_bytes(row, non_expert, expert) + fp32_grads,
            optimizer_bytes(row, stage, non_expert, expert) + fp32_optimizer,
            optimizer_transient_bytes(row, non_expert, expert), at_loss, at_backward, at_embedding)


# A one-statement wrapper, inlined: no library of its own (cold compile). Inlined, its IR compiles under the
# caller's flags, so error_model='numpy' here holds only for a direct Python call (its caller,
# memory._with_bf16_layers, is error_model='numpy' too): a division added to this body takes the caller's model.
@njit(inline="always", error_model='numpy')
def phase_kinds(row, stage, phase, dense_layer, moe_layer, working, gather, comm, grad_work, logits, resident=0.0):
    """(weights, gradients, optimizer, activations, buffers) allocated on pipeline rank ``stage`` at ``phase``.

    ``dense_layer``/``moe_layer``: what a layer keeps per micro-batch; ``working``: the recompute working set;
    ``gather``: FSDP gather buffers; ``comm``: communication buffers; ``grad_work``: ``backward_grad_bytes``;
    ``logits``: the last rank's logits and loss workspace; ``resident``: one layer's offloaded activations
    (``offloaded_layer_bytes``, the larger of dense and MoE).
    A phase that does not happen on this rank (the loss off the last rank, the embedding off the first)
    returns the states alone.
    """
    return _phase(row, stage, phase, _stage_state(row, stage, dense_layer, moe_layer),
                  (working, gather, comm, grad_work, logits, resident))


@njit(error_model='numpy')
def stage_peak(row, stage, dense_layer, moe_layer, working, gather, comm, grad_work, logits, resident=0.0):
    """The kinds of rank ``stage`` at its largest phase (``phase_kinds`` of every phase, states computed once)."""
    state = _stage_state(row, stage, dense_layer, moe_layer)
    shared = (working, gather, comm, grad_work, logits, resident)
    best = -1.0
    w0 = g0 = o0 = a0 = b0 = 0.0
    for phase in range(N_PHASES):
        w1, g1, o1, a1, b1 = _phase(row, stage, phase, state, shared)
        total = w1 + g1 + o1 + a1 + b1
        if total > best:
            best = total
            w0, g0, o0, a0, b0 = w1, g1, o1, a1, b1
    return w0, g0, o0, a0, b0
