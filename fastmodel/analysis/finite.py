"""Results that are not finite numbers become a status, never a reported ``inf`` (issue 25 item 2).

An input of absurd magnitude (a bandwidth of 1e-300 B/s, a global batch of
1e300) overflows a kernel's arithmetic to ``inf`` or ``nan``. The engines run
their kernels unchanged and then call :func:`mark_not_finite`: every evaluated
point with a result that is not a finite number gets the engine's
``not_finite`` status and NaN results, like any other point that was not
evaluated, so reports, batches and sweeps say so in one line. The serving kernel
applies the same rule to each row as it writes it (``kernels/serve/evaluate.py``
``_emit``: a second pass over a sweep's whole result matrix cost about a tenth of
a large SLO search).
"""

from __future__ import annotations

import numpy as np


def mark_not_finite(status: np.ndarray, out: np.ndarray, code: int, evaluated=(0,)) -> int:
    """Give ``code`` to every point (column of ``out``, results x n) whose ``status`` is one of ``evaluated``
    and whose results are not all finite; set its results to NaN. Returns how many points were marked.

    One pass sums each point's results (a NaN or an infinity anywhere makes the sum non-finite); only the
    evaluated points whose sum is not finite are looked at one value at a time (points that were not evaluated
    hold NaN already, and in a sweep they can be most of the grid)."""
    if out.size == 0:
        return 0
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(out, axis=0)
    suspects = np.flatnonzero(~np.isfinite(total) & np.isin(status, evaluated))
    if suspects.size == 0:
        return 0
    bad = suspects[~np.isfinite(out[:, suspects]).all(axis=0)]
    status[bad] = code
    out[:, bad] = np.nan
    return int(bad.size)
