"""CSV and Parquet outputs of ``fastmodel batch``: the union of the columns of the kinds present.

A line carries its kind's columns and its engine's results only (``fastmodel.io.batch_results.engine_outputs``); a
table needs one set of columns for every row, and which kinds a batch holds is known only when its last line
is read. So each chunk's table (the columns of the kinds and engines in that chunk) is spooled, as an Arrow
IPC stream, to a temporary file; at ``close`` the union of every chunk's columns is the schema, in a fixed
order (``case``, ``status``, the kinds' columns in claim order, then the engines' results in registry order),
and each chunk is read back, given nulls for the columns it lacks, and written. Memory stays bounded by a
chunk.
"""

from __future__ import annotations

import tempfile
from typing import IO

import numpy as np
import orjson

from fastmodel.io import batch_kinds
from fastmodel.io.batch_results import Chunk, engine_outputs


class _ArrowWriter:
    """Chunk tables spooled, then written under the union of their columns (subclasses pick the format)."""

    def __init__(self, handle: IO[bytes]):
        import pyarrow as pa

        self.pa = pa
        self.handle = handle
        self.spool = tempfile.TemporaryFile(prefix="fastmodel-batch-")
        self.ranges: list[tuple[int, int]] = []
        self.kinds: set[int] = set()
        self.writer = None

    def abandon(self) -> None:
        """Close the pyarrow writer now, while its file is open (it would otherwise try when collected)."""
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 - the output is discarded anyway
                pass
            self.writer = None
        self.spool.close()

    def _columns(self, kinds) -> list[tuple[str, object, tuple]]:
        """(name, type, where) of the columns of ``kinds`` (indices into KINDS), in the output's order:
        ``where`` is ``("kind", name)`` for a kind's column, ``("row", row)`` for a result."""
        pa, kind_list = self.pa, batch_kinds.KINDS
        types = {"string": pa.string(), "float64": pa.float64()}
        columns: dict[str, tuple] = {"case": (pa.string(), ("case",)), "status": (pa.string(), ("status",))}
        for k in sorted(kinds):
            for name, type_ in kind_list[k].columns.items():
                columns.setdefault(name, (types[type_], ("kind", name)))
        from fastmodel.registry import ENGINES

        engines = {kind_list[k].engine for k in kinds}
        for engine in (e for e in ENGINES if e in engines):
            for name, row in zip(*engine_outputs(engine)):
                columns.setdefault(name, (pa.float64(), ("row", row)))
        return [(name, type_, where) for name, (type_, where) in columns.items()]

    def write(self, chunk: Chunk) -> None:
        pa = self.pa
        kinds = {k for k in chunk.kinds if k is not None}
        self.kinds |= kinds
        cases = [c if type(c) is str else orjson.dumps(c).decode() for c in chunk.cases]
        status = ["ok" if s is None else "error: " + s for s in chunk.status]
        values, given = chunk.values, chunk.columns
        arrays, fields = [], []
        for name, type_, where in self._columns(kinds):
            if where[0] == "row":
                column = values[where[1]]
                arrays.append(pa.array(column, pa.float64(), mask=~np.isfinite(column)))
            else:
                data = cases if where[0] == "case" else status if where[0] == "status" else given[where[1]]
                arrays.append(pa.array(data, type_))
            fields.append(pa.field(name, type_))
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        start = self.spool.tell()
        with pa.ipc.new_stream(self.spool, table.schema) as sink:
            sink.write_table(table)
        self.ranges.append((start, self.spool.tell()))

    def tables(self):
        """(the union's schema, each spooled chunk's table aligned to it), read back one at a time."""
        pa = self.pa
        schema = pa.schema([pa.field(name, type_) for name, type_, _ in self._columns(self.kinds)])

        def aligned():
            for start, end in self.ranges:
                self.spool.seek(start)
                table = pa.ipc.open_stream(pa.py_buffer(self.spool.read(end - start))).read_all()
                yield pa.Table.from_arrays([table[f.name] if f.name in table.column_names else
                                            pa.nulls(table.num_rows, f.type) for f in schema], schema=schema)

        return schema, aligned()

    def close(self) -> None:
        schema, tables = self.tables()
        self.writer = self.open(schema)
        for table in tables:
            self.writer.write_table(table)
        self.writer.close()
        self.spool.close()


class CsvWriter(_ArrowWriter):
    def open(self, schema):
        import pyarrow.csv as csv

        return csv.CSVWriter(self.handle, schema)


class ParquetWriter(_ArrowWriter):
    def open(self, schema):
        import pyarrow.parquet as pq

        return pq.ParquetWriter(self.handle, schema)
