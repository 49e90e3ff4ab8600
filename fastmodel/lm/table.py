"""Parameter tables of the real-world LM model: one column per configuration.

``table(n, **values)`` builds a ``(N_COLUMNS, n)`` float64 array, column-major
like the MAD-Max tables: every column starts at its registry default
(``fastmodel.registry.lm``) and ``values`` (scalars or length-``n`` arrays) replace
them by name. Codes may be given by name (``sharding="fsdp"``).
"""

from __future__ import annotations

import numpy as np

from fastmodel.errors import SpecError, nearest
from fastmodel.registry.lm import (
    COLLECTIVE_ALGORITHMS,
    COLUMN_INDEX,
    COLUMNS,
    CP_ALGORITHMS,
    LOAD_MODES,
    OPTIMIZER_CODES,
    PIPELINE_SCHEDULES,
    PRECISION_CODES,
    RECOMPUTE_CODES,
    SELECTIVE_POLICIES,
    SHARDING_CODES,
)

CODE_TABLES = {"sharding": SHARDING_CODES, "recompute": RECOMPUTE_CODES, "precision": PRECISION_CODES,
               "optimizer": OPTIMIZER_CODES, "pipeline_schedule": PIPELINE_SCHEDULES, "cp_algorithm": CP_ALGORITHMS,
               "collective_algorithm": COLLECTIVE_ALGORITHMS, "load_mode": LOAD_MODES,
               "selective_policy": SELECTIVE_POLICIES}


def encode(name: str, value):
    """A column value as a number: code names are looked up in their code table."""
    codes = CODE_TABLES.get(name)
    if codes is not None and isinstance(value, str):
        if value not in codes:
            raise SpecError(None, name, f"unknown value {value!r}; choose one of {', '.join(codes)}{nearest(value, codes)}")
        return codes[value]
    return value


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
