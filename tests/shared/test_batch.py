"""Batch: results equal `run` line for line; formats, chunking, interruption, progress, kinds."""

import csv
import io
import json
import math
import random

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel.api import make_config
from fastmodel.cli import main
from fastmodel.errors import FastmodelError
from fastmodel.io import batch as batch_module
from fastmodel.io.batch import run_batch
from fastmodel.io.batch_kinds import KINDS, Prepared, Table
from fastmodel.madmax.engine import evaluate_configs
from fastmodel.madmax.parallel.plans import enumerate_plan_shapes
from fastmodel.registry.madmax import NAMES
from fastmodel.testing import dev_cases

MODELS = [("llama2-70b", "llm-pretrain"), ("llama-7b", "llm-pretrain"), ("dlrm-a", "dlrm-pretrain"),
          ("vit-10b", "vit-pretrain")]


def varied_lines(count: int, seed: int = 1) -> list[dict]:
    """Built-in names with varied plans, cluster sizes and semantics (legal and illegal), and inline MAD-Max cases."""
    rng = random.Random(seed)
    shapes = [p.label for p in enumerate_plan_shapes(2, 8)]
    dev = dev_cases()
    lines = []
    for i in range(count):
        if i % 7 == 6:
            case = dev[rng.randrange(len(dev))]
            lines.append({"case": f"dev-{i}", "model": case["model"], "system": case["system"], "task": case["task"]})
            continue
        model, task = MODELS[rng.randrange(len(MODELS))]
        line = {"model": model, "system": "dc-a", "task": task, "plan": rng.choice(shapes),
                "num_nodes": rng.choice([1, 2, 3, 4, 6, 16, 64, 256, 1024])}
        if rng.random() < 0.3:
            line["semantics"] = rng.choice(["default", "madmax", {"ddp_grad_sharded_layer": False}])
        lines.append(line)
    return lines


def single(line: dict):
    """What `fastmodel run` computes for one line: (plan label, results by name) or the error text."""
    try:
        config = make_config(line["model"], line["system"], line["task"], line.get("semantics", "default"),
                             line.get("plan"), line.get("num_nodes"))
    except FastmodelError as error:
        return " ".join(str(error).split())
    results = evaluate_configs([config])
    return config.plan.label, {name: float(results[name][0]) for name in NAMES}


def test_batch_equals_run_for_a_sample_of_lines():
    lines = varied_lines(3000)
    records = list(run_batch([json.dumps(line) for line in lines]))
    assert len(records) == len(lines)
    statuses = {r["status"] == "ok" for r in records}
    assert statuses == {True, False}  # the sample holds legal and illegal lines
    sample = random.Random(2).sample(range(len(lines)), 300)
    for i in sample:
        want, got = single(lines[i]), records[i]
        assert got["case"] == lines[i].get("case", i + 1)
        if isinstance(want, str):
            assert got["status"] == "error: " + want, (lines[i], got["status"])
            continue
        assert got["status"] == "ok", (lines[i], got["status"])
        assert got["plan"] == want[0]
        for name, value in want[1].items():
            assert got[name] == (value if math.isfinite(value) else None), (lines[i], name)


def test_chunks_do_not_change_results(monkeypatch):
    lines = [json.dumps(line) for line in varied_lines(500, seed=3)]
    whole = list(run_batch(lines))
    monkeypatch.setattr(batch_module, "CHUNK_LINES", 37)
    assert list(run_batch(lines)) == whole


