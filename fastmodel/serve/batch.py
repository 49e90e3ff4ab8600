"""``fastmodel batch`` lines of the serving engine: serving records (SERVE_RUNS.md), detected by content.

Each record of a chunk is lowered on its own (a bad record gets its own one-line error) and the chunk's
records are evaluated in one call; a line carries its ``id`` and the serving results
(``registry.serve.SERVE_RESULTS``). A disaggregated record (``serve.mode = "disagg"``) is evaluated through its
two worker pools (``fastmodel.serve.disagg``, as validate predicts it): TTFT, TPOT, end-to-end latency and
throughput (per GPU, per user), its decode pool's requests and ``limiting_pool``; results a deployment of two
pools has no single value of (memory, breakdown) stay empty. ``measured`` is never read.
"""

from __future__ import annotations

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
        from fastmodel.registry.serve import SERVE_RESULTS, SERVE_STATUS, SERVE_STATUSES
        from fastmodel.serve.disagg import evaluate_records
        from fastmodel.serve.records import lower_any

        if not getattr(default_semantics, "real_world", True):   # --semantics madmax: as a run record's line
            reason = (f"semantics: a serving record, evaluated by the serving model, not under "
                      f"{default_semantics.name!r}, which is the MAD-Max model only; the MAD-Max presets take MAD-Max "
                      "specs")
            return Prepared(errors={j: reason for j in range(len(cases))})
        lowered, errors = lower_all(cases, lower_any)
        out = Prepared(errors=errors)
        n = len(cases)
        out.columns = {"id": [None] * n, "limiting_pool": [None] * n}
        out.results = {r.name: [None] * n for r in SERVE_RESULTS}
        for (j, record), (state, result, pool) in zip(lowered, evaluate_records([r for _, r in lowered])):
            if state != "ok":
                out.errors[j] = _refusal(SERVE_STATUSES[SERVE_STATUS[state]], getattr(record, "columns", None))
                continue
            out.columns["id"][j] = record.id
            out.columns["limiting_pool"][j] = pool["limiting_pool"] if pool is not None else None
            for name, value in result.items():
                if name in out.results:      # a deployment of two pools has some results only; others empty
                    out.results[name][j] = value
        return out


def _refusal(state, columns=None) -> str:
    """The status row of a configuration the serving kernels refused (``columns``: its values, which
    ``fastmodel.serve.report.status_message`` names where the status has them)."""
    from fastmodel.serve.report import status_message

    if state.name == "not_finite":
        return f"{state.name}: {state.message}"
    return f"illegal serving configuration ({state.name}): {status_message(state.name, columns)}"
