"""Per-op timeline of one real-world configuration (docs/model.md §11.12).

The step of the busiest pipeline stage (the last: it holds the LM head) laid
out as ops on a compute stream and one communication stream per process group
(tp, cp, ep, pp, dp), in 1F1B order: the warm-up bubble, then per micro-batch
the forward of each layer (GEMMs, attention, memory-bound ops), the LM head,
and the backward of each layer (recompute first), then the cool-down bubble, the
once-per-step data-parallel reduction, the optimizer step and the host overhead.

Durations come from the kernel's own results (``lm_engine.evaluate_table``)
and its per-layer terms (``kernels/lm_layer.head_costs``, ``recompute_share``),
so the timeline ends exactly at the predicted step time. A collective ends
where its exposed part ends: the compute stream waits for that part (a gap) and
the rest overlaps the layer's compute. Within a layer the forward / backward
split follows the model's pass ratios (GEMMs and memory-bound ops 1 : 2,
attention 1 : 2.5, TP and EP collectives 1 : 1 + full recompute, CP 1 : 2 +
full recompute, ZeRO-3 gathers 1 : 2); layers of different kinds (dense, MoE,
sliding window) are drawn at their average.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.lm.table import CODE_TABLES
from fastmodel.registry.lm import COLUMN_INDEX

STREAMS = ("compute", "tp", "cp", "ep", "pp", "dp")
KINDS = ("gemm", "attention", "memory_bound", "recompute", "head", "bubble", "optimizer", "overhead",
         "tp", "cp", "ep", "pp", "dp")
#: above this many layer-ops a step is drawn one op per pass and micro-batch instead of per layer
MAX_LAYER_OPS = 200_000


@dataclass(frozen=True)
class Timeline:
    """Ops of one step (seconds). ``stream`` and ``kind`` index STREAMS and KINDS."""

    names: tuple[str, ...]
    stream: np.ndarray
    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step_time: float
    per_layer: bool

    def exposed(self) -> float:
        """Seconds the compute stream waits for communication (gaps that are not bubble or host time)."""
        on = self.stream == 0
        busy = float(np.sum(self.end[on] - self.start[on]))
        return max(0.0, self.step_time - busy)


class _Builder:
    def __init__(self):
        self.names, self.stream, self.kind, self.start, self.end = [], [], [], [], []

    def op(self, name, stream, kind, start, end):
        if end - start > 1e-12:
            self.names.append(name)
            self.stream.append(STREAMS.index(stream))
            self.kind.append(KINDS.index(kind))
            self.start.append(start)
            self.end.append(end)

    def comm(self, name, stream, total, gap_start, gap_end, window_start):
        """A collective of ``total`` seconds whose exposed part is the gap [gap_start, gap_end): it ends at the
        gap's end and overlaps compute before it, no earlier than ``window_start``."""
        if total > 0.0:
            self.op(name, stream, stream, max(window_start, gap_end - total), gap_end)


