"""``fastmodel batch`` lines of the serving engine: serving records (SERVE_RUNS.md), detected by content.

Each record of a chunk is lowered on its own (a bad record gets its own one-line error) and the chunk's
records are evaluated in one call; a line carries its ``id`` and the serving results
(``registry.serve.SERVE_RESULTS``). A disaggregated record (``serve.mode = "disagg"``) is evaluated through its
two worker pools (``fastmodel.serve.disagg``, as validate predicts it): TTFT, TPOT, end-to-end latency and
throughput (per GPU, per user), its decode pool's requests and ``limiting_pool``; results a deployment of two
pools has no single value of (memory, breakdown) stay empty. ``measured`` is never read.
"""

from __future__ import annotations

import numpy as np

from fastmodel.io.batch_kinds import Prepared, lower_all
from fastmodel.spec.detect import is_serve_record


class ServeRecords:
    """Lines in the SERVE_RUNS.md schema: the serving model (kernels/serve/evaluate.py)."""

    name = "serve_record"
    engine = "serve"
    columns = {"id": "string", "limiting_pool": "string"}

    def claims(self, case: dict) -> bool:
        if type(case.get("model")) is not dict or type(case.get("serve")) is not dict:
            return False
        return is_serve_record(case)

    def prepare(self, cases: list[dict], default_semantics) -> Prepared:
        from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUSES
        from fastmodel.serve.api import evaluate_table
        from fastmodel.serve.disagg import DisaggRecord, evaluate_disagg
        from fastmodel.serve.records import lower_any
        from fastmodel.serve.report import disagg_result

        lowered, errors = lower_all(cases, lower_any)
        out = Prepared(errors=errors)
        single = [(j, r) for j, r in lowered if not isinstance(r, DisaggRecord)]
        pooled = [(j, r) for j, r in lowered if isinstance(r, DisaggRecord)]
        n = len(cases)
        out.columns = {"id": [None] * n, "limiting_pool": [None] * n}
        out.results = {r.name: [None] * n for r in SERVE_RESULTS}
        if single:
            results, status = evaluate_table(np.stack([record.columns for _, record in single], axis=1))
            for k, (j, record) in enumerate(single):
                if status[k]:
                    out.errors[j] = _refusal(SERVE_STATUSES[int(status[k])])
                    continue
                out.columns["id"][j] = record.id
                for v, result in enumerate(SERVE_RESULTS):
                    out.results[result.name][j] = float(results[v, k])
        for (j, record), pool in zip(pooled, evaluate_disagg([r for _, r in pooled])):
            if pool["status"] != "ok":
                from fastmodel.registry.serve import SERVE_STATUS

                out.errors[j] = _refusal(SERVE_STATUSES[SERVE_STATUS[pool["status"]]])
                continue
            out.columns["id"][j] = record.id
            out.columns["limiting_pool"][j] = pool["limiting_pool"]
            for name, value in disagg_result(record, pool).items():
                if name in out.results:      # the serving results a deployment of two pools has; others empty
                    out.results[name][j] = value
        return out


def _refusal(state) -> str:
    """The status row of a configuration the serving kernels refused."""
    return f"{state.name}: {state.message}" if state.name == "not_finite" else \
        f"illegal serving configuration ({state.name}): {state.message}"
