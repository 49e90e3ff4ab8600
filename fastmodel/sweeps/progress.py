"""The progress bar of a sweep on a terminal."""

from __future__ import annotations

import time

from fastmodel.progress_bar import TerminalBar


class Progress(TerminalBar):
    """A one-line progress bar on a terminal (configs done, configs/s, ETA); silent otherwise. It counts on either
    way: ``done`` configurations, of which ``skipped`` a resumed store already held (``skip``: done, but not
    evaluated by this run, so not in the rate)."""

    def __init__(self, total: int, stream=None, enabled: bool | None = None, min_interval_s: float = 0.2):
        super().__init__(stream, enabled, min_interval_s)
        self.total = total
        self.done = 0
        self.skipped = 0

    def skip(self, configs: int) -> None:
        """``configs`` configurations a resumed store already holds."""
        self.skipped += configs
        self.done += configs

    @property
    def evaluated(self) -> int:
        """The configurations this run evaluated."""
        return self.done - self.skipped

    def __call__(self, configs: int) -> None:
        self.done += configs
        now = time.perf_counter()
        if self._due(now, force=self.done >= self.total):
            elapsed = max(now - self.start, 1e-9)
            rate = self.evaluated / elapsed
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            pct = 100 * self.done / self.total if self.total else 100
            self._show(f"{self.done:,}/{self.total:,} configs ({pct:5.1f}%)  {rate:,.0f} configs/s  ETA {eta:,.0f} s")
