"""Values of the real-world column vector written by name: a code name becomes its integer; the shape of a
table of such vectors.

Shared by the training and serving engines (one column vector, ``fastmodel.registry.lm``): a spec, a run
record or a sweep axis may give a coded column by name (``sharding = "fsdp"``, ``load_mode = "concurrency"``);
:func:`encode` looks it up in the registry's ``CODE_TABLES``.
"""

from __future__ import annotations

import numpy as np

from fastmodel.errors import SpecError, nearest
from fastmodel.registry.lm import CODE_TABLES, COLUMNS


def check_table(params) -> None:
    """A ValueError unless ``params`` is a ``(N_COLUMNS, n)`` table: the training and serving row kernels copy
    every column of a configuration into a frame vector (kernels/jit.py ``stack_vector``) and would read past
    the end of a shorter one."""
    if np.ndim(params) != 2 or np.shape(params)[0] != len(COLUMNS):
        raise ValueError(f"a table of {len(COLUMNS)} columns x configurations is needed, got shape "
                         f"{np.shape(params)}")


def check_base(base) -> None:
    """A ValueError unless ``base`` is one configuration's ``N_COLUMNS`` vector: the grid kernels copy every
    column of it into each point's frame vector (kernels/jit.py ``stack_vector``) and would read past the end of
    a shorter one."""
    if np.ndim(base) != 1 or np.size(base) != len(COLUMNS):
        raise ValueError(f"a base vector of {len(COLUMNS)} columns is needed, got shape {np.shape(base)}")


#: coded columns that also take a boolean, as run records state them (RUNS.md): the code names false and true
#: stand for. ``cuda_graphs``: true is per-layer graphs, false none (docs/model.md §11.37); ``moe_a2a_overlap``:
#: RUNS.md's older boolean, true is Megatron-Core's batch-level EP all-to-all overlap, false none (§11.14)
BOOLEAN_CODE_NAMES = {"cuda_graphs": ("none", "layer"), "moe_a2a_overlap": ("none", "batch")}


def boolean_name(name: str, value):
    """A boolean given for a column of ``BOOLEAN_CODE_NAMES`` as the code name it stands for (an execution field,
    a sweep axis value, a record's plan field); any other value as it is."""
    names = BOOLEAN_CODE_NAMES.get(name)
    if names is not None and isinstance(value, (bool, np.bool_)):
        return names[int(value)]
    return value


def encode(name: str, value):
    """A column value as a number: code names are looked up in their code table (SpecError naming the
    column and the nearest code otherwise), a boolean of ``BOOLEAN_CODE_NAMES`` by the name it stands for;
    numbers pass through."""
    value = boolean_name(name, value)
    codes = CODE_TABLES.get(name)
    if codes is not None and isinstance(value, str):
        if value not in codes:
            raise SpecError(None, name, f"unknown value {value!r}; choose one of {', '.join(codes)}{nearest(value, codes)}")
        return codes[value]
    return value


__all__ = ["BOOLEAN_CODE_NAMES", "CODE_TABLES", "boolean_name", "encode"]
