"""``fastmodel.sweep(...)``: the one call that defines and runs a sweep; :mod:`fastmodel.engines` chooses
the engine (MAD-Max grid or real-world model) and the engine's door runs it."""

from __future__ import annotations

from typing import Any

import xarray as xr

from fastmodel.errors import SweepError
from fastmodel.sweep.cluster import connect
from fastmodel.sweep.definition import UNIT_CONFIGS, Sweep
from fastmodel.sweep.progress import Progress
from fastmodel.sweep.run import run_in_memory, run_to_store


def sweep(model: Any, system: Any, task: Any, axes: dict[str, Any], semantics: Any = "default",
          store: str | None = None, resume: bool = False, workers: int | None = None, scheduler: str | None = None,
          progress: bool | None = False, unit_configs: int = UNIT_CONFIGS, overwrite: bool = False,
          execution: Any = None, only_fitting: bool = False, calibration: Any = None) -> xr.Dataset:
    """Evaluate a grid of configurations; a labeled Dataset with one dimension per axis.

    ``axes`` maps field names (short or dotted) or ``plan`` to values: a list,
    a scalar, or a range ``{start, stop, num|step, scale='linear'|'log'}``;
    ``plan`` takes ``'all'``, a list of plan strings, or rules
    ``{dense=[...], emb=[...], max_levels=1|2}``. With ``store`` (a ``.zarr``
    path) results stream to disk chunk by chunk (``resume`` completes an
    interrupted store, ``overwrite`` replaces an existing sweep store and
    nothing else); ``workers`` / ``scheduler`` run the chunks on a Dask
    distributed cluster (needs ``store``).

    Under the ``default`` semantics a real-world model (``family = "lm"``) is swept by the real-world
    model instead (``fastmodel.lm.sweep``: axes are registry columns, ``num_nodes``, ``global_batch`` and
    ``plan`` meshes; ``execution``, ``only_fitting`` and ``calibration`` -- a ``fastmodel calibrate`` TOML
    path or ``Calibration`` -- apply; the result is in memory). A calibration for a MAD-Max model is a SpecError.
    """
    from fastmodel import engines

    engine = engines.MADMAX if isinstance(model, (list, tuple)) else engines.for_specs(model, semantics, system)
    return engine.door().sweep(model, system, task, axes, semantics=semantics, store=store, resume=resume,
                               workers=workers, scheduler=scheduler, progress=progress, unit_configs=unit_configs,
                               overwrite=overwrite, execution=execution, only_fitting=only_fitting,
                               calibration=calibration)


def grid_sweep(model: Any, system: Any, task: Any, axes: dict[str, Any], *, semantics: Any = "default",
               store: str | None = None, resume: bool = False, workers: int | None = None,
               scheduler: str | None = None, progress: bool | None = False, unit_configs: int = UNIT_CONFIGS,
               overwrite: bool = False) -> xr.Dataset:
    """A MAD-Max grid sweep in memory, into a zarr store, or on a Dask cluster (see :func:`sweep`)."""
    definition = Sweep(model, system, task, axes, semantics, unit_configs)
    bar = Progress(definition.num_configs, enabled=progress) if progress is not False else None
    try:
        if workers is not None or scheduler is not None:
            if store is None:
                raise SweepError("a distributed sweep writes a zarr store: give store='out.zarr' (-o out.zarr)")
            client, cluster = connect(scheduler, workers)
            try:
                return run_to_store(definition, store, resume, bar, client, overwrite)
            finally:
                client.close()
                if cluster is not None:
                    cluster.close()
        if store is not None:
            return run_to_store(definition, store, resume, bar, overwrite=overwrite)
        return run_in_memory(definition, bar)
    finally:
        if bar is not None:
            bar.close()
