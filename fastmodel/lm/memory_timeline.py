"""Memory over one training step, per pipeline rank and kind: the data of ``fastmodel plot memory-timeline``.

Each pipeline rank runs its schedule's operations in order (``kernels/lm/pipeline.py:stage_order``, every
schedule); after each forward it holds one more micro-batch's activations (a ``1 / v`` chunk of its layers
under the interleaved schedule; DualPipe's two directions each hold their chunk), a backward frees them. The memory of each moment is composed by
the same kernel terms as the peak (kernels/lm/memory_peak.py), so the largest moment of a rank's timeline is
that rank's peak (``tests/lm/test_memory_peak.py`` ``test_timeline_peak_is_the_kernel_peak`` checks it against ``memory_row``):

- after the forward of a micro-batch: its activations are added (the chunk's, ``memory_chunks.chunk_microbatch_bytes``:
  under the interleaved schedule rank 0's chunk 0 and the last rank's last chunk differ); after the last model stage of its chain
  (the last rank's last chunk; DualPipe: rank 0 in the reverse direction) the logits and loss workspace are
  live (``P_LOSS``);
- at the start of a backward: the recompute working set and the layer's activation gradients, and on the
  last rank that micro-batch's final-norm and LM-head inputs are gone (``P_BACKWARD``); after it, the
  micro-batch's activations are freed and, on the first rank at chunk 0, the word embedding's weight gradient
  is live (``P_EMBEDDING``) where the chain starts; under ZB-H1 and DualPipe the input-gradient pass ``I`` is
  that start and the weight-gradient pass ``W`` frees the activations -- under ZB-H1 ``I`` frees all but each
  linear's input and output gradient (``memory_chunks.rank_wgrad_pending_bytes``), which ``W`` frees;
- the optimizer step ends the step (``P_OPTIMIZER``);
- per-layer CUDA graphs' static buffers (``memory_peak.cuda_graph_buffer_bytes``) are buffers at every moment.

A moment is labelled by its operation and micro-batch (:func:`op_label`: ``F3``, ``B3``, ``I3``, ``B3 emb``); under
DualPipe the reverse direction's carry a mark (``F3'``), since both directions number their micro-batches from 0.

``overhead`` is ``overhead_bytes`` (kernels/lm/memory.py); the allocator's cache shows as the ``reserved`` line, the peak
allocated bytes times ``(1 + allocator_cache_fraction)`` plus the overhead (the cache is released on demand, so
it does not decide what fits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import MEMORY_KINDS


@dataclass(frozen=True)
class StageMemory:
    """One pipeline rank's moments: ``labels[i]`` (e.g. ``F3`` = after the forward of micro-batch 3; ``F3'``
    under DualPipe that of micro-batch 3 of the reverse direction, :func:`op_label`) and ``values[i, k]`` bytes
    of ``MEMORY_KINDS[k]``."""
    stage: int
    labels: tuple[str, ...]
    values: np.ndarray

    @property
    def totals(self) -> np.ndarray:
        return self.values.sum(axis=1)


@dataclass(frozen=True)
class MemoryTimeline:
    """Memory over one step on every pipeline rank (``stages``), the device's HBM, the usable HBM under the
    memory margin, and the worst rank's reserved peak plus the overhead (``reserved_bytes``); ``label_note``
    says what marked labels mean ('' when none is marked: :data:`REVERSE_NOTE` under DualPipe)."""
    stages: tuple[StageMemory, ...]
    kinds: tuple[str, ...]
    hbm_bytes: float
    usable_bytes: float
    reserved_bytes: float
    title: str
    label_note: str = ""


#: the mark after the micro-batch of a DualPipe reverse-direction operation (``F3'``): ASCII, so text keeps it
REVERSE_MARK = "'"
#: what the mark means, for the figure's axis label
REVERSE_NOTE = f"F j{REVERSE_MARK} / B j{REVERSE_MARK}: of DualPipe's reverse direction"


def op_label(kind: str, micro_batch: int, reverse: bool = False) -> str:
    """A moment's label: ``F3`` (after the forward of micro-batch 3), ``B3``, ``I3``; ``F3'`` when the operation
    is of DualPipe's reverse direction (chunk 1 of ``kernels/lm/pipeline.py:dualpipe_order``: the micro-batches
    entering at the last rank), which numbers its micro-batches from 0 as the forward direction does."""
    return f"{kind}{micro_batch}{REVERSE_MARK if reverse else ''}"


def _terms(row: np.ndarray) -> dict:
    """The kernel's rank-independent peak terms (``kernels/lm/memory.py`` ``peak_terms``, one jitted function for
    both) and the embedding-side transients of the timeline's moments."""
    from fastmodel.kernels.lm.memory import peak_terms
    from fastmodel.kernels.lm.memory_peak import embedding_grad_bytes, loss_gather_bytes

    names = ("dense", "moe", "resident", "working", "gather", "comm", "grads", "logits")
    terms = dict(zip(names, peak_terms(row)))
    return {**terms, "embedding": embedding_grad_bytes(row), "loss_gather": loss_gather_bytes(row, terms["gather"])}


