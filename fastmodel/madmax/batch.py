"""``fastmodel batch`` lines of the MAD-Max engine: ``{"case"?, "model", "system", "task", "semantics"?,
"plan"?, "num_nodes"?}`` with specs by built-in name, path or inline dict (fastmodel or the reference's
format). Each distinct spec is validated once and its lines' node counts become one vectorized parameter
table; a line that is not legal takes the single-configuration path (:func:`parse_case`), so its reason is
the one ``fastmodel run`` gives."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from fastmodel.errors import FastmodelError
from fastmodel.io.batch_kinds import (
    _DUMPS,
    _LRU,
    _SORT,
    Prepared,
    Table,
    _content_key,
    internal_error,
    load_json,
    one_line,
)

CASE_KEYS = ("case", "model", "system", "task", "semantics", "plan", "num_nodes")


def _spec_text(value) -> str:
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, str) and value.startswith("{"):
        raise FastmodelError(f"spec name {value!r} looks like JSON text; give a JSON object instead")
    if not isinstance(value, str):
        raise FastmodelError(f"expected a spec name, path or object, got {type(value).__name__}")
    return value


@lru_cache(maxsize=1024)
def _system_with_nodes(text: str, num_nodes):
    from fastmodel.madmax.spec.loader import load_cached

    system = load_cached("system", text)
    return system if num_nodes is None else system.with_nodes(num_nodes)


def parse_case(line: "str | dict", default_semantics):
    """One JSONL line (or its parsed dict) -> a resolved Config; raises FastmodelError.

    This is what ``fastmodel run`` does for one configuration; the batch takes
    it for every line its vectorized path does not admit, so reasons match.
    """
    from fastmodel.madmax.lowering.config import resolve
    from fastmodel.madmax.spec.loader import load_cached
    from fastmodel.semantics import get_semantics

    case = load_json(line) if isinstance(line, str) else line
    if not isinstance(case, dict):
        raise FastmodelError("a case must be a JSON object")
    unknown = [k for k in case if k not in CASE_KEYS and k != "expected" and k != "rule"]
    if unknown:
        from fastmodel.spec.detect import misshapen_record

        if misshapen_record(case):
            raise FastmodelError(misshapen_record(case))
        from fastmodel.errors import nearest
        raise FastmodelError(f"unknown key {unknown[0]!r}{nearest(unknown[0], CASE_KEYS)}")
    for key in ("model", "system", "task"):
        if key not in case:
            raise FastmodelError(f"missing key {key!r}")
    model = load_cached("model", _spec_text(case["model"]))
    num_nodes = case.get("num_nodes")
    if num_nodes is not None and (isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1):
        raise FastmodelError(f"num_nodes must be a positive integer (got {num_nodes!r})")
    system = _system_with_nodes(_spec_text(case["system"]), num_nodes)
    task = load_cached("task", _spec_text(case["task"]))
    semantics = get_semantics(case["semantics"]) if "semantics" in case else default_semantics
    return resolve(model, system, task, semantics, case.get("plan"))



@dataclass
class _Base:
    """Everything of a line but its node count, validated once (None fields: the slow path decides)."""

    model: Any = None
    system: Any = None
    task: Any = None
    semantics: Any = None
    plan: Any = None              # unresolved Plan (degrees may be implied)
    key: Any = None               # StructureKey
    max_nodes: int | None = None  # system.num_nodes bound

    #: per node count seen: its parameter column, status and plan label (the count's index in ``index``)
    index: dict = field(default_factory=dict)
    table: Any = None
    status: Any = None
    labels: list = field(default_factory=list)

    @property
    def fast(self) -> bool:
        return self.key is not None

    def columns_for(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
        """Parameter columns (COLUMNS x k), status codes and plan labels of distinct node ``counts``.

        Each count is computed once (``params.param_table`` over the new
        counts at once) and kept, so a chunk's table is one gather.
        """
        from fastmodel.madmax.lowering.params import STATUS, param_table

        if len(self.index) > 65536:  # bounded memory
            self.index, self.table, self.status, self.labels = {}, None, None, []
        new = [int(n) for n in counts.tolist() if n not in self.index]
        if new:
            values = np.asarray(new, dtype=np.int64)
            table, status = param_table(self.model, self.system, self.task, self.plan,
                                        values={"system.num_nodes": values}, shape=(len(new),),
                                        semantics=self.semantics)
            if self.max_nodes is not None:  # beyond the system's bound: with_nodes' error, on the slow path
                status = np.where(values > self.max_nodes, np.int8(STATUS["product_ne_devices"]), status)
            per_node = self.system.devices_per_node
            for n, code in zip(new, status.tolist()):
                self.index[n] = len(self.labels)
                self.labels.append(self.plan.resolve(n * per_node, per_node).label if code == 0 else None)
            self.table = table if self.table is None else np.concatenate([self.table, table], axis=1)
            self.status = status if self.status is None else np.concatenate([self.status, status])
        where = np.fromiter((self.index[n] for n in counts.tolist()), dtype=np.int64, count=len(counts))
        return self.table[:, where], self.status[where], [self.labels[i] for i in where.tolist()]


class SpecCases:
    """Lines ``{"case"?, "model", "system", "task", "semantics"?, "plan"?, "num_nodes"?}``: specs by
    built-in name, path or inline dict (fastmodel or MAD-Max reference format).

    Each distinct (model, system, task, semantics, plan) -- keyed by canonical
    content -- is validated once; its lines' node counts become one vectorized
    parameter table (``params.param_table``). A line that is not legal (any
    rule, any spec error) takes the exact single-configuration path
    (:func:`fastmodel.io.batch.parse_case`, memoised per distinct line content), so
    its reason is the one ``fastmodel run`` gives.
    """

    name = "spec"
    engine = "madmax"
    columns = {"plan": "string"}
    #: a structure with fewer rows in a chunk runs on the single-threaded kernel: waking the thread pool for
    #: each of a chunk's many small groups costs more than it saves, the more so on a busy machine
    #: (bench/bench_batch.py)
    PARALLEL_MIN_ROWS = 8192
    ALLOWED = frozenset(("case", "model", "system", "task", "semantics", "plan", "num_nodes", "expected", "rule"))

    def __init__(self, cache_size: int = 4096):
        self._bases = _LRU(cache_size)
        self._slow = _LRU(65536)

    def claims(self, case: dict) -> bool:
        return True

    # -- per distinct base ------------------------------------------------
    def _base(self, key, case: dict, default_semantics) -> _Base:
        from fastmodel.madmax.lowering.config import check_task_fits_family, structure_key_for
        from fastmodel.madmax.parallel.plans import Plan
        from fastmodel.madmax.parallel.rules import check_plan_shape
        from fastmodel.madmax.spec.loader import load_cached
        from fastmodel.semantics import get_semantics

        try:
            model = load_cached("model", _spec_text(case["model"]))
            system = _system_with_nodes(_spec_text(case["system"]), None)
            task = load_cached("task", _spec_text(case["task"]))
            semantics = get_semantics(case["semantics"]) if "semantics" in case else default_semantics
            check_task_fits_family(model, task)
            plan_value = case.get("plan")
            plan = task.parsed_plan if plan_value is None else Plan.parse(plan_value)
            if plan is None:
                return self._bases.put(key, _Base())
            check_plan_shape(plan, model.family)  # the row rules run in param_table, as status codes
            structure = structure_key_for(model, task, plan, semantics)
        except FastmodelError:
            return self._bases.put(key, _Base())  # every line of it takes the slow path, for its exact reason
        bound = next((m.le for m in type(system).model_fields["num_nodes"].metadata if hasattr(m, "le")), None)
        return self._bases.put(key, _Base(model, system, task, semantics, plan, structure, bound))

    def _slow_line(self, case: dict, default_semantics):
        """(reason, None) or (None, Config) of one line, by the single-configuration path (memoised)."""
        key = tuple((k, _content_key(v)) for k, v in case.items() if k not in ("case", "expected", "rule"))
        found = self._slow.get(key)
        if found is not None:
            return found
        try:
            found = (None, parse_case(case, default_semantics))
        except FastmodelError as error:
            found = (one_line(error), None)
        except Exception as error:  # noqa: BLE001 - a bad line must never stop the batch
            found = (internal_error(error), None)
        return self._slow.put(key, found)

    # -- a group of lines -------------------------------------------------
    def prepare(self, cases: list[dict], default_semantics) -> Prepared:
        out = Prepared()
        errors = out.errors
        plans: list = [None] * len(cases)
        out.columns["plan"] = plans
        allowed = self.ALLOWED.issuperset
        groups: dict[tuple, tuple[list[int], list]] = {}
        slow: list[int] = []
        add_slow = slow.append
        find = groups.get
        # a line without semantics takes the batch's default: part of the key, since the validated bases are
        # kept across chunks and batches; hashable (its canonical JSON) so such lines group by a dict lookup
        default_dump = default_semantics.model_dump()
        default_key = _DUMPS(default_dump, option=_SORT)
        for i, case in enumerate(cases):
            get = case.get
            nodes = get("num_nodes")
            if not allowed(case) or (nodes is not None and (type(nodes) is not int or nodes < 1)):
                add_slow(i)
                continue
            try:
                semantics = get("semantics", default_key)
                key = (case["model"], case["system"], case["task"], get("plan"), semantics)
                group = find(key)
            except KeyError:
                add_slow(i)
                continue
            except TypeError:  # an inline spec (dict): keyed by its canonical content, one orjson call
                key = _DUMPS((*key[:4], default_dump if semantics is default_key else semantics), option=_SORT)
                group = find(key)
            if group is None:
                group = groups[key] = ([], [])
            group[0].append(i)
            group[1].append(nodes)

        fast_tables: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}
        for key, (positions, nodes) in groups.items():
            base = self._bases.get(key)
            if base is None:
                base = self._base(key, cases[positions[0]], default_semantics)
            if not base.fast:
                slow.extend(positions)
                continue
            rows = np.asarray(positions, dtype=np.int64)
            own = base.system.num_nodes
            counts = np.fromiter((own if n is None else n for n in nodes), dtype=np.int64, count=len(nodes))
            unique, inverse = np.unique(counts, return_inverse=True)
            columns, status, labels = base.columns_for(unique)
            legal = status[inverse] == 0
            if not legal.all():
                # lines illegal at a cluster size share its reason: ask the single-configuration path once per
                # size (the first such line), the rest of them copy it
                for which in np.unique(inverse[~legal]).tolist():
                    same = rows[inverse == which].tolist()
                    reason, _ = self._slow_line(cases[same[0]], default_semantics)
                    if reason is None:                      # legal after all: each line its own way
                        slow.extend(same)
                        continue
                    for position in same:
                        errors[position] = reason
                rows, inverse = rows[legal], inverse[legal]
            if not len(rows):
                continue
            table = columns[:, inverse]
            for position, which in zip(rows.tolist(), inverse.tolist()):
                plans[position] = labels[which]
            fast_tables.setdefault((base.key, base.semantics), []).append((table, rows))

        if slow:
            from fastmodel.madmax.lowering.config import param_row, structure_key

            for i in sorted(slow):
                reason, config = self._slow_line(cases[i], default_semantics)
                if reason is not None:
                    errors[i] = reason
                    continue
                plans[i] = config.plan.label
                fast_tables.setdefault((structure_key(config), config.semantics), []).append(
                    (param_row(config)[:, None], np.array([i], dtype=np.int64)))

        for (key, semantics), parts in fast_tables.items():
            params = parts[0][0] if len(parts) == 1 else np.concatenate([p for p, _ in parts], axis=1)
            rows = parts[0][1] if len(parts) == 1 else np.concatenate([r for _, r in parts])
            out.tables.append(Table(key, semantics, params, rows))
        return out

    def evaluate_into(self, key, semantics, params: np.ndarray, out: np.ndarray) -> None:
        """Evaluate a table of this kind (one structure, all legal) into ``out`` (N_RESULTS x m)."""
        from fastmodel.madmax.engine import evaluate_into

        evaluate_into(key, semantics, params, np.zeros(params.shape[1], dtype=np.int8), out, 0, False, True,
                      self.PARALLEL_MIN_ROWS)
