"""What every command shares (fastmodel/cli/common.py): Ctrl-C is one line and exit 130, even when it lands inside
a C callback and the library then fails with an error of its own."""

import signal
import sys
import types

import pytest

from fastmodel.cli.common import Interrupt, friendly


def test_an_error_after_an_interrupt_swallowed_in_a_callback_is_reported_as_the_interrupt(capsys):
    """numba compiling a kernel: llvmlite's object-cache callback swallows the KeyboardInterrupt (Python prints
    "Exception ignored ...") and numba then raises RuntimeError("no compiled object yet")."""
    @friendly
    def command():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler     # friendly's own handler
        sys.unraisablehook(types.SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(),
                                                 exc_traceback=None, err_msg="Exception ignored", object=None))
        raise RuntimeError("no compiled object yet for <Library 'evaluate_serial'>")

    hook = sys.unraisablehook
    with pytest.raises(SystemExit) as caught:
        command()
    assert caught.value.code == 130
    err = capsys.readouterr().err
    assert err == "interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler and sys.unraisablehook is hook  # restored


def test_an_error_without_an_interrupt_is_still_a_bug_with_its_traceback():
    @friendly
    def command():
        raise RuntimeError("a real bug")

    with pytest.raises(RuntimeError, match="a real bug"):
        command()
    assert not Interrupt.seen


def test_an_interrupt_swallowed_in_a_callback_without_a_later_error_is_still_the_interrupt(capsys):
    """The command ran on after the swallowed Ctrl-C: its outputs are not whole, so it ends as interrupted."""
    @friendly
    def command():
        sys.unraisablehook(types.SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(),
                                                 exc_traceback=None, err_msg="Exception ignored", object=None))
        return "done"

    with pytest.raises(SystemExit) as caught:
        command()
    assert caught.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def test_a_stale_interrupt_does_not_hide_a_bug_where_friendly_installs_no_handler(monkeypatch):
    """Under a caller's own SIGINT handler friendly installs none, so a ``seen`` left from an earlier command is
    no evidence: the error keeps its traceback."""
    @friendly
    def command():
        raise RuntimeError("a real bug")

    monkeypatch.setattr(Interrupt, "seen", True)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        with pytest.raises(RuntimeError, match="a real bug"):
            command()
    finally:
        signal.signal(signal.SIGINT, previous)