def stage_memory(row: np.ndarray, stage: int, terms: dict | None = None) -> StageMemory:
    """The moments of pipeline rank ``stage`` over one step (see the module docstring)."""
    from fastmodel.kernels.lm.bf16_layers import bf16_row, bf16_stage_share
    from fastmodel.kernels.lm.memory import overhead_bytes
    from fastmodel.kernels.lm.memory_chunks import chunk_microbatch_bytes, rank_wgrad_pending_bytes
    from fastmodel.kernels.lm.memory_peak import (
        P_LOSS,
        P_OPTIMIZER,
        backward_moment,
        backward_passed_head_bytes,
        cuda_graph_buffer_bytes,
        head_gather_buffer_bytes,
        phase_kinds,
    )
    from fastmodel.kernels.lm.pipeline import microbatches
    from fastmodel.kernels.lm.pipeline_orders import chain_length, exact_schedule, stage_order, virtual_stage

    t = _terms(row) if terms is None else terms
    pp = int(row[C["pp"]])
    schedule, v = exact_schedule(int(row[C["pipeline_schedule"]]), int(row[C["vp"]]))
    chain = chain_length(schedule, pp, v)
    shared = (t["dense"], t["moe"], t["working"], t["gather"], t["comm"], t["grads"], t["logits"])
    w, g, o, _, _ = phase_kinds(row, float(stage), P_LOSS, *shared)            # the states, every moment
    o_step = phase_kinds(row, float(stage), P_OPTIMIZER, *shared)[2]           # + the optimizer step's transient
    kept = 1.0 - row[C["activation_offload"]]
    chunks = [chunk_microbatch_bytes(row, float(stage), float(c), t["dense"], t["moe"]) * kept for c in range(max(v, 2))]
    fsdp = int(row[C["sharding"]]) == 3
    zb = schedule == "zb_h1"     # I keeps each linear's input and output gradient until W (memory_chunks)
    residue = rank_wgrad_pending_bytes(row, float(stage)) * kept if zb else 0.0
    passed_head = backward_passed_head_bytes(row, float(stage))
    overhead = overhead_bytes(row)
    graphs = cuda_graph_buffer_bytes(row, float(stage))   # per-layer CUDA graphs' static buffers: every moment
    comm = t["comm"] + head_gather_buffer_bytes(row, float(stage))   # + the LM head's gather under Userbuffers
    index = {k: i for i, k in enumerate(MEMORY_KINDS)}
    labels, rows = ["start"], []

    def moment(activations=0.0, buffers=0.0, gradients=0.0, optimizer=o):
        values = np.zeros(len(MEMORY_KINDS))
        values[index["weights"]], values[index["gradients"]], values[index["optimizer"]] = w, g + gradients, optimizer
        values[index["activations"]], values[index["buffers"]] = activations, buffers + graphs
        values[index["overhead"]] = overhead
        rows.append(values)

    moment()
    held = 0.0
    m = int(round(microbatches(row)))
    for kind, micro_batch, part in stage_order(schedule, pp, m, stage, v):
        position = virtual_stage(schedule, pp, stage, part) % chain     # along the chain of model stages
        chunk = chunks[part]
        loss = position == chain - 1
        reverse = schedule == "dualpipe" and part == 1
        if kind in ("F", "P"):      # a forward (DualPipe: also one overlapped with a backward) holds a chunk
            held += chunk
            labels.append(op_label("F", micro_batch, reverse))
            moment(held + (t["resident"] if loss else 0.0),
                   (t["loss_gather"] + t["logits"] if loss else t["gather"]) + comm)
            continue
        if kind in ("B", "I"):      # a backward (ZB-H1: its input-gradient pass) starts
            labels.append(op_label(kind, micro_batch, reverse))
            head = passed_head if loss else 0.0      # the head inputs go with the backward of the loss's chunk
            moment(*backward_moment(row, held - head * kept + 2.0 * t["resident"], t["working"] * kept,
                                    t["gather"] + comm, t["grads"]))
            if kind == "I":
                held = max(held - chunk + residue, 0.0) if zb else held
                continue
        held = max(held - (residue if zb else chunk), 0.0)   # B, or the weight-gradient pass W, frees the rest
        if position == 0:
            labels.append(f"{op_label('B', micro_batch, reverse)} emb")
            near = held + (t["resident"] if held > 0.0 else 0.0)   # the next backward's last layer, reloaded
            if fsdp:
                moment(near, comm + t["embedding"])
            else:
                moment(near, comm, t["embedding"])
    labels.append("optimizer step")
    moment(optimizer=o_step)
    values = np.array(rows)
    share = bf16_stage_share(row, float(stage))
    if share > 0.0:  # the recipe's BF16 layers, at every moment (kernels/lm/memory.py _with_bf16_layers, §11.39)
        values = values + share * (stage_memory(bf16_row(row), stage).values - values)
    return StageMemory(stage, tuple(labels), values)