def timeline(columns: np.ndarray, label: str = "the configuration") -> Timeline:
    """The per-op timeline of the configuration ``columns`` (a registry column vector); a one-line
    NotFiniteError naming ``label`` when its times are not finite numbers."""
    from fastmodel.kernels.lm.layer import N_WORK, W_GEMM, W_MEM, W_TP, head_costs, recompute_share
    from fastmodel.lm.engine import evaluate_one

    columns = np.asarray(columns, dtype=np.float64)
    r = evaluate_one(columns, label)

    def col(name):
        return float(columns[COLUMN_INDEX[name]])

    pp, dp = col("pp"), col("dp")
    m = col("global_batch") / (col("micro_batch") * dp)
    layers = col("layers") / pp
    full, _ = recompute_share(columns)
    work = np.zeros(N_WORK)
    head_costs(columns, work)
    head_gemm, head_mem, head_tp = work[W_GEMM], 2.0 * work[W_MEM], 2.0 * work[W_TP]
    fsdp = col("sharding") == CODE_TABLES["sharding"]["fsdp"] and pp <= 1.0

    # per layer and micro-batch, averaged over the layer kinds
    gemm = (r["time_gemm"] / m - 3.0 * head_gemm) / layers
    attn = r["time_attention"] / m / layers
    mem = (r["time_memory_bound"] / m - head_mem) / layers
    again = r["time_recompute"] / m / layers
    keep = 1.0 - again / (gemm + attn + mem) if gemm + attn + mem > 0.0 else 1.0
    gemm, attn, mem = gemm * keep, attn * keep, mem * keep
    fwd = {"gemm": gemm / 3.0, "attention": attn / 3.5, "memory_bound": mem / 3.0}
    bwd = {"gemm": 2.0 * gemm / 3.0, "attention": 2.5 * attn / 3.5, "memory_bound": 2.0 * mem / 3.0}
    shares = {"tp": 1.0 / (2.0 + full), "cp": 1.0 / (3.0 + full), "ep": 1.0 / (2.0 + full), "dp": 1.0 / 3.0}
    groups = ["tp", "cp", "ep"] + (["dp"] if fsdp else [])
    comm = {g: r[f"comm_{g}"] / m for g in groups}
    hidden = {g: r[f"exposed_{g}"] / m for g in groups}
    comm["tp"] -= head_tp
    hidden["tp"] -= head_tp
    comm = {g: max(0.0, v) / layers for g, v in comm.items()}
    hidden = {g: max(0.0, v) / layers for g, v in hidden.items()}

    per_layer = layers * m <= MAX_LAYER_OPS
    repeat = max(1, int(round(layers))) if per_layer else 1
    scale = layers / repeat              # layers each drawn layer stands for (uneven stages: not quite 1)
    b = _Builder()
    head_f = head_gemm + head_mem / 2.0
    head_b = 2.0 * head_gemm + head_mem / 2.0
    compute_f = sum(fwd.values()) * layers + head_f
    compute_b = (sum(bwd.values()) + again) * layers + head_b
    bubble = r["pipeline_bubble"]
    warm = bubble * compute_f / (compute_f + compute_b) if compute_f + compute_b > 0.0 else 0.0
    t = 0.0
    b.op("pipeline warm-up", "compute", "bubble", t, t + warm)
    t += warm
    pp_gap = r["exposed_pp"] / (2.0 * m)
    pp_send = r["comm_pp"] / (2.0 * m)

    def layer_pass(label, ops, recompute, direction, t):
        first = t
        if recompute > 0.0:
            b.op(f"{label} recompute", "compute", "recompute", t, t + recompute * scale)
            t += recompute * scale
        for kind, seconds in ops.items():
            b.op(f"{label} {kind}", "compute", kind, t, t + seconds * scale)
            t += seconds * scale
        gap_start = t
        gap = sum((hidden[g] * (shares[g] if direction == "f" else 1.0 - shares[g])) for g in groups) * scale
        for g in groups:
            share = shares[g] if direction == "f" else 1.0 - shares[g]
            exposed_here = hidden[g] * share * scale
            b.comm(f"{label} {g}", g, comm[g] * share * scale, gap_start, gap_start + exposed_here, first)
        return t + gap

    for i in range(int(round(m))):
        mb = f"mb{i}"
        for layer in range(repeat):
            name = f"{mb} L{layer} fwd" if per_layer else f"{mb} layers fwd"
            t = layer_pass(name, fwd, 0.0, "f", t)
        b.op(f"{mb} LM head fwd", "compute", "head", t, t + head_f)
        t += head_f
        b.op(f"{mb} LM head bwd", "compute", "head", t, t + head_b)
        t_head_end = t + head_b
        b.comm(f"{mb} LM head tp", "tp", head_tp, t_head_end, t_head_end + head_tp, t)
        t = t_head_end + head_tp
        b.comm(f"{mb} pp send fwd", "pp", pp_send, t, t + pp_gap, t - head_b)
        t += pp_gap
        for layer in reversed(range(repeat)):
            name = f"{mb} L{layer} bwd" if per_layer else f"{mb} layers bwd"
            t = layer_pass(name, bwd, again, "b", t)
        b.comm(f"{mb} pp send bwd", "pp", pp_send, t, t + pp_gap, t)
        t += pp_gap
    last_backward_start = t - (compute_b - head_b + pp_gap)
    b.op("pipeline cool-down", "compute", "bubble", t, t + bubble - warm)
    t += bubble - warm
    if not fsdp:
        dp_gap = r["exposed_dp"]
        b.comm("dp gradient reduction", "dp", r["comm_dp"], t, t + dp_gap, last_backward_start)
        t += dp_gap
    b.op("optimizer step", "compute", "optimizer", t, t + r["time_optimizer"])
    t += r["time_optimizer"]
    overhead = r["step_time"] - t
    b.op("host overhead", "compute", "overhead", t, t + max(0.0, overhead))
    return Timeline(tuple(b.names), np.array(b.stream, dtype=np.int8), np.array(b.kind, dtype=np.int8),
                    np.array(b.start), np.array(b.end), r["step_time"], per_layer)


def record_timeline(data: dict, source: str | None = None) -> tuple["Timeline", str]:
    """(timeline, title) of one run record (RUNS.md); an illegal plan is a PlanError."""
    from pathlib import Path

    from fastmodel.lm.records import lower_record
    from fastmodel.lm.rules import check_plan

    record = lower_record(data, source)
    check_plan(record.columns, f"{source}: plan" if source else "plan")
    label = record.id or (Path(source).stem if source else "run record")
    return timeline(record.columns, f"{source}: {label}" if source else label), label


def spec_timeline(model, system, task, plan: str | None = None, num_nodes: int | None = None) -> tuple["Timeline", str]:
    """(timeline, title) of one real-world configuration given as specs (a task's mesh plan applies when
    ``plan`` is None)."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    spec = load_lm_model(model)
    train = load_train_task(task)
    plan = plan if plan is not None else train.plan
    columns = point_columns(spec, system, train, plan=plan, num_nodes=num_nodes)
    return timeline(columns, f"plan {plan or 'dp'!r}"), f"{spec.name}, {plan or 'dp'}"
