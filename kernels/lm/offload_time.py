"""Time of Megatron-Core's fine-grained activation offloading: the host-link copies not hidden by compute.

The bytes each layer moves are ``offloaded_layer_bytes`` (kernels/lm/memory_offload.py). Megatron-LM@0823c73
megatron/core/pipeline_parallel/fine_grained_activation_offload.py copies them on two side streams of their own
(``_d2h_stream``, ``_h2d_stream``, lines 429-430): at a module's end the D2H stream waits for the compute stream
and copies (``on_group_commit_forward``, lines 1122-1129; the compute stream goes on, it waits on no D2H event
unless ``fine_grained_offloading_max_inflight_offloads`` is set, lines 1019-1026); at the end of a group's backward
the H2D stream reloads the next offloaded group (``on_group_start_backward``, ``bulk_reload``, lines 1131-1146,
1192-1202), which first waits for that group's D2H copy (line 1045), and the compute stream waits for the reload
before that group's backward (``on_group_commit_backward``, lines 1148-1168). Since the last group of each module
name stays on the GPU (``post_warmup_callback``, lines 566-603), each reload is issued one layer's backward ahead
of its use. Per layer and micro-batch, with ``c`` the copy of its offloaded bytes over the host link (full duplex:
D2H and H2D each have a direction of their own), the compute stream loses

    max(0, c - forward) + max(0, c - backward)

(docs/model.md §11.21): a D2H stream slower than the forward leaves a backlog the reloads wait for; a reload slower
than one layer's backward stalls the next layer's backward.
"""

from fastmodel.kernels.jit import njit, stack_vector
from fastmodel.kernels.lm.layout import C_HOST_LINK_BW, C_HOST_LINK_EFF, C_LAYERS, C_MTP_LAYERS, C_OFFLOAD_MODULES
from fastmodel.kernels.lm.shape import layer_mix, mtp_layer_is_moe
from fastmodel.kernels.lm.memory_states import is_moe
from fastmodel.kernels.lm.memory_offload import offloaded_layer_bytes
from fastmodel.kernels.lm.passes import (
    A_BACKWARD_INPUT, A_BACKWARD_WEIGHT, A_EXPOSED_B, A_EXPOSED_F, A_FORWARD, A_RECOMPUTE, N_WORK, layer_passes_of,
)


@njit
def host_copy_s(row, nbytes):
    """Seconds to copy ``nbytes`` one way over the GPU's host link: ``nbytes / (host_link_bw x host_link_eff)``."""
    return nbytes / (row[C_HOST_LINK_BW] * row[C_HOST_LINK_EFF])


@njit
def exposed_copy_s(copy, forward, backward):
    """Seconds a layer's offload copies of ``copy`` seconds each way add to the compute stream, given the layer's
    ``forward`` and ``backward`` critical-path seconds: ``max(0, copy - forward) + max(0, copy - backward)``."""
    return max(0.0, copy - forward) + max(0.0, copy - backward)


@njit(inline="always")
def forward_backward(work):
    """(forward, backward) critical-path seconds of the layer in ``work[A_*]``: the forward with its exposed
    communication; the backward for inputs and weights, the recompute and its exposed communication."""
    return (work[A_FORWARD] + work[A_EXPOSED_F],
            work[A_BACKWARD_INPUT] + work[A_BACKWARD_WEIGHT] + work[A_RECOMPUTE] + work[A_EXPOSED_B])


@njit
def offload_layer_s(row, work, moe_only):
    """Exposed copy seconds of the average layer, one micro-batch (0 without ``offload_modules``): dense and MoE
    layers each with their own bytes and passes, weighted by the layer mix (``moe_only``: the MoE layers alone,
    the busiest rank of ``last_rank_all_moe``). Overwrites ``work[A_*]``. The step takes the same seconds from the
    passes it has already taken (:func:`offload_layer_from`)."""
    if int(row[C_OFFLOAD_MODULES]) == 0:
        return 0.0
    moe_f = moe_b = avg_f = avg_b = 0.0
    if is_moe(row):
        layer_passes_of(row, work, True)
        moe_f, moe_b = forward_backward(work)
    if not moe_only:
        layer_passes_of(row, work, False)
        avg_f, avg_b = forward_backward(work)
    return _offload_mix(row, moe_only, avg_f, avg_b, moe_f, moe_b)


@njit
def offload_layer_from(row, moe_only, avg_f, avg_b, last):
    """:func:`offload_layer_s` bit for bit, from passes ``step.busiest_stage_into`` has taken: ``avg_f``, ``avg_b``
    the mix's average layer's (:func:`forward_backward` of ``passes.layer_passes``, the body of
    ``layer_passes_of(row, work, False)``), and where ``moe_only`` the MoE layer's in ``last`` (the last rank's
    passes, ``rank_lead.last_rank_layer_time``: ``layer_passes_of(row, work, True)`` or its kept-costs twin, bit for
    bit). Only a MoE model's MoE layer outside ``moe_only`` is passed again, in a frame vector: no layer pass twice
    a configuration where the step already has it, nothing allocated (docs/performance.md, 2026-12-07)."""
    if int(row[C_OFFLOAD_MODULES]) == 0:
        return 0.0
    moe_f = moe_b = 0.0
    if is_moe(row):
        if moe_only:
            moe_f, moe_b = forward_backward(last)
        else:
            moe = stack_vector(N_WORK)
            layer_passes_of(row, moe, True)
            moe_f, moe_b = forward_backward(moe)
    return _offload_mix(row, moe_only, avg_f, avg_b, moe_f, moe_b)


@njit
def _offload_mix(row, moe_only, avg_f, avg_b, moe_f, moe_b):
    """The exposed copy seconds of :func:`offload_layer_s` from the average layer's and the MoE layer's (forward,
    backward) seconds (the average's unread where ``moe_only`` or without dense layers)."""
    moe_layers = moe = 0.0
    if is_moe(row):
        counts = layer_mix(row)
        moe_layers = counts[2] + counts[3]
        moe = exposed_copy_s(host_copy_s(row, offloaded_layer_bytes(row, True)), moe_f, moe_b)
    dense_layers = row[C_LAYERS] - moe_layers
    if moe_only or dense_layers <= 0.0:
        return moe
    # the average layer's passes are the mix's weighted sum (passes.layer_passes_of): the dense layers' passes
    # are what the MoE layers leave of it
    dense_f = (row[C_LAYERS] * avg_f - moe_layers * moe_f) / dense_layers if moe_layers > 0.0 else avg_f
    dense_b = (row[C_LAYERS] * avg_b - moe_layers * moe_b) / dense_layers if moe_layers > 0.0 else avg_b
    dense = exposed_copy_s(host_copy_s(row, offloaded_layer_bytes(row, False)), dense_f, dense_b)
    return (dense_layers * dense + moe_layers * moe) / row[C_LAYERS]


@njit
def mtp_offload_s(row, d_mtp):
    """Exposed copy seconds of one MTP module's layer, one micro-batch (0 without ``offload_modules`` or MTP): the
    bytes of its kind (``shape.mtp_layer_is_moe``; a ``TransformerLayer`` offloads as the decoder's do) against its
    own passes, ``d_mtp`` (``mtp_breakdown.mtp_layer_into``), not the average layer's (docs/model.md §11.21)."""
    if int(row[C_OFFLOAD_MODULES]) == 0 or row[C_MTP_LAYERS] <= 0.0:
        return 0.0
    forward, backward = forward_backward(d_mtp)
    return exposed_copy_s(host_copy_s(row, offloaded_layer_bytes(row, mtp_layer_is_moe(row))), forward, backward)
