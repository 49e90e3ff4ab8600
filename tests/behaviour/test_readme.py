"""README cannot drift (issue 25 item 8).

* every option a README (or docs/usage.md) command shows exists in that command's ``--help``;
* README's shell examples run in order on a fresh clone: no two write the same file, and each exits 0 in a
  fresh folder holding only what a clone has (``tests/``, ``specs/``) and stand-ins for the user's own files
  the examples name (``my_run.json``, ``runs.jsonl``, ...);
* every number README quotes as a result is produced here by running its command (the Quickstart report, the
  validation table, sweep sizes, ZeRO-3 errors), or is a benchmark measurement in a paragraph that names its
  ``bench/`` script, or says "about", or is an input of the example (a window, a device's capacity).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
USAGE = (ROOT / "docs" / "usage.md").read_text()
DATA = ROOT / "tests" / "data"

# ---------------------------------------------------------------------------------------------------------------
# shell examples


def shell_examples(text: str) -> list[tuple[int, list[str]]]:
    """(line, argv) of every ``fastmodel`` command in the indented code blocks of ``text``, in order; a
    backslash continues a line, ``&&`` separates commands, ``#`` starts a comment."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        line, start = lines[i], i + 1
        if line.startswith("    ") and line.strip() and not lines[i - 1].strip().startswith("```"):
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in [*words, "&&"]:
                if word == "&&":
                    if command and command[0] == "fastmodel":
                        found.append((start, command[1:]))
                    command = []
                else:
                    command.append(word)
        i += 1
    return found


def _in_fence(text: str) -> str:
    """``text`` without its fenced (```) blocks: Python examples, not shell."""
    return re.sub(r"```.*?```", lambda fence: "\n" * fence.group(0).count("\n"), text, flags=re.S)


def resolve(argv: list[str]) -> tuple[click.Command, list[str]]:
    """The click command ``argv`` names and the rest of ``argv``."""
    command, rest = main, list(argv)
    while isinstance(command, click.Group) and rest and rest[0] in command.commands:
        command, rest = command.commands[rest.pop(0)], rest
    return command, rest


def options(command: click.Command) -> set[str]:
    names = {"-h", "--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names |= set(param.opts) | set(param.secondary_opts)
    return names


def all_options() -> set[str]:
    names: set[str] = set()
    stack = [main]
    while stack:
        command = stack.pop()
        names |= options(command)
        if isinstance(command, click.Group):
            stack += list(command.commands.values())
    return names


def test_quickstart_is_exactly_two_indented_commands():
    """CI reads the Quickstart's two indented commands; the first is the one whose numbers README quotes."""
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for line in section.splitlines() if line.startswith("    ") and line.strip()]
    assert len(commands) == 2, commands
    assert commands[0].startswith("pip install . && fastmodel run ")
    assert commands[1].startswith('pip install -e ".[test]" && python -m pytest')


@pytest.mark.parametrize("doc", ["README.md", "docs/usage.md"])
def test_every_option_an_example_shows_exists_in_its_command_help(doc):
    text = README if doc == "README.md" else USAGE
    examples = shell_examples(_in_fence(text))
    assert len(examples) >= (25 if doc == "README.md" else 20)
    for line, argv in examples:
        command, rest = resolve(argv)
        assert not isinstance(command, click.Group), f"{doc}:{line}: {argv[:2]} names no command"
        help_text = CliRunner().invoke(main, [*argv[: len(argv) - len(rest)], "--help"]).output
        for word in rest:
            if re.match(r"^--?[A-Za-z]", word):
                name = word.split("=", 1)[0]
                assert name in options(command) and name in help_text, \
                    f"{doc}:{line}: fastmodel {command.name} has no option {name} (--help: {sorted(options(command))})"


