"""The result matrix of an in-memory sweep, in pages the kernel can hand out without compacting memory.

numpy asks Linux for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every array of 4 MiB or more.
Where THP ``defrag`` is ``madvise`` (the kernel default, ``/sys/kernel/mm/transparent_hugepage/defrag``), a
fault in such a region compacts memory synchronously to find a free 2 MiB page when none is at hand. A sweep's
result matrix (results x points float64, about 3.7 GB for the 12.8M-point bench sweep) is written once, in a
stream, so huge pages buy it little; their compaction cost 25 s of system time per sweep against 1.6 s with
4 KiB pages, on the 2-core VM of ``bench/bench_lm_sweep.py`` (its ``sys_s`` column; docs/performance.md).
The matrix is therefore an anonymous mapping advised ``MADV_NOHUGEPAGE``; where ``madvise`` is not available
(not Linux), a plain ``np.empty``.
"""

from __future__ import annotations

import mmap

import numpy as np

#: below this many bytes numpy does not ask for huge pages either, and a mapping is not worth a system call
ADVISE_MIN_BYTES = 4 << 20


def result_matrix(rows: int, points: int) -> np.ndarray:
    """An uninitialised float64 ``(rows, points)`` C-ordered matrix, backed by 4 KiB pages where the system
    lets us say so (the mapping lives as long as the array or any view of it)."""
    nbytes = rows * points * 8
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if nbytes < ADVISE_MIN_BYTES or advice is None:
        return np.empty((rows, points))
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)   # private anonymous memory, as numpy's (not shmem)
    region.madvise(advice)
    return np.frombuffer(region, dtype=np.float64).reshape(rows, points)
