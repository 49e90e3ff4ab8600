"""fastmodel: predict iteration time and memory of large ML models on GPU clusters.

Implements the MAD-Max performance model (Hsia et al., ISCA 2024) on numba
kernels. Start with :func:`evaluate`.
"""

__version__ = "0.1.0"

from fastmodel.api import evaluate, make_config  # noqa: E402
from fastmodel.errors import FastmodelError, PlanError, SpecError, SweepError  # noqa: E402
from fastmodel.plans import Plan, enumerate_plans  # noqa: E402
from fastmodel.semantics import PRESETS, Semantics, get_semantics  # noqa: E402
from fastmodel.sweep import sweep  # noqa: E402

__all__ = [
    "__version__", "evaluate", "make_config", "FastmodelError", "PlanError", "SpecError", "SweepError",
    "Plan", "enumerate_plans", "PRESETS", "Semantics", "get_semantics", "sweep",
]
