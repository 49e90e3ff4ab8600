"""Per-op timeline of one real-world configuration (docs/model.md §11.12).

The step of the busiest pipeline stage laid out as ops on a compute stream and one communication stream per process group
(tp, cp, ep, pp, dp), in 1F1B order: the warm-up bubble, then per micro-batch
the forward of each layer (GEMMs, attention, memory-bound ops), the LM head
when the busiest stage is the last (with the loss in the pipeline split a middle
stage can be busiest: a full share of layers, no head; ``busiest_stage``),
and the backward of each layer (recompute first), then the cool-down bubble, the
once-per-step data-parallel reduction, the optimizer step, fine-grained offloading's exposed copies (one
block: docs/model.md §11.21) and the host overhead.

Durations come from the kernel's own results (``lm_engine.evaluate_table``)
and its per-layer terms (``kernels/lm_layer.head_costs``, ``recompute_share``),
so the timeline ends exactly at the predicted step time. A collective ends
where its exposed part ends: the compute stream waits for that part (a gap) and
the rest overlaps the layer's compute. Within a layer the forward / backward
split follows the model's pass ratios (GEMMs and memory-bound ops 1 : 2,
attention 1 : 2.5, TP and EP collectives 1 : 1 + full recompute, CP 1 : 2 +
full recompute, ZeRO-3 gathers 1 : 2); layers of different kinds (dense, MoE,
sliding window) are drawn at their average, the layers a low-precision run keeps in BF16 at their own ops
(``L<i> (BF16)``, docs/model.md §11.39).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.lm.table import CODE_TABLES
from fastmodel.registry.lm import COLUMN_INDEX

STREAMS = ("compute", "tp", "cp", "ep", "pp", "dp")
KINDS = ("gemm", "attention", "memory_bound", "recompute", "head", "bubble", "optimizer", "overhead",
         "tp", "cp", "ep", "pp", "dp", "offload", "eval", "straggler")
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


def _layer_terms(columns: np.ndarray, r: dict) -> dict:
    """Per layer and micro-batch seconds of the average layer, recovered from the kernel's results with the
    kernel's own pass ratios (``kernels/lm/passes.py``): forward and backward ops by kind, recompute, and per
    process group the collective and its exposed part with the forward's share of its runs. The busiest rank's
    BF16 layers (docs/model.md §11.39) are taken out of the results first: ``bf16`` is one BF16 layer's extra
    accumulators (``kernels/lm/bf16_layers.bf16_layer_work``), ``lead`` / ``trail`` how many of them open and
    close the rank's layers."""
    from fastmodel.kernels.lm.bf16_layers import bf16_row
    from fastmodel.kernels.lm.first_rank import embedding_parts, embedding_stage_tp
    from fastmodel.kernels.lm.layer import W_GEMM, W_MEM, W_TP, W_TP_BACKWARD, W_TP_HIDDEN, W_WGRAD, recompute_share
    from fastmodel.kernels.lm.passes import (
        A_ATTN,
        A_CP_COMM,
        A_CP_EXPOSED,
        A_EP_COMM,
        A_EP_EXPOSED,
        A_GEMM,
        A_MEM,
        A_RECOMPUTE,
        A_TP_COMM,
        A_TP_EXPOSED,
        BACKWARD_GEMM,
        CP_BACKWARD_PASSES,
        EP_BACKWARD_PASSES,
        GATHER_BACKWARD_PASSES,
        N_WORK,
        TP_BACKWARD_PASSES,
        head_passes,
        tp_pass_factors,
    )
    from fastmodel.kernels.lm.step import busiest_stage, last_rank_all_moe

    def col(name):
        return float(columns[COLUMN_INDEX[name]])

    pp, m = col("pp"), col("global_batch") / (col("micro_batch") * col("dp"))
    # the busiest rank's layers, whether it holds the LM head (share 1: the last rank; 0: a middle or the first
    # rank) and its BF16 layers: n16 of them, each d16 beyond the rank's layer
    *_, layers, share, n16, d16, emb = busiest_stage(columns, np.zeros(N_WORK))
    # the word embedding's TP collectives on the busiest rank (rank 0, or half on DualPipe's last): exposed, in
    # comm_tp / exposed_tp (step_row), its own op, not the layers' (§11.44 item 1d); its dense gradient (§11.43) in
    # time_memory_bound, its own op after the backward's collectives
    emb, emb_grad = embedding_parts(columns, emb)
    emb_f, emb_b = embedding_stage_tp(columns)
    emb_f, emb_b = (emb * emb_f / (emb_f + emb_b), emb * emb_b / (emb_f + emb_b)) if emb > 0.0 else (0.0, 0.0)
    full, _ = recompute_share(columns)
    work = np.zeros(N_WORK)
    head_f, head_b, head_w = (share * t for t in head_passes(columns, work))
    work *= share
    head_gemm, head_mem = work[W_GEMM], 2.0 * work[W_MEM]
    # the head's backward TP with its SP re-gathers, of which W_TP_HIDDEN run under their dgrad GEMMs (§11.42)
    head_backward_tp = TP_BACKWARD_PASSES * (work[W_TP_BACKWARD] - work[W_TP_HIDDEN])
    head_comm, head_tp = work[W_TP] + TP_BACKWARD_PASSES * work[W_TP_BACKWARD], work[W_TP] + head_backward_tp
    fsdp = col("sharding") == CODE_TABLES["sharding"]["fsdp"] and pp <= 1.0
    gemm = (r["time_gemm"] / m - (1.0 + BACKWARD_GEMM) * head_gemm - work[W_WGRAD] - n16 * d16[A_GEMM]) / layers
    attn = (r["time_attention"] / m - n16 * d16[A_ATTN]) / layers
    mem = (r["time_memory_bound"] / m - head_mem - n16 * d16[A_MEM] - emb_grad) / layers
    again = (r["time_recompute"] / m - n16 * d16[A_RECOMPUTE]) / layers
    groups = ["tp", "cp", "ep"] + (["dp"] if fsdp else [])
    slots = {"tp": (A_TP_COMM, A_TP_EXPOSED), "cp": (A_CP_COMM, A_CP_EXPOSED), "ep": (A_EP_COMM, A_EP_EXPOSED)}
    comm = {g: r[f"comm_{g}"] / m - (n16 * d16[slots[g][0]] if g in slots else 0.0) for g in groups}
    exposed = {g: r[f"exposed_{g}"] / m - (n16 * d16[slots[g][1]] if g in slots else 0.0) for g in groups}
    comm["tp"] -= head_comm + emb
    exposed["tp"] -= head_tp + emb
    tp_f, tp_b = tp_pass_factors(columns)          # per-projection TP (KempnerForge) runs more backward passes
    backward_runs = {"tp": (tp_b + tp_f * full) / tp_f, "cp": CP_BACKWARD_PASSES + full, "ep": EP_BACKWARD_PASSES + full,
                     "dp": GATHER_BACKWARD_PASSES + 1.0}           # ZeRO-3: gather, gather again, reduce-scatter
    shares = {g: 1.0 / (1.0 + backward_runs[g]) for g in groups}
    # TP: the kernel's own forward and backward seconds (W_TP, W_TP_BACKWARD differ under SP with quantized
    # gathers, §11.40 / §11.41), for the busiest rank's layer kind; a BF16 layer's at the bf16 row's
    moe_only = share == 1.0 and bool(last_rank_all_moe(columns))
    tp_split = _tp_split(columns, moe_only)
    shares["tp"] = tp_split[0] / tp_split[1] if tp_split[1] > 0.0 else shares["tp"]
    exposed_shares = {**shares, "tp": _exposed_share(tp_split, shares["tp"])}
    wide_split = _tp_split(bf16_row(columns), moe_only) if n16 > 0.0 else tp_split
    if n16 <= 0.0:
        lead = 0.0
    elif pp <= 1.0:                                 # the one rank: the first layers and the last
        lead = min(col("bf16_layers_start"), n16)
    else:                                           # the first rank's open its layers, the last rank's close them
        lead = n16 if share == 0.0 else 0.0
    extra = {"gemm": d16[A_GEMM], "attn": d16[A_ATTN], "mem": d16[A_MEM], "again": d16[A_RECOMPUTE],
             "comm": {g: d16[slots[g][0]] if g in slots else 0.0 for g in groups},
             "exposed": {g: d16[slots[g][1]] if g in slots else 0.0 for g in groups},
             "tp_split": tuple(w - v for w, v in zip(wide_split, tp_split))}
    return {
        "m": m, "layers": layers, "fsdp": fsdp, "groups": groups, "head_tp": head_tp,
        "head_f": head_f - work[W_TP], "head_b": head_b + head_w - head_backward_tp,
        "emb_f": emb_f, "emb_b": emb_b, "emb_grad": emb_grad, "n16": n16, "lead": lead, "trail": n16 - lead, "extra": extra, "tp_split": tp_split,
        "base": {"gemm": gemm, "attn": attn, "mem": mem, "again": again, "comm": comm, "exposed": exposed},
        **_pass_ops(gemm, attn, mem, again, comm, exposed, layers, shares, exposed_shares),
    }


