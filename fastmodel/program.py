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
from fastmodel.kernels.layout import CATEGORY_NAMES, STREAM_COMM, STREAM_COMPUTE


@dataclass(frozen=True, eq=False)
class Program:
    """Dense op arrays of one program structure (shared by many configs)."""

    op_stream: np.ndarray     # int8: 0 compute, 1 communication
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

    @property
    def num_ops(self) -> int:
        return int(self.op_stream.shape[0])

    @property
    def num_compute_ops(self) -> int:
        return int(np.count_nonzero(self.op_stream == STREAM_COMPUTE))

    @property
    def num_comm_ops(self) -> int:
        return int(np.count_nonzero(self.op_stream == STREAM_COMM))

    @cached_property
    def kernel_arrays(self) -> ProgramArrays:
        """The op graph as the kernels' ``ProgramArrays`` bundle (built once per Program, fixed dtypes)."""
        return make_program_arrays(*(getattr(self, name) for name in ProgramArrays._fields))

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

    def begin_layers(self) -> None:
        """Start a run of layers (one per phase); mark each with :meth:`layer`."""
        self._layer_runs.append([])

    def layer(self) -> None:
        """The next op starts a new layer of the current run."""
        self._layer_runs[-1].append(len(self._names))

    def end_layers(self) -> None:
        """The current run of layers ends before the next op."""
        self._layer_runs[-1].append(len(self._names))

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
        return Program(**arrays, op_names=tuple(self._names), **seg)


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
