"""Point-by-point comparison of a sweep against single evaluations (the sweep-partition tests'
equivalence check)."""

import numpy as np


def same_points(sweep, alone) -> None:
    """Every variable and status of ``alone`` equals ``sweep``'s, point for point (NaN = NaN)."""
    assert set(alone.data_vars) == set(sweep.data_vars)
    for name in alone.data_vars:
        got, want = sweep[name].transpose(*alone[name].dims).values, alone[name].values
        assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), name
