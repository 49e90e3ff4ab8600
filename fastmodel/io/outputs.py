"""Rules for output paths: never replace an input, nor anything that is not our own output of the same kind.

Every command that writes a file checks its output here before doing any work:

- an output that is one of the command's inputs is refused;
- an existing regular file is replaced only with ``--force`` (``force``), except
  figures, where replacing the previous figure is the convention (``replace_ok``);
- even then, the existing file must be of the kind the command writes (its
  first bytes say so): a dataset is never replaced by a CSV, nor a JSONL file
  by a figure; a directory is never replaced;
- special files (``/dev/null``, a FIFO, a terminal) are written as they are.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fastmodel.errors import FastmodelError

#: first bytes of each kind of file fastmodel writes
_SIGNATURES = {
    "png": (b"\x89PNG",),
    "pdf": (b"%PDF",),
    "netcdf": (b"CDF\x01", b"CDF\x02"),
    "parquet": (b"PAR1",),
}


class OutputError(FastmodelError):
    """An output path would destroy an input or a file of another kind."""


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _head(path: Path, size: int = 4096) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def is_kind(path: str | os.PathLike, kind: str) -> bool:
    """Whether the existing file at ``path`` looks like a ``kind`` file (text, png, pdf, svg, netcdf, parquet)."""
    head = _head(Path(path))
    if not head:
        return True  # an empty file holds nothing to lose
    if kind in _SIGNATURES:
        return head.startswith(_SIGNATURES[kind])
    if b"\0" in head or head.startswith(b"\x89HDF") or any(head.startswith(s) for sigs in _SIGNATURES.values() for s in sigs):
        return False
    text = head.decode("utf-8", errors="ignore")  # a multi-byte character may be cut at the end
    if len(text.encode("utf-8")) < len(head) - 3:
        return False  # not UTF-8 text
    if kind == "svg":
        return "<svg" in text
    return kind == "text"


def check_output(path: str, kind: str, inputs: tuple[str, ...] = (), force: bool = False,
                 replace_ok: bool = False, what: str = "output") -> None:
    """Refuse ``path`` if it is an input, or an existing file we may not replace (see the module doc)."""
    if path in ("-", ""):
        return
    for source in inputs:
        if source and source != "-" and os.path.lexists(source) and _same_file(path, source):
            raise OutputError(f"{path}: the {what} is also an input of this command ({source}); "
                              "write it somewhere else")
    target = Path(os.path.realpath(path))
    try:
        info = target.stat()
    except FileNotFoundError:  # a new file: its folder must exist and take files, checked before any work
        if not target.parent.is_dir():
            raise OutputError(f"{path}: cannot write: no such directory {target.parent}") from None
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise OutputError(f"{path}: cannot write in {target.parent}: permission denied") from None
        return
    except OSError as error:
        raise OutputError(f"{path}: cannot write: {error.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{path}: is a directory; refusing to replace it")
    if not stat.S_ISREG(info.st_mode):
        return  # /dev/null, a FIFO, a terminal: written directly, nothing replaced
    if not is_kind(target, kind):
        raise OutputError(f"{path} exists and is not a {kind} file; refusing to replace it "
                          "(even with --force): choose another output")
    if not (force or replace_ok):
        raise OutputError(f"{path} exists; pass --force to replace it")
