"""Parameter tables of the real-world LM model: one column per configuration.

``table(n, **values)`` builds a ``(N_COLUMNS, n)`` float64 array, column-major
like the MAD-Max tables: every column starts at its registry default
(``fastmodel.registry.lm``) and ``values`` (scalars or length-``n`` arrays) replace
them by name. Codes may be given by name (``sharding="fsdp"``).
"""

from __future__ import annotations

import numpy as np

from fastmodel.errors import SpecError, nearest
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.spec.columns import CODE_TABLES, encode  # noqa: F401 - part of this module's API


def table(n: int = 1, **values) -> np.ndarray:
    """A ``(N_COLUMNS, n)`` parameter table: registry defaults, overridden by ``values``."""
    params = np.empty((len(COLUMNS), n))
    for i, column in enumerate(COLUMNS):
        params[i] = column.default
    for name, value in values.items():
        if name not in COLUMN_INDEX:
            raise SpecError(None, name, f"unknown column{nearest(name, COLUMN_INDEX)}")
        params[COLUMN_INDEX[name]] = encode(name, value)
    return params


def row(**values) -> np.ndarray:
    """One configuration's column vector (``table(1, ...)[:, 0]``)."""
    return np.ascontiguousarray(table(1, **values)[:, 0])
