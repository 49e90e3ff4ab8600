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


def test_an_interrupt_outside_a_commands_handler_is_one_line_and_130(capsys):
    """Ctrl-C that lands in a command's invocation before ``friendly`` installs its handler (a command module
    loading): "interrupted" alone (click writes an empty line first) and exit 130 (click's Exit would be returned
    by main(standalone_mode=False), and the process would exit 0)."""
    import click

    from fastmodel.cli.common import OneLineGroup

    group = click.group(cls=OneLineGroup)(lambda: None)

    @group.command()
    def boom():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as caught:
        group.main(["boom"], prog_name="fastmodel")
    assert caught.value.code == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_an_interrupt_while_the_command_line_loads_is_one_line_and_130():
    """Ctrl-C during ``from fastmodel.cli import entry`` (the console script's first 0.1-0.5 s): "interrupted" and
    130, not a traceback of the import. The interrupt is made by a finder raising it when fastmodel.cli.plot is
    imported, as SIGINT would there."""
    import subprocess

    code = ("import sys, importlib.abc\n"
            "class Boom(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'fastmodel.cli.plot':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Boom())\n"
            "from fastmodel.cli import entry\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "interrupted\n")


def test_every_interrupt_ends_through_one_helper_with_one_line_and_130(capsys):
    """``exit_interrupted``: "interrupted", what the command left on disk, one line on stderr, SystemExit 130
    (never click's Exit, which ``main(standalone_mode=False)`` would return as exit 0); the places that catch
    Ctrl-C (cli/__init__.py, OneLineGroup, friendly, the sweep command) print nothing of their own."""
    import ast
    from pathlib import Path

    from fastmodel.cli.interrupted import exit_interrupted

    with pytest.raises(SystemExit) as caught:
        exit_interrupted(": out.csv not written")
    assert type(caught.value) is SystemExit and caught.value.code == 130
    assert capsys.readouterr() == ("", "interrupted: out.csv not written\n")
    cli = Path(__file__).resolve().parents[2] / "fastmodel" / "cli"
    for path in sorted(cli.glob("*.py")):
        if path.name == "interrupted.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            assert not (isinstance(node, ast.Constant) and node.value == 130), f"{path.name}:{node.lineno}"
            said = node.args[0] if isinstance(node, ast.Call) and node.args else None
            if isinstance(said, ast.JoinedStr):
                said = said.values[0]
            assert not (isinstance(said, ast.Constant) and str(said.value).startswith("interrupted")), \
                f"{path.name}:{node.lineno}"


def test_the_calibration_argument_is_named_as_the_flag_by_every_command(tmp_path):
    """Hurried walk 9: a calibration given to a MAD-Max run or sweep said 'calibration: applies to the real-world
    model ...', the Python argument's name; the command names its flag (SHARED_FLAGS through flag_names, which
    friendly applies), and Python keeps its argument."""
    from click.testing import CliRunner

    import fastmodel
    from fastmodel.cli import main
    from fastmodel.errors import SpecError
    from tests.lm.test_calibrate import GOOD
    from tests.suite_fixtures import DATA

    calibration = tmp_path / "cal.toml"
    calibration.write_text(GOOD)
    said = 'applies to the real-world model (family = "lm" specs and run records)'
    with pytest.raises(SpecError, match=r"^calibration: applies to the real-world model"):
        fastmodel.evaluate("dlrm-a", "zionex", "dlrm-pretrain", calibration=str(calibration))
    runner = CliRunner()
    for args in (["run", "-m", "dlrm-a", "-s", "zionex", "-t", "dlrm-pretrain"],
                 ["sweep", str(DATA.parent.parent / "specs" / "sweeps" / "cloud_dlrm_a.toml"), "-o",
                  str(tmp_path / "s.nc")]):
        result = runner.invoke(main, [*args, "--calibration", str(calibration)])
        assert result.exit_code == 2 and result.stderr == f"error: --calibration: {said}; the MAD-Max model has no " \
            "fitted efficiencies\n", result.output


@pytest.mark.parametrize("args, said", [
    (["memory"], "No such command 'memory': it is 'fastmodel plot memory' (see 'fastmodel --help')"),
    (["heatmap"], "No such command 'heatmap': it is 'fastmodel plot heatmap'"),
    (["list"], "No such command 'list': it is 'fastmodel specs list'"),
    (["search"], "No such command 'search': it is 'fastmodel serve --search'"),
    (["plot", "sweep"], "No such command 'sweep': it is 'fastmodel sweep' (see 'fastmodel plot --help')"),
    (["specs", "heatmap"], "No such command 'heatmap': it is 'fastmodel plot heatmap'"),
    (["sweeep"], "No such command 'sweeep'. Did you mean 'sweep'?"),        # click's own nearest name stays
])
def test_a_command_of_another_group_names_where_it_is(args, said):
    """Hurried walk 9: 'fastmodel memory' (the figure is 'plot memory') said "No such command 'memory'." and no
    more; a command of another group (or the parent's, or an option of another command) names where it is (one
    line, exit 2: OneLineGroup.resolve_command, which plot and specs use too)."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from tests.suite_fixtures import one_line_error

    one_line_error(CliRunner().invoke(main, args, prog_name="fastmodel"), said)


def _walk(command, path):
    """(the command path, the click command) of ``command`` and every command under it."""
    for name, sub in getattr(command, "commands", {}).items():
        yield from _walk(sub, [*path, name])
    yield path, command


def test_every_flag_a_help_text_names_is_the_command_s_own_or_names_its_command():
    """Hurried walk 9: ``calibrate --help`` said the overlay is applied 'with --calibration', a flag calibrate does
    not have (run, validate, sweep and batch do). A --flag in a command's help (its text or an option's) is the
    command's own, or the name of a command that has it stands just before it ('serve --search -o')."""
    import re

    import click

    from fastmodel.cli import main

    def flags(command):
        return {o for p in command.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}

    commands = list(_walk(main, []))
    stray = []
    for path, command in commands:
        own = flags(command)
        for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
            for match in re.finditer(r"(?<![\w-])--[a-z][a-z0-9-]*", text):
                flag, before = match.group(0), text[max(0, match.start() - 60):match.start()]
                named = [" ".join(p) for p, c in commands if p and flag in flags(c) and
                         not isinstance(c, click.Group) and re.search(rf"\b{re.escape(p[-1])}\b", before)]
                if flag not in own and not named:
                    stray.append(f"fastmodel {' '.join(path)}: {flag}")
    assert not stray, stray


