"""Legality of real-world plans: the rule table of ``kernels/lm/rules.py`` applied to tables and to
single configurations (the first broken rule becomes a PlanError naming it)."""

from __future__ import annotations

import numpy as np

from fastmodel.errors import PlanError
from fastmodel.registry.lm import STATUSES


def plan_status(params: np.ndarray) -> np.ndarray:
    """int8 status code of every configuration (column) of ``params``: the first broken rule, 0 if none."""
    from fastmodel.kernels.lm.rules import plan_status_table

    status = np.empty(params.shape[1], dtype=np.int8)
    plan_status_table(np.asarray(params, dtype=np.float64), status)
    return status


def check_plan(column: np.ndarray, label: str = "plan") -> None:
    """Raise a PlanError for the first rule one configuration (a column vector) breaks."""
    code = int(plan_status(np.asarray(column, dtype=np.float64).reshape(-1, 1))[0])
    if code:
        raise PlanError(STATUSES[code].name, STATUSES[code].message, label)


def legal_meshes(model, cluster) -> list[tuple[dict[str, int], int]]:
    """(mesh, dp) of every mesh of ``lm.sweep.all_meshes`` that the rule table allows for ``model`` on all of
    ``cluster`` with the default execution, at a global batch where the batch rules hold (n_gpus x pp x
    micro_batch sequences: tp x pp x cp micro-batches per stage, at least pp); ``plan = "all"`` in a sweep
    gives the other meshes a status."""
    from fastmodel.lm.loader import load_execution
    from fastmodel.lm.sweep import all_meshes, base_columns
    from fastmodel.registry.lm import COLUMN_INDEX as C

    execution = load_execution(None)
    n = cluster.n_gpus
    found = []
    for mesh in all_meshes(model, cluster, n):
        ranks = mesh["tp"] * mesh["pp"] * mesh["cp"]
        if n % ranks:
            continue
        dp = n // ranks
        columns = base_columns(model, cluster, execution, n * mesh["pp"] * execution.micro_batch)
        for key, value in mesh.items():
            columns[C[key]] = value
        columns[C["dp"]] = columns[C["shard_degree"]] = dp
        if plan_status(columns.reshape(-1, 1))[0] == 0:
            found.append((mesh, dp))
    return found