def test_repeated_lines_are_evaluated_once_and_each_keeps_its_own_case(monkeypatch):
    from fastmodel.io.batch_output import jsonl
    from fastmodel.semantics import get_semantics

    lines = [json.dumps(line) for line in varied_lines(120, seed=9)]
    lines = lines + lines[::-1] + ["not json", "[1]", "not json", '{"case": 5, "model": "nope"}'] * 2
    repeated = lines + [lines[3]] * 50
    default = get_semantics("default")
    # each line alone, in a chunk of its own, no memo: nothing shared
    alone = [next(batch_module.records(batch_module.evaluate_chunk([line.encode()], i + 1, default)))
             for i, line in enumerate(repeated)]
    assert [r["case"] for r in alone[-50:]] == list(range(len(lines) + 1, len(repeated) + 1))

    evaluated = []
    real = batch_module._evaluate_distinct

    def counting(raw_lines, *args):
        evaluated.append(len(raw_lines))
        return real(raw_lines, *args)

    monkeypatch.setattr(batch_module, "_evaluate_distinct", counting)
    assert list(run_batch(repeated)) == alone
    assert evaluated == [len(set(repeated))] and len(set(repeated)) < len(repeated) / 2
    chunk = batch_module.evaluate_chunk([(line + "\n").encode() for line in repeated], 1, default)
    assert [json.loads(x) for x in jsonl(chunk).decode().splitlines()] == alone
    assert chunk.error_count() == sum(r["status"] != "ok" for r in alone)

    # across chunks, the batch's memo evaluates each distinct line once; a small memo forgets and re-evaluates
    monkeypatch.setattr(batch_module, "CHUNK_LINES", 7)
    evaluated.clear()
    assert list(run_batch(repeated)) == alone
    assert sum(evaluated) == len(set(repeated))

    class Small(batch_module.LineMemo):
        def __init__(self):
            super().__init__(size=10)

    monkeypatch.setattr(batch_module, "LineMemo", Small)
    evaluated.clear()
    assert list(run_batch(repeated)) == alone
    assert sum(evaluated) > len(set(repeated))


def write_input(tmp_path, lines) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + "not json\n")
    return str(path)


