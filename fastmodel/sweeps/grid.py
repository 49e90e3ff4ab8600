"""The grid's layout into units of work: hyper-rectangles of at most ``unit_configs`` points.

Structural axes are looped over (MAD-Max: they change the op graph, so each
combination of their values is one Program); the numeric axes are cut into blocks (trailing axes
whole, the first one split), so a unit is one structural combination times one
block of each numeric axis, a contiguous range of the internal layout
(structural axes first, then numeric, C order).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class Unit:
    """One rectangle of the grid: fixed structural indices, a block of each numeric axis."""

    index: int
    structural: tuple[int, ...]        # index into each structural axis
    blocks: tuple[slice, ...]          # slice of each numeric axis

    @property
    def size(self) -> int:
        return math.prod(b.stop - b.start for b in self.blocks)


class GridLayout:
    """The unit layout of a :class:`~fastmodel.sweeps.plan.SweepPlan` (a base class of it): needs its
    ``axes``, ``shape``, ``structural_axes``, ``numeric_axes``, ``unit_configs``, ``block`` and ``_combos``."""

    def _block_shape(self, unit_configs: int | None = None) -> tuple[int, ...]:
        """Block size along each numeric axis for units of at most ``unit_configs`` points (default: the
        plan's): trailing axes whole, the first split."""
        sizes = [self.shape[i] for i in self.numeric_axes]
        block = [1] * len(sizes)
        room = max(1, self.unit_configs if unit_configs is None else unit_configs)
        for k in range(len(sizes) - 1, -1, -1):
            take = min(sizes[k], max(1, room))
            block[k] = take
            room //= max(1, take)
            if take < sizes[k]:
                break
        return tuple(block)

    def units(self, unit_configs: int | None = None) -> Iterator[Unit]:
        """Every unit of work, in a fixed order (unit.index counts from 0); with ``unit_configs``, units of that
        size instead of the plan's (an in-memory run of a plan whose units build no table)."""
        block = self.block if unit_configs is None else self._block_shape(unit_configs)
        numeric_sizes = [self.shape[i] for i in self.numeric_axes]
        starts = [range(0, size, b) for size, b in zip(numeric_sizes, block)]
        index = 0
        for combo in self._combos:
            for corner in itertools.product(*starts):
                blocks = tuple(slice(c, min(c + b, size)) for c, b, size in zip(corner, block, numeric_sizes))
                yield Unit(index, combo, blocks)
                index += 1

    @property
    def num_units(self) -> int:
        per_combo = math.prod(math.ceil(self.shape[i] / b) for i, b in zip(self.numeric_axes, self.block))
        return len(self._combos) * per_combo

    def region(self, unit: Unit) -> tuple:
        """Index of the unit's region in the full grid (ints for structural dims)."""
        index: list[Any] = [None] * len(self.axes)
        for axis, value in zip(self.structural_axes, unit.structural):
            index[axis] = value
        for axis, block in zip(self.numeric_axes, unit.blocks):
            index[axis] = block
        return tuple(index)

    def unit_offset(self, unit: Unit) -> int:
        """Flat offset of the unit in the internal layout (structural axes first, then numeric)."""
        numeric_sizes = [self.shape[i] for i in self.numeric_axes]
        numeric_size = math.prod(numeric_sizes)
        combo_flat = int(np.ravel_multi_index(unit.structural, [self.shape[i] for i in self.structural_axes])) \
            if self.structural_axes else 0
        corner = [b.start for b in unit.blocks]
        corner_flat = int(np.ravel_multi_index(corner, numeric_sizes)) if numeric_sizes else 0
        return combo_flat * numeric_size + corner_flat

    @property
    def internal_dims(self) -> tuple[str, ...]:
        return tuple(self.axes[i].name for i in (*self.structural_axes, *self.numeric_axes))

    @property
    def internal_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[i] for i in (*self.structural_axes, *self.numeric_axes))