def _exposed_share(tp_split: tuple[float, float, float], fallback: float) -> float:
    """The forward's share of a layer's exposed TP seconds from :func:`_tp_split`'s (forward, all passes, hidden):
    ``forward / (all - hidden)``, as ``passes._add_layer_kind`` charges it (the whole forward exposed, the wgrad
    re-gathers' hidden seconds off the backward only; with ``tp_comm_overlap`` hidden is 0 and the share is the
    collectives' own)."""
    forward, total, hidden = tp_split
    return forward / (total - hidden) if total - hidden > 0.0 else fallback


def _tp_split(columns: np.ndarray, moe_only: bool) -> tuple[float, float, float]:
    """(forward, all passes, hidden) TP seconds of the average layer (of the MoE layers when ``moe_only``) per
    micro-batch as the kernel charges them (``passes._add_layer_kind``): ``W_TP f (1 + full)`` with the recompute's
    replay in the backward, plus ``W_TP_BACKWARD b`` (``tp_pass_factors`` f, b), over the layer mix; hidden is the
    wgrad re-gathers' seconds under their dgrad GEMMs without ``tp_comm_overlap`` (``W_TP_HIDDEN b``, §11.41; 0
    with it, whose overlap rule hides in proportion)."""
    from fastmodel.kernels.lm.layer import N_WORK as N_LAYER_WORK
    from fastmodel.kernels.lm.layer import W_TP, W_TP_BACKWARD, W_TP_HIDDEN, layer_costs, layer_mix, recompute_share
    from fastmodel.kernels.lm.passes import tp_pass_factors

    full, _ = recompute_share(columns)
    tp_f, tp_b = tp_pass_factors(columns)
    no_overlap = columns[COLUMN_INDEX["tp_comm_overlap"]] <= 0.0
    counts, work = layer_mix(columns), np.zeros(N_LAYER_WORK)
    forward = total = hidden = 0.0
    for kind in range(2 if moe_only else 0, 4):
        if counts[kind] > 0.0:
            layer_costs(columns, kind >= 2, kind % 2 == 1, work)
            forward += counts[kind] * work[W_TP] * tp_f
            total += counts[kind] * (work[W_TP] * tp_f * (1.0 + full) + work[W_TP_BACKWARD] * tp_b)
            hidden += counts[kind] * work[W_TP_HIDDEN] * tp_b if no_overlap else 0.0
    return forward, total, hidden


