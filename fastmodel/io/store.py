"""Ownership of sweep stores on disk: what is ours, who writes it, whether it is complete.

A zarr sweep store is a directory. Writers hold an exclusive lock
(``fcntl.flock`` on ``<store>.lock`` beside it, holding the owner's pid, host and
start time), so a second writer is refused with the owner's name instead of
corrupting the store; a lock whose owner died (SIGKILL) is free again because
the kernel drops the flock with the process. Only a directory that is one of
our sweep stores may be deleted by ``--force`` (``overwrite=True``); readers refuse a store whose
units are not all written. The errors name the Python API's arguments (``overwrite=True``, ``resume=True``); a
command names its flags (``cli/common.SHARED_FLAGS``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import time
from pathlib import Path

from fastmodel.errors import FastmodelError, SweepError


def lock_path(path: str | os.PathLike) -> Path:
    target = Path(os.path.abspath(path))
    return target.with_name(target.name + ".lock")


def lock_owner(path: str | os.PathLike) -> str | None:
    """'pid 123 on host h since 2026-...' if another process holds the store's writer lock, else None."""
    lock = lock_path(path)
    try:
        handle = open(lock, "r")
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _describe(handle.read())
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def _describe(text: str) -> str:
    try:
        info = json.loads(text)
        return f"pid {info['pid']} on host {info['host']} since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "another process"


def _owner(handle, wait_s: float = 1.0) -> str:
    """The lock holder named from the lock file. Its holder writes its pid right after taking the lock, so
    an empty file means it is between the two steps: read again for up to ``wait_s`` before saying
    "another process"."""
    deadline = time.monotonic() + wait_s
    while True:
        handle.seek(0)
        text = handle.read()
        if text or time.monotonic() >= deadline:
            return _describe(text)
        time.sleep(0.02)


@contextlib.contextmanager
def writer_lock(path: str | os.PathLike):
    """Hold the exclusive writer lock of the store at ``path``; SweepError naming the owner if taken."""
    lock = lock_path(path)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as error:
            raise SweepError(f"{path}: cannot create the lock file {lock}: {error.strerror}") from None
        handle = os.fdopen(fd, "r+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = _owner(handle)
            handle.close()
            raise SweepError(f"{path} is being written by {owner} (lock {lock}); wait for it to finish, or stop it") \
                from None
        try:  # the file we locked may have been unlinked by its previous owner meanwhile: then lock the new one
            same = os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        handle.close()
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        handle.flush()
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        handle.close()


def is_sweep_store(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory holding a fastmodel sweep store (its sweep definition and unit flags)."""
    root = Path(path)
    if not root.is_dir():
        return False
    try:
        attrs = json.loads((root / ".zattrs").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(attrs, dict) and "sweep" in attrs and "fastmodel_version" in attrs and (root / "unit_done").is_dir()


def nothing_to_resume(path: str | os.PathLike) -> SweepError:
    """The refusal to resume ``path``, which is not a fastmodel sweep store (:func:`is_sweep_store`): one wording for
    ``fastmodel sweep --resume`` (fastmodel/cli/sweep.py, before the sweep file is read) and :func:`resume_flags`
    (the Python API's resume)."""
    return SweepError(f"{path} is not a fastmodel sweep store, so there is nothing to resume; choose another "
                      "output (fastmodel never deletes it, even with overwrite=True)")


def remove_store(path: str | os.PathLike) -> None:
    """Delete a sweep store (``overwrite=True``, ``--force``); anything else is refused, never deleted."""
    root = Path(path)
    if root.is_symlink() or not is_sweep_store(root):
        raise SweepError(f"{path} exists and is not a fastmodel sweep store; refusing to delete it "
                         "(even with overwrite=True): choose another output or remove it yourself")
    shutil.rmtree(root)


def resume_flags(path: str | os.PathLike, definition: dict, num_units: int, variables=(),
                 status_meanings: str | None = None):
    """The ``unit_done`` flags of the sweep store at ``path`` if the sweep ``definition`` (its JSON form,
    ``Sweep.definition()``) made it with ``num_units`` units, it holds ``variables`` and its ``status`` codes
    mean ``status_meanings`` (the ``flag_meanings`` this fastmodel writes; a store whose codes were numbered by
    another version would mix two numberings); a one-line SweepError otherwise (not a store, damaged, another
    sweep, other status codes)."""
    import numpy as np
    import zarr

    if not is_sweep_store(path):
        raise nothing_to_resume(path)
    try:
        group = zarr.open_group(path, mode="r")
        stored = json.loads(group.attrs["sweep"])
    except Exception as error:  # noqa: BLE001 - a damaged store is a user-facing error
        raise _damaged(path, error) from None
    # the definition first: another sweep's store (another engine's variables) is not damaged
    if stored != json.loads(json.dumps(definition)):
        raise SweepError(f"{path}: the store was made by a different sweep definition; cannot resume it "
                         "(pass overwrite=True instead of resume=True to replace it)")
    try:
        done = np.asarray(group["unit_done"][:], dtype=bool)
        for name in variables:
            group[name]
        stored_meanings = group["status"].attrs.get("flag_meanings") if status_meanings is not None else None
    except Exception as error:  # noqa: BLE001 - a damaged store is a user-facing error
        raise _damaged(path, error) from None
    if status_meanings is not None and stored_meanings != status_meanings:
        raise SweepError(f"{path}: the store's status codes were numbered by another fastmodel version; cannot "
                         "resume it (pass overwrite=True instead of resume=True to replace it)")
    if done.shape != (num_units,):
        raise SweepError(f"{path}: the sweep store is damaged (unit_done has {done.size} units, the sweep "
                         f"{num_units}); pass overwrite=True instead of resume=True to replace it")
    return done


def _damaged(path, error: Exception) -> SweepError:
    return SweepError(f"{path}: the sweep store is damaged ({type(error).__name__}: {error}); "
                      "pass overwrite=True instead of resume=True to replace it")


def missing_units(group) -> tuple[int, int]:
    """(units not written, all units) of an opened zarr group or Dataset with ``unit_done``."""
    import numpy as np

    done = np.asarray(group["unit_done"][:], dtype=bool)
    return int((~done).sum()), int(done.size)


def check_complete(path: str | os.PathLike, ds) -> None:
    """Refuse to read a store whose units are not all written (interrupted, failed or still being written)."""
    if "unit_done" not in ds:
        return
    missing, total = missing_units(ds)
    if missing == 0:
        return
    owner = lock_owner(path)
    why = f"is still being written by {owner}" if owner else "is incomplete (interrupted or failed)"
    raise FastmodelError(f"{path} {why}: {missing:,} of {total:,} units of work are not computed (status "
                         "not_computed); complete it with 'fastmodel sweep <file> -o <store> --resume' before reading it")
