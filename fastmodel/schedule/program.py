"""Programs: the op graph of one iteration as dense arrays.

Ops are listed in emission order; each has a stream, a cost slot, a category
and dependencies given as integer indices of earlier ops (CSR). The
:class:`ProgramBuilder` lets lowering code name ops and refer to them by key;
a dependency on a key that was never emitted is dropped, as in the reference
(e.g. layer −1, or allgathers of a plan without FSDP).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from fastmodel.kernels.args import ProgramArrays, make_program_arrays
from fastmodel.kernels.streams import CATEGORY_NAMES, MAX_STREAMS, STREAM_COMPUTE


@dataclass(frozen=True, eq=False)
class Program:
    """Dense op arrays of one program structure (shared by many configs)."""

    op_stream: np.ndarray     # int8: 0 compute, 1.. communication streams (< layout.MAX_STREAMS)
    op_slot: np.ndarray       # int32: index into the family's cost slots
    op_category: np.ndarray   # int8: layout.CAT_*
    op_barrier: np.ndarray    # bool: both streams synchronise before this op
    dep_ptr: np.ndarray       # int32 CSR row pointer, len n_ops + 1
    dep_idx: np.ndarray       # int32 indices of earlier ops
    op_names: tuple[str, ...] = field(repr=False)
    # periodic segments (see find_segments): first op, ops per layer, layers, state window
    seg_start: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32), repr=False)
    seg_period: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32), repr=False)
    seg_layers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32), repr=False)
    seg_window: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32), repr=False)
    # repeated phases (ProgramBuilder.begin_repeat): first op, one past the last, times it runs in a row
    repeat_start: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32), repr=False)
    repeat_end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32), repr=False)
    repeat_count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32), repr=False)

    @property
    def num_ops(self) -> int:
        return int(self.op_stream.shape[0])

    @property
    def n_streams(self) -> int:
        """Streams the ops use: compute (0) and each communication stream up to the highest one used."""
        return int(self.op_stream.max()) + 1 if self.num_ops else 1

    @cached_property
    def op_runs(self) -> np.ndarray:
        """How many times each op runs in one iteration (its phase's repeat count; 1 outside repeated phases)."""
        runs = np.ones(self.num_ops, dtype=np.int64)
        for a, b, r in zip(self.repeat_start, self.repeat_end, self.repeat_count):
            runs[a:b] = r
        return runs

    @property
    def num_compute_ops(self) -> int:
        return int(self.op_runs[self.op_stream == STREAM_COMPUTE].sum())

    @property
    def num_comm_ops(self) -> int:
        return int(self.op_runs[self.op_stream != STREAM_COMPUTE].sum())

    def phases(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(first op, one past the last, repeat count) of every phase, covering the ops in order: the repeated
        phases and, between them, phases that run once."""
        bounds, starts, ends, counts = 0, [], [], []
        for a, b, r in zip(self.repeat_start.tolist(), self.repeat_end.tolist(), self.repeat_count.tolist()):
            if a > bounds:
                starts.append(bounds), ends.append(a), counts.append(1)
            starts.append(a), ends.append(b), counts.append(r)
            bounds = b
        if bounds < self.num_ops or not starts:
            starts.append(bounds), ends.append(self.num_ops), counts.append(1)
        return (np.array(starts, dtype=np.int32), np.array(ends, dtype=np.int32), np.array(counts, dtype=np.int32))

    @cached_property
    def kernel_arrays(self) -> ProgramArrays:
        """The op graph as the kernels' ``ProgramArrays`` bundle (built once per Program, fixed dtypes)."""
        if self.n_streams > MAX_STREAMS:
            raise ValueError(f"a Program uses {self.n_streams} streams; the scheduler has room for {MAX_STREAMS}")
        arrays = [self.op_stream, self.op_slot, self.op_category, self.op_barrier, self.dep_ptr, self.dep_idx,
                  self.seg_start, self.seg_period, self.seg_layers, self.seg_window]
        return make_program_arrays(*arrays, *self.phases(), self.n_streams)

    def category_name(self, index: int) -> str:
        return CATEGORY_NAMES[int(self.op_category[index])]


class ProgramBuilder:
    """Accumulates ops by key, then freezes them into a :class:`Program`."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self._stream: list[int] = []
        self._slot: list[int] = []
        self._category: list[int] = []
        self._barrier: list[bool] = []
        self._deps: list[list[int]] = []
        self._names: list[str] = []
        self._pending_barrier = False
        self._layer_runs: list[list[int]] = []
        self._repeats: list[list[int]] = []     # [first op, one past the last (-1: open), count]

    def begin_layers(self) -> None:
        """Start a run of layers (one per phase); mark each with :meth:`layer`."""
        self._layer_runs.append([])

    def layer(self) -> None:
        """The next op starts a new layer of the current run."""
        self._layer_runs[-1].append(len(self._names))

    def end_layers(self) -> None:
        """The current run of layers ends before the next op."""
        self._layer_runs[-1].append(len(self._names))

    def begin_repeat(self, count: int) -> None:
        """The ops up to :meth:`end_repeat` form a phase that runs ``count`` times in a row (e.g. the
        per-micro-batch body of gradient accumulation); each run continues every stream's cursor, and a
        dependency on an op of the phase refers to its latest run. Phases do not nest."""
        if self._repeats and self._repeats[-1][1] < 0:
            raise ValueError("begin_repeat inside a repeated phase: phases do not nest")
        if int(count) < 1:
            raise ValueError(f"repeat count must be >= 1, got {count}")
        self._repeats.append([len(self._names), -1, int(count)])

    def end_repeat(self) -> None:
        """The current repeated phase ends before the next op."""
        if not self._repeats or self._repeats[-1][1] >= 0:
            raise ValueError("end_repeat without begin_repeat")
        self._repeats[-1][1] = len(self._names)

    def has(self, key: str) -> bool:
        return key in self._index

    def barrier(self) -> None:
        """Synchronise both streams before the next op (phase boundary)."""
        self._pending_barrier = True

    def op(self, key: str, stream: int, slot: int, category: int, deps=()) -> None:
        """Append op ``key``; ``deps`` are keys of earlier ops (missing ones are ignored)."""
        if key in self._index:
            raise ValueError(f"duplicate op key {key!r}")
        resolved = sorted({self._index[d] for d in deps if d in self._index})
        self._index[key] = len(self._names)
        self._names.append(key)
        self._stream.append(stream)
        self._slot.append(slot)
        self._category.append(category)
        self._barrier.append(self._pending_barrier)
        self._deps.append(resolved)
        self._pending_barrier = False

    def build(self) -> Program:
        ptr = np.zeros(len(self._deps) + 1, dtype=np.int32)
        ptr[1:] = np.cumsum([len(d) for d in self._deps])
        idx = np.array([i for deps in self._deps for i in deps], dtype=np.int32)
        arrays = dict(
            op_stream=np.array(self._stream, dtype=np.int8),
            op_slot=np.array(self._slot, dtype=np.int32),
            op_category=np.array(self._category, dtype=np.int8),
            op_barrier=np.array(self._barrier, dtype=np.bool_),
            dep_ptr=ptr,
            dep_idx=idx,
        )
        segments = find_segments(arrays["op_stream"], arrays["op_slot"], arrays["op_category"], arrays["op_barrier"],
                                 ptr, idx, self._layer_runs)
        seg = {name: np.array([s[k] for s in segments], dtype=np.int32)
               for k, name in enumerate(("seg_start", "seg_period", "seg_layers", "seg_window"))}
        if self._repeats and self._repeats[-1][1] < 0:
            raise ValueError("a repeated phase is still open: call end_repeat")
        repeats = [r for r in self._repeats if r[1] > r[0]]
        for first, last, _ in repeats:     # a periodic segment lies inside one phase or outside every phase
            for s0, period, layers, _w in segments:
                s1 = s0 + period * layers
                if s0 < last and s1 > first and not (first <= s0 and s1 <= last):
                    raise ValueError(f"layers {s0}..{s1} straddle the repeated phase {first}..{last}")
        rep = {name: np.array([r[k] for r in repeats], dtype=np.int32)
               for k, name in enumerate(("repeat_start", "repeat_end", "repeat_count"))}
        return Program(**arrays, op_names=tuple(self._names), **seg, **rep)


def _ranges(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """first[0]..first[0]+lengths[0]-1, first[1].., ... concatenated (int64)."""
    total = int(lengths.sum())
    offsets = np.repeat(first - (np.cumsum(lengths) - lengths), lengths)
    return offsets + np.arange(total, dtype=np.int64)


def _same_as_next(stream, slot, cat, barrier, dep_ptr, dep_idx, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per pair of adjacent layers (i, i+1): layer i+1 equals layer i shifted by its length -- same length,
    streams, slots and categories op by op, no barrier, every dependency shifted. All pairs at once."""
    result = (lengths[:-1] == lengths[1:]) & (lengths[:-1] > 0)
    pairs = np.flatnonzero(result)
    if not len(pairs):
        return result
    period = lengths[pairs]
    ops = _ranges(starts[pairs], period)
    shift = np.repeat(period, period)
    other = ops + shift
    good = ((stream[ops] == stream[other]) & (slot[ops] == slot[other]) & (cat[ops] == cat[other])
            & ~barrier[ops] & ~barrier[other])
    count = (dep_ptr[ops + 1] - dep_ptr[ops]).astype(np.int64)
    good &= count == dep_ptr[other + 1] - dep_ptr[other]
    count = np.where(good, count, 0)           # equal counts: the two ops' dependency lists line up
    owner = np.repeat(np.arange(len(ops)), count)
    entry = _ranges(np.zeros(len(ops), dtype=np.int64), count)
    mismatch = dep_idx[dep_ptr[ops][owner] + entry] + shift[owner] != dep_idx[dep_ptr[other][owner] + entry]
    good[owner[mismatch]] = False
    failures = np.bincount(np.repeat(np.arange(len(pairs)), period)[~good], minlength=len(pairs))
    result[pairs] = failures == 0
    return result


def _entries(dep_ptr, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
    """(op, entry in dep_idx) of every dependency of ops first..last-1 (int64, in order)."""
    counts = np.diff(dep_ptr[first:last + 1]).astype(np.int64)
    return np.repeat(np.arange(first, last, dtype=np.int64), counts), np.arange(dep_ptr[first], dep_ptr[last])


def find_segments(stream, slot, cat, barrier, dep_ptr, dep_idx, layer_runs) -> list[tuple[int, int, int, int]]:
    """Maximal runs of identical layers, verified op by op: (first op, period, layers, window).

    A run qualifies when each layer equals the previous one shifted by the
    period (streams, slots, categories, dependencies) and has no barrier. The
    window is the number of trailing layers whose op end times, with the two
    stream cursors, form the schedule state: enough for the next layer's
    dependencies and for every later op that depends into the run. The
    scheduler may extrapolate a run once that state advances uniformly.
    Each run of layers is compared in a few whole-array operations.
    """
    n_ops = len(stream)
    segments = []
    for bounds in layer_runs:
        if len(bounds) < 3:   # fewer than two layers
            continue
        starts = np.asarray(bounds[:-1], dtype=np.int64)
        lengths = np.diff(np.asarray(bounds, dtype=np.int64))
        same = np.concatenate(([0], _same_as_next(stream, slot, cat, barrier, dep_ptr, dep_idx, starts, lengths),
                               [0])).astype(np.int8)
        edges = np.diff(same)
        for first, stop in zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()):
            layers = stop - first + 1           # pairs first..stop-1 hold: layers first..stop
            if layers < 4:
                continue
            seg_start, period = int(starts[first]), int(lengths[first])
            seg_end = seg_start + layers * period
            ops, entries = _entries(dep_ptr, seg_start + period, seg_end)
            deps = dep_idx[entries].astype(np.int64)
            lookback = max(1, int(((ops - seg_start) // period - (deps - seg_start) // period).max(initial=1)))
            _, entries = _entries(dep_ptr, seg_end, n_ops)
            deps = dep_idx[entries].astype(np.int64)
            deps = deps[(seg_start <= deps) & (deps < seg_end)]
            tail = max(1, int((layers - (deps - seg_start) // period).max(initial=1)))
            window = max(lookback, tail)
            if window < layers - 1:
                segments.append((seg_start, period, layers, window))
    return segments
