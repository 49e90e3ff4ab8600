"""Programs: the op graph of one iteration as dense arrays.

Ops are listed in emission order; each has a stream, a cost slot, a category
and dependencies given as integer indices of earlier ops (CSR). The
:class:`ProgramBuilder` lets lowering code name ops and refer to them by key;
a dependency on a key that was never emitted is dropped, as in the reference
(e.g. layer −1, or allgathers of a plan without FSDP).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

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

    @property
    def num_ops(self) -> int:
        return int(self.op_stream.shape[0])

    @property
    def num_compute_ops(self) -> int:
        return int(np.count_nonzero(self.op_stream == STREAM_COMPUTE))

    @property
    def num_comm_ops(self) -> int:
        return int(np.count_nonzero(self.op_stream == STREAM_COMM))

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The arrays in the scheduler kernel's argument order."""
        return (self.op_stream, self.op_slot, self.op_category, self.op_barrier, self.dep_ptr, self.dep_idx)

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
        return Program(**arrays, op_names=tuple(self._names))
