"""The results of batch lines: the values matrix (one row per result variable of every engine, one column per
line), a chunk's results (:class:`Distinct`: its distinct lines'; :class:`Chunk`: per line, each the row of its
distinct line) and a chunk's result records (``case``, ``status``, the line kind's columns, its engine's results
and their aliases). :mod:`fastmodel.io.batch` reads and evaluates the lines into these; the writers
(:mod:`fastmodel.io.batch_output`, :mod:`fastmodel.io.batch_tables`) read them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO, Iterable, Iterator

import numpy as np

from fastmodel.io import batch_kinds
from fastmodel.registry import ENGINES


def _result_layout() -> tuple[tuple[str, ...], dict[str, tuple[int, ...]]]:
    """(every engine's result names once, in engine order; engine -> the rows of its ``RESULTS``)."""
    names: dict[str, int] = {}
    rows = {}
    for engine, module in ENGINES.items():
        for result in module.RESULTS:
            names.setdefault(result.name, len(names))
        rows[engine] = tuple(names[r.name] for r in module.RESULTS)
    return tuple(names), rows


#: the rows of the values matrix: every engine's result variables (a shared variable once), and each engine's
RESULT_NAMES, ENGINE_ROWS = _result_layout()
#: row of each result variable in the values matrix
RESULT_ROW = {name: i for i, name in enumerate(RESULT_NAMES)}


# --- a chunk's results ------------------------------------------------------

@dataclass
class Distinct:
    """Results of a chunk's distinct lines (byte for byte): ``status`` None for ok, else the reason."""

    named: list              # per distinct line: whether it gives its own "case" id ...
    given: list              # ... and that id (None where it gives none: its line number is its id)
    status: list             # None (ok) or reason
    kinds: list              # index into KINDS (None: not parsed)
    columns: dict            # kind output column -> value per distinct line
    values: np.ndarray       # RESULT_NAMES x distinct lines (NaN where not ok or not the line's engine's)


@dataclass
class Chunk:
    """Results of consecutive lines: each line is a row of ``distinct`` (``inverse``: its row, per line; None
    when every line is distinct and row i is line i). Identical lines are parsed and evaluated once; the
    per-line views (``cases``, ``status``, ``kinds``, ``columns``, ``values``) are built on each call."""

    first_line: int
    size: int
    distinct: Distinct
    inverse: "np.ndarray | None"     # int64 per line

    def __len__(self) -> int:
        return self.size

    def _each(self, values: list) -> list:
        return values if self.inverse is None else list(map(values.__getitem__, self.inverse.tolist()))

    @property
    def cases(self) -> list:
        """The line's own "case" id, else its line number."""
        d = self.distinct
        rows = range(len(d.named)) if self.inverse is None else self.inverse.tolist()
        return [d.given[j] if d.named[j] else self.first_line + i for i, j in enumerate(rows)]

    @property
    def status(self) -> list:
        return self._each(self.distinct.status)

    @property
    def kinds(self) -> list:
        return self._each(self.distinct.kinds)

    @property
    def columns(self) -> dict:
        return {name: self._each(values) for name, values in self.distinct.columns.items()}

    @property
    def values(self) -> np.ndarray:
        return self.distinct.values if self.inverse is None else self.distinct.values[:, self.inverse]

    def error_count(self) -> int:
        bad = np.array([s is not None for s in self.distinct.status], dtype=bool)
        if self.inverse is None:
            return int(bad.sum())
        return int(np.bincount(self.inverse, minlength=len(bad))[bad].sum())


# --- result records ---------------------------------------------------------

def engine_outputs(engine: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(output keys, their rows of the values matrix) of a line of ``engine``: its result variables in registry
    order, then their aliases (``iteration_time``: the row of ``step_time``)."""
    results, rows = ENGINES[engine].RESULTS, ENGINE_ROWS[engine]
    aliases = [(alias, row) for result, row in zip(results, rows) for alias in result.aliases]
    return (*(r.name for r in results), *(a for a, _ in aliases)), (*rows, *(row for _, row in aliases))


def engine_rows(engine: str):
    """The rows of ``engine``'s results in the values matrix: a slice where they are consecutive (MAD-Max's,
    the first), else their indices."""
    rows = ENGINE_ROWS[engine]
    return slice(rows[0], rows[0] + len(rows)) if rows == tuple(range(rows[0], rows[0] + len(rows))) else list(rows)


def records(chunk: Chunk) -> Iterator[dict]:
    """The result records (dicts, JSON-ready) of a chunk, in order: each line's kind columns and its engine's
    results."""
    values = chunk.values
    status, kind_of, columns = chunk.status, chunk.kinds, chunk.columns
    kinds = batch_kinds.KINDS
    outputs = {}        # engine -> (its output names, its rows' values line by line)
    for kind in kinds:
        if kind.engine not in outputs:
            names, rows = engine_outputs(kind.engine)
            outputs[kind.engine] = (names, values[list(rows)].T.tolist())
    for i, case in enumerate(chunk.cases):
        reason = status[i]
        if reason is not None:
            yield {"case": case, "status": "error: " + reason}
            continue
        record = {"case": case, "status": "ok"}
        kind = kinds[kind_of[i]]
        for name in kind.columns:
            record[name] = columns[name][i]
        names, table = outputs[kind.engine]
        for name, value in zip(names, table[i]):
            record[name] = value if value == value and value not in (float("inf"), float("-inf")) else None
        yield record


def write_records(records_: Iterable[dict], out: IO[str]) -> tuple[int, int]:
    """Write records as JSONL text; return (ok count, error count)."""
    ok = bad = 0
    for record in records_:
        out.write(json.dumps(record) + "\n")
        if record["status"] == "ok":
            ok += 1
        else:
            bad += 1
    return ok, bad
