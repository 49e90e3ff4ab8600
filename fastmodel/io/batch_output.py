"""Writers of batch results, chosen by the output's extension, one chunk at a time.

``.csv`` -> CSV, ``.parquet`` -> Parquet (via pyarrow), anything else -> JSONL. A line's record: ``case``,
``status``, its kind's columns (``plan``, ``id``), then the result variables of its engine only (the
registry's ``RESULTS`` of that engine, SI units, then their aliases: ``iteration_time`` repeats
``step_time``). JSONL keeps each line's ``case`` id as given and leaves the kind's columns and results off
error lines; CSV and Parquet take the union of the columns of the kinds present in the batch (``case`` as
text, empty/null where a line has no value): each chunk's table is spooled to a temporary file and the
union's columns are known when the last chunk is done. A non-finite value is ``null``. Files are written
atomically: an interrupted batch leaves no output (or the old file), never a partial one. JSONL text is
formatted once per distinct line of a chunk and written by a background thread while the next chunk is
evaluated.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO

import numpy as np
import orjson

from fastmodel.io import batch_kinds
from fastmodel.io.batch import no_cyclic_gc, read_chunks, run_chunks
from fastmodel.io.batch_results import ENGINE_ROWS, Chunk, engine_outputs, engine_rows
from fastmodel.io.batch_tables import CsvWriter, ParquetWriter

_DUMPS = orjson.dumps


class JsonlWriter:
    """One JSON object per line: ``case``, ``status``, the kind's columns, then the results.

    With ``background``, a thread writes each chunk's text while the next
    chunk is evaluated (:class:`_BackgroundWrites`); otherwise the caller's
    thread writes it.
    """

    def __init__(self, handle: IO[bytes], background: bool = False):
        self.handle = handle
        self.background = _BackgroundWrites(handle) if background else None

    def write(self, chunk: Chunk) -> None:
        with no_cyclic_gc():
            pieces = jsonl_pieces(chunk)
        if self.background is not None:
            self.background.put(pieces)
        else:
            self.handle.write(b"".join(pieces))
            self.handle.flush()  # stdout: each chunk as soon as it is done

    def close(self) -> None:
        if self.background is not None:
            self.background.close()

    def abandon(self) -> None:
        if self.background is not None:
            self.background.abandon()


class _BackgroundWrites:
    """A thread that joins and writes the text of one chunk after another, in order.

    Copying a chunk's text into the kernel (and the disk writing it out)
    releases the GIL, so it overlaps the evaluation of the next chunk. At most
    one chunk waits in the queue, so memory stays bounded. A write that fails
    is raised in the caller's thread at its next ``put`` or at ``close``. On a
    regular file each written chunk is handed to the kernel's writeback at
    once (``POSIX_FADV_DONTNEED``), so the final ``fsync`` of the atomic
    output has little left to wait for.
    """

    def __init__(self, handle: IO[bytes]):
        import queue
        import threading

        self.handle = handle
        self.queue: queue.Queue = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.stop = False
        self.fd = _regular_fd(handle)
        self.thread = threading.Thread(target=self._run, name="fastmodel-batch-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            pieces = self.queue.get()
            if pieces is None:
                return
            if self.stop or self.error is not None:
                continue
            try:
                self.handle.write(b"".join(pieces))
                self.handle.flush()
                if self.fd is not None:
                    os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
                self.error = error

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def put(self, pieces: list[bytes]) -> None:
        self._raise()
        self.queue.put(pieces)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        self._raise()

    def abandon(self) -> None:
        """Stop after the write under way (if any); nothing more is written."""
        self.stop = True
        self.queue.put(None)
        self.thread.join()


def _regular_fd(handle) -> int | None:
    """The file descriptor of ``handle`` if it is a regular file and writeback hints exist, else None."""
    import stat

    if not hasattr(os, "posix_fadvise"):
        return None
    try:
        fd = handle.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, AttributeError, ValueError):
        return None


_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_SEPARATOR = b'},{"status":'


def _tail_template(engine: str) -> tuple[bytes, tuple[int, ...]]:
    """The rest of an ok record of ``engine`` after its ``"case":..,``: its head (``"status":"ok","plan":..``),
    then each of the engine's results and aliases; and which formatted result each alias repeats."""
    names, rows = engine_outputs(engine)
    own = len(ENGINE_ROWS[engine])
    template = b'"status":%b' + b"".join(b',"%b":%%b' % name.encode() for name in names) + b"}"
    return template, tuple(rows.index(row) for row in rows[own:])


_TAILS: dict[str, tuple[bytes, tuple[int, ...]]] = {}


def jsonl(chunk: Chunk) -> bytes:
    """The JSONL text of a chunk's records (non-finite numbers are ``null``)."""
    return b"".join(jsonl_pieces(chunk))


