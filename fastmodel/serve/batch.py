"""``fastmodel batch`` lines of the serving engine: serving records (SERVE_RUNS.md), detected by content.

Each record of a chunk is lowered on its own (a bad record gets its own one-line error) and the chunk's
records are evaluated in one call; a line carries its ``id`` and the serving results
(``registry.serve.SERVE_RESULTS``). ``measured`` is never read.
"""

from __future__ import annotations

import numpy as np

from fastmodel.io.batch_kinds import Prepared, lower_all
from fastmodel.spec.detect import is_serve_record


class ServeRecords:
    """Lines in the SERVE_RUNS.md schema: the serving model (kernels/serve/evaluate.py)."""

    name = "serve_record"
    engine = "serve"
    columns = {"id": "string"}

    def claims(self, case: dict) -> bool:
        if type(case.get("model")) is not dict or type(case.get("serve")) is not dict:
            return False
        return is_serve_record(case)

    def prepare(self, cases: list[dict], default_semantics) -> Prepared:
        from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUSES
        from fastmodel.serve.api import evaluate_table
        from fastmodel.serve.records import lower_serve_record

        lowered, errors = lower_all(cases, lower_serve_record)
        out = Prepared(errors=errors)
        if not lowered:
            return out
        results, status = evaluate_table(np.stack([record.columns for _, record in lowered], axis=1))
        n = len(cases)
        ids: list = [None] * n
        values: dict[str, list] = {r.name: [None] * n for r in SERVE_RESULTS}
        for k, (j, record) in enumerate(lowered):
            if status[k]:
                state = SERVE_STATUSES[int(status[k])]
                out.errors[j] = f"{state.name}: {state.message}" if state.name == "not_finite" else \
                    f"illegal serving configuration ({state.name}): {state.message}"
                continue
            ids[j] = record.id
            for v, result in enumerate(SERVE_RESULTS):
                values[result.name][j] = float(results[v, k])
        out.columns = {"id": ids}
        out.results = values
        return out
