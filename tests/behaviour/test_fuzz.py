"""Property-based fuzzing of every user input: spec fields, plan strings, sweep axes, batch lines, run records.

Fixed seed (``derandomize``) and bounded example counts, so CI runs the same
cases every time in well under a minute. For every input: no traceback (the
CLI runs in-process with exceptions propagated), exit code 0 or 2, a user
error is exactly one line ``error: ...``, and no output file is left
half-written (no temporary file beside it; an output exists only complete).
"""

import json
import math
import os
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from fuzz_inputs import fuzz_settings, leaf_paths, mutate, weird  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fastmodel.engines import load_model, load_system  # noqa: E402
from fastmodel.errors import SpecError  # noqa: E402
from fastmodel.lm.record_schema import BLOCKS  # noqa: E402
from fastmodel.lm.records import lower_record  # noqa: E402
from fastmodel.registry.lm import COLUMNS  # noqa: E402
from tests.suite_fixtures import DATA, cli  # noqa: E402

FUZZ = fuzz_settings(40)
WEIRD = weird([0, 1, -1, 2, 80, 1e300, 1e-300, 0.5, 1.5, 70, "40 GB", "1555 GB/s", "312 TFLOP/s", "1e400 B", "-5 TB/s",
               "abc GB/s", "70", "0.5"])


def assert_clean(result, outputs=(), codes=(0, 2)):
    """Exit 0, or exit 2 with one 'error:' line (or another of ``codes``: batch's 3); no temporary file beside
    any output."""
    assert result.exit_code in codes, result.output
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert lines and lines[-1].startswith("error: ") and len(lines) <= 2, result.output  # (+ sweep's size line)
        assert "Traceback" not in result.output
    for out in outputs:
        out = Path(out)
        left = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
        assert left == [], left


MODEL = load_model("llama-7b").model_dump(mode="json")
SYSTEM = load_system("dc-a").model_dump(mode="json")
MODEL_PATHS = sorted(leaf_paths(MODEL))
SYSTEM_PATHS = sorted(leaf_paths(SYSTEM))


@FUZZ
@given(which=st.sampled_from(["model", "system"]), index=st.integers(0, 100), value=WEIRD,
       action=st.sampled_from(["set", "set", "set", "delete", "typo"]))
def test_fuzz_spec_fields(tmp_path, which, index, value, action):
    base, paths = (MODEL, MODEL_PATHS) if which == "model" else (SYSTEM, SYSTEM_PATHS)
    path = paths[index % len(paths)]
    spec = tmp_path / f"{which}.json"
    spec.write_text(json.dumps(mutate(base, path, value, action)))
    args = {"model": "llama-7b", "system": "dc-a", which: spec}
    result = cli("run", "-m", args["model"], "-s", args["system"], "-t", "llm-pretrain", "--plan", "fsdp/ddp",
                 "--nodes", 2, "--json")
    assert_clean(result)
    hypothesis.event(f"exit {result.exit_code}")
    if result.exit_code == 2 and f"{which}." in result.output.split(":", 2)[-1][:80]:
        assert str(spec) in result.output, result.output  # a field error names the file
    if result.exit_code == 0:
        report = json.loads(result.output)
        assert report["iteration_time"] is None or report["iteration_time"] > 0


PLAN_TOKENS = st.sampled_from(["tp", "ddp", "fsdp", "pp", "mp", "2", "8", "16", "0", "-1", "1", ",", "/", "//",
                               " ", "x", "TP", "ddp2048", "\u00e9", "\n"])


@FUZZ
@given(plan=st.one_of(st.lists(PLAN_TOKENS, max_size=8).map("".join), st.text(max_size=12)),
       semantics=st.sampled_from(["madmax", "default"]))
def test_fuzz_plan_strings(plan, semantics):
    result = cli("run", "-m", "llama-7b", "-s", "dc-a", "-t", "llm-pretrain", "--nodes", 4, "--plan", plan,
                 "--semantics", semantics, "--json")
    assert_clean(result)
    hypothesis.event(f"exit {result.exit_code}")


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


SCALARS = st.one_of(st.integers(-5, 5000), st.floats(-1e3, 1e13, allow_nan=False),
                    st.sampled_from([0, 1, 2, 4, 0.5, 0.9, 1.5, 1e300, "25 GB/s", "x", "all", True,
                                     float("nan"), float("inf")]))
