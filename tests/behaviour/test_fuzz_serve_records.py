"""Property-based fuzzing of serving records (SERVE_RUNS.md; fastmodel.serve.record_schema), as
test_fuzz.py does for run records: every field wrong-typed, out of bounds, missing or joined by an unknown key.

Fixed seed and a bounded example count. For every input: ``fastmodel serve`` and ``fastmodel validate`` exit 0
or 2 with one ``error:`` line and no traceback; the lowering either refuses in one line naming
``FILE:LINE: block.field`` or yields a column vector inside the registry's bounds, never reading a string or
boolean as a number or a fraction as a count, never ignoring an unknown key.
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

hypothesis = pytest.importorskip("hypothesis")
from fuzz_inputs import fuzz_settings, leaf_paths, mutate, weird  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fastmodel.cli import main  # noqa: E402
from fastmodel.errors import SpecError  # noqa: E402
from fastmodel.registry.lm import COLUMNS  # noqa: E402
from fastmodel.serve.records import lower_serve_record  # noqa: E402

FUZZ = fuzz_settings(80)
WEIRD = weird([0, 1, -1, 2, 3, 8, 64, 1e300, 1e-300, 0.5, 1.5, "8", "fp4", "disagg", "80 GB"])
DEV = Path(__file__).resolve().parents[1] / "data" / "serve_dev_load.jsonl"
RECORD = json.loads(next(line for line in DEV.read_text().splitlines() if '"attention_dp"' in line))
PATHS = sorted(p for p in leaf_paths(RECORD) if p[0] not in ("aic", "measured"))
COUNTS = {"tp", "pp", "ep", "attention_dp", "moe_tp", "input_len", "output_len", "concurrency", "n_gpus",
          "gpus_per_node", "layers", "hidden", "ffn", "heads", "kv_heads", "head_dim", "vocab", "moe_experts",
          "moe_topk", "moe_ffn", "sliding_window", "sliding_window_layers"}


def _clean(result, codes=(0, 2)):
    assert result.exit_code in codes, result.output
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output


@FUZZ
@given(index=st.integers(0, 200), value=WEIRD, action=st.sampled_from(["set", "set", "set", "delete", "typo", "extra"]))
def test_fuzz_serving_record_fields(tmp_path, index, value, action):
    path = PATHS[index % len(PATHS)]
    data = mutate(RECORD, path, value, action)
    records = tmp_path / "serve.jsonl"
    records.write_text(json.dumps(data) + "\n")
    runner = CliRunner()
    _clean(runner.invoke(main, ["serve", str(records)], catch_exceptions=False))
    _clean(runner.invoke(main, ["validate", str(records)], catch_exceptions=False), (0, 2, 3))   # 3: refused
    try:
        lowered = lower_serve_record(data, "serve.jsonl:1")
    except SpecError as error:
        assert str(error).startswith("serve.jsonl:1: ") and "\n" not in str(error)
        hypothesis.event("refused")
        return
    hypothesis.event("accepted")
    informational = path[-1] in ("network", "name", "activation", "source_ref", "source", "id", "framework",
                                 "assumptions", "flags", "gpu", "inter_node_bw_assumed", "ffn_kind")
    assert action not in ("typo", "extra") or (action == "typo" and informational and False), \
        "an unknown key was accepted"
    original = RECORD
    for key in path:
        original = original[key]
    if action == "set" and value is not None and original is not None and not informational:
        if isinstance(original, bool):
            assert isinstance(value, bool), f"{value!r} read as a boolean"
        elif isinstance(original, (int, float)):
            assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{value!r} read as a number"
            assert path[-1] not in COUNTS or isinstance(value, int), f"{value!r} read as a count"
    for column, number in zip(COLUMNS, lowered.columns):
        assert column.lo <= number <= column.hi, f"{column.name} = {number} outside [{column.lo}, {column.hi}]"
