"""Writers of batch results, chosen by the output's extension, one chunk at a time.

``.csv`` -> CSV, ``.parquet`` -> Parquet (one row group per chunk; both via
pyarrow), anything else -> JSONL. Columns: ``case``, ``status``, the kinds'
columns (``plan``), then every result variable of the registry (SI units).
JSONL keeps each line's ``case`` id as given and leaves the kind's columns and
results off error lines; CSV and Parquet hold every column on every row
(``case`` as text, empty/null where a line has no value). A non-finite value
is ``null``. Files are written atomically: an interrupted batch leaves no
output (or the old file), never a partial one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO

import numpy as np
import orjson

from fastmodel import batch_kinds
from fastmodel.batch import Chunk, no_cyclic_gc, read_chunks, run_chunks
from fastmodel.results import NAMES

_DUMPS = orjson.dumps


def kind_columns() -> dict[str, str]:
    """Output columns of every kind (name -> type), in kind order."""
    columns: dict[str, str] = {}
    for kind in batch_kinds.KINDS:
        for name, type_ in kind.columns.items():
            columns.setdefault(name, type_)
    return columns


class JsonlWriter:
    """One JSON object per line: ``case``, ``status``, the kind's columns, then the results."""

    def __init__(self, handle: IO[bytes]):
        self.handle = handle

    def write(self, chunk: Chunk) -> None:
        with no_cyclic_gc():
            text = jsonl(chunk)
        self.handle.write(text)

    def close(self) -> None:
        pass

    def abandon(self) -> None:
        pass


_SCALARS = (int, str, float, bool, type(None))
_SEPARATOR = b'},{"case":'
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
#: the line of an ok record: its head (``"case":..,"status":"ok","plan":..``), then each result with its key
_LINE = b'{"case":%b' + b"".join(b',"%b":%%b' % name.encode() for name in NAMES) + b"}"


def jsonl(chunk: Chunk) -> bytes:
    """The JSONL text of a chunk's records (non-finite numbers are ``null``).

    orjson formats the chunk's numbers in one call and the heads of its
    records in another (a call per line costs more than its formatting); each
    line is then one ``%`` of its pieces into the keyed template. The list's
    separators ``},{"case":`` cannot occur inside a JSON string (the quote
    would be escaped), so splitting on them is exact as long as no case id
    is itself a list or object -- such a chunk takes a call per line.
    """
    n = len(chunk)
    if n == 0:
        return b""
    status, cases, kinds, columns = chunk.status, chunk.cases, chunk.kinds, chunk.columns
    ok = [i for i in range(n) if status[i] is None]
    kind_list = batch_kinds.KINDS
    heads = []
    for i in ok:
        head = {"case": cases[i], "status": "ok"}
        for name in kind_list[kinds[i]].columns:
            head[name] = columns[name][i]
        heads.append(head)
    if not all(type(case) in _SCALARS for case in cases):
        return b"".join(_DUMPS(record, option=orjson.OPT_APPEND_NEWLINE) for record in _records(chunk, ok, heads))
    lines: list = [None] * n if len(ok) < n else []
    if ok:
        values = chunk.values if len(ok) == n else chunk.values[:, ok]
        rows = _DUMPS(np.ascontiguousarray(values.T), option=_NUMPY)[2:-2].split(b"],[")  # numbers only
        head_text = _DUMPS(heads)[len(b'[{"case":'):-2].split(_SEPARATOR)
        formatted = [_LINE % (head, *row.split(b",")) for head, row in zip(head_text, rows)]
        if len(ok) == n:
            lines = formatted
        else:
            for i, line in zip(ok, formatted):
                lines[i] = line
    if len(ok) < n:
        for i in range(n):
            if status[i] is not None:
                lines[i] = _DUMPS({"case": cases[i], "status": "error: " + status[i]})
    lines.append(b"")
    return b"\n".join(lines)


def _records(chunk: Chunk, ok: list[int], heads: list[dict]):
    """Records as dicts, in order (the per-line path)."""
    rows = chunk.values.T.tolist()
    heads_at = dict(zip(ok, heads))
    for i, case in enumerate(chunk.cases):
        if chunk.status[i] is not None:
            yield {"case": case, "status": "error: " + chunk.status[i]}
        else:
            yield {**heads_at[i], **dict(zip(NAMES, rows[i]))}


class _ArrowWriter:
    """A pyarrow table per chunk (subclasses pick the file format)."""

    def __init__(self, handle: IO[bytes]):
        import pyarrow as pa

        self.pa = pa
        self.handle = handle
        self.extra = kind_columns()
        types = {"string": pa.string(), "float64": pa.float64()}
        self.schema = pa.schema([("case", pa.string()), ("status", pa.string())]
                                + [(name, types[t]) for name, t in self.extra.items()]
                                + [(name, pa.float64()) for name in NAMES])
        self.writer = None

    def abandon(self) -> None:
        """Close the pyarrow writer now, while its file is open (it would otherwise try when collected)."""
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 - the output is discarded anyway
                pass
            self.writer = None

    def table(self, chunk: Chunk):
        pa = self.pa
        cases = [c if type(c) is str else orjson.dumps(c).decode() for c in chunk.cases]
        status = ["ok" if s is None else "error: " + s for s in chunk.status]
        arrays = [pa.array(cases, pa.string()), pa.array(status, pa.string())]
        for name in self.extra:
            arrays.append(pa.array(chunk.columns.get(name, [None] * len(chunk)), self.schema.field(name).type))
        for v in range(len(NAMES)):
            column = chunk.values[v]
            arrays.append(pa.array(column, pa.float64(), mask=~np.isfinite(column)))
        return pa.Table.from_arrays(arrays, schema=self.schema)