def test_csv_and_parquet_hold_the_jsonl_results(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    src = write_input(tmp_path, varied_lines(200, seed=4))
    runner = CliRunner()
    for name in ("out.jsonl", "out.csv", "out.parquet"):
        assert runner.invoke(main, ["batch", src, "-o", str(tmp_path / name)]).exit_code == 0
    records = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    with open(tmp_path / "out.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    table = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert len(records) == len(rows) == len(table) == 201
    # the union of the kinds present: their columns, then their engines' results (here MAD-Max spec lines only:
    # its variables and the alias iteration_time, no other engine's)
    keys = list(dict.fromkeys(key for record in records for key in record))
    assert list(rows[0]) == list(table[0]) == keys
    assert keys == ["case", "status", "plan", *NAMES, "iteration_time"]
    for record, row, entry in zip(records, rows, table):
        assert row["case"] == entry["case"] == str(record["case"])
        assert row["status"] == entry["status"] == record["status"]
        for name in ("plan", *NAMES):
            value = record.get(name)
            assert entry[name] == value
            assert (row[name] == "") if value is None else (type(value)(row[name]) == value)


def _interrupt_chunk(monkeypatch, n: int) -> list:
    """Make batch's ``n``-th ``evaluate_chunk`` call raise KeyboardInterrupt (Ctrl-C in the middle of a run);
    returns the list of calls so far (clear it to count again)."""
    real = batch_module.evaluate_chunk
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(batch_module, "evaluate_chunk", interrupted)
    return calls


def test_ctrl_c_leaves_no_output(tmp_path, monkeypatch):
    src = write_input(tmp_path, varied_lines(300, seed=5))
    out = tmp_path / "out.parquet"
    out.write_bytes(b"PAR1 old")          # an earlier output of the same kind, replaceable with --force
    calls = _interrupt_chunk(monkeypatch, 3)
    monkeypatch.setattr(batch_module, "CHUNK_LINES", 50)
    for target in (out, tmp_path / "new.jsonl"):
        calls.clear()
        result = CliRunner().invoke(main, ["batch", src, "-o", str(target), "--force"])
        assert result.exit_code == 130 and "interrupted" in result.output
    assert out.read_bytes() == b"PAR1 old" and not (tmp_path / "new.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.parquet"]  # no temporary file left


def test_progress_bar_only_when_asked_or_on_a_terminal(tmp_path):
    src = write_input(tmp_path, varied_lines(20, seed=6))
    runner = CliRunner()
    quiet = runner.invoke(main, ["batch", src, "-o", str(tmp_path / "a.jsonl")])
    assert quiet.exit_code == 0 and "lines/s" not in quiet.output
    shown = runner.invoke(main, ["batch", src, "-o", str(tmp_path / "b.jsonl"), "--progress"])
    assert shown.exit_code == 0 and "21 lines" in shown.output and "100.0%" in shown.output


def test_case_ids_that_are_objects_and_strings_that_look_like_separators():
    lines = [
        {"case": {"id": [1, {"case": 2}]}, "model": "llama-7b", "system": "dc-a", "task": "llm-pretrain-fsdp"},
        {"case": 'x"},{"case":1', "model": "llama-7b", "system": "dc-a", "task": "llm-pretrain-fsdp"},
        {"case": [{"a": 1}, {"case": 2}], "model": "nope", "system": "dc-a", "task": "llm-pretrain-fsdp"},
    ]
    import io

    from fastmodel.io.batch import read_chunks, run_chunks
    from fastmodel.io.batch_output import jsonl

    text = b"".join(jsonl(chunk) for chunk in run_chunks(read_chunks(io.BytesIO(
        "".join(json.dumps(line) + "\n" for line in lines).encode()))))
    records = [json.loads(x) for x in text.decode().splitlines()]
    assert [r["case"] for r in records] == [line["case"] for line in lines]
    assert [r["status"][:5] for r in records] == ["ok", "ok", "error"]


class ToyRuns:
    """A kind of its own: lines {"toy": nodes} are LLaMA-7B fsdp/ddp runs on that many DC-A nodes."""

    name = "toy"
    engine = "madmax"       # its results are the MAD-Max engine's (its tables run through its kernels)
    columns = {"toy_nodes": "float64"}

    def claims(self, case):
        return "toy" in case

    def prepare(self, cases, default_semantics):
        from fastmodel.madmax.lowering.config import structure_key_for
        from fastmodel.madmax.lowering.params import param_table
        from fastmodel.madmax.parallel.plans import Plan
        from fastmodel.madmax.spec.loader import load_model, load_system, load_task

        model, system, task = load_model("llama-7b"), load_system("dc-a"), load_task("llm-pretrain-fsdp")
        plan = Plan.parse("fsdp/ddp")
        out = Prepared(columns={"toy_nodes": [float(c["toy"]) for c in cases]})
        nodes = np.array([c["toy"] for c in cases])
        table, status = param_table(model, system, task, plan, values={"system.num_nodes": nodes}, shape=(len(cases),))
        out.errors = {j: "toy: illegal" for j in np.flatnonzero(status).tolist()}
        keep = status == 0
        out.tables.append(Table(structure_key_for(model, task, plan, default_semantics), default_semantics,
                                table[:, keep], np.flatnonzero(keep)))
        return out

    def evaluate_into(self, key, semantics, params, out):
        from fastmodel.madmax.engine import evaluate_into

        evaluate_into(key, semantics, params, np.zeros(params.shape[1], dtype=np.int8), out)


def test_a_new_kind_claims_its_lines_and_shares_the_kernels(monkeypatch):
    monkeypatch.setattr("fastmodel.io.batch_kinds.KINDS", [ToyRuns(), *KINDS])
    lines = [{"toy": 4}, {"model": "llama-7b", "system": "dc-a", "task": "llm-pretrain-fsdp", "num_nodes": 4},
             {"toy": 0}]
    records = list(run_batch([json.dumps(line) for line in lines]))
    assert records[0]["toy_nodes"] == 4.0 and "plan" not in records[0]
    assert records[1]["plan"] == "fsdp32/ddp32" and "toy_nodes" not in records[1]
    assert {k: v for k, v in records[0].items() if k in NAMES} == {k: v for k, v in records[1].items() if k in NAMES}
    assert records[2]["status"] == "error: toy: illegal"


def test_background_writes_give_the_same_bytes_and_leave_nothing_when_interrupted(tmp_path, monkeypatch):
    import threading

    from fastmodel.io.batch_output import run_to_output

    src = write_input(tmp_path, varied_lines(400, seed=7) * 2)   # duplicated lines share their distinct line
    monkeypatch.setattr(batch_module, "CHUNK_LINES", 60)
    for background in (False, True):
        with open(src, "rb") as source:
            assert run_to_output(source, str(tmp_path / f"{background}.jsonl"), background=background)[0] > 0
    assert (tmp_path / "True.jsonl").read_bytes() == (tmp_path / "False.jsonl").read_bytes()
    expected = list(run_batch(open(src).read().splitlines()))
    assert [json.loads(line) for line in (tmp_path / "True.jsonl").read_text().splitlines()] == expected

    _interrupt_chunk(monkeypatch, 4)
    with open(src, "rb") as source, pytest.raises(KeyboardInterrupt):
        run_to_output(source, str(tmp_path / "cut.jsonl"), background=True)
    assert not (tmp_path / "cut.jsonl").exists() and not list(tmp_path.glob(".cut.jsonl.*"))
    assert not [t for t in threading.enumerate() if t.name == "fastmodel-batch-writer"]


def test_a_failed_background_write_is_raised_in_the_batch(tmp_path, monkeypatch):
    from fastmodel.io.batch_output import JsonlWriter

    class Full(io.BytesIO):
        def write(self, data):
            raise OSError(28, "No space left on device")

    src = write_input(tmp_path, varied_lines(200, seed=8))
    monkeypatch.setattr(batch_module, "CHUNK_LINES", 50)
    writer = JsonlWriter(Full(), background=True)
    with open(src, "rb") as source, pytest.raises(OSError, match="No space left"):
        for chunk in batch_module.run_chunks(batch_module.read_chunks(source)):
            writer.write(chunk)
        writer.close()


def test_an_empty_input_is_one_line_and_writes_nothing(tmp_path):
    """An empty file (or standard input) printed "0 ok, 0 errors" and exited 0 with an empty output: nothing to
    evaluate is bad input (like an empty sweep axis), one line, exit 2, no output written. A blank line is a
    line: its row says "empty line"."""
    from tests.suite_fixtures import cli, one_line_error

    empty, out = tmp_path / "cases.jsonl", tmp_path / "out.jsonl"
    empty.write_bytes(b"")
    one_line_error(cli("batch", empty, "-o", out), f"{empty}: no records: the file is empty")
    assert not out.exists()
    result = CliRunner().invoke(main, ["batch", "-"], input=b"")
    assert result.exit_code == 2 and "error: -: no records: standard input is empty" in result.output, result.output
    result = CliRunner().invoke(main, ["batch", "-"], input=b"\n")       # its only line an error: exit 3
    assert result.exit_code == 3 and '"status":"error: empty line"' in result.output, result.output


def test_a_batch_whose_every_line_is_an_error_exits_3(tmp_path):
    """Every line an error printed "0 ok, 2 errors" and exited 0, where a sweep with no legal point exits 3: now
    the output is written (one row per line, each with its reason) and the exit is 3, the line saying so; one ok
    line among errors keeps exit 0."""
    bad, out = tmp_path / "bad.jsonl", tmp_path / "out.jsonl"
    bad.write_text('{"x": 1}\nnot json\n')
    result = CliRunner().invoke(main, ["batch", str(bad), "-o", str(out)])
    assert result.exit_code == 3, result.output
    assert "0 ok, 2 errors: every line is an error" in result.output and "(exit 3)" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(row["status"].startswith("error: ") for row in rows)
    case = dev_cases()[0]
    good = json.dumps({key: case[key] for key in ("model", "system", "task")})
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(f"{good}\nnot json\n")
    result = CliRunner().invoke(main, ["batch", str(mixed), "-o", str(tmp_path / "m.jsonl")])
    assert result.exit_code == 0 and "1 ok, 1 errors" in result.output, result.output


@pytest.mark.parametrize("lines, name", [(["tp,pp,step_time\n", "8,4,1.5\n"], "CSV"),
                                         (['model = "llama3.1-70b"\n', 'system = "dgx-h100"\n'], "TOML")])
def test_run_batch_refuses_a_csv_or_toml_file_in_one_line_naming_the_kind(lines, name):
    """The CLI's check (a CSV or TOML file given as the cases) lives in fastmodel/io/batch.py, so the Python
    ``run_batch`` has it too: one line naming the kind, not an 'invalid JSON' row per line."""
    with pytest.raises(FastmodelError, match=f"^lines: a {name} file, not JSON lines: batch reads one configuration"):
        list(run_batch(lines))
    rows = list(run_batch(["a,b", '{"model": "llama3-8b", "system": "dgx-h100", "task": "llm-pretrain"}']))
    assert len(rows) == 2 and rows[0]["status"] != "ok"      # one JSON line in the head: a row per line
