"""The console's `fastmodel batch` interprets the kernels when its input file holds few distinct lines
(fastmodel/io/batch_jit.py), with the compiled kernels' results to the last bit; otherwise it compiles."""

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.io.batch_jit import MAX_DISTINCT, few_distinct_lines, interpret_if_few
from fastmodel.testing import dev_cases


def _lines(distinct: int, repeats: int) -> list[str]:
    """``distinct`` different lines (inline MAD-Max cases, names at varied cluster sizes, a bad line), cycled."""
    dev = dev_cases()
    pool = [json.dumps({"case": c["case"], "model": c["model"], "system": c["system"], "task": c["task"]})
            for c in dev[:20]]
    pool += ["not json", json.dumps({"model": "nope", "system": "dc-a", "task": "llm-pretrain"})]
    nodes = 1
    while len(pool) < distinct:
        pool.append(json.dumps({"model": "llama-7b", "system": "dc-a", "task": "llm-pretrain-fsdp",
                                "num_nodes": nodes}))
        nodes += 1
    pool = pool[:distinct]
    return [pool[i % len(pool)] for i in range(distinct * repeats)]


def _console_batch(src, out, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FASTMODEL_JIT"}
    code = ("import sys; from fastmodel.cli import entry; sys.argv = ['fastmodel', *sys.argv[1:]]; code = 0\n"
            "try:\n    entry()\nexcept SystemExit as stop:\n    code = stop.code\n"
            "sys.stderr.write(f'numba imported: {\"numba\" in sys.modules}')\nsys.exit(code)")
    return subprocess.run([sys.executable, "-c", code, "batch", str(src), "-o", str(out)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=600)


def test_few_distinct_lines_counts_raw_lines_and_stops_at_the_limits(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"a\nb\na\nb\nc")          # a, b, and c without its newline
    assert few_distinct_lines(str(path), max_distinct=3)
    assert not few_distinct_lines(str(path), max_distinct=2)
    path.write_bytes(b"a\nb\na\nb\nb")          # the last b lacks its newline: another line for the batch
    assert not few_distinct_lines(str(path), max_distinct=2)
    assert not few_distinct_lines(str(path), max_distinct=3, max_bytes=5)
    assert not few_distinct_lines(str(tmp_path / "missing.jsonl"))
    assert interpret_if_few("-") is False      # stdin: never read ahead


def test_console_batch_interprets_few_distinct_lines_with_the_compiled_results(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(_lines(40, 5)) + "\n")
    result = _console_batch(src, tmp_path / "fast.jsonl", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.endswith("numba imported: False")
    compiled = CliRunner().invoke(main, ["batch", str(src), "-o", str(tmp_path / "compiled.jsonl")])  # numba here
    assert compiled.exit_code == 0, compiled.output
    fast = (tmp_path / "fast.jsonl").read_bytes()
    assert fast == (tmp_path / "compiled.jsonl").read_bytes()
    records = [json.loads(line) for line in fast.splitlines()]
    assert len(records) == 200 and {r["status"] == "ok" for r in records} == {True, False}


def test_console_batch_compiles_many_distinct_lines(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(_lines(MAX_DISTINCT + 1, 1)) + "\n")
    result = _console_batch(src, tmp_path / "out.jsonl", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.endswith("numba imported: True")
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == MAX_DISTINCT + 1
