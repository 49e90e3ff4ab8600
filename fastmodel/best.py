"""Top-k tables over a sweep dataset: the best configurations by any variable, with filters."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import xarray as xr

from fastmodel.errors import FastmodelError, SweepError, nearest
from fastmodel.params import STATUS, STATUS_NAMES

_EXPR = re.compile(r"^\s*(!?)([A-Za-z_][\w.]*)\s*(?:(==|=|!=|>=|<=|>|<)\s*(.+?))?\s*$")


def open_result(path: str) -> xr.Dataset:
    """Open a sweep result (.zarr store or .nc file)."""
    p = Path(path)
    if not p.exists():
        raise FastmodelError(f"{path}: no such file or store")
    try:
        if p.is_dir() or p.suffix == ".zarr":
            return xr.open_zarr(path)
        return xr.open_dataset(path, engine="scipy")
    except Exception as error:  # noqa: BLE001 - unreadable input is a user error
        raise FastmodelError(f"{path}: cannot open as a sweep result ({type(error).__name__}: {error})") from None


def _value(ds: xr.Dataset, name: str, text: str):
    if name == "status" and text in STATUS:
        return STATUS[text]
    if name == "status" and not re.match(r"^-?\d+$", text):
        raise SweepError(f"status {text!r} unknown; one of {', '.join(STATUS_NAMES)}{nearest(text, STATUS_NAMES)}")
    if ds[name].dtype.kind in "US O".replace(" ", ""):
        return text.strip("'\"")
    if ds[name].dtype.kind == "b":
        return text.lower() in ("1", "true", "yes")
    try:
        return float(text)
    except ValueError:
        raise SweepError(f"where: {name} is numeric, cannot compare with {text!r}") from None


def where_mask(ds: xr.Dataset, expressions: list[str]) -> xr.DataArray:
    """Boolean mask over the grid from expressions like ``fits_memory``, ``num_nodes=256``, ``status=ok``."""
    mask = xr.DataArray(True)
    names = list(ds.data_vars) + list(ds.coords)
    for expression in expressions:
        match = _EXPR.match(expression)
        if not match:
            raise SweepError(f"cannot parse filter {expression!r}; write e.g. fits_memory, num_nodes=256, throughput>100")
        negate, name, op, text = match.groups()
        if name not in names:
            raise SweepError(f"filter on unknown variable {name!r}{nearest(name, names)}")
        var = ds[name]
        if op is None:
            if var.dtype.kind != "b":
                raise SweepError(f"filter {name!r} needs a comparison (it is not true/false)")
            cond = var.astype(bool)
        else:
            value = _value(ds, name, text)
            cond = {"=": var == value, "==": var == value, "!=": var != value, ">=": var >= value,
                    "<=": var <= value, ">": var > value, "<": var < value}[op]
        mask = mask & (~cond if negate else cond)
    return mask


def best(ds: xr.Dataset, by: str, top: int = 10, where: list[str] | None = None, ascending: bool = False,
         columns: tuple[str, ...] = ("throughput", "iteration_time", "exposed_comm", "memory_per_device")):
    """The ``top`` configurations by ``by`` (largest first unless ``ascending``) as a pandas DataFrame."""
    import pandas as pd

    if by not in ds.data_vars:
        raise SweepError(f"unknown variable {by!r}{nearest(by, list(ds.data_vars))}")
    if top < 1:
        raise SweepError(f"--top must be at least 1 (got {top})")
    variable = ds[by]
    mask = where_mask(ds, where or [])
    values = variable.where(mask).transpose(*variable.dims).values.astype(np.float64)
    flat = values.reshape(-1)
    finite = np.flatnonzero(np.isfinite(flat))
    if finite.size == 0:
        raise SweepError("no configuration passes the filters" if where else f"{by} has no finite value")
    keys = flat[finite] if ascending else -flat[finite]
    k = min(top, finite.size)
    chosen = finite[np.argpartition(keys, k - 1)[:k]] if k < finite.size else finite
    chosen = chosen[np.argsort(keys[np.searchsorted(finite, chosen)], kind="stable")]
    index = np.unravel_index(chosen, values.shape)
    rows = {}
    for dim, idx in zip(variable.dims, index):
        rows[dim] = ds[dim].values[idx]
    for name in dict.fromkeys((by, *[c for c in columns if c in ds.data_vars])):
        rows[name] = ds[name].transpose(*variable.dims).values[index]
    if "status" in ds:
        rows["status"] = [STATUS_NAMES[int(s)] for s in ds["status"].transpose(*variable.dims).values[index]]
    return pd.DataFrame(rows)
