"""Zarr sweep stores: created atomically, one chunk per unit, a ``unit_done`` flag after each unit's data.

An interrupted sweep resumes exactly where it stopped; a store made by another
definition is refused. :func:`write_units` is also the Dask task's body
(:func:`write_units_task` rebuilds the sweep from its JSON in the worker).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import numpy as np
import xarray as xr

from fastmodel.errors import SweepError
from fastmodel.kernels.madmax.layout import N_RESULTS, RESULTS
from fastmodel.madmax.lowering.params import STATUS
from fastmodel.sweep.definition import Sweep, sweep_from_json
from fastmodel.sweep.grid import Unit


def _chunks(sweep: Sweep) -> tuple[int, ...]:
    """zarr chunks: one per unit (1 along structural axes, the block along numeric ones)."""
    chunks = [1] * len(sweep.axes)
    for axis, block in zip(sweep.numeric_axes, sweep.block):
        chunks[axis] = block
    return tuple(chunks)


def create_store(sweep: Sweep, path: str) -> None:
    """Create the store atomically: metadata, coordinates, every status ``not_computed``, ``unit_done`` all false.

    The store is built under a temporary name beside ``path`` and renamed onto
    it when complete, so an interruption (Ctrl-C, SIGKILL, a full disk) leaves
    either no store or a whole one, never a half-made one.
    """
    import dask.array as da

    target = Path(os.path.abspath(path))
    if target.exists():
        raise SweepError(f"{path} exists")
    chunks = _chunks(sweep)
    data = {}
    for name in sweep.float_variables:
        data[name] = (sweep.dims, da.full(sweep.shape, np.nan, chunks=chunks), sweep.variable_attrs(name))
    data["fits_memory"] = (sweep.dims, da.zeros(sweep.shape, dtype=bool, chunks=chunks), sweep.variable_attrs("fits_memory"))
    data["status"] = (sweep.dims, da.zeros(sweep.shape, dtype=np.int8, chunks=chunks), sweep.variable_attrs("status"))
    data["unit_done"] = (("sweep_unit",), da.zeros(sweep.num_units, dtype=bool, chunks=1),
                         {"long_name": "unit of work written", "units": "1"})
    ds = xr.Dataset(data, coords=sweep.coords(), attrs=sweep.dataset_attrs())

    def not_computed(status) -> None:  # every point starts as not computed; a unit's write replaces its region
        for unit in sweep.units():
            block_shape = tuple(b.stop - b.start for b in unit.blocks)
            status[sweep.region(unit)] = np.full(block_shape, STATUS["not_computed"], dtype=np.int8)

    create_store_atomically(ds, path, not_computed)


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


def open_store_for_resume(sweep: Sweep, path: str) -> np.ndarray:
    """The ``unit_done`` flags of an existing store made by the same sweep (``store.resume_flags``)."""
    from fastmodel.io.store import resume_flags

    return resume_flags(path, sweep.definition(), sweep.num_units, ("status", *sweep.float_variables))


def write_units(sweep: Sweep, path: str, units: list[Unit], progress: Callable[[int], None] | None = None) -> int:
    """Evaluate ``units`` and write each into the store; the done flag goes last."""
    import zarr

    group = zarr.open_group(path, mode="r+")
    names = [n for n in RESULTS if n in sweep.float_variables or n == "fits_memory"]
    arrays = {name: group[name] for name in (*names, "status")}
    done = group["unit_done"]
    written = 0
    for unit in units:
        n = unit.size
        out = np.empty((N_RESULTS, n))
        status = np.zeros(n, dtype=np.int8)
        sweep.evaluate_unit(unit, out, status, 0)
        region = sweep.region(unit)
        block_shape = tuple(b.stop - b.start for b in unit.blocks)
        for v, name in enumerate(RESULTS):
            if name in arrays:
                values = out[v] > 0.5 if name == "fits_memory" else out[v]
                arrays[name][region] = values.reshape(block_shape)
        arrays["status"][region] = status.reshape(block_shape)
        done[unit.index] = True
        written += n
        if progress:
            progress(n)
    return written


def write_units_task(definition_json: str, path: str, unit_indices: list[int]) -> int:
    """Dask task: rebuild the sweep in the worker and write some units."""
    sweep = sweep_from_json(definition_json)
    wanted = set(unit_indices)
    units = [u for u in sweep.units() if u.index in wanted]
    return write_units(sweep, path, units)
