"""The ``fastmodel`` command group and console entry point; command modules add their commands to ``main``."""

from __future__ import annotations

import os
import sys

import click

from fastmodel import __version__
from fastmodel.cli.common import ConsoleState, OneLineGroup


def entry() -> None:
    """The ``fastmodel`` console script. ``fastmodel run`` evaluates one configuration with the kernels
    interpreted (``FASTMODEL_JIT=0``, kernels/jit.py): loading numba and the compiled kernels takes about 1.5 s,
    interpreting one row a few milliseconds, and the numbers are the same (tests/test_cli_run_fast.py). So does
    ``batch`` when its input file holds few distinct lines (fastmodel/io/batch_jit.py). Every other command uses
    the compiled kernels."""
    ConsoleState.console = True
    if len(sys.argv) > 1 and sys.argv[1] == "run":
        os.environ.setdefault("FASTMODEL_JIT", "0")
    try:
        main()
    finally:
        _ignore_late_signals()


def _ignore_late_signals() -> None:
    """Once the command has ended (its outputs whole or absent, its last line written), ignore Ctrl-C and SIGTERM
    while Python tears down (0.1-0.3 s freeing numba, xarray, ...): Python restores SIGINT's default handler at
    finalization unless the signal is ignored, so a Ctrl-C just after ``done: ...`` or ``wrote out.csv`` killed the
    process by the signal, without a line (the shell's 130, ``timeout``'s 124), as if the output were unfinished.
    The exit status stays the command's."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fastmodel")
def main():
    """Predict step time and memory of large models on GPU clusters: one plan, or millions in a sweep."""
    _check_environment()


#: the environment variables kernels/jit.py reads and the values it tells apart (anything else read as the default)
ENVIRONMENT = {"FASTMODEL_JIT": "0 (kernels interpreted) or 1 (compiled, the default)",
               "FASTMODEL_COMPILE_NOTE": "0 (no compile note) or 1 (a note even when stderr is no terminal)"}


def _check_environment() -> None:
    """A FASTMODEL_* setting kernels/jit.py would not read as written (FASTMODEL_JIT=false ran the compiled
    kernels, FASTMODEL_COMPILE_NOTE=yes fell back to the terminal test) is one line, exit 2."""
    for name, meaning in ENVIRONMENT.items():
        value = os.environ.get(name, "")
        if value not in ("", "0", "1"):
            raise click.UsageError(f"{name}={value!r}: give {meaning}, or unset it")
