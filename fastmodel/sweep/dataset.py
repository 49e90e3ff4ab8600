"""Labels of a sweep's results: coordinates, variable and dataset attributes, and the in-memory Dataset."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import xarray as xr

from fastmodel import __version__
from fastmodel.kernels.madmax.layout import N_RESULTS, RESULTS
from fastmodel.madmax.lowering.params import STATUS_NAMES
from fastmodel.registry.madmax import attrs as variable_attrs


class DatasetLabels:
    """Coordinates and attributes of a :class:`~fastmodel.sweep.definition.Sweep`'s results (a base class of
    it): needs its ``axes``, base specs, ``semantics`` and ``definition()``."""

    def coords(self) -> dict[str, Any]:
        coords = {}
        for axis in self.axes:
            attrs = {"field": axis.path}
            values = axis.values.astype(str) if axis.values.dtype == object else axis.values
            coords[axis.name] = xr.Variable(axis.name, values, attrs=attrs)
        return coords

    def variable_attrs(self, name: str) -> dict:
        if name == "status":
            return {
                "long_name": "status",
                "units": "1",
                "description": "Why a point has no result: " + ", ".join(
                    f"{code}={label}" for code, label in enumerate(STATUS_NAMES)),
                "flag_values": list(range(len(STATUS_NAMES))),
                "flag_meanings": " ".join(STATUS_NAMES),
            }
        return variable_attrs(name)

    def dataset_attrs(self) -> dict:
        return {
            "model": json.dumps(self.model.model_dump()),
            "system": json.dumps(self.system.model_dump()),
            "task": json.dumps(self.task.model_dump()),
            "semantics": json.dumps(self.semantics.model_dump()),
            "sweep": json.dumps(self.definition()),
            "fastmodel_version": __version__,
        }

    def result_bytes(self) -> int:
        """Bytes of the result matrix (every result variable) and status in memory."""
        return self.num_configs * (8 * N_RESULTS + 1)


def assemble(sweep, out: np.ndarray, status: np.ndarray) -> xr.Dataset:
    """The labeled Dataset of a whole grid from its result matrix and status in the internal layout (views)."""
    shape, dims = sweep.internal_shape, sweep.internal_dims
    data = {}
    for v, name in enumerate(RESULTS):
        if name == "fits_memory":
            values = out[v].reshape(shape) > 0.5
        elif name in sweep.float_variables:
            values = out[v].reshape(shape)
        else:
            continue
        data[name] = xr.Variable(dims, values, sweep.variable_attrs(name)).transpose(*sweep.dims)
    data["status"] = xr.Variable(dims, status.reshape(shape), sweep.variable_attrs("status")).transpose(*sweep.dims)
    return xr.Dataset(data, coords=sweep.coords(), attrs=sweep.dataset_attrs())