def _pass_ops(gemm, attn, mem, again, comm, exposed, layers, shares, exposed_shares) -> dict:
    """One layer's ops per micro-batch from its GEMM, attention, memory-bound and recompute seconds (recompute
    inside the first three) and each group's collective and exposed seconds over ``layers`` layers; ``shares``
    and ``exposed_shares`` give each group's forward share of its collective and exposed seconds."""
    from fastmodel.kernels.lm.passes import BACKWARD_ATTN, BACKWARD_GEMM, BACKWARD_MEM

    keep = 1.0 - again / (gemm + attn + mem) if gemm + attn + mem > 0.0 else 1.0
    gemm, attn, mem = gemm * keep, attn * keep, mem * keep
    gemm_runs, attn_runs, mem_runs = 1.0 + BACKWARD_GEMM, 1.0 + BACKWARD_ATTN, 1.0 + BACKWARD_MEM
    return {
        "again": again, "shares": shares, "exposed_shares": exposed_shares,
        "fwd": {"gemm": gemm / gemm_runs, "attention": attn / attn_runs, "memory_bound": mem / mem_runs},
        "bwd": {"gemm": BACKWARD_GEMM * gemm / gemm_runs, "attention": BACKWARD_ATTN * attn / attn_runs,
                "memory_bound": BACKWARD_MEM * mem / mem_runs},
        "comm": {g: max(0.0, v) / layers for g, v in comm.items()},
        "exposed": {g: max(0.0, v) / layers for g, v in exposed.items()},
    }