def test_every_option_readme_names_inline_exists():
    """Inline `fastmodel CMD ... --opt` and the output table's `CMD -o ...` name options of CMD; every other
    inline `--opt` is an option of some command."""
    everything = all_options()
    for snippet in re.findall(r"`([^`\n]+)`", _in_fence(README)):
        words = snippet.replace("\\|", "|").split()
        if words and words[0] == "fastmodel":
            words = words[1:]
        if words and words[0] in main.commands:
            group = main.commands[words[0]]
            commands = [group]
            if isinstance(group, click.Group):     # `plot heatmap|timeline`, or `plot … -o`: every subcommand
                named = [name for name in (words[1].split("|") if len(words) > 1 else ()) if name in group.commands]
                commands = [group.commands[name] for name in named or group.commands]
            for command in commands:
                for word in words:
                    if re.match(r"^--?[A-Za-z]", word):
                        assert word in options(command), f"README: `{snippet}`: {command.name} has no {word}"
        for word in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", snippet):
            assert word in everything, f"README: `{snippet}`: no command has {word}"


OUTPUT_FLAGS = ("-o", "--output", "--plot", "--csv")


def outputs(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word in OUTPUT_FLAGS and argv[i + 1] != "-"]


def test_readme_examples_never_write_the_same_file_twice():
    """Run in order, a second example writing an earlier one's output would be refused (no --force)."""
    seen: dict[str, int] = {}
    for line, argv in shell_examples(_in_fence(README)):
        for out in outputs(argv):
            assert out not in seen, f"README:{line} writes {out}, which README:{seen[out]} wrote already"
            seen[out] = line


