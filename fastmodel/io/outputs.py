"""The one rule for output files: never replace an input, never replace a file without ``--force``, never
replace a file of another kind even then (issue 25 item 3). The errors name the Python argument, ``force=True``
(``fastmodel.calibrate(..., force=True)``); a command names its flag, ``--force`` (``cli/common.flag_names``, which
every command's ``friendly`` applies to them).

Every command that writes a file checks its output here before doing any work
(:func:`check_output`), then writes it under :func:`claim_output`:

- an output that is one of the command's inputs is refused;
- an existing regular file is replaced only with ``--force`` (``force``);
- even then, the existing file must be of the kind the command writes, read
  from its first bytes (:func:`content_kind`): a CSV never replaces a JSONL file
  of runs, a TOML calibration never replaces a CSV, a figure never replaces
  anything but a figure of its format, a netCDF file only a netCDF file; a
  directory is never replaced;
- special files (``/dev/null``, a FIFO, a terminal) are written as they are;
- :func:`claim_output` holds the output's writer lock (``io.store.writer_lock``,
  the lock of zarr stores) while the file is written and checks again under it,
  so of two commands writing one file at once the second is refused (never both
  "succeed" with the last silently winning); it removes the temporary files a
  killed writer of that output left behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from fastmodel.errors import FastmodelError

#: first bytes of each binary kind of file fastmodel writes (netCDF-3 classic and 64-bit offset)
_SIGNATURES = {
    "png": (b"\x89PNG",),
    "pdf": (b"%PDF",),
    "netcdf": (b"CDF\x01", b"CDF\x02"),
    "parquet": (b"PAR1",),
}
_TOML_LINE = re.compile(r"""^(\[\[?\s*[\w".\- ]+\s*\]\]?|[\w".\-]+\s*=)""")


class OutputError(FastmodelError):
    """An output path would destroy an input, an existing file without --force, or a file of another kind."""


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


def content_kind(head: bytes) -> str:
    """The kind of a file from its first bytes: ``empty``, ``png``, ``pdf``, ``netcdf``, ``parquet``, ``binary``
    (anything else that is not UTF-8 text, HDF5 included), ``svg``, ``json`` (JSON or JSON lines), ``toml``,
    ``csv`` (a first line with a comma or a tab) or ``text``."""
    if not head.strip():
        return "empty"
    for kind, signatures in _SIGNATURES.items():
        if head.startswith(signatures):
            return kind
    if b"\0" in head or head.startswith(b"\x89HDF"):
        return "binary"
    text = head.decode("utf-8", errors="ignore")   # a multi-byte character may be cut at the end
    if len(text.encode("utf-8")) < len(head) - 3:
        return "binary"
    text = text.lstrip("\ufeff")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "<svg" in text and lines[0].startswith("<"):
        return "svg"
    significant = [line for line in lines if not line.startswith("#")]
    if not significant:
        return "toml"                               # comments only: a TOML file with nothing set
    first = significant[0]
    if first.startswith("{"):
        return "json"
    if _TOML_LINE.match(first):                     # a [table] header or a key = value line
        return "csv" if "," in first.split("=", 1)[0] and not first.startswith("[") else "toml"
    if first.startswith("["):
        return "json"
    return "csv" if ("," in first or "\t" in first) else "text"


def other_kind(head: bytes) -> str | None:
    """``csv`` or ``toml`` when ``head`` (a file's first bytes) given as JSON lines is a CSV or TOML file
    (:func:`content_kind`) with no line a JSON object; None otherwise, and for a head of blank and comment lines
    only (``#``, ``//``: ``errors.comment_line``). The one rule of ``read_jsonl`` (fastmodel/spec/records.py) and
    batch (fastmodel/io/batch.py ``refuse_another_kind``); each says it in its own words (review11 #4)."""
    from fastmodel.errors import comment_line

    lines = head.decode("utf-8", errors="ignore").lstrip("\ufeff").splitlines()
    if not any(line.strip() and not comment_line(line) for line in lines):
        return None
    kind = content_kind(head)
    if kind in ("csv", "toml") and not any(line.lstrip().startswith("{") for line in lines):
        return kind
    return None


def output_kind(path: str, kind: str) -> str:
    """The kind a command writes to ``path``: ``kind``, or for ``"text"`` (tables written by suffix, as
    ``batch`` and ``serve`` do) CSV for a ``.csv`` path and JSON lines for any other."""
    if kind != "text":
        return kind
    return "csv" if Path(str(path)).suffix.lower() in (".csv", ".tsv") else "json"


def is_kind(path: str | os.PathLike, kind: str) -> bool:
    """Whether the existing file at ``path`` may be replaced by a ``kind`` file (it holds nothing, or a file of
    that kind; ``"text"``: any text file)."""
    found = content_kind(_head(Path(path)))
    if found == "empty":
        return True
    if kind == "text":
        return found in ("csv", "json", "toml", "svg", "text")
    return found == kind


_NAMES = {"csv": "CSV", "json": "JSON/JSONL", "toml": "TOML", "png": "PNG", "pdf": "PDF", "svg": "SVG",
          "netcdf": "netCDF", "parquet": "Parquet", "binary": "binary", "text": "plain-text",
          "spreadsheet": "spreadsheet", "compressed": "compressed", "image": "image"}


#: file-name suffixes that say which kind a file holds (a suffix not listed says nothing: out.txt, rows.dat); the
#: spreadsheet, binary, compressed and image suffixes name formats fastmodel never writes, so an output named so is
#: refused rather than filled with JSON lines or CSV that a spreadsheet program, an HDF5 reader or gunzip fails on
SUFFIX_KINDS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json",
                ".toml": "toml", ".png": "png", ".pdf": "pdf", ".svg": "svg", ".nc": "netcdf", ".nc4": "netcdf",
                ".cdf": "netcdf", ".parquet": "parquet", ".pq": "parquet", ".zarr": "zarr",
                **dict.fromkeys((".xlsx", ".xls", ".ods"), "spreadsheet"),
                **dict.fromkeys((".h5", ".hdf5", ".hdf", ".feather", ".arrow", ".pkl", ".pickle", ".npy", ".npz"),
                                "binary"),
                **dict.fromkeys((".gz", ".bz2", ".xz", ".zst", ".zip"), "compressed"),
                **dict.fromkeys((".jpg", ".jpeg", ".gif", ".tif", ".tiff", ".webp", ".eps"), "image")}


def _check_suffix(path: str, kind: str, what: str, by_suffix: bool = False) -> None:
    """A name whose suffix promises another kind than the one written (JSON lines into ``out.nc``, a TOML
    calibration into ``cal.json``) is refused: a later command would read the file by its name.
    ``by_suffix``: the command writes CSV for ``.csv`` and JSON lines otherwise (batch, serve)."""
    suffix = Path(str(path)).suffix.lower()
    named = SUFFIX_KINDS.get(suffix)
    if named is not None and named != kind:
        fits = ".jsonl (or .csv)" if by_suffix else next(s for s, k in SUFFIX_KINDS.items() if k == kind)
        raise OutputError(f"{path}: a {suffix} name, but this command writes {_NAMES.get(kind, kind)} here; "
                          f"name the {what} {fits}")


def wrote(path: str, kind: str) -> str:
    """The line a command prints once it wrote ``path`` as ``kind``: ``wrote PATH``, and for a name whose suffix
    says nothing of its kind (``x.txt``, ``rows``; a suffix naming another kind is refused before any work,
    :func:`_check_suffix`) what it holds: ``wrote x.txt (CSV; the name does not end in .csv)``."""
    suffix = Path(str(path)).suffix.lower()
    if SUFFIX_KINDS.get(suffix) == kind or not os.path.isfile(path):   # /dev/stdout, a FIFO: nothing to name
        return f"wrote {path}"
    usual = next(s for s, k in SUFFIX_KINDS.items() if k == kind)
    return f"wrote {path} ({_NAMES.get(kind, kind)}; the name does not end in {usual})"


#: suffixes of an input that is a file (or store) by its name, never a built-in spec name: named before the output
INPUT_SUFFIXES = (".jsonl", ".json", ".toml", ".nc", ".zarr", ".csv")


def check_output(path: str, kind: str, inputs: tuple[str, ...] = (), force: bool = False,
                 what: str = "output", stdout: bool = False) -> None:
    """Refuse ``path`` if it is an input, or an existing file we may not replace (see the module doc).
    ``kind``: what the command writes (``csv``, ``json``, ``toml``, ``png``, ``pdf``, ``svg``, ``netcdf``,
    ``parquet``; ``text``: by suffix, :func:`output_kind`). ``-`` is standard output where the command writes
    there (``stdout``: batch), else refused: it would become a file named ``-`` that no later run is stopped
    from replacing; an empty path is refused."""
    if path == "-" and stdout:
        return
    if path in ("-", ""):
        named = ".jsonl or .csv" if kind == "text" else next((s for s, k in SUFFIX_KINDS.items() if k == kind), "")
        problem = f"this command writes its {what} to a file, not to standard output" if path else f"an empty {what} name"
        raise OutputError(f"{path or repr(path)}: {problem}; name a {named} file")
    if str(path).endswith(("/", os.sep)):   # 'out.csv/' was written as the file out.csv
        raise OutputError(f"{path}: ends in '/', so names a directory; name the {what} file (without the '/')")
    if (log := _LOG.get()) is not None:
        log.pending.setdefault(str(path), os.path.lexists(path))
    for source in inputs:     # an input file that is not there first: the output's state is moot until it is
        if source and str(source).endswith(INPUT_SUFFIXES) and not os.path.lexists(source):
            raise FastmodelError(f"{source}: no such file" + (" or store" if str(source).endswith((".nc", ".zarr"))
                                                               else ""))
        if source and source != "-" and os.path.lexists(source) and _same_file(path, source):
            raise OutputError(f"{path}: the {what} is also an input of this command ({source}); "
                              "write it somewhere else")
    target = Path(os.path.realpath(path))
    try:
        info = target.stat()
    except FileNotFoundError:  # a new file: its folder must exist and take files, checked before any work
        if not target.parent.is_dir():
            raise OutputError(f"{path}: cannot write: no such directory {target.parent}") from None
        _check_suffix(path, output_kind(path, kind), what, by_suffix=kind == "text")
        _probe_folders(path, target)
        return
    except OSError as error:
        raise OutputError(f"{path}: cannot write: {error.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{path}: is a directory; refusing to replace it")
    if not stat.S_ISREG(info.st_mode):
        return  # /dev/null, a FIFO, a terminal: written directly, nothing replaced
    want = output_kind(path, kind)
    found = content_kind(_head(target))
    if found not in ("empty", want):
        raise OutputError(f"{path} exists and is a {_NAMES.get(found, found)} file, not the {_NAMES.get(want, want)} "
                          f"{what} this command writes; refusing to replace it (even with force=True): choose another "
                          "output")
    _check_suffix(path, want, what, by_suffix=kind == "text")
    if not force:
        raise OutputError(f"{path} exists; pass force=True to replace it")
    _probe_folders(path, target)


def _probe_folders(path: str, target: Path) -> None:
    """Create and remove a file where the writer will create its own, before any work: the writer lock beside
    ``path`` (``io.store.lock_path``) and the temporary file beside its real ``target`` (``io.atomic``). A
    folder that refuses one (no write permission, a read-only file system, /proc) fails here in one line, not
    after the command's work; ``os.access`` alone passes them for root."""
    for folder in dict.fromkeys((Path(os.path.abspath(path)).parent, target.parent)):
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=folder)
        except OSError as error:
            raise OutputError(f"{path}: cannot write in {folder}: {error.strerror}") from None
        os.close(fd)
        os.unlink(probe)


def _special(path: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def claim_output(path: str, kind: str, inputs: tuple[str, ...] = (), force: bool = False, what: str = "output",
                 stdout: bool = False):
    """Hold ``path``'s writer lock, check it again under the lock (:func:`check_output`: a file that appeared
    since the first check is refused without --force) and remove temporary files a killed writer of it left;
    the caller writes it atomically inside (``io.atomic``). Another process holding the lock: a one-line
    error naming it. Standard output and special files are written without a lock."""
    if path in ("-", "") or _special(path):
        check_output(path, kind, inputs, force, what, stdout)
        yield
        if (log := _LOG.get()) is not None:
            log.pending.pop(str(path), None)      # standard output, /dev/null: no file to report
        return
    from fastmodel.io.store import writer_lock

    with writer_lock(path):
        check_output(path, kind, inputs, force, what)
        target = Path(os.path.realpath(path))
        for stale in target.parent.glob(f".{glob_escape(target.name)}.*.tmp"):
            if stale.is_file() and not stale.is_symlink():
                with contextlib.suppress(OSError):
                    stale.unlink()
        yield
    mark_written(path)


def mark_written(path) -> None:
    """``path`` is written whole (renamed into place; a sweep store with every unit): a Ctrl-C after it says so."""
    if (log := _LOG.get()) is not None:
        log.pending.pop(str(path), None)
        if str(path) not in log.written:
            log.written.append(str(path))


@dataclass
class OutputLog:
    """The outputs of one command (one :func:`output_log` scope), for what a Ctrl-C reports:

    - ``pending``: outputs checked and not yet written, path -> whether a file was there before (every file is
      written under a temporary name and renamed when whole, so an interrupted command leaves none of them, or
      the earlier file as it was);
    - ``written``: outputs written whole (:func:`mark_written`): a Ctrl-C after them (while the command prints
      its summary) said a bare "interrupted", as if they were not written.

    One per call, never process-wide: a long-lived process (the Python API, a test session) ran many commands
    into one module-level list and dict, which only grew (issue 23)."""

    pending: dict[str, bool] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)

    def interrupted(self) -> str:
        """What an interrupted command left on disk, for its one-line message ('' when it writes no file)."""
        new = [path for path, existed in self.pending.items() if not existed]
        kept = [path for path, existed in self.pending.items() if existed]
        said = [f"{', '.join(self.written)} written whole" if self.written else "",
                f"{', '.join(new)} not written" if new else "", f"{', '.join(kept)} left as it was" if kept else ""]
        return ": " + "; ".join(part for part in said if part) if any(said) else ""


#: the log of the command running in this context (None outside :func:`output_log`: nothing is recorded)
_LOG: ContextVar[OutputLog | None] = ContextVar("fastmodel_output_log", default=None)


@contextlib.contextmanager
def output_log():
    """A fresh :class:`OutputLog` for the outputs checked and written inside (the CLI opens one per command,
    ``cli.common.friendly``); the enclosing one, or none, again after. Outside any, nothing is recorded."""
    token = _LOG.set(OutputLog())
    try:
        yield _LOG.get()
    finally:
        _LOG.reset(token)


def glob_escape(name: str) -> str:
    """``name`` with glob metacharacters escaped (a file may be called ``a[1].csv``)."""
    return re.sub(r"([*?\[])", r"[\1]", name)