def _bf16_terms(terms: dict, ratio: float) -> dict:
    """A BF16 layer's ops (docs/model.md §11.39): the rank's layer plus ``ratio`` times one BF16 layer's extra
    seconds per part (1 when the layer is drawn at one layer's scale)."""
    base, extra, layers = terms["base"], terms["extra"], terms["layers"]
    per = {k: base[k] + ratio * extra[k] for k in ("gemm", "attn", "mem", "again")}
    comm = {g: base["comm"][g] + ratio * extra["comm"][g] * layers for g in terms["groups"]}
    exposed = {g: base["exposed"][g] + ratio * extra["exposed"][g] * layers for g in terms["groups"]}
    # the blend's own TP split: the layer's plus ratio BF16 extras
    (forward, total, hidden) = (v + ratio * d for v, d in zip(terms["tp_split"], extra["tp_split"]))
    shares = dict(terms["shares"])
    if total > 0.0:
        shares["tp"] = forward / total
    exposed_shares = {**terms["exposed_shares"], "tp": _exposed_share((forward, total, hidden), shares["tp"])}
    return {**terms, **_pass_ops(per["gemm"], per["attn"], per["mem"], per["again"], comm, exposed, layers, shares,
                                 exposed_shares)}


def _segments(terms: dict, per_layer: bool) -> list[tuple[str, dict, float]]:
    """The busiest rank's layers in forward order as (label, terms, scale): one per layer (``per_layer``), the BF16
    ones at their own ops, or one block of each kind."""
    layers, n16, lead, trail = terms["layers"], terms["n16"], terms["lead"], terms["trail"]
    if not per_layer:
        wide = _bf16_terms(terms, 1.0)
        blocks = [("BF16 layers", wide, lead), ("layers", terms, layers - n16), ("BF16 layers", wide, trail)]
        return [b for b in blocks if b[2] > 0.0]
    repeat = max(1, int(round(layers)))
    first, last = min(int(round(lead)), repeat), min(int(round(trail)), repeat)
    marked = [i < first or i >= repeat - last for i in range(repeat)]
    scale = layers / repeat
    # every layer draws the rank's layer at scale; the marked ones each add n16 / (marked) BF16 extras
    wide = _bf16_terms(terms, n16 / max(sum(marked), 1) / scale) if n16 > 0.0 else terms
    return [(f"L{i} (BF16)" if on else f"L{i}", wide if on else terms, scale) for i, on in enumerate(marked)]


def _layer_pass(b: _Builder, terms: dict, label: str, direction: str, t: float, scale: float) -> float:
    """One layer's forward (``direction`` "f") or backward ops from ``t``; returns where the next starts."""
    first = t
    ops = terms["fwd"] if direction == "f" else terms["bwd"]
    recompute = 0.0 if direction == "f" else terms["again"]
    if recompute > 0.0:
        b.op(f"{label} recompute", "compute", "recompute", t, t + recompute * scale)
        t += recompute * scale
    for kind, seconds in ops.items():
        b.op(f"{label} {kind}", "compute", kind, t, t + seconds * scale)
        t += seconds * scale
    gap_start = gap_end = t
    for g in terms["groups"]:
        share = terms["shares"][g] if direction == "f" else 1.0 - terms["shares"][g]
        exposed_share = terms["exposed_shares"][g] if direction == "f" else 1.0 - terms["exposed_shares"][g]
        exposed_here = terms["exposed"][g] * exposed_share * scale
        b.comm(f"{label} {g}", g, terms["comm"][g] * share * scale, gap_start, gap_start + exposed_here, first)
        gap_end += exposed_here
    return gap_end