def _stand_ins(folder: Path) -> None:
    """A clone's tests/ and specs/, and the user's own files README's examples name."""
    (folder / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    (folder / "specs").symlink_to(ROOT / "specs", target_is_directory=True)
    runs = (DATA / "runs_dev.jsonl").read_text()
    (folder / "runs.jsonl").write_text(runs)
    (folder / "my_run.json").write_text(next(line for line in runs.splitlines() if "tp8pp12" in line))
    (folder / "SERVE_RUNS.jsonl").write_text("".join((DATA / "serve_dev_load.jsonl").read_text()
                                                     .splitlines(keepends=True)[:12]))
    shutil.copy(ROOT / "specs" / "sweeps" / "llama3_70b_h100_plans.toml", folder / "my_lm_sweep.toml")


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """Every README example run in order in a fresh folder: {line: output}."""
    folder = tmp_path_factory.mktemp("clone")
    _stand_ins(folder)
    results = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        for line, argv in shell_examples(_in_fence(README)):
            result = CliRunner().invoke(main, argv, catch_exceptions=False)
            results[line] = (argv, result.exit_code, result.output)
    return folder, results


def test_readme_examples_run_in_order_on_a_fresh_clone(readme_run):
    folder, results = readme_run
    for line, (argv, code, output) in results.items():
        assert code == 0, f"README:{line}: fastmodel {' '.join(argv)} exited {code}:\n{output[-2000:]}"
        for out in outputs(argv):
            assert (folder / out).exists(), f"README:{line} did not write {out}"


# ---------------------------------------------------------------------------------------------------------------
# numbers: each claim a pattern README must match once; the tests below compute what it says


CLAIMS = {
    "quickstart": r"a step of\s+([\d,]+) × ([\d,]+) tokens in ([\d.]+) s at ([\d.]+)% MFU.*?and\s+([\d.]+) GiB per GPU",
    "intro": r"On (\d+) published\s+training runs it predicts step time with ([\d.]+)% MAPE \(([\d.]+)% median, "
             r"in-sample\), against\s+([\d.]+)% and ([\d.]+)% for a constant 40% / 50% MFU formula",
    "table": r"\| runs \| n \| model MAPE[^\n]*\n(?:\|[^\n]*\|\n)+",
    "zero3": r"DeepSpeed ZeRO-3 at 1,000\+ GPUs is now within (\d+)–(\d+)%",
    "plans_points": r"llama3_70b_h100_plans\.toml, ([\d,]+) points",
    "serving_points": r"llama3\.1_70b_serving\.toml, ([\d,]+) points",
    "moe_excerpt": r"```\nMoE step time by dispatcher\n.*?```",
}
#: numbers that are inputs of an example, not results: the constant-MFU baselines, the timeline's window, MAD-Max's
#: 3 x weights rule, device names (A100 80 GB, GH200 144 GB)
INPUTS = {"40%", "50%", "3 s", "3 ×", "80 GB", "144 GB", "25%"}


def test_the_hit_tolerance_readme_names_is_validates():
    from fastmodel.analysis.splits import HIT_TOLERANCE

    assert f"{HIT_TOLERANCE:.0%}" == "25%" and "within 25%" in README


def claim(name: str) -> re.Match:
    found = list(re.finditer(CLAIMS[name], README, flags=re.S))
    assert len(found) == 1, f"README should state the {name} claim once ({CLAIMS[name]}); found {len(found)}"
    return found[0]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _printed(value: float, quoted: str) -> str:
    """``value`` printed with as many decimals as README's ``quoted``."""
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return f"{value:,.{decimals}f}" if "," in quoted else f"{value:.{decimals}f}"


def _output(results, prefix: list[str]) -> str:
    matches = [out for argv, code, out in results.values() if argv[: len(prefix)] == prefix]
    assert len(matches) == 1, prefix
    return matches[0]


def test_quickstart_numbers_are_what_its_command_prints(readme_run):
    _, results = readme_run
    report = _output(results, ["run", "--model", "llama3.1-70b"])
    batch, seq, step, mfu, memory = claim("quickstart").groups()
    printed_step = float(re.search(r"step time\s+([\d.]+) s", report).group(1))
    tokens = float(re.search(r"tokens/s\s+([\d,]+)", report).group(1).replace(",", ""))
    assert _printed(printed_step, step) == step, f"README says {step} s, the command prints {printed_step} s"
    assert re.search(rf"MFU / HFU\s+{re.escape(mfu)}% /", report), f"README says {mfu}% MFU:\n{report}"
    assert re.search(rf"memory per device\s+{re.escape(memory)} GiB", report), f"README: {memory} GiB:\n{report}"
    assert tokens * printed_step == pytest.approx(_number(batch) * _number(seq), rel=2e-3)


def _validate_groups(output: str) -> dict[str, list[str]]:
    """{group: [n, MAPE, median, MFU.40 MAPE, MFU.50 MAPE]} of validate's printed tables."""
    groups, first = {}, 2
    for line in output.splitlines():
        cells = line.split()
        if cells[:2] == ["group", "n"]:
            first = 3 if cells[2] == "miss" else 2          # the count of runs taken as misses, when shown
        elif len(cells) >= 7 and cells[1].isdigit():
            groups[cells[0]] = [cells[1], cells[first], cells[first + 1], cells[-2], cells[-1]]
    return groups


#: README's table rows -> the dev runs' sources (tests/data/runs_dev.jsonl), or ``FILE:GROUP``, a group of what
#: README's ``validate tests/data/FILE`` prints (the unseen public files)
TABLE_SOURCES = {
    "all": ["all"],
    "Korthikanti 2022 (Megatron, A100)": ["korthikanti2022_t5"],
    "Narayanan 2021 Table 1 (Megatron, A100)": ["narayanan2021_t1"],
    "Narayanan 2021 Table 2 (incl. ZeRO-3)": ["narayanan2021_t2"],
    "TorchTitan (FSDP2, A100)": ["torchtitan_perf"],
    "PyTorch FSDP blogs (A100/H100)": ["fsdp_pytorch_blogs"],
    "MLPerf GPT-3 v3.1 / v4.0 (FP8, H100)": ["mlperf_training_v3.1_logs", "mlperf_training_v4.0"],
    "Llama 3 405B (Table 4)": ["llama3_2024_table4"],
    "MT-NLG, BLOOM (Megatron-DeepSpeed)": ["other_large_runs"],
    "Unseen: MegaScale, Nemotron-4 (`runs_megatron_public`, A100/H100)": ["runs_megatron_public.jsonl:all"],
}


def test_validation_table_and_intro_are_what_validate_prints(readme_run):
    _, results = readme_run
    groups = _validate_groups(_output(results, ["validate", "tests/data/runs_dev.jsonl"]))

    def cells_of(source: str) -> list[str]:
        if ":" not in source:
            return groups[source]
        file, group = source.split(":")
        return _validate_groups(_output(results, ["validate", f"tests/data/{file}"]))[group]

    rows = [line.strip("|").split("|") for line in claim("table").group(0).strip().splitlines()[2:]]
    assert sorted(row[0].strip() for row in rows) == sorted(TABLE_SOURCES)
    for label, *cells in rows:
        expected = [" / ".join(cells_of(source)[k].rstrip("%") + ("%" if k else "") for source in
                               TABLE_SOURCES[label.strip()]) for k in range(5)]
        got = [cell.strip().replace("%", "") for cell in cells]
        assert got == [e.replace("%", "") for e in expected], f"README row {label.strip()!r}: {cells} vs {expected}"
    n, mape, median, mfu40, mfu50 = claim("intro").groups()
    assert [n, mape, median, mfu40, mfu50] == [groups["all"][0], *(v.rstrip("%") for v in groups["all"][1:])]


def test_zero3_error_range_is_what_validate_writes(readme_run):
    folder, _ = readme_run
    import csv
    rows = [r for r in csv.DictReader((folder / "rows.csv").open()) if r["id"].endswith("-zero3")
            and int(re.search(r"-n(\d+)-", r["id"]).group(1)) >= 1000]
    errors = sorted(abs(float(r["error"])) * 100 for r in rows)
    assert len(errors) >= 2
    low, high = claim("zero3").groups()
    assert (f"{errors[0]:.0f}", f"{errors[-1]:.0f}") == (low, high), errors


def test_moe_excerpt_is_what_validate_prints(readme_run):
    """README's excerpt of the MoE section: every line of it is a line ``validate`` prints on runs_moe_public.jsonl."""
    _, results = readme_run
    printed = _output(results, ["validate", "tests/data/runs_moe_public.jsonl"]).splitlines()
    excerpt = [line for line in claim("moe_excerpt").group(0).splitlines() if line and not line.startswith("```")]
    assert len(excerpt) >= 4
    missing = [line for line in excerpt if line not in printed]
    assert not missing, "README's MoE excerpt differs from what validate prints:\n" + "\n".join(missing)


@pytest.mark.parametrize("name, store", [("plans_points", "plans.nc"), ("serving_points", "serving.nc")])
def test_sweep_sizes_are_what_the_sweeps_write(readme_run, name, store):
    folder, _ = readme_run
    with xr.open_dataset(folder / store) as ds:
        assert f"{ds.status.size:,}" == claim(name).group(1)


NUMBER = re.compile(r"(?<![\w.§-])\d[\d,]*(?:\.\d+)?(?:\s?(?:%|s\b|ms\b|GiB|MiB|GB\b|configs/s|lines/s|points|"
                    r"-point|×))")


def test_every_result_number_in_readme_is_checked_measured_or_about():
    """A number with a unit of a result (%, s, GiB, configs/s, points, ...) is checked by a test above, or sits
    in a paragraph (table row) naming the ``bench/`` script that measured it, or follows "about"."""
    checked = [m.span() for name in CLAIMS for m in [claim(name)]]
    unchecked = []
    offset = 0
    for paragraph in re.split(r"(\n\s*\n|\n(?=\|))", README):
        for match in NUMBER.finditer(paragraph):
            start = offset + match.start()
            if any(lo <= start < hi for lo, hi in checked) or match.group(0) in INPUTS:
                continue
            if "bench/" in paragraph or re.search(r"about\s+(\S+\s+){0,2}$", paragraph[: match.start()]):
                continue
            unchecked.append(f"{match.group(0)!r} in: {paragraph[max(0, match.start() - 60): match.end() + 20]!r}")
        offset += len(paragraph)
    assert not unchecked, "README numbers no test produces (check them here, or say 'about'):\n" + "\n".join(unchecked)


def test_the_python_api_section_runs(capsys):
    """README's "Python API" example runs as written on a fresh interpreter's view of the package, and prints
    what it says: a step time in seconds, a throughput, a ranked table, a serving TPOT, the held-out validation
    scores and a calibrated step time."""
    section = README.split("## Python API\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    exec(compile(code, "README.md (Python API)", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split()[1:] == ["s", "True"] and float(printed[0].split()[0]) > 0
    assert float(printed[1]) > 0 and printed[2].split()[:2] == ["num_nodes", "plan"] and float(printed[-3]) > 0
    assert printed[-2].startswith("{'metric': 'step_time', 'key': None, 'group': 'all', 'split': 'held-out'")
    assert float(printed[-1]) > 0
