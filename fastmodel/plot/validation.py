"""Predicted vs measured step time of ``fastmodel validate`` (one marker per run, colour by source)."""

from __future__ import annotations

import numpy as np

from fastmodel.plot.readable import make_readable
from fastmodel.plot.style import label, new_axes, paper_rc, unit_formatter

#: the shaded band: the issue's dense-run accuracy bar
BAND = 0.15


def predicted_vs_measured(table: list[dict], size="single", ax=None):
    """Log-log scatter of predicted against measured step time, the identity line and a +/-15 % band; the
    legend sits outside the axes, beside the data (issue 25 item 9)."""
    with paper_rc():
        return _draw(table, size, ax)


def _draw(table, size, ax):
    fig, ax = new_axes(size, ax=ax)
    measured = np.array([r["measured_step_time_s"] for r in table], dtype=float)
    predicted = np.array([r["predicted_step_time_s"] for r in table], dtype=float)
    ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0) & (predicted > 0)
    if not ok.any():
        from fastmodel.errors import FastmodelError
        raise FastmodelError("no run has both a measured and a predicted step time to plot")
    lo = min(measured[ok].min(), predicted[ok].min()) / 1.5
    hi = max(measured[ok].max(), predicted[ok].max()) * 1.5
    line = np.array([lo, hi])
    ax.fill_between(line, line * (1 - BAND), line * (1 + BAND), color="0.9", lw=0, label=f"±{BAND:.0%}")
    ax.plot(line, line, color="0.4", lw=0.8, label="predicted = measured")
    sources = sorted({r["source"] for r in table})
    markers = "os^vD<>pXh*"     # the 9th source shares the 1st's colour (8 Okabe-Ito): a cross, not a hexagon
    for i, source in enumerate(sources):
        pick = ok & np.array([r["source"] == source for r in table])
        if pick.any():
            ax.scatter(measured[pick], predicted[pick], s=14, marker=markers[i % len(markers)], label=source,
                       zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    for axis in (ax.xaxis, ax.yaxis):   # plain numbers (1, 10, 100), as the other figures; 10^k past 4 decades
        axis.set_major_formatter(unit_formatter(1.0, axis))
    ax.set_xlabel(label("measured step time", "s"))      # "[s]", as every other figure
    ax.set_ylabel(label("predicted step time", "s"))
    errors = predicted[ok] / measured[ok] - 1
    left_out = int((~ok).sum())   # refused or skipped runs: no point, but counted (they are misses in the scores)
    ax.set_title(f"{ok.sum()} runs, MAPE {100 * np.mean(np.abs(errors)):.1f}%"
                 + (f"; {left_out} without a prediction left out" if left_out else ""), loc="left")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper", handlelength=1.2)
    make_readable(fig)   # minimum font, no overlapping tick labels (plot/readable.py)
    return fig, ax
