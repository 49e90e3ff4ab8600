"""Ctrl-C's one line and exit status, the same wherever the command line catches it. It imports ``sys`` only, so
``fastmodel.cli`` can use it while its command modules (and click) are still loading."""

from __future__ import annotations

import sys
from typing import NoReturn


def exit_interrupted(said: str = "") -> NoReturn:
    """Write ``interrupted`` and ``said`` (what the command left on disk, e.g. ``": out.csv not written"``) as one
    line on stderr, then exit 130, the shell's status for SIGINT. A SystemExit, not click's Exit:
    ``main(standalone_mode=False)`` would return that one's code, and the process would exit 0."""
    sys.stderr.write(f"interrupted{said}\n")
    sys.stderr.flush()
    raise SystemExit(130)
