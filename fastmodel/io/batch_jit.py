"""Whether a ``fastmodel batch`` process interprets its kernels: when its input holds few distinct lines.

The batch evaluates each distinct line once (:mod:`fastmodel.io.batch`), so an
input of 100,000 lines cycling 65 cases evaluates 65 configurations. Loading
numba and the compiled kernels costs about 1.5 s of start-up, interpreting a
configuration about a millisecond (as ``fastmodel run`` does for its one:
``FASTMODEL_JIT=0``, kernels/jit.py; the numbers are the same to the last
bit). The console command therefore counts the distinct lines of a regular
input file before anything imports the kernels, and interprets them when there
are at most :data:`MAX_DISTINCT` in at most :data:`MAX_BYTES` bytes. It stops
reading at the first line past the limit, so an input of many distinct lines
costs a few thousand lines of reading. Standard input, a larger file or an
explicit ``FASTMODEL_JIT`` keep the compiled kernels.
"""

from __future__ import annotations

import os
import sys

#: at most this many distinct lines are interpreted (about a millisecond each; numba's start-up is ~1.5 s)
MAX_DISTINCT = 256
#: files past this size keep the compiled kernels (counting their lines would cost more than it saves)
MAX_BYTES = 256 << 20
_BLOCK = 1 << 20   # read per step: an input of many distinct lines stops after a block or two


def few_distinct_lines(path: str, max_distinct: int = MAX_DISTINCT, max_bytes: int = MAX_BYTES) -> bool:
    """True if the regular file ``path`` has at most ``max_distinct`` distinct lines (byte for byte, as the
    batch tells them apart) and at most ``max_bytes`` bytes; False otherwise or if it cannot be read."""
    try:
        if os.path.getsize(path) > max_bytes:
            return False
        seen: set[bytes] = set()
        with open(path, "rb") as handle:
            while True:
                lines = handle.readlines(_BLOCK)
                if not lines:
                    return True
                seen.update(lines)
                if len(seen) > max_distinct:
                    return False
    except OSError:
        return False


def interpret_if_few(path: str) -> bool:
    """Before the kernels are imported, make this process interpret them if ``path`` (a batch input; '-':
    stdin) has few distinct lines. Returns whether it did. For the console command only (it sets the
    process's environment, which a test runner's process must keep)."""
    if path == "-" or "FASTMODEL_JIT" in os.environ or "fastmodel.kernels.jit" in sys.modules:
        return False
    if not os.path.isfile(path) or not few_distinct_lines(path):
        return False
    os.environ["FASTMODEL_JIT"] = "0"
    return True
