"""Atomic output files: write to a temporary name beside the target, then rename.

An interrupted run leaves either the old file or the complete new one. The
new file gets the old file's permissions (or the usual 0666 & ~umask); a
symlink is followed, so its target is replaced and the link kept; special files
(``/dev/null``, FIFOs, terminals) are written directly, never replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from fastmodel.errors import FastmodelError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _writable_target(path) -> tuple[Path, os.stat_result | None]:
    """The real path behind ``path`` (symlinks followed) and its stat, if it exists."""
    target = Path(os.path.realpath(path))
    try:
        return target, target.stat()
    except FileNotFoundError:
        return target, None
    except OSError as error:
        raise FastmodelError(f"{path}: cannot write: {error.strerror}") from None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Context manager yielding a temporary path beside ``path``; renamed onto it on success.

    For writers that take a file name (``Dataset.to_netcdf``). The target must
    be a regular file or not exist yet.
    """
    target, info = _writable_target(path)
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise FastmodelError(f"{path}: not a regular file")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise FastmodelError(f"{path}: cannot write: {error.strerror}") from None
    os.close(fd)
    try:
        yield tmp_name
        os.chmod(tmp_name, stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask())
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w"):
    """Context manager yielding a file object; renamed onto ``path`` on success."""
    target, info = _writable_target(path)
    if info is not None and not stat.S_ISREG(info.st_mode):
        if stat.S_ISDIR(info.st_mode):
            raise FastmodelError(f"{path}: is a directory")
        try:
            handle = open(target, mode)
        except OSError as error:
            raise FastmodelError(f"{path}: cannot write: {error.strerror}") from None
        with handle:
            yield handle
        return
    with atomic_path(path) as tmp_name, open(tmp_name, mode) as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())
