"""What every command of the ``fastmodel`` command line shares: one-line errors, choices, options.

User errors print one line (``error: ...``) and exit 2; Ctrl-C exits 130 (SIGTERM: 143, after the same clean-up);
anything else is an internal bug and shows a traceback (exit 1).
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys

import click

from fastmodel.cli.interrupted import exit_interrupted
from fastmodel.errors import FastmodelError


class Choice(click.Choice):
    """click.Choice that suggests the nearest valid value."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            from fastmodel.errors import nearest

            self.fail(f"{value!r} is not one of {', '.join(map(str, self.choices))}{nearest(str(value), self.choices)}",
                      param, ctx)


class FloatRange(click.FloatRange):
    """click.FloatRange that refuses NaN: it compares false with both bounds, so click's own range lets it in. Text
    that is no number is refused as such (click said "'90%' is not a valid float range"), a percentage with the
    fraction it stands for (``--kv-cache-mem-fraction 90%``: 0.9)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            percent = re.fullmatch(r"\s*([+-]?\d+(?:\.\d*)?|\.\d+)\s*%\s*", value)
            if percent:
                self.fail(f"{value!r}: give a fraction, not a percentage ({float(percent[1]) / 100:g})", param, ctx)
            try:
                float(value)
            except ValueError:
                self.fail(f"{value!r} is not a number", param, ctx)
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number in the range {self._describe_range()}.", param, ctx)
        return number


class Whole(click.IntRange):
    """click.IntRange that refuses text other than a whole number as such: ``--nodes 8.5`` and ``--tp 4k`` said "is
    not a valid integer range"."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not re.fullmatch(r"\s*[+-]?\d+\s*", value):
            self.fail(f"{value!r} is not a whole number", param, ctx)
        return super().convert(value, param, ctx)


class Count(Whole):
    """:class:`Whole` for a count of tokens or requests, naming a unit suffix: ``--input-len 8k`` said "'8k' is not
    a valid integer range"; a count takes none (8k is 8000 or 8192 tokens: the user says which)."""

    def convert(self, value, param, ctx):
        from fastmodel.spec.quantity import COUNT_HINT, count_suffix_hint

        if count_suffix_hint(value):
            self.fail(f"{value!r}: {COUNT_HINT}", param, ctx)
        return super().convert(value, param, ctx)