RANGES = st.fixed_dictionaries(
    {"start": SCALARS, "stop": SCALARS},
    optional={"num": st.one_of(st.integers(-2, 6), st.sampled_from([10**14, 2.5])),
              "step": st.one_of(st.floats(-2, 2e3, allow_nan=False), st.sampled_from([1e-15, 0])),
              "scale": st.sampled_from(["linear", "log", "cubic"]), "stpo": st.just(1)})
AXIS_VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=4), RANGES)
AXIS_NAMES = st.sampled_from(["num_nodes", "flops_util", "global_batch", "hbm_capacity_bytes", "num_layers",
                              "kind", "port_bandwidth_bytes_per_s", "num_heads", "bogus", "num_devices", "fp16"])
PLANS = st.one_of(st.just("all"), st.lists(st.sampled_from(["fsdp/ddp", "tp,ddp/mp", "pp/mp", "tp8,ddp/mp", "x",
                                                            "ddp/ddp/ddp"]), min_size=0, max_size=3),
                  st.just({"dense": ["tp", "ddp"], "max_levels": 1}), st.just({"dense": ["nope"]}))


@settings(FUZZ, max_examples=30)
@given(axes=st.dictionaries(AXIS_NAMES, AXIS_VALUES, max_size=3), plan=PLANS,
       suffix=st.sampled_from([".nc", ".nc", ".zarr"]))
def test_fuzz_sweep_axes(tmp_path, axes, plan, suffix):
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    lines = ['model = "llama-7b"', 'system = "dc-a"', 'task = "llm-pretrain"', "[axes]"]
    lines += [f"{name} = {_toml_value(value)}" for name, value in axes.items()]
    lines.append(f"plan = {_toml_value(plan)}")
    sweep_file = folder / "s.toml"
    sweep_file.write_text("\n".join(lines) + "\n")
    out = folder / f"out{suffix}"
    result = cli("sweep", sweep_file, "-o", out, "--no-progress")
    assert_clean(result, [out])
    hypothesis.event(f"exit {result.exit_code}: " + (result.output.strip().splitlines()[-1][:50] if result.exit_code else ""))
    assert not (folder / f"out{suffix}.lock").exists()
    if result.exit_code == 2:
        assert not out.exists() or suffix == ".zarr"
    else:
        best = cli("best", out, "--by", "throughput", "--top", "2")
        assert_clean(best)


CASE_KEYS = st.sampled_from(["case", "model", "system", "task", "plan", "num_nodes", "semantics", "junk", "expected"])
CASE_VALUES = st.one_of(st.sampled_from(["llama-7b", "dc-a", "llm-pretrain", "llm-pretrain-fsdp", "dlrm-a",
                                         "fsdp/ddp", "tp,ddp/mp", "madmax", "default", "nope", "", "../x.toml"]),
                        WEIRD, st.fixed_dictionaries({"family": st.sampled_from(["llm", "dlrm", "x"])}))
LINES = st.one_of(
    st.dictionaries(CASE_KEYS, CASE_VALUES, max_size=7).map(json.dumps),
    st.just(json.dumps({"model": "llama-7b", "system": "dc-a", "task": "llm-pretrain-fsdp", "num_nodes": 2})),
    st.text(max_size=20).filter(lambda t: "\n" not in t and "\r" not in t),
    st.sampled_from(["", "   ", "[]", "null", "{", "\ufeff{}", '{"model": 1e999}']),
)


@FUZZ
@given(lines=st.lists(LINES, min_size=1, max_size=6))
def test_fuzz_batch_lines(tmp_path, lines):
    cases = tmp_path / "in.jsonl"
    cases.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    if out.exists():
        os.unlink(out)
    result = cli("batch", cases, "-o", out)
    assert_clean(result, [out], codes=(0, 2, 3))
    hypothesis.event(f"exit {result.exit_code}: " + (result.output.strip().splitlines()[-1][:50] if result.exit_code else ""))
    assert result.exit_code in (0, 3), result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == len(cases.read_bytes().split(b"\n")) - 1
    for record in records:
        assert record["status"] == "ok" or record["status"].startswith("error: "), record
        assert "internal error" not in record["status"], record
    assert (result.exit_code == 3) == all(r["status"] != "ok" for r in records), result.output   # exit 3: no ok line


