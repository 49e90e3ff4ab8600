"""Batch evaluation: JSONL lines in, one result per line out, in order, streamed in chunks.

Input lines of every engine's kinds (fastmodel/engines.py): MAD-Max spec lines ``{"case": id?,
"model": name|path|dict, "system": ..., "task": ..., "semantics"?: preset|dict, "plan"?: str,
"num_nodes"?: int}`` (fastmodel/madmax/batch.py), real-world spec lines and run records
(fastmodel/lm/batch.py), serving records (fastmodel/serve/batch.py), mixed in one file. Result: ``case``
(the line's own id, else its line number), ``status`` (``"ok"`` or ``"error: <reason>"``), the kind's
columns and the result variables of the line's engine (its registry ``RESULTS``, SI units, and their
aliases), no other engine's.

The path is streaming and vectorized: lines are read a chunk at a time;
identical lines (byte for byte) are parsed and evaluated once -- within a
chunk, and across chunks while the batch's :class:`LineMemo` holds them --
and each line gets its distinct line's result with its own ``case``. Distinct
lines are parsed with orjson, handed to the kind that claims them
(:mod:`fastmodel.io.batch_kinds`: each distinct spec validated once, parameter
tables built per group with numpy), and every structure of the chunk goes
through the fused kernels once. Memory is bounded by the chunk size and the
memo's size, whatever the input's length. A bad line never stops the batch:
it gets its own ``error:`` status. What a chunk's results are (the values
matrix, :class:`Chunk`, the records): :mod:`fastmodel.io.batch_results`.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from collections import defaultdict
from typing import IO, Iterable, Iterator

import numpy as np
import orjson

from fastmodel.errors import FastmodelError, comment_line
from fastmodel.io import batch_kinds
from fastmodel.io.batch_kinds import internal_error, one_line
from fastmodel.io.batch_results import ENGINE_ROWS, RESULT_NAMES, RESULT_ROW, Chunk, Distinct, engine_rows, records
from fastmodel.io.batch_results import engine_outputs as engine_outputs  # imported from here too
from fastmodel.io.batch_results import write_records as write_records

#: input read per chunk: at most this many bytes (about 7,000 lines of inline MAD-Max dicts) ...
CHUNK_BYTES = 8 << 20
#: ... and at most this many lines (memory grows with both)
CHUNK_LINES = 20_000


# --- one line ----------------------------------------------------------------

def _parse_slow(raw: bytes):
    """A line orjson refused: the value, or the line's error reason (str) -- json's rules and messages."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        return _Bad("line is not UTF-8 text")
    if not text.strip():
        return _Bad("empty line")
    if comment := comment_line(text):               # was "invalid JSON: Expecting value at column 1"
        return _Bad(f"{comment} (the line keeps its row of the output)")
    try:
        return batch_kinds.load_json(text.lstrip("\ufeff"))
    except FastmodelError as error:
        return _Bad(one_line(error))


class _Bad(str):
    """A line's error reason, where its parsed value would be."""


# --- a chunk of lines -------------------------------------------------------

