"""Ctrl-C's one line and exit status, the same wherever the command line catches it. It imports ``sys`` only, so
``fastmodel.cli`` can use it while its command modules (and click) are still loading."""

from __future__ import annotations

import sys
from typing import NoReturn

#: the signal that stopped the command (``common.friendly``'s handler sets it): 2, Ctrl-C's SIGINT, or 15, the
#: SIGTERM of ``kill``, ``timeout`` and batch schedulers, which unwinds the same way (locks released, temporary
#: files removed) instead of killing the process where it stands
RECEIVED = {"signum": 2}


def exit_interrupted(said: str = "") -> NoReturn:
    """Write ``interrupted`` (``terminated`` after SIGTERM) and ``said`` (what the command left on disk, e.g.
    ``": out.csv not written"``) as one line on stderr, then exit 128 + the signal's number: 130 for SIGINT, 143 for
    SIGTERM, the shell's statuses. A SystemExit, not click's Exit: ``main(standalone_mode=False)`` would return that
    one's code, and the process would exit 0."""
    signum = RECEIVED["signum"]
    sys.stderr.write(f"{'terminated' if signum == 15 else 'interrupted'}{said}\n")
    sys.stderr.flush()
    raise SystemExit(128 + signum)