RUN_RECORD = json.loads(next(line for line in (DATA / "runs_dev.jsonl").read_text().splitlines() if "405b-s131072" in line))
RUN_PATHS = sorted(p for p in leaf_paths(RUN_RECORD) if p[0] != "measured" or len(p) == 2)


def _is_count(path) -> bool:
    """A field of the record schema that holds a whole number (layers, heads, tp, micro_batch...)."""
    block = BLOCKS.get(path[0] if len(path) == 2 else "")
    field = block.model_fields.get(path[-1]) if block else None
    text = str(field.annotation) if field else ""
    return "int" in text and "float" not in text


@FUZZ
@given(index=st.integers(0, 200), value=WEIRD, action=st.sampled_from(["set", "set", "set", "delete", "typo", "extra"]))
def test_fuzz_run_record_fields(tmp_path, index, value, action):
    """Every field of a run record wrong-typed, out of bounds, missing or joined by an unknown key: a one-line
    error naming the record's line and field, or a record whose every column is inside the registry's bounds;
    a string or boolean is never read as a number, a fraction never as a count, an unknown key never ignored
    (``measured`` is free-form but for the step time and memory that validate checks)."""
    path = RUN_PATHS[index % len(RUN_PATHS)]
    data = mutate(RUN_RECORD, path, value, "set" if action == "extra" else action)
    if action == "extra":
        data = mutate(RUN_RECORD, (*path[:-1], "bogus_field"), value, "set")
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(data) + "\n")
    assert_clean(cli("validate", runs), codes=(0, 2, 3))     # 3: its one record refused (cli/validate.py)
    _check_record_mutation(data, path, value, action)


#: per field: a wrong type (text, boolean, list), out of bounds (negative, zero, fractional, absurd), missing,
#: a typo of its key, and an unknown key beside it
EVERY_FIELD = [("set", "x"), ("set", True), ("set", [1]), ("set", -1), ("set", 0), ("set", 0.5), ("set", 1e300),
               ("set", float("nan")), ("delete", None), ("typo", None), ("extra", 1)]


@pytest.mark.parametrize("path", RUN_PATHS, ids=".".join)
def test_every_run_record_field_wrong_typed_out_of_bounds_missing_or_extra(path):
    """The fuzz above, exhaustively: every field of a run record under every kind of damage. No traceback, no
    hang (the record is lowered, and evaluated when accepted), no silent acceptance of an out-of-bounds value."""
    from fastmodel.errors import FastmodelError
    from fastmodel.lm.api import record_values

    for action, value in EVERY_FIELD:
        data = mutate(RUN_RECORD, path, value, "set" if action == "extra" else action)
        if action == "extra":
            data = mutate(RUN_RECORD, (*path[:-1], "bogus_field"), value, "set")
        if _check_record_mutation(data, path, value, action):
            try:
                values, _ = record_values(data, "runs.jsonl:1")
            except FastmodelError as error:       # a plan rule or a not_finite result: one line
                assert "\n" not in str(error)
                continue
            assert all(math.isfinite(v) for v in values.values() if not isinstance(v, bool)), (path, action, value)


def _check_record_mutation(data, path, value, action) -> bool:
    """One damaged record: refused in one line naming its line, or accepted with every column inside the
    registry's bounds and no string, boolean or fraction read as a number or count. True when accepted."""
    try:
        lowered = lower_record(data, "runs.jsonl:1")
    except SpecError as error:
        assert str(error).startswith("runs.jsonl:1: ") and "\n" not in str(error)
        return False
    assert action not in ("typo", "extra") or path[0] == "measured", "an unknown key was accepted"
    original = RUN_RECORD
    for key in path:
        original = original[key]
    if action == "set" and path[0] != "measured" and value is not None and original is not None:
        if isinstance(original, bool):
            assert isinstance(value, bool), f"{value!r} read as a boolean"
        elif isinstance(original, (int, float)):
            assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{value!r} read as a number"
            assert not _is_count(path) or isinstance(value, int), f"{value!r} read as a count"
    for column, number in zip(COLUMNS, lowered.columns):
        assert column.lo <= number <= column.hi, f"{column.name} = {number} outside [{column.lo}, {column.hi}]"
    return True
