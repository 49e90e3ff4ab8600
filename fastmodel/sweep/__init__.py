"""Sweeps: a Cartesian grid of spec fields and plans, evaluated into a labeled Dataset.

The grid has one dimension per axis, in the order given. Axes that change
the op graph (plan, layer count, precision, task kind, freezing) are
*structural*; each combination of them is one Program. The remaining
(numeric) axes are cut into hyper-rectangular *units* of at most
``unit_configs`` points; a unit is evaluated as one parameter table through
the kernels and written into its region of the grid. Units are the unit of
work everywhere: in memory, streamed into a zarr store (one zarr chunk per
unit, a ``unit_done`` flag written after the data, so an interrupted sweep
resumes exactly where it stopped), and as Dask distributed tasks.

Illegal and infeasible points stay in the grid: their result variables are
NaN and ``status`` says why (``registry.madmax.STATUS_NAMES``); memory variables are
kept for ``does_not_fit`` points so one can see by how much they miss.

One module per job:

- :mod:`.definition` -- :class:`Sweep` (axes, their checks, the JSON round trip), built on
  :mod:`.grid` (units of work), :mod:`.evaluation` (one unit through the kernels) and
  :mod:`.dataset` (coordinates, attributes, the in-memory Dataset);
- :mod:`.size` -- memory, disk and time estimates before a run;
- :mod:`.store` -- zarr stores: atomic creation, resume, writing units;
- :mod:`.cluster` -- the one Dask client helper (addresses, connecting, units on workers);
- :mod:`.progress` -- the terminal progress bar;
- :mod:`.run` -- :func:`run_in_memory`, :func:`run_to_store`;
- :mod:`.api` -- :func:`sweep`, the call behind ``fastmodel.sweep(...)``.

``import fastmodel.sweep`` gives this package; calling it calls :func:`sweep`
(``fastmodel.sweep(...)`` and ``fastmodel.sweep.sweep(...)`` are the same).
"""

import sys

from fastmodel.sweep.api import sweep
from fastmodel.sweep.cluster import check_scheduler_address, connect
from fastmodel.sweep.dataset import assemble
from fastmodel.sweep.definition import FLOAT_VARIABLES, MAX_STRUCTURAL_COMBINATIONS, UNIT_CONFIGS, Axis, Sweep
from fastmodel.sweep.grid import Unit
from fastmodel.sweep.progress import Progress
from fastmodel.sweep.run import run_in_memory, run_to_store
from fastmodel.sweep.size import CONFIRM_CONFIGS, ESTIMATE_CONFIGS_PER_S, available_memory_bytes, check_size
from fastmodel.sweep.store import (
    create_store,
    create_store_atomically,
    open_store_for_resume,
    stored_unit_configs,
    write_units,
)

__all__ = [
    "CONFIRM_CONFIGS", "ESTIMATE_CONFIGS_PER_S", "FLOAT_VARIABLES", "MAX_STRUCTURAL_COMBINATIONS", "UNIT_CONFIGS",
    "Axis", "Progress", "Sweep", "Unit", "assemble", "available_memory_bytes", "check_scheduler_address",
    "check_size", "connect", "create_store", "create_store_atomically", "open_store_for_resume", "run_in_memory",
    "run_to_store", "stored_unit_configs", "sweep", "write_units",
]


class _CallableModule(type(sys.modules[__name__])):
    """``fastmodel.sweep`` is this package (``import fastmodel.sweep`` gives it) and also calls
    :func:`sweep`, so ``fastmodel.sweep(...)`` works whichever of the two the parent package's attribute holds."""

    def __call__(self, *args, **kwargs):
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
