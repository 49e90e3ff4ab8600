"""Zarr sweep stores of every engine: created atomically, one chunk per unit, a ``unit_done`` flag after each
unit's data.

An interrupted sweep resumes exactly where it stopped; a store made by another definition is refused.
:func:`write_units` is also the Dask task's body (:func:`write_units_task` rebuilds the plan from its engine
name and JSON definition in the worker, through the engine's door: ``fastmodel.engines``).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import xarray as xr

from fastmodel.errors import SweepError
from fastmodel.sweeps.buffers import result_matrix
from fastmodel.sweeps.grid import Unit
from fastmodel.sweeps.plan import SweepPlan


def _chunks(plan: SweepPlan) -> tuple[int, ...]:
    """zarr chunks: one per unit (1 along structural axes, the block along numeric ones)."""
    chunks = [1] * len(plan.axes)
    for axis, block in zip(plan.numeric_axes, plan.block):
        chunks[axis] = block
    return tuple(chunks)


def create_store(plan: SweepPlan, path: str) -> None:
    """Create the store atomically: metadata, coordinates, every status ``not_computed``, ``unit_done`` all false.

    The store is built under a temporary name beside ``path`` and renamed onto it when complete, so an
    interruption (Ctrl-C, SIGKILL, a full disk) leaves either no store or a whole one, never a half-made one.
    """
    import dask.array as da

    target = Path(os.path.abspath(path))
    if target.exists():
        raise SweepError(f"{path} exists")
    chunks = _chunks(plan)
    coords = plan.registry.COORDS
    data = {}
    for var in plan.stored():
        extra = tuple(len(coords[d]) for d in var.dims)
        shape, chunked = (*plan.shape, *extra), (*chunks, *extra)
        array = da.zeros(shape, dtype=bool, chunks=chunked) if var.dtype == "bool" else \
            da.full(shape, np.nan, chunks=chunked)
        data[var.name] = ((*plan.dims, *var.dims), array, var.attrs)
    data["status"] = (plan.dims, da.zeros(plan.shape, dtype=np.int8, chunks=chunks), plan.status_attrs())
    data["unit_done"] = (("sweep_unit",), da.zeros(plan.num_units, dtype=bool, chunks=1),
                         {"long_name": "unit of work written", "units": "1"})
    ds = xr.Dataset(data, coords=plan.coords(), attrs={**plan.dataset_attrs(), "fastmodel_engine": plan.engine})
    not_computed = plan.status_code("not_computed")

    def mark(status) -> None:  # every point starts as not computed; a unit's write replaces its region
        for unit in plan.units():
            block_shape = tuple(b.stop - b.start for b in unit.blocks)
            status[plan.region(unit)] = np.full(block_shape, not_computed, dtype=np.int8)

    create_store_atomically(ds, path, mark)


def create_store_atomically(ds: xr.Dataset, path: str, mark_status) -> None:
    """Write ``ds``'s metadata as a zarr store at ``path`` (no data computed), let ``mark_status(status)`` fill
    the ``status`` array, then rename it into place: an interruption (Ctrl-C, SIGKILL, a full disk) leaves no
    store or a whole one. The caller holds the writer lock, so leftovers of a killed creator are removed."""
    import shutil
    import tempfile

    import zarr

    target = Path(os.path.abspath(path))
    for stale in target.parent.glob(f".{target.name}.creating-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp = tempfile.mkdtemp(prefix=f".{target.name}.creating-", dir=target.parent)
    except OSError as error:
        raise SweepError(f"{path}: cannot create: {error.strerror}") from None
    try:
        ds.to_zarr(tmp, mode="w", compute=False, consolidated=True, zarr_format=2)
        mark_status(zarr.open_group(tmp, mode="r+")["status"])
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def stored_unit_configs(path: str) -> int | None:
    """The unit size a store was made with (so --resume needs no --unit-configs)."""
    import zarr

    try:
        return json.loads(zarr.open_group(path, mode="r").attrs["sweep"]).get("unit_configs")
    except Exception:  # noqa: BLE001 - not a store: open_store_for_resume reports it
        return None


def open_store_for_resume(plan: SweepPlan, path: str) -> np.ndarray:
    """The ``unit_done`` flags of an existing store made by the same sweep (``io.store.resume_flags``)."""
    from fastmodel.io.store import resume_flags

    return resume_flags(path, plan.definition(), plan.num_units, ("status", *(s.name for s in plan.stored())),
                        plan.status_attrs()["flag_meanings"])


def write_units(plan: SweepPlan, path: str, units: list[Unit], progress: Callable[[int], None] | None = None) -> int:
    """Evaluate ``units`` and write each into the store; the done flag goes last."""
    import zarr

    group = zarr.open_group(path, mode="r+")
    stored = plan.stored()
    arrays = {var.name: group[var.name] for var in stored}
    status_array, done = group["status"], group["unit_done"]
    written = 0
    for unit in units:
        n = unit.size
        out = result_matrix(plan.num_rows, n)
        status = np.zeros(n, dtype=np.int8)
        plan.evaluate_unit(unit, out, status, 0)
        region = plan.region(unit)
        block_shape = tuple(b.stop - b.start for b in unit.blocks)
        for var in stored:
            values = var.block(out)
            if var.dims:
                arrays[var.name][(*region, slice(None))] = np.moveaxis(values.reshape((-1, *block_shape)), 0, -1)
            else:
                arrays[var.name][region] = values.reshape(block_shape)
        status_array[region] = status.reshape(block_shape)
        done[unit.index] = True
        written += n
        if progress:
            progress(n)
    return written


@lru_cache(maxsize=8)
def plan_from_json(engine: str, definition_json: str) -> SweepPlan:
    """The plan of an engine's JSON definition, cached (a Dask worker rebuilds it once for all its tasks)."""
    from fastmodel import engines

    return engines.ENGINES[engine].door().sweep_plan_from_definition(json.loads(definition_json))


def write_units_task(engine: str, definition_json: str, path: str, unit_indices: list[int]) -> int:
    """Dask task: rebuild the plan in the worker and write some units."""
    plan = plan_from_json(engine, definition_json)
    wanted = set(unit_indices)
    units = [u for u in plan.units() if u.index in wanted]
    return write_units(plan, path, units)
