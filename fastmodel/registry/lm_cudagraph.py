"""Plan columns of CUDA graphs: the captured scope (host issue time, docs/model.md §11.37) and per-layer graphs
that keep static buffers for every (layer, micro-batch) of the step (memory).

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays under the line cap. docs/model_memory.md "CUDA graphs (issue 23)" gives the equation and its
sources; kernels/lm/memory_peak.py ``cuda_graph_buffer_bytes`` computes it.
"""

from __future__ import annotations

#: what the step's CUDA graphs capture (docs/model.md §11.37): nothing (eager), each transformer layer's forward
#: and backward (TE ``make_graphed_callables`` per layer, Megatron-Core ``cuda_graph_impl`` "local" or
#: "transformer_engine"), or the whole forward-backward of the step (Megatron-Core "full_iteration")
CUDA_GRAPH_SCOPES = {"none": 0, "layer": 1, "full_iteration": 2}

CUDA_GRAPH_PLAN_ROWS = (
    ("cuda_graphs", "1", 0, "What CUDA graphs capture (docs/model.md §11.37): none (eager); layer: each "
     "transformer layer's forward and backward replayed as one graph each, its host issue time that of the "
     "replay call (GRAPH_REPLAY_OPS operators per layer pass); full_iteration: the forward-backward of every "
     "micro-batch in one graph, no per-layer issue time. Layers a graph cannot hold stay eager: a stack whose MoE "
     "layer syncs the host (moe_sync_issue_ops > 0), and under layer graphs a dropless MoE layer. layer is refused "
     "under DualPipe (its modules run eagerly and defer weight gradients: schedule_not_runnable, "
     "kernels/lm/pipeline.py schedule_status); full_iteration is kept there.",
     0, 2, False, "code"),
    ("cuda_graph_microbatch_buffers", "1", 0, "1: Transformer Engine make_graphed_callables graphs every layer of "
     "the rank once per micro-batch of the step (_order given) without reusing buffers between graphs (TE < 2.7, "
     "or _reuse_graph_input_output_buffers off: the MLPerf v4.0 NeMo GPT-3 runs); each graph keeps its static "
     "output, output gradient and input gradient, one layer output each, for the whole step "
     "(docs/model_memory.md \"CUDA graphs (issue 23)\"); refused under DualPipe (eager modules, deferred weight "
     "gradients: schedule_not_runnable). 0: none (eager; Megatron-Core's graphs, which reuse them).",
     0, 1, False, "flag"),
)
