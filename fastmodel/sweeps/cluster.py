"""The one Dask client helper: scheduler addresses, connecting, and running a store's units on workers."""

from __future__ import annotations

import json
import os
from typing import Callable

from fastmodel.errors import SweepError
from fastmodel.sweeps.grid import Unit
from fastmodel.sweeps.plan import SweepPlan
from fastmodel.sweeps.store import write_units_task


def check_scheduler_address(scheduler: str) -> None:
    """SweepError unless ``scheduler`` reads as a Dask scheduler address (``tcp://host:8786``)."""
    import re

    if not re.match(r"^(tcp|tls|ucx|ws|wss)://[^\s:/]+(:\d+)?/?$", str(scheduler)):
        raise SweepError(f"--scheduler {scheduler!r} is not a scheduler address; write e.g. tcp://host:8786")


def connect(scheduler: str | None = None, workers: int | None = None):
    """(client, cluster) for a Dask scheduler address or a local cluster of ``workers`` processes."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        check_scheduler_address(scheduler)
        try:
            return Client(scheduler, timeout=10), None
        except (OSError, TimeoutError, ValueError) as error:
            raise SweepError(f"--scheduler {scheduler}: cannot connect ({' '.join(str(error).split()) or type(error).__name__})") \
                from None
    check_local_workers(int(workers))
    cluster = LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True, dashboard_address=None)
    return Client(cluster), cluster


#: most worker processes of a local cluster per CPU: each is a whole Python process with numba and xarray loaded
#: (about 0.2 GB), and a CPU-bound kernel gains nothing from more processes than CPUs
WORKERS_PER_CPU = 4


def check_local_workers(workers: int) -> None:
    """SweepError for a local cluster of more than ``WORKERS_PER_CPU`` worker processes per CPU of this machine
    (at least 8): ``--workers 1000000`` would start a million processes and exhaust memory, not run faster."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    most = max(8, WORKERS_PER_CPU * cpus)
    if workers > most:
        raise SweepError(f"--workers {workers:,}: this machine has {cpus} CPU{'s' if cpus > 1 else ''}; a local "
                         f"cluster takes at most {most} worker processes (more only compete for the CPUs, about "
                         "0.2 GB each); run a larger cluster with --scheduler")


def _check_workers_see(client, path: str) -> None:
    """Every worker must see the store (same path on a shared filesystem), or nothing is written."""
    seen = client.run(os.path.isdir, path)
    blind = sorted(worker for worker, ok in seen.items() if not ok)
    if blind:
        raise SweepError(f"{path}: {len(blind)} of {len(seen)} Dask workers cannot see the store (e.g. {blind[0]}); "
                         "write it on a filesystem every worker mounts at the same path")


def write_units_on_cluster(client, plan: SweepPlan, path: str, todo: list[Unit],
                           progress: Callable[[int], None] | None = None) -> None:
    """Write ``todo`` into the store at ``path`` with the workers of ``client`` (about 8 tasks per worker)."""
    _check_workers_see(client, path)
    definition_json = json.dumps(plan.definition())
    per_task = max(1, len(todo) // (8 * max(1, len(client.scheduler_info().get("workers", {})))))
    batches = [todo[k:k + per_task] for k in range(0, len(todo), per_task)]
    futures = [client.submit(write_units_task, plan.engine, definition_json, path, [u.index for u in batch],
                             pure=False)
               for batch in batches]
    from distributed import as_completed

    for future in as_completed(futures):
        written = future.result()
        if progress:
            progress(written)
