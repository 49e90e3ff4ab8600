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


def _same_layer_shifted(stream, slot, cat, barrier, dep_ptr, dep_idx, a: int, b: int, period: int) -> bool:
    """True if ops b..b+period equal ops a..a+period with every dependency shifted by b - a."""
    shift = b - a
    for k in range(period):
        i, j = a + k, b + k
        if stream[i] != stream[j] or slot[i] != slot[j] or cat[i] != cat[j] or barrier[i] or barrier[j]:
            return False
        di = dep_idx[dep_ptr[i]:dep_ptr[i + 1]]
        dj = dep_idx[dep_ptr[j]:dep_ptr[j + 1]]
        if di.shape != dj.shape or not np.array_equal(di + shift, dj):
            return False
    return True


def find_segments(stream, slot, cat, barrier, dep_ptr, dep_idx, layer_runs) -> list[tuple[int, int, int, int]]:
    """Maximal runs of identical layers, verified op by op: (first op, period, layers, window).

    A run qualifies when each layer equals the previous one shifted by the
    period (streams, slots, categories, dependencies) and has no barrier. The
    window is the number of trailing layers whose op end times, with the two
    stream cursors, form the schedule state: enough for the next layer's
    dependencies and for every later op that depends into the run. The
    scheduler may extrapolate a run once that state advances uniformly.
    """
    n_ops = len(stream)
    segments = []
    for bounds in layer_runs:
        starts, end = bounds[:-1], bounds[-1]
        j = 1
        while j < len(starts):
            period = (starts[j + 1] if j + 1 < len(starts) else end) - starts[j]
            first = j - 1
            if period <= 0 or starts[j] - starts[first] != period:
                j += 1
                continue
            last = first
            while last + 1 < len(starts):
                nxt = starts[last + 1]
                nxt_end = starts[last + 2] if last + 2 < len(starts) else end
                if nxt_end - nxt != period or not _same_layer_shifted(stream, slot, cat, barrier, dep_ptr, dep_idx,
                                                                      starts[last], nxt, period):
                    break
                last += 1
            layers = last - first + 1
            if layers >= 4:
                seg_start = starts[first]
                seg_end = seg_start + layers * period
                lookback = 1
                for op in range(seg_start + period, seg_end):
                    for d in dep_idx[dep_ptr[op]:dep_ptr[op + 1]]:
                        lookback = max(lookback, (op - seg_start) // period - (int(d) - seg_start) // period)
                tail = 1
                for op in range(seg_end, n_ops):
                    for d in dep_idx[dep_ptr[op]:dep_ptr[op + 1]]:
                        if seg_start <= d < seg_end:
                            tail = max(tail, layers - (int(d) - seg_start) // period)
                window = max(lookback, tail)
                if window < layers - 1:
                    segments.append((seg_start, period, layers, window))
            j = last + 2
    return segments