class CsvWriter(_ArrowWriter):
    def write(self, chunk: Chunk) -> None:
        import pyarrow.csv as csv

        if self.writer is None:
            self.writer = csv.CSVWriter(self.handle, self.schema)
        self.writer.write_table(self.table(chunk))

    def close(self) -> None:
        import pyarrow.csv as csv

        if self.writer is None:  # no line at all: the header only
            self.writer = csv.CSVWriter(self.handle, self.schema)
        self.writer.close()


class ParquetWriter(_ArrowWriter):
    def write(self, chunk: Chunk) -> None:
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.handle, self.schema)
        self.writer.write_table(self.table(chunk))

    def close(self) -> None:
        import pyarrow.parquet as pq

        if self.writer is None:
            self.writer = pq.ParquetWriter(self.handle, self.schema)
        self.writer.close()


WRITERS = {".csv": CsvWriter, ".parquet": ParquetWriter}


def writer_for(output: str):
    """The writer class of an output path (by extension; JSONL unless .csv or .parquet)."""
    return WRITERS.get(Path(output).suffix.lower(), JsonlWriter) if output != "-" else JsonlWriter


def run_to_output(source: IO[bytes], output: str, semantics="default", progress: bool | None = None,
                  formatter: bool | None = None, calibration=None) -> tuple[int, int]:
    """Evaluate every line of ``source`` into ``output`` ('-': stdout); return (ok, errors).
    ``calibration``: a calibration overlay (TOML path or ``Calibration``) for run-record lines.

    ``formatter``: format JSONL in a second process while this one evaluates
    the next chunk (default: for JSONL inputs of more than two chunks, on a
    machine with more than one core).
    """
    from fastmodel.atomic import atomic_write
    from fastmodel.batch import CHUNK_BYTES
    from fastmodel.progress_bar import LineProgress

    writer_class = writer_for(output)
    total = _size(source)
    if formatter is None:
        formatter = (writer_class is JsonlWriter and (os.cpu_count() or 1) > 1
                     and (total is None or total > 2 * CHUNK_BYTES))
    bar = LineProgress(total, enabled=progress)
    counts = [0, 0]

    def count(chunk: Chunk) -> None:
        bad = sum(1 for s in chunk.status if s is not None)
        counts[0] += len(chunk) - bad
        counts[1] += bad

    def run(handle: IO[bytes]) -> None:
        writer = writer_class(handle) if not formatter else _FormatterProcess(handle)
        try:
            for chunk in run_chunks(read_chunks(source), semantics, bar, calibration):
                writer.write(chunk)
                count(chunk)
                if handle is sys.stdout.buffer:
                    handle.flush()
        except BaseException:
            writer.abandon()  # the temporary file goes; nothing may write to it later
            raise
        writer.close()

    try:
        if output == "-":
            sys.stdout.flush()
            run(sys.stdout.buffer)
        else:
            with atomic_write(output, "wb") as handle:
                run(handle)
    finally:
        bar.close()
    return counts[0], counts[1]


class _FormatterProcess:
    """A JSONL writer whose formatting runs in a child process, one chunk behind the evaluation.

    The child is forked when the batch starts (before the kernels load) and
    only formats: chunk k is sent, the next chunk is evaluated meanwhile, then
    k's text is received and written -- so output stays in order and at most
    one chunk is in flight. One pipe each way; the parent always receives
    before it sends again, so neither blocks the other.
    """

    def __init__(self, handle: IO[bytes]):
        import multiprocessing

        context = multiprocessing.get_context("fork")
        self.handle = handle
        child_in, self.to_child = context.Pipe(duplex=False)
        self.from_child, child_out = context.Pipe(duplex=False)
        self.process = context.Process(target=_format_loop, args=(child_in, child_out), daemon=True)
        self.process.start()
        child_in.close()
        child_out.close()
        self.pending = False

    def _receive(self) -> None:
        if self.pending:
            self.pending = False
            try:
                text = self.from_child.recv_bytes()
            except EOFError:
                raise RuntimeError("the JSONL formatter process died") from None
            if text[:1] == b"!":
                raise RuntimeError(f"JSONL formatting failed: {text[1:].decode(errors='replace')}")
            self.handle.write(text[1:])

    def write(self, chunk: Chunk) -> None:
        self._receive()
        self.to_child.send(chunk)
        self.pending = True

    def close(self) -> None:
        self._receive()
        self.to_child.send(None)
        self.process.join()

    def abandon(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def _format_loop(source, sink) -> None:
    """The formatter child: chunks in, ``b"+" + JSONL`` (or ``b"!" + reason``) out, until None."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        chunk = source.recv()
        if chunk is None:
            return
        try:
            with no_cyclic_gc():
                text = jsonl(chunk)
            sink.send_bytes(b"+" + text)
        except Exception as error:  # noqa: BLE001 - reported by the parent
            sink.send_bytes(b"!" + f"{type(error).__name__}: {error}".encode())


def _size(source) -> int | None:
    import os
    import stat

    try:
        info = os.fstat(source.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