def test_every_choice_option_suggests_the_nearest_value():
    """Walk 9: plot heatmap --best mx, plot pareto --x-dir mn, --size dbl, plot breakdown --quantity mem and
    calibrate --loss took click's own Choice ("'mx' is not one of 'auto', 'max', ..." and no nearest value) where
    every other choice names it (cli/common.Choice); every choice option of every command is one now."""
    import click
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.cli.common import Choice
    from tests.suite_fixtures import one_line_error

    plain = [f"{' '.join(path)} {param.opts[-1]}" for path, command in _walk(main, []) for param in command.params
             if isinstance(param.type, click.Choice) and not isinstance(param.type, Choice)]
    assert not plain, plain
    one_line_error(CliRunner().invoke(main, ["plot", "heatmap", "x.nc", "--x", "plan", "--y", "num_nodes", "--best",
                                             "mx", "-o", "x.png"]), "'mx' is not one of auto, max, min, none (did you "
                   "mean 'max'?)")


def test_the_semantics_argument_is_named_as_the_flag():
    """Walk 9: run of a real-world spec with --semantics madmax said 'semantics: model 'Llama 3 8B' is a real-world
    spec ...', the Python argument; the command names its flag (SHARED_FLAGS), Python keeps its argument."""
    from click.testing import CliRunner

    import fastmodel
    from fastmodel.cli import main
    from fastmodel.errors import SpecError
    from tests.suite_fixtures import one_line_error

    said = "model 'Llama 3 8B' is a real-world spec: evaluate it under semantics 'default'"
    with pytest.raises(SpecError, match=f"^semantics: {said}"):
        fastmodel.evaluate("llama3-8b", "dgx-h100", "llm-pretrain", semantics="madmax", plan="tp8")
    one_line_error(CliRunner().invoke(main, ["run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-p",
                                             "tp8", "--semantics", "madmax"]), f"error: --semantics: {said}")


@pytest.mark.parametrize("args, said", [
    (["run", "-m", "llama3-70b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "8.5"], "'8.5' is not a whole number"),
    (["serve", "-m", "llama3.1-8b", "--batch-size", "8", "--tp", "4k"], "'4k' is not a whole number"),
    (["sweep", "x.toml", "--workers", "two"], "'two' is not a whole number"),
    (["serve", "-m", "llama3.1-8b", "--batch-size", "8", "--kv-cache-mem-fraction", "90%"],
     "'90%': give a fraction, not a percentage (0.9)"),
    (["serve", "-m", "llama3.1-8b", "--batch-size", "8", "--kv-cache-mem-fraction", "most"], "'most' is not a number"),
])
def test_a_number_option_given_text_says_what_it_takes(args, said):
    """Whole numbers and fractions (h-mend15's campaign): click said "'8.5' is not a valid integer range" and "'90%'
    is not a valid float range"."""
    from click.testing import CliRunner

    from fastmodel.cli import main

    run = CliRunner().invoke(main, args)
    assert run.exit_code == 2, run.output
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and said in lines[0] and "range" not in lines[0], run.stderr


def test_whole_and_fraction_options_still_take_their_numbers():
    import click

    from fastmodel.cli.common import Count, FloatRange, Whole

    assert Whole(min=1).convert(" 8 ", None, None) == 8 and Whole(min=1).convert(8, None, None) == 8
    assert Count(min=1).convert("8192", None, None) == 8192
    assert FloatRange(0.01, 1.0).convert("0.9", None, None) == 0.9 and FloatRange(0.0, 1.0).convert(1, None, None) == 1
    with pytest.raises(click.BadParameter, match="range"):
        Whole(min=1).convert("0", None, None)                      # a bound keeps click's message