def _micro_batch(b: _Builder, terms: dict, r: dict, i: int, segments: list, t: float) -> float:
    """Micro-batch ``i`` on the busiest stage: layer forwards (``segments``, :func:`_segments`), the LM head (when
    it holds it), its sends and the layer backwards."""
    m = terms["m"]
    head_f, head_b, head_tp = terms["head_f"], terms["head_b"], terms["head_tp"]
    pp_gap, pp_send = r["exposed_pp"] / (2.0 * m), r["comm_pp"] / (2.0 * m)
    mb = f"mb{i}"
    emb_f, emb_b = terms["emb_f"], terms["emb_b"]
    b.comm(f"{mb} embedding tp fwd", "tp", emb_f, t, t + emb_f, t)     # rank 0's embedding (§11.44 item 1d)
    t += emb_f
    for label, ops, scale in segments:
        t = _layer_pass(b, ops, f"{mb} {label} fwd", "f", t, scale)
    b.op(f"{mb} LM head fwd", "compute", "head", t, t + head_f)
    t += head_f
    b.op(f"{mb} LM head bwd", "compute", "head", t, t + head_b)
    t_head_end = t + head_b
    b.comm(f"{mb} LM head tp", "tp", head_tp, t_head_end, t_head_end + head_tp, t)
    t = t_head_end + head_tp
    b.comm(f"{mb} pp send fwd", "pp", pp_send, t, t + pp_gap, t - head_b)
    t += pp_gap
    for label, ops, scale in reversed(segments):
        t = _layer_pass(b, ops, f"{mb} {label} bwd", "b", t, scale)
    b.comm(f"{mb} embedding tp bwd", "tp", emb_b, t, t + emb_b, t)
    t += emb_b
    b.op(f"{mb} embedding dense grad", "compute", "memory_bound", t, t + terms["emb_grad"])     # §11.43
    t += terms["emb_grad"]
    b.comm(f"{mb} pp send bwd", "pp", pp_send, t, t + pp_gap, t)
    return t + pp_gap


def timeline(columns: np.ndarray, label: str = "the configuration") -> Timeline:
    """The per-op timeline of the configuration ``columns`` (a registry column vector); a one-line
    NotFiniteError naming ``label`` when its times are not finite numbers."""
    from fastmodel.lm.engine import evaluate_one

    columns = np.asarray(columns, dtype=np.float64)
    r = evaluate_one(columns, label)
    terms = _layer_terms(columns, r)
    m, layers = terms["m"], terms["layers"]
    per_layer = layers * m <= MAX_LAYER_OPS
    segments = _segments(terms, per_layer)
    b = _Builder()
    compute_f = sum(sum(ops["fwd"].values()) * scale for _, ops, scale in segments) + terms["head_f"]
    compute_b = sum((sum(ops["bwd"].values()) + ops["again"]) * scale for _, ops, scale in segments) + terms["head_b"]
    bubble = r["pipeline_bubble"]
    warm = bubble * compute_f / (compute_f + compute_b) if compute_f + compute_b > 0.0 else 0.0
    b.op("pipeline warm-up", "compute", "bubble", 0.0, warm)
    t = warm
    for i in range(int(round(m))):
        t = _micro_batch(b, terms, r, i, segments, t)
    last_backward_start = t - (compute_b - terms["head_b"] + terms["emb_b"] + terms["emb_grad"] + r["exposed_pp"] / (2.0 * m))
    b.op("pipeline cool-down", "compute", "bubble", t, t + bubble - warm)
    t += bubble - warm
    if not terms["fsdp"]:
        dp_gap = r["exposed_dp"]
        b.comm("dp gradient reduction", "dp", r["comm_dp"], t, t + dp_gap, last_backward_start)
        t += dp_gap
    b.op("optimizer step", "compute", "optimizer", t, t + r["time_optimizer"])
    t += r["time_optimizer"]
    if r["time_offload"] > 0.0:     # fine-grained offloading's exposed copies, summed over the step (§11.21)
        b.op("activation offload copies (exposed)", "compute", "offload", t, t + r["time_offload"])
        t += r["time_offload"]
    if r["time_eval"] > 0.0:        # the run's interleaved evaluation, its share per step (§11.17.1)
        b.op("evaluation (forward-only batches, per step)", "compute", "eval", t, t + r["time_eval"])
        t += r["time_eval"]
    if r["time_straggler"] > 0.0:   # the wait for the job's slowest GPU, drawn at the step's end (§11.68)
        b.op("waiting for the slowest GPU", "compute", "straggler", t, t + r["time_straggler"])
        t += r["time_straggler"]
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


def spec_timeline(model, system, task, plan: str | None = None, num_nodes: int | None = None,
                  execution=None) -> tuple["Timeline", str]:
    """(timeline, title) of one real-world configuration given as specs (a task's mesh plan applies when
    ``plan`` is None), run as ``execution`` (a dict of execution fields) says."""
    from fastmodel.lm.sweep import spec_point

    spec, plan, columns = spec_point(model, system, task, plan, execution, num_nodes)
    return timeline(columns, f"plan {plan or 'dp'!r}"), f"{spec.name}, {plan or 'dp'}"
