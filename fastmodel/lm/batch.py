"""``fastmodel batch`` lines of the real-world training engine: run records (RUNS.md) and spec lines.

- :class:`RunRecords`: lines in the RUNS.md schema, detected by content; each record is lowered on its own
  (a bad record gets its own one-line error) and a chunk's records are evaluated in one call.
- :class:`SpecLines`: ``{"case"?, "model", "system", "task", "plan"?, "num_nodes"?, "execution"?}`` whose
  model is a real-world spec (``family = "lm"``), as ``fastmodel run`` takes them.

A line carries the engine's result variables (``registry.lm.RESULTS``: ``step_time``, its alias
``iteration_time``, the memory kinds ``memory_<kind>``, ...) after its ``id`` or ``plan``; ``measured`` is
never read.
"""

from __future__ import annotations

import numpy as np

from fastmodel.errors import FastmodelError
from fastmodel.io.batch_kinds import Prepared, internal_error, lower_all, one_line
from fastmodel.spec.detect import is_real_world_model, is_run_record


class RunRecords:
    """Lines in the RUNS.md schema: the real-world model (docs/model.md §11)."""

    name = "run_record"
    engine = "lm"
    columns = {"id": "string"}
    takes_calibration = True

    def __init__(self, calibration=None):
        from fastmodel.lm.calibrate.overlay import as_calibration

        self.calibration = as_calibration(calibration)  # an overlay for every record (None: physical values)
        self.seen: dict[str, set] = {}       # device -> network tiers used by the records evaluated so far
        self.software: set = set()           # the records' (framework, stack): their software stacks

    def finish(self) -> None:
        """After the last chunk: a ``CalibrationWarning`` per device or tier the calibration does not cover."""
        if self.calibration is not None and not self.seen:   # e.g. a file of serving records only
            import warnings

            from fastmodel.lm.calibrate.use import CalibrationWarning

            warnings.warn("--calibration applied to no line: it applies to run records (RUNS.md), and no line "
                          "was one", CalibrationWarning, stacklevel=2)
        elif self.calibration is not None:
            from fastmodel.lm.calibrate.use import check

            check(self.calibration, self.seen, software=self.software)

    def claims(self, case: dict) -> bool:
        if type(case.get("model")) is not dict or type(case.get("plan")) is not dict:   # spec lines: no walk
            return False
        return is_run_record(case)

    def prepare(self, cases: list[dict], default_semantics) -> Prepared:
        from fastmodel.lm.engine import evaluate_table
        from fastmodel.lm.records import lower_record
        from fastmodel.lm.rules import plan_status

        if not getattr(default_semantics, "real_world", True):   # --semantics madmax: as run -m RECORD refuses it
            reason = (f"semantics: a measured-run record, evaluated by the real-world model ('default'), not under "
                      f"{default_semantics.name!r}, which is the MAD-Max model only; the MAD-Max presets take MAD-Max "
                      "specs")
            return Prepared(errors={j: reason for j in range(len(cases))})
        lowered, errors = lower_all(cases, lower_record)
        out = Prepared(errors=errors)
        if not lowered:
            return out
        if self.calibration is not None:
            from fastmodel.lm.calibrate.overlay import apply_calibration
            from fastmodel.lm.calibrate.use import record_software, tiers_used

            for _, record in lowered:
                self.seen.setdefault(record.gpu, set()).update(tiers_used(record.columns))
                self.software.add(record_software(record))
            calibrated = apply_calibration([record for _, record in lowered], self.calibration)
            lowered = [(j, record) for (j, _), record in zip(lowered, calibrated)]
        params = np.stack([record.columns for _, record in lowered], axis=1)
        status = plan_status(params)
        results = evaluate_table(params, finite := np.zeros(len(lowered), dtype=np.int8))
        status = np.where(status == 0, finite, status)         # not_finite: results that overflow
        for k, (j, _) in enumerate(lowered):
            if status[k]:
                out.errors[j] = _status_error(int(status[k]), params[:, k])
        legal = [(k, j, record.id) for k, (j, record) in enumerate(lowered) if not status[k]]
        _fill(out, len(cases), "id", results, legal)
        return out


def _status_error(code: int, columns) -> str:
    """The error line of a batch line whose configuration (column vector ``columns``) got status ``code``: an
    illegal plan with the reason ``run`` gives it (``rules.status_reason``: the expert mesh's degrees, ...)."""
    from fastmodel.lm.rules import status_reason
    from fastmodel.registry.lm import STATUSES

    name, message = STATUSES[code].name, STATUSES[code].message
    if name == "not_finite":
        return f"not_finite: {message}"
    return f"plan: illegal plan ({name}): {status_reason(code, columns)}"