class OneLineGroup(click.Group):
    """A group whose usage errors are one line (``error: ...``, exit 2) like every other error."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as error:
            click.echo(error.ctx.get_help())
            sys.exit(0)
        except click.UsageError as error:
            hint = f" (see '{error.ctx.command_path} --help')" if error.ctx is not None else ""
            click.echo(f"error: {' '.join(_same_job(error).split())}{hint}", err=True)
            sys.exit(2)
        except click.ClickException as error:
            click.echo(f"error: {' '.join(error.format_message().split())}", err=True)
            sys.exit(error.exit_code)
        except click.exceptions.Abort:
            exit_interrupted()
        except click.exceptions.Exit as error:
            sys.exit(error.exit_code)

    def resolve_command(self, ctx, args):
        """A command that is one of a group's (``fastmodel memory``: ``plot memory``; ``fastmodel list``: ``specs
        list``), the parent group's (``fastmodel plot sweep``: ``fastmodel sweep``) or an option of another
        (:data:`COMMAND_ELSEWHERE`) names where it is; click said only "No such command 'memory'."."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            name, where = (args[0] if args else ""), []
            groups = [(ctx.command_path, self)]
            if ctx.parent is not None and isinstance(ctx.parent.command, click.Group):
                groups.append((ctx.parent.command_path, ctx.parent.command))
            for path, group in groups:    # the parent's own commands, and every other group's below it or here
                if group is not self and name in group.commands:
                    where.append(f"'{path} {name}'")
                where += [f"'{path} {sub} {name}'" for sub, command in sorted(group.commands.items())
                          if isinstance(command, click.Group) and command is not self and name in command.commands]
            if not where and name not in COMMAND_ELSEWHERE:
                raise
            raise click.UsageError(f"No such command '{name}': it is {' or '.join(where) or COMMAND_ELSEWHERE[name]}",
                                   ctx) from None

    def invoke(self, ctx):
        """Ctrl-C outside a command's own handler (``friendly``: while a command module loads): "interrupted" and
        130, without the empty line click writes before its Abort."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            exit_interrupted()


#: commands a hurried user types that are an option of another command
COMMAND_ELSEWHERE = {"search": "'fastmodel serve --search' (an SLO search of serving configurations)",
                     "evaluate": "'fastmodel run' (one configuration) or 'fastmodel batch' (a file of them)"}

#: options one command has for a job another does under its own name: ``best --sel`` is ``best --where``, ``plot heatmap
#: --where`` is ``--sel`` (click's nearest name was '--csv' or '--help')
SAME_JOB = {"--sel": ("--where",), "--select": ("--sel", "--where"), "--where": ("--sel",),
            "--filter": ("--where", "--sel")}


def _same_job(error: click.UsageError) -> str:
    """click's message, or for an option another command has (:data:`SAME_JOB`) the one this command has instead,
    or for a ``fastmodel serve`` option naming a column serving refuses (``serve.spec.TRAINING_COLUMNS``) why."""
    name = getattr(error, "option_name", None)
    if isinstance(error, click.NoSuchOption) and error.ctx is not None and error.ctx.command.name == "serve":
        from fastmodel.serve.spec import TRAINING_COLUMNS

        column = str(name).lstrip("-").replace("-", "_")
        if column in TRAINING_COLUMNS:      # serve --recompute full: a training option, not a misspelt one
            return f"No such option '{name}': {TRAINING_COLUMNS[column]}"
    if not isinstance(error, click.NoSuchOption) or error.ctx is None or name not in SAME_JOB:
        return error.format_message()
    have = {opt for param in error.ctx.command.params for opt in getattr(param, "opts", ())}
    other = next((o for o in SAME_JOB[name] if o in have), None)
    if other is None:
        return error.format_message()
    return (f"No such option '{name}': '{error.ctx.command_path}' picks points with {other} DIM=VALUE (e.g. {other} "
            "num_nodes=8)")


class PresetChoice(Choice):
    """The semantics presets, read from ``fastmodel.semantics`` (pydantic) only when parsed or shown."""

    def __init__(self):
        super().__init__([])

    @property
    def choices(self):
        from fastmodel.semantics import PRESETS

        return sorted(PRESETS)

    @choices.setter
    def choices(self, value):  # click.Choice.__init__ assigns it
        pass


KIND_CHOICE = Choice(["model", "system", "task", "serve-task"])
#: the kinds of built-in spec files ``specs list`` and ``specs show`` read (``device``: specs/devices, the datasheet
#: values a system's or serving record's GPU and ``serve --device`` pick)
SPEC_KINDS = ("model", "system", "task", "sweep", "device")
SHOW_CHOICE = Choice(list(SPEC_KINDS))
LIST_CHOICE = Choice(list(SPEC_KINDS))


def friendly(func):
    """Turn user errors (and running out of memory) into one line + exit 2, and Ctrl-C into exit 130."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        from fastmodel.io.outputs import output_log

        previous = _catch_interrupts()
        with output_log() as outputs:         # this command's outputs, for what a Ctrl-C reports
            try:
                with flag_names(SHARED_FLAGS):   # the API's force=True, calibration: ...; here --force, --calibration
                    result = func(*args, **kwargs)
                if previous is not None and Interrupt.seen:
                    raise KeyboardInterrupt     # a Ctrl-C the unraisable hook swallowed: the command ran on, not whole
                return result
            except FastmodelError as error:
                click.echo(f"error: {' '.join(str(error).split())}", err=True)
                sys.exit(2)
            except KeyboardInterrupt:
                exit_interrupted(outputs.interrupted())   # outputs are whole or absent
            except MemoryError:   # numpy's _ArrayMemoryError too: a limit the size check could not see
                click.echo("error: out of memory (a container or `ulimit -v` limit?); a sweep needs less with -o "
                           "out.zarr and fewer --unit-configs, and a .zarr store it began completes with --resume"
                           f"{outputs.interrupted()}", err=True)
                sys.exit(2)
            except BrokenPipeError:  # e.g. piped into `head`
                sys.stderr.close()
                sys.exit(0)
            except OSError as error:
                where = f"{error.filename}: " if error.filename else ""
                click.echo(f"error: {where}{error.strerror or error}", err=True)
                sys.exit(2)
            except Exception:
                if previous is None or not Interrupt.seen:    # no handler of ours: a stale ``seen`` proves nothing
                    raise
                exit_interrupted(outputs.interrupted())   # an error Ctrl-C caused (see Interrupt)
            finally:
                _restore_interrupts(previous)

    return wrapper


