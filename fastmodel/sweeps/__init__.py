"""The shared sweep machinery: any engine's grid of configurations, in memory or streamed into a zarr store.

An engine gives a *sweep plan* (:class:`~.plan.SweepPlan`: its axes, the registry of its results and the
evaluation of one unit of work; the MAD-Max, real-world and serving plans live in their wings); everything
else is the same for every engine. The grid has one dimension per axis, in the order given. Its *structural*
axes (MAD-Max: those that change the op graph) are looped over; the numeric axes are cut into
hyper-rectangular *units* of at most ``unit_configs`` points. Units are the unit of work everywhere: in memory,
streamed into a zarr store (one zarr chunk per unit, a ``unit_done`` flag written after the data, so an
interrupted sweep resumes exactly where it stopped), and as Dask distributed tasks.

Illegal and infeasible points stay in the grid: their result variables are NaN and ``status`` says why (the
engine's registry ``STATUSES``).

One module per job:

- :mod:`.plan` -- :class:`SweepPlan` and :class:`Axis`, what an engine provides;
- :mod:`.grid` -- units of work; :mod:`.ranges` -- axis values from lists and range tables;
- :mod:`.assemble` -- the in-memory Dataset; :mod:`.size` -- memory, disk and time estimates;
- :mod:`.store` -- zarr stores: atomic creation, resume, writing units, the Dask task;
- :mod:`.cluster` -- the one Dask client helper; :mod:`.progress` -- the terminal progress bar;
- :mod:`.run` -- :func:`run_in_memory`, :func:`run_to_store`, :func:`run`;
- :mod:`.file` -- sweep files of every engine.

The call that defines and runs a sweep is :func:`fastmodel.sweep` (``fastmodel/api.py``): this package is
``fastmodel.sweeps``, so the function and the package never share a name.
"""

from fastmodel.sweeps.assemble import assemble
from fastmodel.sweeps.cluster import check_scheduler_address, connect
from fastmodel.sweeps.grid import Unit
from fastmodel.sweeps.plan import Axis, SweepPlan
from fastmodel.sweeps.progress import Progress
from fastmodel.sweeps.run import run, run_in_memory, run_to_store
from fastmodel.sweeps.size import CONFIRM_CONFIGS, available_memory_bytes, check_size
from fastmodel.sweeps.store import (
    create_store,
    create_store_atomically,
    open_store_for_resume,
    stored_unit_configs,
    write_units,
)

__all__ = [
    "CONFIRM_CONFIGS", "Axis", "Progress", "SweepPlan", "Unit", "assemble", "available_memory_bytes",
    "check_scheduler_address", "check_size", "connect", "create_store", "create_store_atomically",
    "open_store_for_resume", "run", "run_in_memory", "run_to_store", "stored_unit_configs", "write_units",
]
