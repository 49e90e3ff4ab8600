"""Figures for papers: heatmaps, timelines, breakdowns, Pareto frontiers and scaling curves.

Every function takes xarray data (or, for :func:`timeline`, a configuration),
draws on the non-interactive Agg canvas in the paper style and returns
``(fig, ax)`` so it can be restyled; :func:`save` writes PNG, PDF or SVG with
reproducible bytes.
"""

from fastmodel.plot.heatmap import heatmap
from fastmodel.plot.style import PALETTE, SIZES, paper_rc, save

__all__ = ["PALETTE", "SIZES", "heatmap", "paper_rc", "save"]
