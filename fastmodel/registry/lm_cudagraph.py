"""Plan column of per-layer CUDA graphs that keep static buffers for every (layer, micro-batch) of the step.

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays under the line cap. docs/model_memory.md "CUDA graphs (issue 23)" gives the equation and its
sources; kernels/lm/memory_peak.py ``cuda_graph_buffer_bytes`` computes it.
"""

from __future__ import annotations

CUDA_GRAPH_PLAN_ROWS = (
    ("cuda_graph_microbatch_buffers", "1", 0, "1: Transformer Engine make_graphed_callables graphs every layer of "
     "the rank once per micro-batch of the step (_order given) without reusing buffers between graphs (TE < 2.7, "
     "or _reuse_graph_input_output_buffers off: the MLPerf v4.0 NeMo GPT-3 runs); each graph keeps its static "
     "output, output gradient and input gradient, one layer output each, for the whole step "
     "(docs/model_memory.md \"CUDA graphs (issue 23)\"); refused under DualPipe (eager modules, deferred weight "
     "gradients: schedule_not_runnable). 0: none (eager; Megatron-Core's graphs, which reuse them).",
     0, 1, False, "flag"),
)
