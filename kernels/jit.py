"""The one place kernels get compiled: numba's ``njit`` with the project's defaults.

Every kernel module imports ``njit`` and ``prange`` from here instead of from
numba, so compilation options (on-disk caching, its location and keying) are
decided once.
"""

from numba import njit as _numba_njit
from numba import prange

__all__ = ["njit", "prange"]


def njit(*args, **options):
    """``numba.njit`` with ``cache=True`` unless the caller says otherwise."""
    options.setdefault("cache", True)
    if len(args) == 1 and callable(args[0]):
        return _numba_njit(**options)(args[0])
    return _numba_njit(*args, **options)