#: the Python API's arguments that every command taking them spells alike, as its errors name them: the output
#: rule's (fastmodel/io/outputs.py: ``force=True``; fastmodel/io/store.py and the Python API's sweep:
#: ``overwrite=True``, ``resume=True``), ``calibration`` (``calibration: applies to the real-world model``) and
#: ``semantics`` (``semantics: model ... is a real-world spec``); :func:`friendly` applies them with :func:`flag_names`
SHARED_FLAGS = {"force": "--force", "overwrite": "--force", "resume": "--resume", "calibration": "--calibration",
                "semantics": "--semantics"}


@contextlib.contextmanager
def flag_names(flags: dict[str, str]):
    """Errors of a Python API call a command makes, with the API's argument names as the command's flags: the API
    names its own arguments (``modes: disagg needs gpus=2 or more``, as a call from Python reads them), and here a
    SpecError of no source whose field is a key of ``flags`` (argument -> flag) is raised again naming the flag,
    with each other argument its reason writes ``name=value`` as ``--flag value`` (``--mode: disagg needs --gpus 2
    or more``; a quoted value bare, ``by='plan'`` as ``--by plan``, and a switch's ``name=True`` as the switch
    alone, ``include_oom=True`` as ``--include-oom``); a SweepError's or an OutputError's text likewise (the output
    rule's ``force=True``, :data:`SHARED_FLAGS`), and a SweepError's text that opens with an argument's name
    (``where: num_nodes=3 is not in the data``) opens with its flag (``--where: ...``). As a command re-raises an API's error with its own names elsewhere
    (cli/execution.py: ``--set``, cli/plot.py: the result file)."""
    import re

    from fastmodel.errors import SpecError, SweepError
    from fastmodel.io.outputs import OutputError

    def flag(match) -> str:
        name = match.group(1)
        if name not in flags:
            return match.group(0)
        if match.group(3):              # a switch: include_oom=True -> --include-oom
            return flags[name]
        return f"{flags[name]} {match.group(2) or ''}"      # gpus=2 -> --gpus 2; by='plan' -> --by plan

    def said(text: str) -> str:
        return re.sub(r"\b([a-z_]+)=(?:'([^']*)'|(True\b))?", flag, text)

    def opened(text: str) -> str:       # "where: ..." -> "--where: ..."
        head, sep, rest = text.partition(": ")
        return f"{flags[head]}: {said(rest)}" if sep and head in flags else said(text)

    try:
        yield
    except SpecError as error:
        if error.source is not None or error.field not in flags:
            raise
        raise type(error)(None, flags[error.field], said(error.reason)) from None
    except SweepError as error:
        raise SweepError(opened(str(error))) from None
    except OutputError as error:
        raise OutputError(said(str(error))) from None


class Interrupt:
    """Whether Ctrl-C arrived during the command. A KeyboardInterrupt raised inside a C callback (numba saving a
    kernel it compiles to its cache: llvmlite's object-cache notify) is printed by Python as "Exception ignored"
    and swallowed, and numba then fails with a RuntimeError ("no compiled object yet"): with ``seen`` set, that
    error is the interrupt's and the command reports ``interrupted`` (exit 130) without a traceback."""
    seen = False


def _on_signal(signum, frame):
    """SIGINT or SIGTERM: a KeyboardInterrupt, so the command unwinds (outputs whole or absent, locks released)
    and ``exit_interrupted`` names the signal."""
    from fastmodel.cli.interrupted import RECEIVED

    Interrupt.seen = True
    RECEIVED["signum"] = signum
    raise KeyboardInterrupt


