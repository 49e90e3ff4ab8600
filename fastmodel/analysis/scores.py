"""Scores of predictions against measurements, shared by every engine's ``validate``: MAPE, median and bias."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scores:
    n: int
    mape: float          # mean |error|
    median: float        # median |error|
    bias: float          # mean signed error


def score(errors: np.ndarray) -> Scores:
    """The scores of relative errors (``predicted / measured - 1``, one per run); NaN when there is none."""
    errors = np.asarray(errors, dtype=float)
    if errors.size == 0:
        return Scores(0, float("nan"), float("nan"), float("nan"))
    return Scores(int(errors.size), float(np.mean(np.abs(errors))), float(np.median(np.abs(errors))),
                  float(np.mean(errors)))
