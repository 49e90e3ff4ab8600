"""Host-bound pieces of the step (docs/model.md §11.7 "Host issue time", §11.17.1): the CPU seconds to issue a
layer and a micro-batch, the wait they add where the host is slower than the GPU, the bubble with host-bound
stages, and the evaluation a run interleaves with its training steps."""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layer import recompute_share
from fastmodel.kernels.lm.layout import (
    C_CUDA_GRAPHS,
    C_EVAL_INTERVAL,
    C_EVAL_ITERS,
    C_HOST_LAYER_S,
    C_HOST_OP_S,
    C_HOST_OPS_LAYER,
    C_LAYERS,
    C_MOE_EXPERTS,
    C_MOE_PAD_TO_CAPACITY,
    C_MOE_SYNC_ISSUE_OPS,
    C_MTP_LAYERS,
    C_PP,
    C_VP,
)
from fastmodel.kernels.lm.bubble_last import credit_applies, embedding_warmup, last_rank_bubble_credit
from fastmodel.kernels.lm.pipeline import pipeline_bubble
from fastmodel.kernels.lm.pipeline_2021 import sync_exchanges


#: host calls of one graphed layer pass (TransformerEngine d0067d0 transformer_engine/pytorch/graph.py, class
#: ``Graphed``, lines 1031-1068 forward, 1072-1118 backward): the copy of the caller's tensor into the static input
#: (the incoming gradient into the static output gradient), the graph replay, the ``detach`` of the static output
#: (input gradient); each charged ``host_op_s`` as an eager operator [A] (docs/model.md §11.37)
GRAPH_REPLAY_OPS = 3.0


@njit
def issued_host_ops(row):
    """Operators the host issues per layer forward under the plan's CUDA graphs (docs/model.md §11.37): the
    stack's ``host_ops_layer`` where nothing is captured -- no graphs, a stack whose MoE layer blocks the host on
    its token counts (``moe_sync_issue_ops > 0``: a stream capture cannot synchronize), or a dropless MoE layer
    under either scope (Megatron-LM d98e8a6 moe/README.md "CUDA Graph": without capacity and padding the dynamic
    shapes make MoE layers uncapturable) --, else the replay's
    ``min(host_ops_layer, GRAPH_REPLAY_OPS)`` under per-layer graphs and 0 under a full-iteration graph (one
    replay per step)."""
    ops = row[C_HOST_OPS_LAYER]
    if row[C_CUDA_GRAPHS] <= 0.0 or ops <= 0.0:
        return ops
    moe = row[C_MOE_EXPERTS] > 0.0
    if moe and row[C_MOE_SYNC_ISSUE_OPS] > 0.0:
        return ops
    if moe and row[C_MOE_PAD_TO_CAPACITY] <= 0.0:
        return ops
    if row[C_CUDA_GRAPHS] >= 2.0:
        return 0.0
    return min(ops, GRAPH_REPLAY_OPS)


@njit
def host_layer_forward_s(row):
    """Host (CPU) seconds to issue one transformer layer's forward pass: ``host_layer_s`` where set (a
    calibration), else the stack's operators per layer forward times its seconds per operator
    (``host_ops_layer x host_op_s``, docs/model.md "Host issue time"; under CUDA graphs ``issued_host_ops``,
    §11.37). The backward pass issues about twice the
    operators at about half the cost each (the autograd engine runs them from C++, without the Python frame),
    and a recomputed forward is a forward: each takes this time too."""
    if row[C_HOST_LAYER_S] > 0.0:
        return row[C_HOST_LAYER_S]
    return issued_host_ops(row) * row[C_HOST_OP_S]


@njit
def host_microbatch_s(row, layers):
    """Host seconds to issue one micro-batch of ``layers`` layers: forward, backward and, under full
    recompute, the recomputed forward, each :func:`host_layer_forward_s` per layer."""
    full, _ = recompute_share(row)
    return layers * host_layer_forward_s(row) * (2.0 + full)


@njit
def average_stage_layers(row):
    """Layers the average pipeline stage's host issues per micro-batch: ``(L + mtp_layers) / p``. Each MTP module
    runs one transformer layer on the last stage (DeepSeek-V3 report sec. 2.2; Megatron-LM d98e8a6 gpt_model.py
    runs it in training and evaluation alike, lines 711-726), spread over the stages as ``step.busiest_stage``'s
    ``average_mb`` spreads its GPU time (docs/model.md §11.4 "MTP module")."""
    return (row[C_LAYERS] + row[C_MTP_LAYERS]) / row[C_PP]


