"""Measured-run files shared by the engines that read them: JSON lines of records, loosely typed numbers.

The training engine's records (``RUNS.md``) and the serving engine's (``SERVE_RUNS.md``) are JSON lines; each
engine lowers one record with its own function and :func:`read_jsonl` names the file and line of a bad one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastmodel.errors import NESTED_TOO_DEEP, SpecError, UnsupportedError, comment_line


def block_missing(data: dict, block: str) -> str:
    """The reason of a record without its required ``block``: "required block missing", and the record's key that
    looks like a misspelling of it, if one does (``modle`` for ``model``: difflib, as ``errors.nearest``)."""
    import difflib

    others = [key for key in data if isinstance(key, str) and key != block]
    close = difflib.get_close_matches(block, others, n=1, cutoff=0.75)
    return "required block missing" + (f" (the record has {close[0]!r}: a misspelling of {block!r}?)" if close else "")


def require_blocks(data: dict, blocks, source: str | None, schema: str) -> None:
    """A one-line SpecError naming the first of ``blocks`` that ``data`` lacks or holds as a non-object (``schema``:
    the document that describes the block, RUNS.md or SERVE_RUNS.md); a missing block names a key of the record
    that looks like its misspelling (:func:`block_missing`)."""
    for block in blocks:
        if not isinstance(data.get(block), dict):
            reason = block_missing(data, block) if data.get(block) is None else \
                f"expected an object ({schema} {block} block), got {type(data[block]).__name__}"
            raise SpecError(source, block, reason)


def number(block: dict, key: str, where: str, source: str | None, default=None, positive=True):
    """A number of a loosely-typed block (serving records): a SpecError naming ``where.key`` otherwise."""
    value = block.get(key, default)
    if value is None:
        value = default
    if value is None:
        raise SpecError(source, f"{where}.{key}", "required field missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise SpecError(source, f"{where}.{key}", f"expected a number, got {value!r}")
    if positive and value <= 0:
        raise SpecError(source, f"{where}.{key}", f"must be > 0, got {value!r}")
    if value < 0:
        raise SpecError(source, f"{where}.{key}", f"must be >= 0, got {value!r}")
    return float(value)


#: a file of another kind given as JSON lines (``io.outputs.other_kind``), as :func:`read_jsonl` names it
_OTHER_KINDS = {"toml": "a TOML file (a spec, sweep file or calibration)", "csv": "a CSV file"}


def read_jsonl(path: str | Path, lower, what: str, whole_object: bool = False, refused: list | None = None) -> list:
    """``lower(data, "file:line")`` of every line of a JSONL file (with ``whole_object``, also of a file holding
    one JSON object over several lines); a bad line is a SpecError naming the file and line. With a
    ``refused`` list (``validate``, which never stops a file for one record: issue 26), a line whose field or
    value the engine does not take (:class:`UnsupportedError`) and a malformed line (invalid JSON, a wrong type,
    a bound, a missing field: :class:`SpecError`) are appended to it as a :class:`Refused` instead, each with
    its one-line reason (``validate`` counts them as misses); a file of such lines only then returns [], unless
    not one of its lines is JSON (another kind of file): a SpecError naming its first line. A file that is not
    UTF-8 text (a figure, a netCDF file) is a SpecError naming its first bad byte, a TOML file one saying so, JSON
    that is not JSON lines (an array, pretty-printed objects: :func:`not_json_lines`) one saying how to write it."""
    if isinstance(path, (list, tuple)):
        return lower_objects(path, lower, what, refused)
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise SpecError(str(path), "", f"cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:   # a binary file (a figure, a netCDF file) given as JSON lines
        raise SpecError(str(path), "", f"not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                                       f"{error.start}): JSON lines are text") from None
    stripped = text.strip()
    from fastmodel.io.outputs import other_kind

    if kind := other_kind(text[:4096].encode("utf-8")):
        raise SpecError(str(path), "", f"{_OTHER_KINDS[kind]}, not JSON lines of {what} (one JSON object a line)")
    if whole_object and stripped.startswith("{") and "\n{" not in stripped:
        lines = [(1, stripped)]
    elif problem := not_json_lines(stripped, what):
        raise SpecError(str(path), "", problem)
    else:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    records, parsed, first_refused = [], 0, len(refused or ())
    for number, line in lines:
        where = f"{path}:{number}"
        data: object = {}
        try:
            try:
                data = json.loads(line)
            except json.JSONDecodeError as error:
                raise SpecError(where, "", comment_line(line) or f"invalid JSON: {error.msg}") from None
            except RecursionError:
                raise SpecError(where, "", f"invalid JSON: {NESTED_TOO_DEEP}") from None
            parsed += 1
            records.append(lower(data, where))
        except (UnsupportedError, SpecError) as error:
            _refuse(refused, where, data, error)
    new_refusals = refused is not None and len(refused) > first_refused    # the caller's list may hold others'
    if not records and not new_refusals:
        raise SpecError(str(path), "", f"no {what} in the file")
    if new_refusals and not parsed:   # not one line is JSON: another kind of file, not a file of refused records
        raise SpecError(None, None, f"{refused[first_refused].reason}; not one line of the file is JSON, so it "
                                    f"holds no {what}")
    return records


def not_json_lines(text: str, what: str) -> str | None:
    """Why ``text`` (a file's, stripped) is JSON but not JSON lines, else None: a JSON array (``[{...}, {...}]``), or
    JSON objects written over more lines than there are objects (pretty-printed, ``json.dump(indent=2)``), which
    ``validate`` had refused line by line, one "invalid JSON" per line of the file (h-mend15's campaign)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    try:
        while at < len(text):
            value, at = decoder.raw_decode(text, at)
            values.append(value)
            while at < len(text) and text[at].isspace():
                at += 1
    except (json.JSONDecodeError, RecursionError):
        return None
    rows = sum(1 for line in text.splitlines() if line.strip())
    if len(values) == 1 and isinstance(values[0], list):
        return (f"a JSON array of {len(values[0])} items, not JSON lines of {what}: write one JSON object a line "
                "(jq -c '.[]' FILE)")
    if rows > len(values) and all(isinstance(v, dict) for v in values):
        objects = "one JSON object" if len(values) == 1 else f"{len(values)} JSON objects"
        return f"{objects} over {rows} lines, not JSON lines of {what}: write each object on one line (jq -c . FILE)"
    return None


def _refuse(refused: list | None, where: str, data, error: SpecError) -> None:
    """A record at ``where`` the engine refused with ``error``: raised without a ``refused`` list (every command but
    ``validate``), else appended to it as a :class:`Refused` with its raw object (``{}`` when ``data`` is no JSON
    object) and the one-line reason. One rule for :func:`read_jsonl` and :func:`lower_objects`."""
    if refused is None:
        raise error
    refused.append(Refused(where, data if isinstance(data, dict) else {}, str(error)))


def lower_objects(objects: list | tuple, lower, what: str, refused: list | None = None,
                  source: str = "runs") -> list:
    """:func:`read_jsonl` of records already parsed (a list of dicts from Python): ``lower(data, "runs[i]")`` of
    each, a bad one a SpecError naming ``runs[i]`` (with a ``refused`` list, appended to it as a :class:`Refused`);
    an empty list is a SpecError."""
    if not objects:
        raise SpecError(source, "", f"no {what} in the list")
    records = []
    for i, data in enumerate(objects):
        where = f"{source}[{i}]"
        try:
            if not isinstance(data, dict):
                raise SpecError(where, "", f"expected a record as a dict (a parsed JSON line), got "
                                           f"{type(data).__name__}")
            records.append(lower(data, where))
        except (UnsupportedError, SpecError) as error:
            _refuse(refused, where, data, error)
    return records


def first_record(path: str | Path):
    """The first readable JSON value of a JSON/JSONL file (None when there is none or the file cannot be read: its
    reader says why); a malformed line before it is skipped (the reader's to report)."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            for line in handle:
                try:
                    data = json.loads(line) if line.strip() else None
                except (json.JSONDecodeError, RecursionError):
                    continue
                if data is not None:
                    return data
    except (OSError, UnicodeDecodeError):
        return None
    return None


@dataclass(frozen=True)
class Refused:
    """A record the engine refused: where it is (``file:line``), its raw JSON object and the one-line reason."""
    where: str
    raw: dict
    reason: str

    @property
    def id(self) -> str:
        return str(self.raw.get("id", self.where))
