"""One-line progress bars on a terminal (silent otherwise): :class:`TerminalBar` does the terminal part,
:class:`LineProgress` counts the lines of ``fastmodel batch``; ``fastmodel.sweeps.progress.Progress`` counts
a sweep's configurations."""

from __future__ import annotations

import sys
import time


class TerminalBar:
    """Redraws one line of stderr (or ``stream``) at most every ``min_interval_s``; silent unless ``enabled``
    (default: the stream is a terminal). Subclasses compose the text and call :meth:`_due` / :meth:`_show`."""

    def __init__(self, stream=None, enabled: bool | None = None, min_interval_s: float = 0.2):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.start = time.perf_counter()
        self.last = 0.0
        self.min_interval_s = min_interval_s

    def _due(self, now: float, force: bool = False) -> bool:
        """Whether to redraw at ``now`` (``force``: whatever the interval); marks the redraw."""
        if not self.enabled or (not force and now - self.last < self.min_interval_s):
            return False
        self.last = now
        return True

    def _show(self, text: str) -> None:
        self.stream.write(f"\r{text}   ")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line (once; later calls do nothing)."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False


class LineProgress(TerminalBar):
    """Lines done, lines/s and (when the input's size is known) percent and ETA, on stderr.

    Silent unless ``enabled`` (default: stderr is a terminal). Called with
    (lines, bytes) after each chunk.
    """

    def __init__(self, total_bytes: int | None, stream=None, enabled: bool | None = None,
                 min_interval_s: float = 0.2):
        super().__init__(stream, enabled, min_interval_s)
        self.total = total_bytes
        self.lines = 0
        self.bytes = 0

    def __call__(self, lines: int, n_bytes: int) -> None:
        self.lines += lines
        self.bytes += n_bytes
        now = time.perf_counter()
        if not self._due(now):
            return
        rate = self.lines / max(now - self.start, 1e-9)
        text = f"{self.lines:,} lines  {rate:,.0f} lines/s"
        if self.total:
            done = min(self.bytes / self.total, 1.0)
            eta = (now - self.start) * (1 - done) / done if done > 0 else float("inf")
            text += f"  {100 * done:5.1f}%  ETA {eta:,.0f} s"
        self._show(text)