def _unraisable(previous):
    def hook(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            Interrupt.seen = True       # no "Exception ignored ... KeyboardInterrupt" traceback on stderr
            return
        previous(unraisable)
    return hook


def _catch_interrupts():
    """Install the SIGINT and SIGTERM handlers (each where its signal is at the default) and the unraisable hook of :class:`Interrupt`
    (main thread only); the previous ones, for :func:`_restore_interrupts`."""
    import signal
    import threading

    from fastmodel.cli.interrupted import RECEIVED

    if threading.current_thread() is not threading.main_thread():
        return None        # a command inside a thread: left as it is
    # each signal is taken only at its default: a caller's own handler, or the SIGINT a shell ignores for a
    # background job (`cmd &`), is left as it is; SIGTERM is still taken then
    sigint = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    sigterm = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if not (sigint or sigterm):
        return None        # a command inside a command: the outer one's handlers stay
    Interrupt.seen = False
    RECEIVED["signum"] = signal.SIGINT
    previous = (signal.signal(signal.SIGINT, _on_signal) if sigint else None, sys.unraisablehook,
                signal.signal(signal.SIGTERM, _on_signal) if sigterm else None)
    sys.unraisablehook = _unraisable(sys.unraisablehook)
    return previous


def _restore_interrupts(previous) -> None:
    if previous is not None:
        import signal

        from fastmodel.cli.interrupted import RECEIVED

        if previous[0] is not None:
            signal.signal(signal.SIGINT, previous[0])
        if previous[2] is not None:
            signal.signal(signal.SIGTERM, previous[2])
        sys.unraisablehook = previous[1]
        RECEIVED["signum"] = signal.SIGINT     # a later interrupt under a caller's handler is not a stale SIGTERM


semantics_option = click.option(
    "--semantics", default="default", show_default=True, type=PresetChoice(),
    help="Modelling preset: 'default' (real-world model for real-world specs, the bug-fixed MAD-Max model "
    "otherwise), 'madmax-fixed', or 'madmax' (the reference, bugs included).",
)


def memory_margin_option(applies: str = ""):
    """``--memory-margin GIB`` (parameter ``memory_margin``, the text as typed; fastmodel.analysis.margin.gib_margin
    reads it), one definition for every command that takes it: ``best``, ``run``, and the ``plot`` commands;
    ``applies`` ends the help (to what it applies)."""
    return click.option("--memory-margin", "memory_margin", metavar="GIB",
                        help="HBM to keep free, GiB: a plan fits when memory_per_device <= HBM - margin (default: "
                        "the plan's own allocator cache, allocator_cache_fraction x memory_allocated)" + applies + ".")


def include_oom_option(verb: str = "rank"):
    """``--include-oom`` (parameter ``include_oom``), one definition for ``best`` (``verb`` "rank") and the plot
    commands that draw training sweeps ("draw")."""
    return click.option("--include-oom", "include_oom", is_flag=True,
                        help=f"Also {verb} plans that do not fit in usable HBM (real-world training and serving "
                        f"results {verb} only the points that fit).")


#: ``--progress/--no-progress`` (parameter ``progress``; None: fastmodel/progress_bar.py draws the bar on a terminal
#: only), one definition for ``batch`` and ``sweep``
progress_option = click.option("--progress/--no-progress", default=None,
                               help="Progress bar (default: on a terminal only).")


calibration_option = click.option(
    "--calibration", type=click.Path(dir_okay=False),
    help="Apply a calibration overlay (.toml from 'fastmodel calibrate') to the real-world model "
    "(run records, family = \"lm\" specs); default: physical (datasheet) values.",
)


def read_calibration(path):
    """The calibration file of ``--calibration`` (None without one); a bad file is a one-line error."""
    if path is None:
        return None
    from fastmodel.lm.calibrate import read_calibration

    return read_calibration(path)


class ConsoleState:
    """``console``: set by :func:`fastmodel.cli.entry` -- this process is the console command (``batch`` may
    then choose interpreted kernels, fastmodel/io/batch_jit.py)."""
    console = False


#: the --width range in inches (fastmodel.plot.style.WIDTH_RANGE, restated so the command line loads without matplotlib)
WIDTH_RANGE = (1.5, 20.0)


def _remember_width(ctx, param, value):
    ctx.meta["fastmodel.plot.width"] = value


def figure_size_options(size_default: str) -> list:
    """--dpi, --size and --width: one definition for every command that draws a figure (``plot ...``,
    ``validate --plot``); the command reads the size with :func:`figure_size`."""
    return [
        click.option("--dpi", default=300, show_default=True, type=click.IntRange(10, 2400),
                     help="Resolution of PNG output (and of images inside PDF/SVG)."),
        click.option("--size", default=size_default, show_default=True, type=Choice(["single", "double"]),
                     help="Width preset: one column (3.5 in) or the full page width (7.16 in)."),
        click.option("--width", type=click.FloatRange(*WIDTH_RANGE), metavar="IN", expose_value=False,
                     callback=_remember_width, help="Figure width in inches, e.g. 3.3 (one column) or 7 (two "
                     "columns); overrides --size. Height: 0.72 x width, at most 2.8 in (or the figure's own)."),
    ]


def figure_size(size: str):
    """The figure size the plot functions take: ``--width`` in inches when given, else the ``--size`` preset."""
    ctx = click.get_current_context(silent=True)
    width = ctx.meta.get("fastmodel.plot.width") if ctx is not None else None
    return size if width is None else float(width)