@njit
def host_wait_per_microbatch(row, per_stage, stage_mb):
    """Seconds a micro-batch of the busiest stage lasts beyond its GPU time ``stage_mb`` because the host issues
    its kernels more slowly: the GPU cannot start a kernel before it is issued, so the micro-batch lasts
    max(GPU time, issue time) (docs/model.md §11.7)."""
    return max(0.0, host_microbatch_s(row, per_stage) - stage_mb)


@njit
def host_bound_bubble(row, average_mb, forward, weight, last_mb, terms):
    """The pipeline bubble with every stage's micro-batch lasting max(GPU time, host issue time): warm-up and
    cool-down wait on the stages' issue as much as on their kernels (docs/model.md §11.7). ``last_mb``: one
    micro-batch on the last rank when it is the busiest (else ``average_mb``); on GPU-bound stages the bubble is
    then the exact ``(p t_avg - t_last) / v`` within ``bubble_last.credit_applies``' domain (§11.43). ``terms``:
    the configuration's ``first_rank.embedding_terms`` (``step.step_row`` evaluates them once)."""
    average_layers = average_stage_layers(row)
    host_forward = average_layers * host_layer_forward_s(row)
    host_mb = host_microbatch_s(row, average_layers)
    bubble = pipeline_bubble(row, max(average_mb, host_mb), max(forward, host_forward), weight)
    if host_mb < average_mb:  # host-bound stages issue alike: the average stage's bubble stays
        bubble -= last_rank_bubble_credit(row, last_mb, average_mb, terms)
    return max(bubble, 0.0)


@njit
def embedding_send_overlap(row, average_mb, last_mb, pp_exposed, terms):
    """Seconds of the interleaved warm-up's and cool-down's exposed sends (``pipeline.pipeline_p2p``: ``2 (p v - 1)
    s``) that run during the first rank's embedding wait, where :func:`host_bound_bubble` charges that wait
    (``bubble_last.embedding_warmup``, §11.44 item 1d): rank 0 starts micro-batch 0's chunk-1 forward at
    ``max(p (f + e_F), (f + e_F) + (p - 1) f + p s)``, its own ``p`` heavier chunk-0 forwards against the chain
    of ``p`` sends through the other ranks, so of the ``(p - 1) e_F`` wait and the ``p s`` the closed form charges
    both, ``min((p - 1) e_F, p s)`` is one; the cool-down's backwards alike: ``min((p - 1) e_F, p s) +
    min((p - 1) e_B, p s)`` (e_B with the dense gradient, §11.43), taken off the exposed sends (the exact program, tests/lm/test_pipeline_program.py);
    0 where the wait is not charged, and under Megatron-LM 2021's blocking exchanges (``pipeline_2021``, whose
    counts are not the chains', §11.52). ``terms``: the configuration's ``first_rank.embedding_terms``."""
    if pp_exposed <= 0.0 or last_mb <= average_mb or embedding_warmup(row, terms) <= 0.0 \
            or not credit_applies(row) or sync_exchanges(row):
        return 0.0
    if host_microbatch_s(row, average_stage_layers(row)) >= average_mb:
        return 0.0      # host-bound: host_bound_bubble keeps the average stage's bubble, no wait charged
    p = row[C_PP]
    send = pp_exposed / (2.0 * (p * row[C_VP] - 1.0))      # interleaved: the chains' sends only
    forward, backward, _ = terms     # the backward's with the dense gradient (§11.43), as the wait
    return min((p - 1.0) * forward, p * send) + min((p - 1.0) * backward, p * send)


@njit
def eval_time(row, forward, micro_batches):
    """Seconds per training step of the evaluation the run interleaves (docs/model.md §11.17.1): every
    ``eval_interval`` steps Megatron-LM runs ``eval_iters`` iterations of ``forward_only`` passes over a whole global
    batch (megatron/training.py ``train``, ``evaluate``; stanford-futuredata/Megatron-LM 0bdc8181), each of the
    ``micro_batches`` a forward of the average stage (``forward``, from ``step.busiest_stage``) or its host issue,
    whichever is longer, and ``pp - 1`` more of fill and drain. 0 unless both columns are set."""
    if row[C_EVAL_INTERVAL] <= 0.0 or row[C_EVAL_ITERS] <= 0.0:
        return 0.0
    mb = max(forward, average_stage_layers(row) * host_layer_forward_s(row))
    return row[C_EVAL_ITERS] / row[C_EVAL_INTERVAL] * (micro_batches + row[C_PP] - 1.0) * mb