def jsonl_pieces(chunk: Chunk) -> list[bytes]:
    """The JSONL text of a chunk's records, as pieces to join.

    Each distinct line's record is formatted once (:func:`_tails`: all but its
    ``case``); a line is then its case id and its distinct line's text. A line
    that gives no ``case`` id takes its line number: one ``%`` per line for
    ``{"case":N,`` and the shared rest; a line that gives one shares its whole
    text with its duplicates.
    """
    n = len(chunk)
    if n == 0:
        return []
    d = chunk.distinct
    tails = [tail + b"\n" for tail in _tails(d)]
    rows = range(len(tails)) if chunk.inverse is None else chunk.inverse.tolist()
    named, first = d.named, chunk.first_line
    if not any(named):
        pieces: list = [None] * (2 * n)
        pieces[0::2] = map(b'{"case":%d,'.__mod__, range(first, first + n))
        pieces[1::2] = map(tails.__getitem__, rows)
        return pieces
    whole = [b'{"case":%b,%b' % (_DUMPS(case), tail) if own else None for own, case, tail in zip(named, d.given, tails)]
    if all(named):
        return list(map(whole.__getitem__, rows))
    return [whole[j] if named[j] else b'{"case":%d,%b' % (first + i, tails[j]) for i, j in enumerate(rows)]


def _tails(d) -> list[bytes]:
    """Per distinct line, its record's text after ``{"case":..,`` (through the closing brace).

    orjson formats the numbers of every ok line of an engine in one call and the heads of their records in
    another (a call per line costs more than its formatting); each tail is then one ``%`` of its pieces into
    the engine's keyed template. A head's values are strings and numbers, so the list's separators
    ``},{"status":`` occur only between heads (a quote inside a string is escaped); if a kind's column held
    anything else, the count would differ and each head takes its own call.
    """
    status, kinds, columns = d.status, d.kinds, d.columns
    n = len(status)
    tails: list = [None] * n
    by_engine: dict[str, list[int]] = {}
    kind_list = batch_kinds.KINDS
    for j in range(n):
        if status[j] is not None:
            tails[j] = _DUMPS({"status": "error: " + status[j]})[1:]
        else:
            by_engine.setdefault(kind_list[kinds[j]].engine, []).append(j)
    for engine, ok in by_engine.items():
        heads = []
        for j in ok:
            head = {"status": "ok"}
            for name in kind_list[kinds[j]].columns:
                head[name] = columns[name][j]
            heads.append(head)
        head_text = _DUMPS(heads)[len(b'[{"status":'):-2].split(_SEPARATOR)
        if len(head_text) != len(heads):
            head_text = [_DUMPS(head)[len(b'{"status":'):-1] for head in heads]
        values = d.values[engine_rows(engine)]
        values = values if len(ok) == n else values[:, ok]
        numbers = _DUMPS(np.ascontiguousarray(values.T), option=_NUMPY)[2:-2].split(b"],[")
        if engine not in _TAILS:
            _TAILS[engine] = _tail_template(engine)
        template, repeats = _TAILS[engine]
        if len(repeats) == 1:       # one alias (step_time's): the common case, without a generator per line
            first = repeats[0]
            for j, head, row in zip(ok, head_text, numbers):
                pieces = row.split(b",")
                tails[j] = template % (head, *pieces, pieces[first])
            continue
        for j, head, row in zip(ok, head_text, numbers):
            pieces = row.split(b",")
            tails[j] = template % (head, *pieces, *(pieces[r] for r in repeats))
    return tails


WRITERS = {".csv": CsvWriter, ".parquet": ParquetWriter}


def writer_for(output: str):
    """The writer class of an output path (by extension; JSONL unless .csv or .parquet)."""
    return WRITERS.get(Path(output).suffix.lower(), JsonlWriter) if output != "-" else JsonlWriter


def run_to_output(source: IO[bytes], output: str, semantics="default", progress: bool | None = None,
                  background: bool | None = None, calibration=None) -> tuple[int, int]:
    """Evaluate every line of ``source`` into ``output`` ('-': stdout); return (ok, errors).
    ``calibration``: a calibration overlay (TOML path or ``Calibration``) for run-record lines.

    ``background``: JSONL is written by a second thread while this one
    evaluates the next chunk (default: on a machine with more than one core).
    """
    from fastmodel.io.atomic import atomic_write
    from fastmodel.progress_bar import LineProgress

    writer_class = writer_for(output)
    if background is None:
        background = (os.cpu_count() or 1) > 1
    bar = LineProgress(_size(source), enabled=progress)
    counts = [0, 0]

    def count(chunk: Chunk) -> None:
        bad = chunk.error_count()
        counts[0] += len(chunk) - bad
        counts[1] += bad

    def run(handle: IO[bytes]) -> None:
        writer = JsonlWriter(handle, background) if writer_class is JsonlWriter else writer_class(handle)
        try:
            for chunk in run_chunks(read_chunks(source), semantics, bar, calibration):
                writer.write(chunk)
                count(chunk)
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


def _size(source) -> int | None:
    import os
    import stat

    try:
        info = os.fstat(source.fileno())
    except (OSError, AttributeError, ValueError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None
