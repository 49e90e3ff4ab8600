"""One Program through the shared list scheduler (``kernels/schedule.py``): each op's start and end.

Engine-neutral: the MAD-Max engine traces its configurations' Programs with it (``madmax/engine.py``) and the
real-world exact pipeline path times its pipeline Programs (``lm/pipeline_program.py``).
"""

from __future__ import annotations

import numpy as np

from fastmodel.kernels.schedule import schedule_trace
from fastmodel.kernels.streams import O_ITERATION_TIME
from fastmodel.schedule.program import Program


def schedule(program: Program, slots_row: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Each op's start and end and the makespan (seconds) of ``program`` under one row of cost-slot durations,
    every op scheduled (e.g. a pipeline Program, ``lm/pipeline_program.py``)."""
    start, end, out = schedule_trace(program.kernel_arrays, np.ascontiguousarray(slots_row, dtype=np.float64))
    return start, end, float(out[O_ITERATION_TIME])


__all__ = ["schedule"]
