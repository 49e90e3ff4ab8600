"""``fastmodel batch`` lines of the serving engine: serving records (SERVE_RUNS.md), detected by content.

Each record of a chunk is lowered on its own (a bad record gets its own one-line error) and the chunk's
records are evaluated in one call; the serving results come as the kind's own columns and
``memory_per_device`` / ``fits_memory`` as the usual result keys. ``measured`` is never read.
"""

from __future__ import annotations

import numpy as np

from fastmodel.errors import FastmodelError
from fastmodel.io.batch_kinds import Prepared, one_line
from fastmodel.spec.detect import is_serve_record

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


class ServeRecords:
    """Lines in the SERVE_RUNS.md schema: the serving model (kernels/serve/evaluate.py)."""

    name = "serve_record"
    columns = {"id": "string", **{name: "float64" for name in SERVE_COLUMNS}}

    def claims(self, case: dict) -> bool:
        if type(case.get("model")) is not dict or type(case.get("serve")) is not dict:
            return False
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
