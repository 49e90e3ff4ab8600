"""A one-line progress bar for streams of lines (``fastmodel batch``): on a terminal only."""

from __future__ import annotations

import sys
import time


class LineProgress:
    """Lines done, lines/s and (when the input's size is known) percent and ETA, on stderr.

    Silent unless ``enabled`` (default: stderr is a terminal). Called with
    (lines, bytes) after each chunk.
    """

    def __init__(self, total_bytes: int | None, stream=None, enabled: bool | None = None,
                 min_interval_s: float = 0.2):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total_bytes
        self.lines = 0
        self.bytes = 0
        self.start = time.perf_counter()
        self.last = 0.0
        self.min_interval_s = min_interval_s

    def __call__(self, lines: int, n_bytes: int) -> None:
        self.lines += lines
        self.bytes += n_bytes
        now = time.perf_counter()
        if not self.enabled or now - self.last < self.min_interval_s:
            return
        self.last = now
        rate = self.lines / max(now - self.start, 1e-9)
        text = f"\r{self.lines:,} lines  {rate:,.0f} lines/s"
        if self.total:
            done = min(self.bytes / self.total, 1.0)
            eta = (now - self.start) * (1 - done) / done if done > 0 else float("inf")
            text += f"  {100 * done:5.1f}%  ETA {eta:,.0f} s"
        self.stream.write(text + "   ")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line (once)."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False
