"""The progress bar of a sweep on a terminal."""

from __future__ import annotations

import time


class Progress:
    """A one-line progress bar on a terminal (configs done, configs/s, ETA); silent otherwise."""

    def __init__(self, total: int, stream=None, enabled: bool | None = None, min_interval_s: float = 0.2):
        import sys

        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.start = time.perf_counter()
        self.last = 0.0
        self.min_interval_s = min_interval_s

    def __call__(self, configs: int) -> None:
        self.done += configs
        now = time.perf_counter()
        if self.enabled and (now - self.last >= self.min_interval_s or self.done >= self.total):
            self.last = now
            elapsed = max(now - self.start, 1e-9)
            rate = self.done / elapsed
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            pct = 100 * self.done / self.total if self.total else 100
            self.stream.write(f"\r{self.done:,}/{self.total:,} configs ({pct:5.1f}%)  {rate:,.0f} configs/s  "
                              f"ETA {eta:,.0f} s   ")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line (once; later calls do nothing)."""
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False
