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