def _fill(out: Prepared, n: int, label: str, results: dict, legal: list[tuple[int, int, str]]) -> None:
    """``out``'s ``label`` column and results from the engine's ``results`` (by name, one value per evaluated
    configuration k) for the lines ``j`` that were evaluated, each with its ``id`` (or plan label)."""
    labels: list = [None] * n
    values: dict[str, list] = {name: [None] * n for name in results}
    for k, j, text in legal:
        labels[j] = text
        for name, column in results.items():
            values[name][j] = float(column[k])
    out.columns = {label: labels}
    out.results = values


class SpecLines:
    """Lines whose model is a real-world spec (``family = "lm"``): ``{"case"?, "model", "system", "task",
    "plan"?, "num_nodes"?, "semantics"?, "execution"?}`` -- the configuration ``fastmodel run`` evaluates
    for the same options. Each distinct line is built once (its column vector, as a sweep point) and a
    chunk's lines are evaluated in one call."""

    name = "lm_spec"
    engine = "lm"
    columns = {"plan": "string"}
    ALLOWED = frozenset(("case", "model", "system", "task", "plan", "num_nodes", "semantics", "execution"))

    def __init__(self):
        self._family: dict = {}

    def claims(self, case: dict) -> bool:
        model = case.get("model")
        if type(model) is dict:
            return is_real_world_model(model)
        if type(model) is not str:
            return False
        found = self._family.get(model)
        if found is None:
            found = self._family[model] = _names_real_world_model(model)
        return found

    def _where_it_goes(self, key: str) -> str:
        """The hint after "unknown key": an execution field's block, the nearest key, or the keys a line takes."""
        from fastmodel.errors import nearest
        from fastmodel.lm.execution import ExecutionSpec

        if key in ExecutionSpec.model_fields:
            return f' (an execution field: write "execution": {{"{key}": ...}})'
        return nearest(key, self.ALLOWED) or f"; a line takes {', '.join(sorted(self.ALLOWED))}"

    def _columns(self, case: dict, default_semantics):
        from fastmodel import engines
        from fastmodel.lm.sweep import point_columns

        unknown = sorted(set(case) - self.ALLOWED - {"expected", "rule"})
        if unknown:
            raise FastmodelError(f"unknown key {unknown[0]!r}{self._where_it_goes(unknown[0])}")
        for key in ("system", "task"):
            if key not in case:
                raise FastmodelError(f"missing key {key!r}")
        engines.for_specs(case["model"], case.get("semantics", default_semantics), case["system"])
        nodes = case.get("num_nodes")
        if nodes is not None and (type(nodes) is not int or nodes < 1):
            raise FastmodelError(f"num_nodes must be a positive integer (got {nodes!r})")
        plan = case.get("plan")
        if plan is None:
            from fastmodel.lm.task import load_train_task

            plan = load_train_task(case["task"]).mesh()
        return point_columns(case["model"], case["system"], case["task"], plan=plan,
                             execution=case.get("execution"), num_nodes=nodes), plan or "dp"

    def prepare(self, cases: list[dict], default_semantics) -> Prepared:
        from fastmodel.lm.engine import evaluate_table

        out = Prepared()
        built = []
        for j, case in enumerate(cases):
            try:
                built.append((j, *self._columns(case, default_semantics)))
            except FastmodelError as error:
                out.errors[j] = one_line(error)
            except Exception as error:  # noqa: BLE001 - a bad line must never stop the batch
                out.errors[j] = internal_error(error)
        if built:
            status = np.zeros(len(built), dtype=np.int8)
            results = evaluate_table(np.stack([columns for _, columns, _ in built], axis=1), status)
            for k, (j, columns, _) in enumerate(built):
                if status[k]:
                    out.errors[j] = _status_error(int(status[k]), columns)
            _fill(out, len(cases), "plan", results,
                  [(k, j, plan) for k, (j, _, plan) in enumerate(built) if not status[k]])
        return out


def _names_real_world_model(name: str) -> bool:
    """Whether a model given by name or path is a real-world spec (False when it cannot be read: the MAD-Max
    kind then reports why)."""
    from fastmodel.spec.loader import resolve_source

    try:
        return is_real_world_model(resolve_source(name, "model")[0])
    except Exception:  # noqa: BLE001 - not readable here: not ours to report
        return False


