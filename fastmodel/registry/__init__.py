"""The registry: every name fastmodel outputs or reads, declared once, dependency-free.

One package, one module per engine (each under 450 lines):

- ``registry.madmax`` -- the MAD-Max engine: result variables (units, ``better``,
  long name, description), status codes with messages, parameter columns (spec
  path, units, the family trait that fills them). ``kernels/madmax/layout.py`` derives
  ``R_*``, ``STATUS_*``, ``COLUMNS`` and ``P_*`` from it.
- ``registry.lm`` -- the real-world model and serving: parameter columns (units,
  bounds, ``fittable``), integer codes, result variables (``better``), memory
  kinds, statuses. ``kernels/lm/layout.py`` derives ``C_*``, ``R_*`` and codes.

Datasets, JSON records, plots (direction, units, labels), ``best`` and
calibration read these. ``better(name)`` looks a result's direction up in either
engine; ``attrs(name)`` gives a MAD-Max variable's xarray attrs (the real-world
engine builds its attrs from ``registry.lm.RESULTS``). The kernels' on-disk cache is keyed by both modules' bytes
(``kernels/jit.py``).
"""

from fastmodel.registry.madmax import attrs, better

__all__ = ["attrs", "better"]
