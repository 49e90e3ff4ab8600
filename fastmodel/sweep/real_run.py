"""Running a real-world sweep file (``fastmodel.sweep.real``) into a ``.nc`` file or a resumable ``.zarr`` store.

``.nc``: the grid is evaluated in memory and written atomically. ``.zarr``: the
grid is cut into boxes of at most ``unit_configs`` points (trailing axes whole,
the first one split, as ``fastmodel.sweep``); the store is created atomically
with every point ``not computed`` (status -1) and each box is written with its
``unit_done`` flag last, so an interrupted sweep resumes where it stopped
(``--resume``) and readers refuse an incomplete store (``store.check_complete``).
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import xarray as xr

from fastmodel.errors import SweepError
from fastmodel.sweep.real import RealSweep

#: status of a point of a store whose unit is not written yet
NOT_COMPUTED = -1


def load_real_sweep_file(path: str, unit_configs: int | None = None) -> RealSweep | None:
    """The real-world sweep of a sweep file, or None when it is a MAD-Max sweep (``sweep.file``)."""
    from fastmodel.spec.loader import read_file
    from fastmodel.sweep.file import locate
    from fastmodel.sweep.real import is_real_sweep, load_real_sweep

    path = locate(path)
    data = read_file(Path(path))
    if not is_real_sweep(data, Path(path).parent):
        return None
    if unit_configs is not None:
        data = {**data, "unit_configs": unit_configs}
    return load_real_sweep(path, data)


def bytes_per_config(sweep: RealSweep) -> int:
    """Output bytes per grid point: float64 results (the memory breakdown counts 7) and the status byte."""
    from fastmodel.registry.lm import RESULTS, SERVE_RESULTS

    return 8 * (len(RESULTS) if sweep.kind == "lm" else len(SERVE_RESULTS)) + 1


def check_real_size(sweep: RealSweep, output: str, to_store: bool, confirmed: bool = False) -> str:
    """Size estimate as text; SweepError over 10^10 points, more disk than is free or (in memory) more than half
    the available memory, unless ``confirmed`` (the last is refused even then: write a .zarr store)."""
    from fastmodel.sweep.size import CONFIRM_CONFIGS, available_memory_bytes, human_bytes

    need = sweep.num_configs * bytes_per_config(sweep)
    text = f"about {human_bytes(need)} {'on disk' if to_store else 'of output'} uncompressed"
    if not to_store and need > available_memory_bytes() // 2:
        raise SweepError(f"{sweep.num_configs:,} configurations need about {human_bytes(need)} in memory, more than "
                         "half of what is available; write a .zarr store (-o out.zarr) instead")
    if confirmed:
        return text
    if sweep.num_configs > CONFIRM_CONFIGS:
        raise SweepError(f"{sweep.num_configs:,} configurations: {text}; pass --yes to run it anyway")
    try:
        free = shutil.disk_usage(Path(os.path.abspath(output)).parent).free
    except OSError:
        free = None
    if free is not None and need > free:
        raise SweepError(f"{sweep.num_configs:,} configurations need up to {human_bytes(need)} but only "
                         f"{human_bytes(free)} is free there; pass --yes to run it anyway")
    return text


def _check_some_ok(ds: xr.Dataset, sweep: RealSweep) -> None:
    status = np.asarray(ds["status"].values).reshape(-1)
    if status.size and not (status == 0).any():
        names = ds.attrs.get("status_names", "").split()
        counts = np.bincount(status[status >= 0], minlength=len(names))
        parts = [f"{100 * c / status.size:.0f}% {names[k] if k < len(names) else k}" for k, c in enumerate(counts)
                 if c and k]
        raise SweepError(f"{sweep.source}: every point of the sweep is illegal or infeasible: {', '.join(parts)}")


def run_real_to_netcdf(sweep: RealSweep, path: str, progress: Callable[[int], None] | None = None) -> xr.Dataset:
    """Evaluate the whole grid in memory and write it atomically as netCDF-3."""
    from fastmodel.io.atomic import atomic_path

    ds = sweep.evaluate()
    _check_some_ok(ds, sweep)
    if progress:
        progress(sweep.num_configs)
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="scipy")
    return ds


# --- zarr stores ---------------------------------------------------------------------

def block_shape(sweep: RealSweep) -> tuple[int, ...]:
    """Box size along each dim: trailing dims whole, the first that does not fit split."""
    block = [1] * len(sweep.shape)
    room = max(1, sweep.unit_configs)
    for k in range(len(sweep.shape) - 1, -1, -1):
        take = min(sweep.shape[k], max(1, room))
        block[k] = take
        room //= max(1, take)
        if take < sweep.shape[k]:
            break
    return tuple(block)


def units(sweep: RealSweep) -> list[tuple[slice, ...]]:
    """Every box of the grid, in a fixed order (the index is the unit number)."""
    block = block_shape(sweep)
    starts = [range(0, n, b) for n, b in zip(sweep.shape, block)]
    return [tuple(slice(c, min(c + b, n)) for c, b, n in zip(corner, block, sweep.shape))
            for corner in itertools.product(*starts)]


def _region(var: xr.DataArray, dims: list[str], box: tuple[slice, ...]) -> tuple:
    by_dim = dict(zip(dims, box))
    return tuple(by_dim.get(d, slice(None)) for d in var.dims)


def create_real_store(sweep: RealSweep, path: str, template: xr.Dataset) -> None:
    """Create the store atomically (temporary name, then rename): full-grid variables shaped like ``template``
    (one box), every status ``NOT_COMPUTED``, every ``unit_done`` false."""
    import dask.array as da

    block = block_shape(sweep)
    boxes = units(sweep)
    coords = {d: (d, np.array(sweep.coords[d])) for d in sweep.dims}  # strings as fixed-width unicode
    data = {}
    for name, var in template.data_vars.items():
        shape = tuple(sweep.shape[sweep.dims.index(d)] if d in sweep.dims else var.sizes[d] for d in var.dims)
        chunks = tuple(block[sweep.dims.index(d)] if d in sweep.dims else var.sizes[d] for d in var.dims)
        fill = np.nan if var.dtype.kind == "f" else 0
        data[name] = (var.dims, da.full(shape, fill, dtype=var.dtype, chunks=chunks), dict(var.attrs))
        if name == "status":
            data[name][2]["description"] = f"{NOT_COMPUTED} not computed; " + var.attrs.get("description", "")
    for name, coord in template.coords.items():
        if name not in sweep.dims:
            coords[name] = (coord.dims, coord.values) if coord.dims else ((), coord.values)
    data["unit_done"] = (("sweep_unit",), da.zeros(len(boxes), dtype=bool, chunks=1),
                         {"long_name": "unit of work written", "units": "1"})
    ds = xr.Dataset(data, coords=coords, attrs=dict(template.attrs))

    def not_computed(status) -> None:
        for box in boxes:
            status[_region(template["status"], sweep.dims, box)] = NOT_COMPUTED

    from fastmodel.sweep import create_store_atomically

    create_store_atomically(ds, path, not_computed)


def _write_box(group, sweep: RealSweep, index: int, box: tuple[slice, ...], ds: xr.Dataset) -> None:
    for name, var in ds.data_vars.items():
        group[name][_region(var, sweep.dims, box)] = np.asarray(var.values)
    group["unit_done"][index] = True


def check_resumable(sweep: RealSweep, path: str) -> np.ndarray:
    """The ``unit_done`` flags of a store made by this same sweep; SweepError otherwise (``store.resume_flags``)."""
    from fastmodel.io.store import resume_flags

    return resume_flags(path, sweep.definition(), len(units(sweep)))


def run_real_to_store(sweep: RealSweep, path: str, resume: bool = False, overwrite: bool = False,
                      progress: Callable[[int], None] | None = None) -> xr.Dataset:
    """Stream the grid into a zarr store box by box under the store's writer lock; return the opened store."""
    import zarr

    from fastmodel.io.store import remove_store, writer_lock

    path = os.path.abspath(path)
    boxes = units(sweep)
    size = [math.prod(s.stop - s.start for s in box) for box in boxes]
    with writer_lock(path):
        exists = os.path.lexists(path)
        first = None
        if resume and exists:
            done = check_resumable(sweep, path)
        else:
            if resume:
                raise SweepError(f"{path}: nothing to resume (no such store)")
            first = sweep.evaluate(boxes[0])  # the first box is the template, and checks the specs before any I/O
            if exists:
                if not overwrite:
                    raise SweepError(f"{path} exists; complete it (--resume) or replace it (--force)")
                remove_store(path)
            create_real_store(sweep, path, first)
            done = np.zeros(len(boxes), dtype=bool)
        if progress:
            progress(sum(n for n, d in zip(size, done) if d))
        group = zarr.open_group(path, mode="r+")
        for index, box in enumerate(boxes):
            if done[index]:
                continue
            ds = first if index == 0 and first is not None else sweep.evaluate(box)
            _write_box(group, sweep, index, box, ds)
            if progress:
                progress(size[index])
    ds = xr.open_zarr(path)
    if sweep.num_configs <= 50_000_000:
        _check_some_ok(ds, sweep)
    return ds


def run_real(sweep: RealSweep, output: str, is_zarr: bool, resume: bool, force: bool, progress) -> xr.Dataset:
    if is_zarr:
        return run_real_to_store(sweep, output, resume, force, progress)
    return run_real_to_netcdf(sweep, output, progress)
