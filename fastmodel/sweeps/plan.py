"""What an engine gives the shared sweep machinery: a sweep plan.

A :class:`SweepPlan` is a grid (its :class:`Axis` list: dimensions, coordinates and which axes are
*structural*, i.e. looped over one by one), the engine whose registry names its results, and a function that
evaluates one unit of work into rows of a result matrix. Everything else -- the units of work and their order
(:mod:`.grid`), the in-memory Dataset (:mod:`.assemble`), zarr stores with resume and the Dask task
(:mod:`.store`), progress, size estimates -- is the same for every engine and lives here, in the shared
package; the engines build their plans in their wings (``fastmodel/madmax/sweep/``,
``fastmodel/lm/sweep_plan.py``, ``fastmodel/serve/sweep_plan.py``).

A plan subclass sets ``engine`` and ``ESTIMATE_CONFIGS_PER_S``, calls :meth:`SweepPlan.set_axes` and defines
``evaluate_unit(unit, out, status, offset)`` (rows of the engine's ``RESULTS`` into ``out[:, offset:offset +
unit.size]``, C order over the unit's numeric block), ``definition()`` (JSON that rebuilds it: resume and Dask
workers) and ``dataset_attrs()``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastmodel.errors import SweepError
from fastmodel.sweeps.grid import GridLayout, Unit


def grid_lanes() -> int:
    """The lanes a grid kernel deals its ``prange`` chunks over (kernels/lm/grid.py ``evaluate_grid``,
    kernels/serve/fused.py ``serve_grid``): numba's thread count, 1 when the kernels run interpreted. Passed in
    by the caller because asking numba for it inside a kernel makes the kernel uncacheable."""
    from fastmodel.kernels.jit import INTERPRETED

    if INTERPRETED:
        return 1
    import numba

    return numba.get_num_threads()


@dataclass(frozen=True)
class Axis:
    """One dimension of a sweep grid."""

    name: str                     # dataset dimension
    path: str                     # what it sets: a spec field path, a column name, "plan", "model", ...
    values: np.ndarray            # coordinate values (labels for plans, devices, precisions)
    structural: bool = False      # looped over one value at a time (MAD-Max: changes the op graph)
    attrs: dict = field(default_factory=dict, compare=False)   # coordinate attrs (field, units)


@dataclass(frozen=True)
class Stored:
    """One dataset variable of a plan: its rows in the result matrix, extra dims and dtype, attrs."""

    name: str
    rows: tuple[int, ...]
    dims: tuple[str, ...]         # beyond the grid's dims (one row per coordinate)
    dtype: str                    # "float64" | "bool"
    attrs: dict
    aliases: tuple[str, ...] = ()

    def block(self, out: np.ndarray) -> np.ndarray:
        """The variable's rows of ``out`` (a view when they are consecutive): ``(n,)`` or ``(k, n)``."""
        first = self.rows[0]
        if not self.dims:
            values = out[first]
        elif self.rows == tuple(range(first, first + len(self.rows))):
            values = out[first:first + len(self.rows)]
        else:
            values = out[list(self.rows)]
        return values > 0.5 if self.dtype == "bool" else values


