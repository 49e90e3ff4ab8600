"""``fastmodel run`` interprets the kernels for its one configuration (cli.entry sets FASTMODEL_JIT=0): the
report must be the one the compiled kernels give, to the last printed digit and in --json to the last bit."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastmodel.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
RECORD = next(line for line in (DATA / "runs_dev.jsonl").read_text().splitlines() if "tp8pp12" in line)

CASES = {
    "madmax-llm": ["-m", "llama2-70b", "-s", "dc-a", "-t", "llm-pretrain-fsdp"],
    "madmax-dlrm": ["-m", "dlrm-a", "-s", "dc-a", "-t", "dlrm-pretrain"],
    "real-world": ["-m", "llama3.1-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "2", "--plan", "tp4.pp2"],
    "run-record": ["-m", "{record}"],
}


def _console(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The console script as installed (``fastmodel.cli:entry``), in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "FASTMODEL_JIT"}
    code = ("import sys; from fastmodel.cli import entry; sys.argv = ['fastmodel', *sys.argv[1:]]; code = 0\n"
            "try:\n    entry()\nexcept SystemExit as stop:\n    code = stop.code\n"
            "sys.stderr.write(f'numba imported: {\"numba\" in sys.modules}')\nsys.exit(code)")
    return subprocess.run([sys.executable, "-c", code, "run", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpreted_run_prints_what_the_compiled_kernels_give(case, tmp_path):
    record = tmp_path / "record.json"
    record.write_text(RECORD)
    args = [a.replace("{record}", str(record)) for a in CASES[case]]
    for extra in ([], ["--json"]):
        fast = _console([*args, *extra], tmp_path)
        assert fast.returncode == 0, fast.stderr
        assert fast.stderr.endswith("numba imported: False")
        compiled = CliRunner().invoke(main, ["run", *args, *extra])       # this process: numba kernels
        assert compiled.exit_code == 0, compiled.output
        if extra:
            assert json.loads(fast.stdout) == json.loads(compiled.stdout)
        else:
            assert fast.stdout == compiled.stdout


def test_the_console_script_interprets_only_run(tmp_path):
    code = ("import os, sys; from fastmodel import cli; sys.argv = ['fastmodel', 'specs', 'list'];\n"
            "try:\n    cli.entry()\nexcept SystemExit:\n    pass\nprint('JIT', os.environ.get('FASTMODEL_JIT'))")
    env = {k: v for k, v in os.environ.items() if k != "FASTMODEL_JIT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=300)
    assert out.stdout.strip().endswith("JIT None")
    from fastmodel.kernels import jit
    assert not jit.INTERPRETED          # this test process compiles its kernels