@contextlib.contextmanager
def no_cyclic_gc():
    """Pause the cyclic garbage collector: a chunk allocates a dict per line, all alive until the chunk is
    done, and the collector would traverse them again and again (up to half of parsing time). Freed by
    reference counting; any cycle is collected once the collector runs again, after the chunk."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def evaluate_chunk(raw_lines: list[bytes], first_line: int, default_semantics, kinds=None, memo=None) -> Chunk:
    """Parse, validate and evaluate a chunk of raw input lines (each distinct line once; with ``memo``, a
    :class:`LineMemo` of the batch, each distinct line of the batch once while the memo holds it)."""
    with no_cyclic_gc():
        distinct = list(dict.fromkeys(raw_lines))
        inverse = None
        if len(distinct) < len(raw_lines):
            row = dict(zip(distinct, range(len(distinct))))
            inverse = np.fromiter(map(row.__getitem__, raw_lines), dtype=np.int64, count=len(raw_lines))
        if memo is None:
            results = _evaluate_distinct(distinct, default_semantics, kinds)
        else:
            results = memo.evaluate(distinct, default_semantics, kinds)
        return Chunk(first_line, len(raw_lines), results, inverse)


class LineMemo:
    """Results of the distinct lines a batch has evaluated, by their raw bytes, for the later chunks that
    repeat them (a line's result depends on its bytes alone, given the batch's default semantics and kinds).
    Bounded: past ``size`` lines, the oldest half is forgotten."""

    def __init__(self, size: int = 16384):
        self.size = size
        self.rows: dict[bytes, tuple] = {}

    def evaluate(self, distinct: list[bytes], default_semantics, kinds) -> Distinct:
        rows = self.rows
        known = [rows.get(raw) for raw in distinct]
        missing = [j for j, row in enumerate(known) if row is None]
        if len(missing) == len(distinct):
            fresh = _evaluate_distinct(distinct, default_semantics, kinds)
            self._keep(distinct, fresh, range(len(distinct)))
            return fresh
        if missing:
            fresh = _evaluate_distinct([distinct[j] for j in missing], default_semantics, kinds)
            self._keep([distinct[j] for j in missing], fresh, range(len(missing)))
            for k, j in enumerate(missing):
                known[j] = self._row(fresh, k)
        names = [name for kind in (batch_kinds.KINDS if kinds is None else kinds) for name in kind.columns]
        u = len(distinct)
        out = Distinct([False] * u, [None] * u, [None] * u, [None] * u, {name: [None] * u for name in names},
                       np.empty((len(known[0][5]), u)))
        for j, (named, case_id, status, kind, columns, values) in enumerate(known):
            out.named[j], out.given[j], out.status[j], out.kinds[j] = named, case_id, status, kind
            for name, value in columns:
                out.columns[name][j] = value
            out.values[:, j] = values
        return out

    @staticmethod
    def _row(d: Distinct, k: int) -> tuple:
        columns = tuple((name, values[k]) for name, values in d.columns.items() if values[k] is not None)
        return d.named[k], d.given[k], d.status[k], d.kinds[k], columns, d.values[:, k].copy()

    def _keep(self, raw_lines: list[bytes], d: Distinct, positions) -> None:
        rows = self.rows
        if len(rows) + len(raw_lines) > self.size:
            for raw in list(rows)[:len(rows) // 2 + 1]:
                del rows[raw]
        for k in positions:
            if len(rows) < self.size:
                rows[raw_lines[k]] = self._row(d, k)


def _evaluate_distinct(raw_lines: list[bytes], default_semantics, kinds) -> Distinct:
    kinds = batch_kinds.KINDS if kinds is None else kinds
    n = len(raw_lines)
    named = [False] * n
    case_ids: list = [None] * n
    status: list = [None] * n
    kind_of: list = [None] * n
    per_kind: list[tuple[list[int], list[dict]]] = [([], []) for _ in kinds]
    loads = orjson.loads
    # the last kind claims every line the others leave (SpecCases): with one kind, no claim is asked
    claims = [kind.claims for kind in kinds]
    last = len(kinds) - 1
    for i, raw in enumerate(raw_lines):
        try:
            case = loads(raw)
        except orjson.JSONDecodeError:
            case = _parse_slow(raw)
            if type(case) is _Bad:
                status[i] = str(case)
                continue
        if type(case) is not dict:
            status[i] = "a case must be a JSON object"
            continue
        if "case" in case:
            named[i] = True
            case_ids[i] = case["case"]
        k = 0
        while k < last and not claims[k](case):
            k += 1
        kind_of[i] = k
        per_kind[k][0].append(i)
        per_kind[k][1].append(case)

    columns: dict[str, list] = {}
    for kind in kinds:
        for name in kind.columns:
            columns.setdefault(name, [None] * n)
    groups: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}
    own: dict[str, list] = defaultdict(list)      # results kinds computed themselves: name -> (line, value)
    for k, (kind, (positions, dicts)) in enumerate(zip(kinds, per_kind)):
        if not positions:
            continue
        prepared = _prepare(kind, dicts, default_semantics)
        for j, reason in prepared.errors.items():
            status[positions[j]] = reason
        for name, values in prepared.columns.items():
            column = columns[name]
            for j, value in enumerate(values):
                if value is not None:
                    column[positions[j]] = value
        where = np.asarray(positions, dtype=np.int64)
        for table in prepared.tables:
            groups.setdefault((k, table.key, table.semantics), []).append((table.params, where[table.rows]))
        for name, given in prepared.results.items():
            own[name].extend((positions[j], value) for j, value in enumerate(given) if value is not None)

    values = np.full((len(RESULT_NAMES), n), np.nan)
    for name, pairs in own.items():
        for i, value in pairs:
            values[RESULT_ROW[name], i] = value
    for (k, key, semantics), parts in groups.items():
        params = np.concatenate([p for p, _ in parts], axis=1) if len(parts) > 1 else parts[0][0]
        rows = np.concatenate([r for _, r in parts]) if len(parts) > 1 else parts[0][1]
        mine = engine_rows(kinds[k].engine)
        out = np.empty((len(ENGINE_ROWS[kinds[k].engine]), len(rows)))
        try:
            kinds[k].evaluate_into(key, semantics, params, out)
        except Exception as error:  # noqa: BLE001 - a structure that fails must not stop the batch
            reason = internal_error(error)
            for r in rows.tolist():
                status[r] = reason
            continue
        if isinstance(mine, slice):
            values[mine, rows] = out
        else:
            values[np.ix_(mine, rows)] = out
    return Distinct(named, case_ids, status, kind_of, columns, values)


def _prepare(kind, dicts: list[dict], default_semantics):
    """``kind.prepare``; if it fails as a whole, line by line, so only the lines at fault get an internal error."""
    from fastmodel.io.batch_kinds import Prepared, Table

    try:
        return kind.prepare(dicts, default_semantics)
    except Exception:  # noqa: BLE001 - retried line by line below
        pass
    merged = Prepared()
    for j, case in enumerate(dicts):
        try:
            one = kind.prepare([case], default_semantics)
        except Exception as error:  # noqa: BLE001
            merged.errors[j] = internal_error(error)
            continue
        if one.errors:
            merged.errors[j] = next(iter(one.errors.values()))
        for name, values in one.columns.items():
            merged.columns.setdefault(name, [None] * len(dicts))[j] = values[0]
        merged.tables += [Table(t.key, t.semantics, t.params, np.full(len(t.rows), j, dtype=np.int64))
                          for t in one.tables]
    return merged


# --- streams ----------------------------------------------------------------

def read_chunks(binary: IO[bytes], chunk_bytes: int = CHUNK_BYTES) -> Iterator[list[bytes]]:
    """Lists of raw lines (newline kept) of about ``chunk_bytes`` each."""
    while True:
        lines = binary.readlines(chunk_bytes)
        if not lines:
            return
        for start in range(0, len(lines), CHUNK_LINES):
            yield lines[start:start + CHUNK_LINES]


def run_chunks(chunks: Iterable[list[bytes]], semantics="default", progress=None,
               calibration=None) -> Iterator[Chunk]:
    """Evaluate chunks of raw lines in order; ``progress(lines, bytes)`` after each. ``calibration`` (TOML
    path or ``Calibration``) applies to run-record lines; after the last chunk, a device or tier of them it
    does not cover is a ``CalibrationWarning``."""
    from fastmodel.semantics import get_semantics

    default_semantics = get_semantics(semantics)
    kinds = batch_kinds.KINDS if calibration is None else batch_kinds.kinds_for(calibration)
    first = 1
    memo = LineMemo()
    for raw_lines in chunks:
        chunk = evaluate_chunk(raw_lines, first, default_semantics, kinds, memo)
        first += len(raw_lines)
        if progress is not None:
            progress(len(raw_lines), sum(map(len, raw_lines)) if getattr(progress, "enabled", True) else 0)
        yield chunk
    for kind in kinds:
        if hasattr(kind, "finish"):
            kind.finish()



def run_batch(lines: Iterable["str | bytes | dict"], semantics="default", calibration=None) -> Iterator[dict]:
    """Yield one result record per input line (text or bytes, no newline needed, or a parsed record or spec line
    as a dict), in order. ``calibration``: a calibration overlay (TOML path or ``Calibration``) for run-record
    lines. ``lines`` is an iterable of lines (``open("runs.jsonl")``, a list): a str, bytes or path is refused
    (iterating one yields characters, not lines)."""
    if isinstance(lines, (str, bytes, os.PathLike)):
        raise FastmodelError(f"lines: expected an iterable of JSON lines or dicts (e.g. open('runs.jsonl')), got "
                             f"{type(lines).__name__}: pass open(path) for a file, [line] for one line")
    return _run_batch(lines, semantics, calibration)


def _as_bytes(line, number: int) -> bytes:
    """One input line as bytes: text encoded, a dict serialised (numpy numbers as numbers)."""
    if isinstance(line, str):
        return line.encode("utf-8", "surrogateescape")
    if isinstance(line, dict):
        try:
            return orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        except orjson.JSONEncodeError as error:
            raise FastmodelError(f"lines: line {number}: a dict that is not JSON ({error})") from None
    return line


#: a file of another kind given as the cases (``io.outputs.other_kind``): its name, and where it goes
_GOES = {"csv": ("CSV", ""), "toml": ("TOML", " (a sweep file runs with 'fastmodel sweep FILE -o out.nc', a spec "
                                             "with 'fastmodel run', a calibration with --calibration)")}
#: the bytes of the input's head that say its kind
HEAD_BYTES = 1 << 16


def refuse_another_kind(head: bytes, where: str) -> None:
    """A CSV or TOML file given as the cases (``head``: its first bytes; no line of them a JSON object) is one line
    naming the kind (``where``: the file, or ``lines`` for :func:`run_batch`): each of its lines was an 'invalid
    JSON' row. A head with one JSON line keeps batch's rule, a row per line."""
    from fastmodel.io.outputs import other_kind

    if kind := other_kind(head[:HEAD_BYTES]):
        name, goes = _GOES[kind]
        raise FastmodelError(f"{where}: a {name} file, not JSON lines: batch reads one configuration or record per "
                             f"line as a JSON object{goes}")
    if problem := _not_json_lines(head[:HEAD_BYTES]):
        raise FastmodelError(f"{where}: {problem}")


def _not_json_lines(head: bytes) -> str | None:
    """What a head that is JSON but not JSON lines is -- the whole head one JSON array, or objects pretty-printed over
    more lines than there are objects -- with the ``jq`` command that writes JSON lines; None otherwise (a head that
    does not decode whole, a lone ``[``, JSON nested past the parser's depth, keep batch's row per line). The
    run-record readers' rule (``fastmodel.spec.records.not_json_lines``, h-mend15)."""
    from fastmodel.spec.records import not_json_lines

    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff").strip()
    if not text.startswith(("[", "{")):
        return None
    return not_json_lines(text, "configurations or records")


def _run_batch(lines, semantics, calibration) -> Iterator[dict]:
    """:func:`run_batch`'s lines in chunks of ``CHUNK_LINES``, the head's kind checked once, on the first chunk
    (``fastmodel batch`` peeks its file's head before it claims the output, :func:`refuse_another_kind` there, and
    runs :func:`run_chunks` without this wrapper). The head's lines are joined without their own line ends: lines
    of ``open(path)`` keep theirs (review12 #13)."""
    def chunks():
        numbered = (_as_bytes(line, number) for number, line in enumerate(lines, 1))
        for index, chunk in enumerate(iter(lambda: list(itertools.islice(numbered, CHUNK_LINES)), [])):
            if index == 0:
                refuse_another_kind(b"\n".join(line.rstrip(b"\r\n") for line in chunk), "lines")
            yield chunk

    for chunk in run_chunks(chunks(), semantics, calibration=calibration):
        yield from records(chunk)
