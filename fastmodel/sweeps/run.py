"""Runners of a sweep plan of any engine: in memory, or streamed into a zarr store (locally or on Dask workers)."""

from __future__ import annotations

import os
from typing import Callable

import numpy as np
import xarray as xr

from fastmodel.errors import SweepError
from fastmodel.io.aliases import with_aliases
from fastmodel.sweeps.assemble import assemble
from fastmodel.sweeps.buffers import result_matrix
from fastmodel.sweeps.cluster import connect, write_units_on_cluster
from fastmodel.sweeps.plan import SweepPlan
from fastmodel.sweeps.progress import Progress
from fastmodel.sweeps.size import check_memory, summarise_status
from fastmodel.sweeps.store import create_store, open_store_for_resume, write_units

#: a store's status codes are counted (to say "every point is illegal") up to this many points
COUNT_STATUS_CONFIGS = 50_000_000


def _check_some_ok(plan: SweepPlan, status: np.ndarray) -> None:
    """A SweepError when no point is ``ok``, saying what the points are (:func:`no_legal_point`)."""
    if (why := no_legal_point(plan, status)) is not None:
        raise SweepError(f"every point of the sweep is illegal or infeasible: {why}")


def no_legal_point(plan: SweepPlan, status) -> str | None:
    """None when a point of the grid is ``ok`` (or the grid is empty); else what the points are, for the
    command's one line: the most common status, its share and its reason (the registry's message), e.g.
    ``batch_not_divisible (100% of 4 points: global_batch is not a multiple of micro_batch x dp)``, then the
    share of each other status."""
    from fastmodel.registry import statuses

    codes = np.asarray(status).reshape(-1)
    counts = np.bincount(codes[codes >= 0].astype(np.int64), minlength=len(plan.status_names()))
    if not plan.num_configs or counts[0] > 0:
        return None
    found = statuses(plan.engine)
    top = int(np.argmax(counts))
    name, reason = (found[top].name, found[top].message) if top < len(found) else (str(top), "unknown code")
    text = f"{name} ({100 * counts[top] / plan.num_configs:.0f}% of {plan.num_configs:,} points: {reason})"
    rest = counts.copy()
    rest[top] = 0
    others = summarise_status(rest, plan.num_configs, plan.status_names())
    return f"{text}{f'; also {others}' if others else ''}"


def run_in_memory(plan: SweepPlan, progress: Callable[[int], None] | None = None,
                  require_ok: bool = True) -> xr.Dataset:
    """Evaluate every unit into one result matrix; return the Dataset (views, no copies). With ``require_ok``,
    a grid without one legal, feasible point is a SweepError saying why."""
    check_memory(plan)
    out = result_matrix(plan.num_rows, plan.num_configs)
    status = np.zeros(plan.num_configs, dtype=np.int8)
    for unit in plan.units(plan.MEMORY_UNIT_CONFIGS):
        plan.evaluate_unit(unit, out, status, plan.unit_offset(unit))
        if progress:
            progress(unit.size)
    if require_ok:
        _check_some_ok(plan, status)
    return assemble(plan, out, status)


def run_to_store(plan: SweepPlan, path: str, resume: bool = False, progress: Callable[[int], None] | None = None,
                 client=None, overwrite: bool = False, require_ok: bool = True) -> xr.Dataset:
    """Stream the sweep into a zarr store (resumable); return the opened Dataset (aliases added). With
    ``require_ok``, a store without one legal, feasible point is a SweepError saying why (the store is written).

    Holds the store's writer lock throughout. ``overwrite`` replaces an existing sweep store (never anything
    else); ``resume`` completes one made by the same definition. The path is made absolute, so Dask workers
    with another working directory write the same store. ``progress`` receives the configurations of each unit
    written; those the store already held go first, to its ``skip`` where it has one (``Progress``).
    """
    from fastmodel.io.store import remove_store, writer_lock

    path = os.path.abspath(path)
    with writer_lock(path):
        exists = os.path.lexists(path)
        if resume and exists:
            done = open_store_for_resume(plan, path)
        else:
            if resume:
                raise SweepError(f"{path}: nothing to resume (no such store)")
            if exists:
                if not overwrite:
                    raise SweepError(f"{path} exists; complete it (resume=True) or replace it (overwrite=True)")
                remove_store(path)
            create_store(plan, path)
            done = np.zeros(plan.num_units, dtype=bool)
        todo = [u for u in plan.units() if not done[u.index]]
        if progress:     # a Progress bar counts the configurations the store holds apart from this run's
            getattr(progress, "skip", progress)(sum(u.size for u in plan.units() if done[u.index]))
        if client is None:
            write_units(plan, path, todo, progress)
        else:
            write_units_on_cluster(client, plan, path, todo, progress)
        # no metadata changes after creation (its consolidated metadata was written before the rename), so there
        # is no finalization step to interrupt: the last unit's done flag completes the store
    ds = xr.open_zarr(path)
    if require_ok and plan.num_configs <= COUNT_STATUS_CONFIGS:
        _check_some_ok(plan, ds["status"].values)
    return with_aliases(ds)


def run(plan: SweepPlan, store: str | None = None, resume: bool = False, workers: int | None = None,
        scheduler: str | None = None, progress: bool | None = False, overwrite: bool = False) -> xr.Dataset:
    """A sweep plan in memory, into a zarr store, or on a Dask cluster (``workers`` local processes or a
    ``scheduler`` address; both need ``store``): the path ``fastmodel.sweep`` takes for every engine."""
    bar = Progress(plan.num_configs, enabled=progress) if progress is not False else None
    try:
        if workers is not None or scheduler is not None:
            if store is None:
                raise SweepError("a distributed sweep writes a zarr store: give store='out.zarr' (-o out.zarr)")
            client, cluster = connect(scheduler, workers)
            try:
                return run_to_store(plan, store, resume, bar, client, overwrite)
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()
        if store is not None:
            return run_to_store(plan, store, resume, bar, overwrite=overwrite)
        if resume:
            raise SweepError("resume completes a zarr store: give store='out.zarr'")
        return run_in_memory(plan, bar)
    finally:
        if bar is not None:
            bar.close()


__all__ = ["no_legal_point", "run", "run_in_memory", "run_to_store"]
