"""Results that are not finite numbers become a status, never a reported ``inf`` (issue 25 item 2).

An input of absurd magnitude (a bandwidth of 1e-300 B/s, a global batch of
1e300) overflows a kernel's arithmetic to ``inf`` or ``nan``. Every evaluated
point whose results are not all finite numbers gets its engine's ``not_finite``
status and NaN results, like any other point that was not evaluated, so reports,
batches and sweeps say so in one line. The one rule lives here and each engine's
kernel applies it to a point while its results are still in its frame vector
(the lm table pass ``kernels/lm/evaluate.py``, the lm grid ``kernels/lm/grid.py``,
serving's ``kernels/serve/evaluate.py`` ``_emit``): a numpy pass over a sweep's
whole result matrix afterwards cost a third of a large lm sweep and a tenth of a
large SLO search (docs/performance.md, "Result pages and the not-finite check").
"""

import math

import numpy as np

from fastmodel.kernels.jit import njit


@njit(inline="always")
def all_finite(values, n):
    """Whether ``values[0:n]`` are all finite numbers. One sum first (a NaN or an infinity anywhere makes it
    non-finite; a finite sum clears the point at once); only when it is not finite is each value looked at (the
    sum of finite values can overflow)."""
    total = 0.0
    for v in range(n):
        total += values[v]
    if math.isfinite(total):
        return True
    for v in range(n):
        if not math.isfinite(values[v]):
            return False
    return True


@njit(inline="always")
def finite_or_marked(values, n, code, evaluated, not_finite):
    """The status of a point whose status so far is ``code``: ``not_finite``, with ``values[0:n]`` set to NaN,
    when it was ``evaluated`` and its results are not all finite; else ``code`` (a point refused before
    evaluation keeps its refusal, whatever its results hold)."""
    if not evaluated or all_finite(values, n):
        return code
    for v in range(n):
        values[v] = np.nan
    return not_finite
