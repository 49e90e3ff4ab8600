"""Figures for papers: heatmaps, timelines, breakdowns (time or memory), memory by kind, Pareto frontiers and
scaling curves.

Every function takes xarray data (or, for :func:`timeline`, a configuration),
draws on the non-interactive Agg canvas in the paper style and returns
``(fig, ax)`` so it can be restyled; :func:`save` writes PNG, PDF or SVG with
reproducible bytes.
"""

from fastmodel.errors import checked_arguments
from fastmodel.plot.breakdown import breakdown
from fastmodel.plot.data import PlotError, direction
from fastmodel.plot.heatmap import heatmap
from fastmodel.plot.memory import memory_bars
from fastmodel.plot.memory_timeline import memory_timeline
from fastmodel.plot.pareto import frontier, pareto, pareto_mask
from fastmodel.plot.scaling import scaling
from fastmodel.plot.style import PALETTE, SIZES, paper_rc, save
from fastmodel.plot.timeline import timeline

# a misspelt keyword is one line naming the nearest parameter (fastmodel.errors.ArgumentError), as in fastmodel.*
breakdown, heatmap, memory_bars, memory_timeline, frontier, pareto, scaling, save, timeline = map(
    checked_arguments, (breakdown, heatmap, memory_bars, memory_timeline, frontier, pareto, scaling, save, timeline))

__all__ = ["PALETTE", "SIZES", "PlotError", "breakdown", "direction", "frontier", "heatmap", "memory_bars", "memory_timeline",
           "paper_rc",
           "pareto", "pareto_mask", "save", "scaling", "timeline"]