class SweepPlan(GridLayout):
    """A grid of configurations of one engine, cut into units of work (see the module docstring)."""

    engine: str = ""
    #: configurations per second assumed for the up-front time estimate of ``fastmodel sweep``
    ESTIMATE_CONFIGS_PER_S: float = 1e6
    #: default size of a unit of work, in configurations (and of a zarr chunk)
    UNIT_CONFIGS = 1 << 18
    #: size of a unit of an in-memory run, where it differs (None: the plan's unit size): plans whose kernel builds
    #: each point from its index (no parameter table) run in memory in few large units, as one kernel call each
    MEMORY_UNIT_CONFIGS: int | None = None

    def set_axes(self, axes: list[Axis], unit_configs: int, max_structural: int | None = None) -> None:
        """The grid of ``axes`` (in dataset order) cut into units of at most ``unit_configs`` points."""
        self.axes = list(axes)
        self.unit_configs = int(unit_configs)
        if self.unit_configs < 1:
            raise SweepError(f"unit_configs must be at least 1 (got {unit_configs})")
        self.shape = tuple(len(a.values) for a in self.axes)
        self.dims = tuple(a.name for a in self.axes)
        if len(set(self.dims)) != len(self.dims):
            raise SweepError(f"two axes make the same dimension: {', '.join(self.dims)}")
        self.num_configs = math.prod(self.shape)
        self.structural_axes = [i for i, a in enumerate(self.axes) if a.structural]
        self.numeric_axes = [i for i, a in enumerate(self.axes) if not a.structural]
        combos = math.prod(self.shape[i] for i in self.structural_axes)
        if max_structural is not None and combos > max_structural:
            raise SweepError(f"the structural axes ({', '.join(self.axes[i].name for i in self.structural_axes)}) "
                             f"make {combos:,} combinations, each its own program; at most {max_structural:,}")
        self.block = self._block_shape()
        self._combos = list(itertools.product(*(range(self.shape[i]) for i in self.structural_axes)))

    # --- what the engine's registry says ------------------------------------------------------------------

    @property
    def registry(self):
        from fastmodel.registry import engine_registry

        return engine_registry(self.engine)

    @property
    def num_rows(self) -> int:
        """Rows of the result matrix a unit is evaluated into (the engine's ``RESULTS``)."""
        return len(self.registry.RESULTS)

    def stored(self) -> tuple[Stored, ...]:
        """The dataset variables of this plan, from the registry: every variable of the engine except one
        named like an axis (the coordinate holds it, e.g. MAD-Max's ``global_batch`` under a global_batch
        axis). Cached."""
        cached = getattr(self, "_stored", None)
        if cached is None:
            from fastmodel.registry import dataset_variables

            index = {r.name: i for i, r in enumerate(self.registry.RESULTS)}
            cached = tuple(Stored(var.name, tuple(index[r] for r in rows), var.dims, var.dtype, var.attrs(),
                                  var.aliases)
                           for var, rows in dataset_variables(self.engine) if var.name not in self.dims)
            self._stored = cached
        return cached

    def status_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.registry.STATUSES)

    def status_code(self, name: str) -> int:
        return self.status_names().index(name)

    def status_attrs(self) -> dict:
        from fastmodel.registry import status_attrs

        return status_attrs(self.engine)

    def extra_coords(self) -> dict[str, Any]:
        """Coordinates of dims beyond the grid (the registry's ``COORDS``) and scalar coordinates
        (:meth:`scalar_coords`)."""
        from fastmodel.registry import coordinate_attrs

        used = {d for s in self.stored() for d in s.dims}
        coords = {d: (d, np.array(v), coordinate_attrs(d)) for d, v in self.registry.COORDS.items() if d in used}
        coords.update({name: ((), value, coordinate_attrs(name, numeric=np.asarray(value).dtype.kind in "iuf"))
                       for name, value in self.scalar_coords().items()})
        return coords

    def scalar_coords(self) -> dict[str, Any]:
        """0-d coordinates of fixed values worth keeping (e.g. the serving device when it is not swept)."""
        return {}

    def coords(self) -> dict[str, Any]:
        import xarray as xr

        from fastmodel.registry import coordinate_attrs

        coords = {}
        for axis in self.axes:     # labelled: a long_name, units on numbers (the engine's, else the registry's)
            values = axis.values.astype(str) if axis.values.dtype == object else axis.values
            coords[axis.name] = xr.Variable(axis.name, values, attrs=coordinate_attrs(
                axis.name, axis.attrs, values.dtype.kind in "iuf", columns=self.engine != "madmax"))
        coords.update(self.extra_coords())
        return coords

    def result_bytes(self) -> int:
        """Bytes of the in-memory result matrix and status."""
        return self.num_configs * (8 * self.num_rows + 1)

    def stored_bytes_per_config(self) -> int:
        """Uncompressed bytes one point takes on disk: every stored value and the status byte."""
        return sum(len(s.rows) * (1 if s.dtype == "bool" else 8) for s in self.stored()) + 1


__all__ = ["Axis", "Stored", "SweepPlan", "Unit"]