def memory_timeline(columns: np.ndarray, title: str = "the configuration",
                    memory_margin: float | None = None) -> MemoryTimeline:
    """Every pipeline rank's memory over one step of the configuration ``columns`` (one column vector).
    ``memory_margin`` (bytes): HBM kept free; default: the configuration's own allocator cache,
    ``allocator_cache_fraction x`` (``allocator_cache_fraction_expandable x`` under expandable segments) its
    allocated peak, or ``(1 - usable_hbm_fraction)`` of the HBM when that device column is set (fastmodel/analysis/margin.py ``default_margin_bytes``)."""
    from fastmodel.analysis.margin import row_margin_bytes
    from fastmodel.kernels.lm.memory import memory_row
    from fastmodel.registry.lm import MEMORY_KINDS as KINDS

    row = np.asarray(columns, dtype=np.float64)
    terms = _terms(row)
    stages = tuple(stage_memory(row, s, terms) for s in range(int(row[C["pp"]])))
    out = np.zeros(len(KINDS))
    memory_row(row, out)
    allocated = out.sum() - out[KINDS.index("overhead")]
    hbm = float(row[C["hbm_bytes"]])
    margin = row_margin_bytes(row, allocated, memory_margin)
    reserved = allocated * (1.0 + row[C["allocator_cache_fraction"]]) + out[KINDS.index("overhead")]
    marked = any(REVERSE_MARK in text for stage in stages for text in stage.labels)
    return MemoryTimeline(stages, KINDS, hbm, hbm - margin, float(reserved), title, REVERSE_NOTE if marked else "")
