"""Runners: a whole sweep in memory, or streamed into a zarr store (locally or on Dask workers)."""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import xarray as xr

from fastmodel.errors import SweepError
from fastmodel.kernels.madmax.layout import N_RESULTS
from fastmodel.madmax.lowering.params import STATUS, STATUS_NAMES
from fastmodel.sweep.cluster import write_units_on_cluster
from fastmodel.sweep.dataset import assemble
from fastmodel.sweep.definition import Sweep
from fastmodel.sweep.size import check_memory, summarise_status
from fastmodel.sweep.store import create_store, open_store_for_resume, write_units


def run_in_memory(sweep: Sweep, progress: Callable[[int], None] | None = None) -> xr.Dataset:
    """Evaluate every unit into one result matrix; return the Dataset (views, no copies)."""
    check_memory(sweep)
    out = np.empty((N_RESULTS, sweep.num_configs))
    status = np.zeros(sweep.num_configs, dtype=np.int8)
    for unit in sweep.units():
        sweep.evaluate_unit(unit, out, status, sweep.unit_offset(unit))
        if progress:
            progress(unit.size)
    counts = np.bincount(status, minlength=len(STATUS_NAMES))
    if counts[STATUS["ok"]] == 0 and sweep.num_configs:
        raise SweepError(f"every point of the sweep is illegal or infeasible: {summarise_status(counts, sweep.num_configs)}")
    return assemble(sweep, out, status)


def run_to_store(sweep: Sweep, path: str, resume: bool = False, progress: Callable[[int], None] | None = None,
                 client=None, overwrite: bool = False) -> xr.Dataset:
    """Stream the sweep into a zarr store (resumable); return the opened Dataset.

    Holds the store's writer lock throughout. ``overwrite`` replaces an
    existing sweep store (never anything else); ``resume`` completes one made
    by the same definition. The path is made absolute, so Dask workers with
    another working directory write the same store.
    """
    from fastmodel.io.store import remove_store, writer_lock

    path = os.path.abspath(path)
    with writer_lock(path):
        exists = os.path.lexists(path)
        if resume and exists:
            done = open_store_for_resume(sweep, path)
        else:
            if resume:
                raise SweepError(f"{path}: nothing to resume (no such store)")
            if exists:
                if not overwrite:
                    raise SweepError(f"{path} exists; complete it (--resume, resume=True) or replace it "
                                     "(--force, overwrite=True)")
                remove_store(path)
            create_store(sweep, path)
            done = np.zeros(sweep.num_units, dtype=bool)
        todo = [u for u in sweep.units() if not done[u.index]]
        if progress:
            progress(sum(u.size for u in sweep.units() if done[u.index]))
        if client is None:
            write_units(sweep, path, todo, progress)
        else:
            write_units_on_cluster(client, sweep, path, todo, progress)
        # no metadata changes after creation (its consolidated metadata was written before the rename), so there
        # is no finalization step to interrupt: the last unit's done flag completes the store
    ds = xr.open_zarr(path)
    counts = np.bincount(ds["status"].values.reshape(-1), minlength=len(STATUS_NAMES)) if sweep.num_configs <= 50_000_000 else None
    if counts is not None and counts[STATUS["ok"]] == 0 and sweep.num_configs:
        raise SweepError(f"every point of the sweep is illegal or infeasible: {summarise_status(counts, sweep.num_configs)}")
    return ds
