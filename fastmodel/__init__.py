"""fastmodel: predict iteration time and memory of large ML models on GPU clusters.

Implements the MAD-Max performance model (Hsia et al., ISCA 2024) on numba
kernels. Start with :func:`evaluate`.

The public names below are imported on first use (module ``__getattr__``), so
``import fastmodel`` -- and every CLI command that needs neither -- loads
neither numba nor xarray.
"""

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    "evaluate": "fastmodel.api",
    "evaluate_record": "fastmodel.api",
    "make_config": "fastmodel.madmax.api",
    "memory_by_stage": "fastmodel.api",
    "FastmodelError": "fastmodel.errors",
    "PlanError": "fastmodel.errors",
    "SpecError": "fastmodel.errors",
    "SweepError": "fastmodel.errors",
    "Plan": "fastmodel.madmax.parallel.plans",
    "enumerate_plans": "fastmodel.madmax.parallel.plans",
    "PRESETS": "fastmodel.semantics",
    "Semantics": "fastmodel.semantics",
    "get_semantics": "fastmodel.semantics",
    "sweep": "fastmodel.api",
    "validate": "fastmodel.api",
    "calibrate": "fastmodel.api",
}

__all__ = ["__version__", *_LAZY]


#: the Python call of each CLI command that has no name of its own here (``fastmodel.run`` is ``evaluate``)
_COMMANDS = {
    "run": "fastmodel.evaluate (specs) or fastmodel.evaluate_record (a run or serving record)",
    "best": "fastmodel.analysis.best.best",
    "serve": "fastmodel.serve.api.evaluate / .sweep, fastmodel.serve.search.slo_search",
    "batch": "fastmodel.io.batch.run_batch",
}
#: subpackages reached as attributes of the package (``fastmodel.plot.heatmap`` after ``import fastmodel``), imported
#: on first use so that ``import fastmodel`` does not load matplotlib
_SUBPACKAGES = ("plot",)


def __getattr__(name: str):
    import importlib

    if name in _SUBPACKAGES:
        return importlib.import_module(f"fastmodel.{name}")
    module = _LAZY.get(name)
    if module is None:
        if name in _COMMANDS:
            raise AttributeError(f"module 'fastmodel' has no attribute {name!r}: 'fastmodel {name}' is "
                                 f"{_COMMANDS[name]} in Python")
        raise AttributeError(f"module 'fastmodel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
