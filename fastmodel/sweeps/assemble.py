"""A sweep's labeled Dataset from its result matrix, every variable named, typed and described by the registry."""

from __future__ import annotations

import numpy as np
import xarray as xr

from fastmodel.io.aliases import with_aliases


def assemble(plan, out: np.ndarray, status: np.ndarray) -> xr.Dataset:
    """The Dataset of a whole grid from its result matrix (``plan.num_rows`` x points) and status in the internal
    layout (structural axes first, then numeric, C order): views of ``out`` transposed to the plan's dims (no
    copy but for flags), a grouped variable (``memory`` by ``memory_kind``) with its dim last, aliases added."""
    shape, dims = plan.internal_shape, plan.internal_dims
    data = {}
    for var in plan.stored():
        values = var.block(out)
        if var.dims:
            extra = tuple(len(plan.registry.COORDS[d]) for d in var.dims)
            variable = xr.Variable((*var.dims, *dims), values.reshape((*extra, *shape)), var.attrs)
            data[var.name] = variable.transpose(*plan.dims, *var.dims)
        else:
            data[var.name] = xr.Variable(dims, values.reshape(shape), var.attrs).transpose(*plan.dims)
    data["status"] = xr.Variable(dims, status.reshape(shape), plan.status_attrs()).transpose(*plan.dims)
    attrs = {**plan.dataset_attrs(), "fastmodel_engine": plan.engine}
    return with_aliases(xr.Dataset(data, coords=plan.coords(), attrs=attrs))


__all__ = ["assemble"]
