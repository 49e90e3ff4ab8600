"""Batch line kinds for measured-run records: training runs (RUNS.md) and serving records (SERVE_RUNS.md).

Detected by content, like the MAD-Max formats. Each group of lines of a chunk is
lowered record by record (a bad record gets its own one-line error) and evaluated
in one call of its engine. A run record's ``iteration_time`` is its step time and
``memory_per_device`` its peak memory (the usual result keys); the real-world and
serving results come as the kind's own columns. ``measured`` is never read.
"""

from __future__ import annotations

import numpy as np

from fastmodel.errors import FastmodelError
from fastmodel.io.batch_kinds import Prepared, one_line

RUN_COLUMNS = ("step_time", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "flops_per_token",
               "pipeline_bubble", "exposed_tp", "exposed_dp")
SERVE_COLUMNS = ("ttft", "tpot", "e2e_latency", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
                 "batch_size", "kv_cache_memory")


def _lower_all(cases, lower) -> tuple[list, dict[int, str]]:
    lowered, errors = [], {}
    for j, case in enumerate(cases):
        try:
            lowered.append((j, lower(case)))
        except FastmodelError as error:
            errors[j] = one_line(error)
    return lowered, errors


class RunRecords:
    """Lines in the RUNS.md schema: the real-world model (docs/model.md §11)."""

    name = "run_record"
    columns = {"id": "string", **{name: "float64" for name in RUN_COLUMNS}}

    def __init__(self, calibration=None):
        self.calibration = calibration       # a Calibration overlay for every record (None: physical values)
        self.seen: dict[str, set] = {}       # device -> network tiers used by the records evaluated so far
        self.frameworks: set = set()         # the records' framework texts (their software stacks)

    def finish(self) -> None:
        """After the last chunk: a ``CalibrationWarning`` per device or tier the calibration does not cover."""
        if self.calibration is not None:
            from fastmodel.lm.calibrate.use import check

            check(self.calibration, self.seen, frameworks=self.frameworks)

    def claims(self, case: dict) -> bool:
        if type(case.get("model")) is not dict or type(case.get("plan")) is not dict:   # spec lines: no walk
            return False
        from fastmodel.lm.records import is_run_record

        return is_run_record(case)

    def prepare(self, cases: list[dict], default_semantics) -> Prepared:
        from fastmodel.lm.engine import evaluate_table
        from fastmodel.lm.records import lower_record
        from fastmodel.lm.rules import plan_status
        from fastmodel.registry.lm import STATUSES

        lowered, errors = _lower_all(cases, lower_record)
        out = Prepared(errors=errors)
        if not lowered:
            return out
        if self.calibration is not None:
            from fastmodel.lm.calibrate.overlay import apply_calibration
            from fastmodel.lm.calibrate.use import tiers_used

            for _, record in lowered:
                self.seen.setdefault(record.gpu, set()).update(tiers_used(record.columns))
                self.frameworks.add(record.raw.get("framework"))
            calibrated = apply_calibration([record for _, record in lowered], self.calibration)
            lowered = [(j, record) for (j, _), record in zip(lowered, calibrated)]
        params = np.stack([record.columns for _, record in lowered], axis=1)
        status = plan_status(params)
        results = evaluate_table(params, finite := np.zeros(len(lowered), dtype=np.int8))
        status = np.where(status == 0, finite, status)
        n = len(cases)
        columns = {name: [None] * n for name in self.columns}
        values = {"iteration_time": [None] * n, "memory_per_device": [None] * n, "fits_memory": [None] * n}
        for k, (j, record) in enumerate(lowered):
            if status[k]:
                name, message = STATUSES[status[k]].name, STATUSES[status[k]].message
                out.errors[j] = f"not_finite: {message}" if name == "not_finite" else \
                    f"plan: illegal plan ({name}): {message}"
                continue
            columns["id"][j] = record.id
            for name in RUN_COLUMNS:
                columns[name][j] = float(results[name][k])
            values["iteration_time"][j] = float(results["step_time"][k])
            values["memory_per_device"][j] = float(results["memory_per_device"][k])
            values["fits_memory"][j] = float(results["fits_memory"][k])
        out.columns = columns
        out.results = values
        return out


class ServeRecords:
    """Lines in the SERVE_RUNS.md schema: the serving model (kernels/serve/evaluate.py)."""

    name = "serve_record"
    columns = {"id": "string", **{name: "float64" for name in SERVE_COLUMNS}}

    def claims(self, case: dict) -> bool:
        if type(case.get("model")) is not dict or type(case.get("serve")) is not dict:
            return False
        from fastmodel.serve.records import is_serve_record

        return is_serve_record(case)

    def prepare(self, cases: list[dict], default_semantics) -> Prepared:
        from fastmodel.registry.lm import SERVE_RESULT_INDEX, SERVE_STATUS_NAMES, STATUS_CODES, STATUSES
        from fastmodel.serve.api import evaluate_table
        from fastmodel.serve.records import lower_serve_record

        lowered, errors = _lower_all(cases, lower_serve_record)
        out = Prepared(errors=errors)
        if not lowered:
            return out
        results, status = evaluate_table(np.stack([record.columns for _, record in lowered], axis=1))
        n = len(cases)
        columns = {name: [None] * n for name in self.columns}
        values = {"memory_per_device": [None] * n, "fits_memory": [None] * n}
        for k, (j, record) in enumerate(lowered):
            if status[k]:
                name = SERVE_STATUS_NAMES[int(status[k])]
                out.errors[j] = f"not_finite: {STATUSES[STATUS_CODES[name]].message}" if name == "not_finite" else \
                    f"illegal serving configuration ({name})"
                continue
            columns["id"][j] = record.id
            for name in SERVE_COLUMNS:
                columns[name][j] = float(results[SERVE_RESULT_INDEX[name], k])
            values["memory_per_device"][j] = float(results[SERVE_RESULT_INDEX["memory_per_device"], k])
            values["fits_memory"][j] = float(results[SERVE_RESULT_INDEX["fits_memory"], k])
        out.columns = columns
        out.results = values
        return out
