"""One configuration's step, op by op, in engine-neutral terms: what ``fastmodel.plot.timeline`` draws.

An engine's door gives a :class:`Timeline` (``timeline(...)``; ``fastmodel.engines.timeline`` chooses the
engine): MAD-Max from the list scheduler's trace of its Program (two streams, the op categories of
``kernels/streams.py``), the real-world model from its closed-form step laid out op by op (the busiest stage's
compute stream and one row per process group, ``fastmodel/lm/timeline.py``). Times are seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timeline:
    """The ops of one step: the row (stream) and kind of each, its start and end."""

    rows: tuple[str, ...]          # row labels, the compute stream first
    kinds: tuple[str, ...]         # op kinds (each drawn in its colour, named in the legend)
    names: tuple[str, ...]         # op names, one per op
    row: np.ndarray                # per op: index into rows
    kind: np.ndarray               # per op: index into kinds
    start: np.ndarray
    end: np.ndarray
    total: float                   # the step time
    label: str = ""                # the configuration: model and plan
    barrier: float | None = None   # the forward/backward barrier, where the program has one
    wait_row: int = 0              # the row whose gaps are waits for communication (the compute stream)
    wait_tol: float = 1e-12        # gaps shorter than this share of the step are not waits (rounding)

    def waits(self) -> np.ndarray:
        """(start, end) of the gaps of the compute row over the step: the exposed communication."""
        on = self.row == self.wait_row
        return idle_intervals(self.start[on], self.end[on], self.total, self.wait_tol)

    def exposed(self) -> float:
        """Seconds the compute row waits in the step."""
        return float(np.sum(np.diff(self.waits(), axis=1)))


def idle_intervals(starts: np.ndarray, ends: np.ndarray, total: float, rel_tol: float) -> np.ndarray:
    """(start, end) of the gaps between the ops of one stream over [0, total], gaps shorter than
    ``rel_tol x total`` left out."""
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    lo = np.concatenate([[0.0], ends])
    hi = np.concatenate([starts, [total]])
    keep = hi - lo > rel_tol * max(total, 1e-30)
    return np.stack([lo[keep], hi[keep]], axis=1)


__all__ = ["Timeline", "idle_intervals"]
