"""The one place kernels get compiled: numba's ``njit`` with the project's defaults.

Every kernel module imports ``njit`` and ``prange`` from here instead of from
numba, so compilation options (on-disk caching, its location and keying) are
decided once.

Compiled kernels are cached on disk, never inside the installed package: a
cache file written into ``site-packages/fastmodel/kernels/__pycache__`` outlives
``pip uninstall`` and turns the leftover folder into a namespace package that
shadows the next install. The cache lives in a per-user directory
(``$NUMBA_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/fastmodel`` or
``~/.cache/fastmodel``), in a subfolder keyed by fastmodel's version and a hash
of the bytes of every file of this package. numba itself keys its index only by
the *entry* function's file, so an edit to a helper module (``layout``,
``costs``) or to the registry the layouts derive their indices from
(``fastmodel/registry/lm.py``, ``fastmodel/registry/madmax.py``) would otherwise load a stale kernel; here any edit
selects a fresh folder.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

#: ``FASTMODEL_JIT=0``: kernels run as plain Python (numba is not imported). The ``fastmodel run`` console
#: command sets it for its one configuration, where loading numba and its compiled kernels (about 1.5 s)
#: costs far more than interpreting one row.
INTERPRETED = os.environ.get("FASTMODEL_JIT", "1") == "0"

if INTERPRETED:
    prange = range
else:
    from numba import config as _numba_config
    from numba import njit as _numba_njit
    from numba import prange

__all__ = ["njit", "prange", "cache_dir", "kernel_source_key", "INTERPRETED"]

_PACKAGE_DIR = Path(__file__).resolve().parent


#: modules outside the kernels package whose module-level constants the kernels compile in
#: (the registries: the real-world model's columns, results and statuses; the MAD-Max results and statuses
#: that kernels/layout.py derives its R_* and STATUS_* indices from)
_CONSTANT_MODULES = ("fastmodel.registry.lm", "fastmodel.registry.madmax")


def _constant_sources() -> list[Path]:
    from importlib.util import find_spec

    paths = []
    for name in _CONSTANT_MODULES:
        spec = find_spec(name)
        if spec is not None and spec.origin:
            paths.append(Path(spec.origin))
    return paths


def kernel_source_key(folder: str | os.PathLike = _PACKAGE_DIR, constant_sources=None) -> str:
    """Hash of the names and bytes of every ``.py`` file in ``folder`` (the kernels package) and of the
    registry modules whose constants the kernels compile in (``constant_sources``; default: the installed ones)."""
    digest = hashlib.sha256()
    extra = _constant_sources() if constant_sources is None else [Path(p) for p in constant_sources]
    for path in [*sorted(Path(folder).glob("*.py")), *extra]:
        digest.update(path.name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("fastmodel")
    except Exception:  # noqa: BLE001 - not installed (source checkout): the source hash still keys the cache
        return "src"


def _base_dir() -> Path:
    user = os.environ.get("NUMBA_CACHE_DIR")
    if user:
        return Path(user)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "fastmodel"


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def cache_dir() -> Path | None:
    """The folder compiled kernels are cached in, created if needed; None when no folder is writable."""
    key = f"numba-{_version()}-{kernel_source_key()}"
    candidates = [_base_dir() / key, Path(tempfile.gettempdir()) / f"fastmodel-{os.getuid()}" / key]
    return next((c for c in candidates if _writable(c)), None)


_CACHE_DIR = None if INTERPRETED else cache_dir()


def njit(*args, **options):
    """``numba.njit`` with ``cache=True`` (in :func:`cache_dir`) unless the caller says otherwise; the plain
    function when :data:`INTERPRETED`."""
    if INTERPRETED:
        return args[0] if len(args) == 1 and callable(args[0]) else (lambda func: func)
    options.setdefault("cache", _CACHE_DIR is not None)
    if not options["cache"]:
        return _numba_njit(*args, **options) if not (len(args) == 1 and callable(args[0])) \
            else _numba_njit(**options)(args[0])
    # numba picks the cache folder when the function is decorated: point it at ours for that moment only
    saved = _numba_config.CACHE_DIR
    _numba_config.CACHE_DIR = str(_CACHE_DIR)
    try:
        if len(args) == 1 and callable(args[0]):
            return _numba_njit(**options)(args[0])
        decorate = _numba_njit(*args, **options)

        def apply(func):
            _numba_config.CACHE_DIR = str(_CACHE_DIR)
            try:
                return decorate(func)
            finally:
                _numba_config.CACHE_DIR = saved

        return apply
    finally:
        _numba_config.CACHE_DIR = saved
