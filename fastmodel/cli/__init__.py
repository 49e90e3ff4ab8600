"""The ``fastmodel`` command line: thin wrappers over the Python API, one module per command group.

- ``app``: the ``main`` group and the console ``entry``; ``common``: one-line errors (``friendly``, ``OneLineGroup``), choices, shared options;
  ``interrupted``: Ctrl-C's one line and exit 130 (``exit_interrupted``);
- ``run``, ``batch``, ``sweep``, ``best``, ``specs`` (``specs`` and ``plans``), ``plot``, ``validate``,
  ``calibrate``, ``serve``, ``warmup``: the commands.

Command modules import lazily what they evaluate with, so ``fastmodel --help`` imports neither numba nor
xarray (tests/test_startup.py).
"""

from fastmodel.cli.interrupted import exit_interrupted

try:   # Ctrl-C while the command line loads (its first 0.1-0.5 s): one line and 130, as later, not a traceback
    from fastmodel.cli import batch as _batch  # noqa: F401  (each module adds its commands to main)
    from fastmodel.cli import best as _best  # noqa: F401
    from fastmodel.cli import run as _run  # noqa: F401
    from fastmodel.cli import specs as _specs  # noqa: F401
    from fastmodel.cli import sweep as _sweep  # noqa: F401
    from fastmodel.cli.app import entry, main
    from fastmodel.cli.calibrate import calibrate as _calibrate
    from fastmodel.cli.plot import plot
    from fastmodel.cli.serve import serve as _serve
    from fastmodel.cli.validate import validate as _validate
    from fastmodel.cli.warmup import warmup as _warmup
except KeyboardInterrupt:
    exit_interrupted()

for _command in (plot, _validate, _calibrate, _serve, _warmup):
    main.add_command(_command)

__all__ = ["main", "entry"]
