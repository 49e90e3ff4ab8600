"""Serving records evaluated from Python: the serving engine's ``evaluate_record`` door (``fastmodel.evaluate_record``)
and the evaluation ``fastmodel run`` makes of one record (docs/model_serving.md; SERVE_RUNS.md).

Moved out of ``fastmodel/serve/api.py`` (which re-exports :func:`evaluate_record` and :func:`evaluate_any_record`,
the engine's door) when that module reached the 450-line limit; no change to either function.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastmodel.errors import SpecError
from fastmodel.registry.serve import SERVE_RESULTS


def evaluate_record(record: dict, source: str | None = None, calibration: Any = None):
    """One serving record (SERVE_RUNS.md; ``measured`` is not read) as a 0-d ``xarray.Dataset`` of every
    serving result, with its ``status`` and the lowering's ``notes`` (joined by "; ", as the training engine's
    ``evaluate_record``); a calibration is a SpecError (it applies to training runs). A disaggregated record
    (``serve.mode = "disagg"``) is answered through its two worker pools, as ``serve`` and ``batch`` answer it: the
    results of ``fastmodel.serve.report.disagg_result`` and the attrs ``mode`` and ``limiting_pool`` ("" when
    the record is not answered)."""
    import xarray as xr

    import fastmodel

    lowered, state, result, pool = evaluate_any_record(record, source, calibration)
    attrs = {"id": lowered.id, "status": state, "fastmodel_task": "serve", "notes": "; ".join(lowered.notes),
             "fastmodel_version": fastmodel.__version__, "fastmodel_engine": "serve"}
    if pool is not None:
        from fastmodel.serve.report import disagg_attrs

        data = {name: ((), np.float64(value), disagg_attrs(name)) for name, value in result.items()}
        return xr.Dataset(data, attrs={**attrs, "mode": "disagg", "limiting_pool": str(pool.get("limiting_pool") or "")})
    data = {r.name: ((), bool(result[r.name] > 0.5) if r.dtype == "bool" else np.float64(result[r.name]), r.attrs())
            for r in SERVE_RESULTS}
    return xr.Dataset(data, attrs=attrs)


def evaluate_any_record(record: dict, source: str | None = None, calibration: Any = None):
    """(the lowered record, its status name, its results by name, its pools' dict or None) of one serving record,
    aggregated or disaggregated: ``records.lower_any`` then ``disagg.evaluate_records``, the evaluation ``serve
    RECORDS`` and ``batch`` make, behind :func:`evaluate_record` and ``fastmodel run``
    (``fastmodel.serve.report.run_record``); a calibration is a SpecError (it applies to training runs)."""
    from fastmodel.serve.disagg import evaluate_records
    from fastmodel.serve.records import lower_any

    _refuse_calibration(source, calibration)
    lowered = lower_any(record, source)
    state, result, pool = evaluate_records([lowered])[0]
    return lowered, state, result, pool


def _refuse_calibration(source: str | None, calibration: Any) -> None:
    if calibration is not None:
        raise SpecError(source, "calibration", "applies to training runs (the real-world training model), not "
                        "to serving records")
