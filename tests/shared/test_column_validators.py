"""One check of a registry column's value (fastmodel/registry/validators.py), called by every input path that
reads one: spec lowering (execution options, a cluster's ``efficiency`` table), device files, sweep axes,
calibration overlays and run records give the same reason, each after its own file and field."""

import copy
import json
from types import SimpleNamespace

import pytest

from fastmodel.errors import SpecError, SweepError
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.registry.lm_overhead import USABLE_HBM_FRACTION_GAP
from fastmodel.registry.validators import Forbidden, column_problem
from tests.suite_fixtures import DATA

USABLE = COLUMNS[COLUMN_INDEX["usable_hbm_fraction"]]
FILL = (
    "is the share of HBM a plan may FILL (0 = not set: keep the plan's allocator cache free); a set share is in "
    "[0.1, 1] (to keep a margin free, use --memory-margin)"
)


def _column(**kw):
    return SimpleNamespace(**{"lo": 0.0, "hi": 1.0, "units": "1", "forbid": (), **kw})


def test_a_value_is_checked_against_its_bounds_and_forbidden_intervals():
    """[lo, hi] closed, each forbidden interval open; units named unless dimensionless or a code."""
    assert column_problem(_column(), 0.0) is None and column_problem(_column(), 1.0) is None
    assert column_problem(_column(), 1.5) == "1.5 is outside [0, 1]"
    assert column_problem(_column(), float("nan")) == "nan is outside [0, 1]"
    assert column_problem(_column(units="code"), -1) == "-1 is outside [0, 1]"
    assert column_problem(_column(lo=1e8, hi=1e14, units="bytes"), 1) == "1 is outside [100000000, 1e+14] bytes"
    gap = _column(forbid=(Forbidden(0.2, 0.4, "is in the gap"),))
    assert [column_problem(gap, v) for v in (0.2, 0.3, 0.4)] == [None, "0.3 is in the gap", None]


def test_usable_hbm_fraction_declares_its_gap_in_the_registry():
    """0 = not set and [0.1, 1] are taken; (0, 0.1) reads as a reserve typed by mistake; above 1 is out of range."""
    assert USABLE.forbid == (USABLE_HBM_FRACTION_GAP,) and (USABLE.lo, USABLE.hi) == (0, 1)
    assert [column_problem(USABLE, v) for v in (0.0, 0.1, 0.95, 1.0)] == [None] * 4
    assert column_problem(USABLE, 0.05) == f"0.05 {FILL}"
    assert column_problem(USABLE, 1.5) == "1.5 is outside [0, 1]"
    # the columns with gaps today: this one, and pp_exchange_2021's and fsdp_version's between their whole codes
    # (review 5 F3; mend18)
    assert {c.name for c in COLUMNS if c.forbid} == {"usable_hbm_fraction", "pp_exchange_2021", "fsdp_version"}


def _device_file(tmp_path, monkeypatch, column, value):
    from fastmodel.spec import devices

    folder = tmp_path / "devices"
    folder.mkdir()
    (folder / "x.toml").write_text(f'names = ["x-gpu"]\nvendor = "nvidia"\n{column} = {value}\n')
    monkeypatch.setattr(devices, "resources", SimpleNamespace(files=lambda _: tmp_path))
    devices._read_device_files.__wrapped__()  # not the cached table of the built-in files


def _cluster_table(tmp_path, monkeypatch, column, value):
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.lm.loader import load_cluster, load_lm_model
    from fastmodel.lm.lowering import Mesh, lower

    cluster = load_cluster("dgx-h100", 1)
    cluster = cluster.model_copy(update={"efficiency": {column: value}})
    lower(load_lm_model("llama3.1-8b"), cluster, ExecutionSpec(), Mesh(dp=cluster.n_gpus), 8 * cluster.n_gpus)


def _sweep_axis(tmp_path, monkeypatch, column, value):
    from fastmodel.lm.sweep import lm_sweep

    lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={column: [value]})


PATHS = {
    "device file": (_device_file, "specs/devices/x.toml: {column}: "),
    "cluster table": (_cluster_table, "dgx-h100: efficiency.{column}: "),
    "sweep axis": (_sweep_axis, "axes.{column}: "),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("column, value", [("usable_hbm_fraction", 0.05), ("attn_eff", 1.5)])
def test_every_path_gives_the_registry_reason(tmp_path, monkeypatch, path, column, value):
    read, prefix = PATHS[path]
    with pytest.raises((SpecError, SweepError)) as caught:
        read(tmp_path, monkeypatch, column, value)
    where = prefix.format(column=column)
    assert str(caught.value).endswith(where + column_problem(COLUMNS[COLUMN_INDEX[column]], value)), caught.value


def test_a_calibration_overlay_gives_the_registry_reason():
    from fastmodel.lm.calibrate.overlay import parse_calibration

    data = {
        "calibration": {"format": 2, "fitted_on": "x", "fitted_at": "now"},
        "device": {"H100-SXM-80GB": {"attn_eff": 1.5}},
    }
    with pytest.raises(SpecError) as caught:
        parse_calibration(data, "cal.toml")
    assert str(caught.value) == 'cal.toml: device."H100-SXM-80GB".attn_eff: ' + column_problem(
        COLUMNS[COLUMN_INDEX["attn_eff"]], 1.5
    )
    with pytest.raises(SweepError, match=r"^axes\.attn_eff: 1\.5 is outside \[0\.05, 1\]$"):
        _sweep_axis(None, None, "attn_eff", 1.5)


def test_a_run_record_and_an_execution_spec_give_the_registry_reason():
    """A record's system and plan fields (``record_blocks.bounds``) and an execution option of kind "number"
    (``execution.option_fields``) run the same check."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.lm.records import lower_record
    from fastmodel.spec.loader import validate

    record = json.loads((DATA / "runs_dev.jsonl").read_text().splitlines()[0])
    for block, field, column, value in (
        ("plan", "recompute_fraction", "recompute_fraction", 5),
        ("plan", "moe_imbalance", "moe_imbalance", 0.5),
        ("system", "hbm_bytes", "hbm_bytes", 1),
    ):
        bad = copy.deepcopy(record)
        bad[block][field] = value
        with pytest.raises(SpecError) as caught:
            lower_record(bad, "runs.jsonl:1")
        reason = column_problem(COLUMNS[COLUMN_INDEX[column]], value)
        assert str(caught.value) == f"runs.jsonl:1: {block}.{field}: {reason}"
    with pytest.raises(SpecError) as caught:
        validate(ExecutionSpec, {"moe_imbalance": 0.5}, "x.toml", "execution")
    assert str(caught.value) == "x.toml: execution.moe_imbalance: 0.5 is outside [1, 64]"


@pytest.mark.parametrize("kind, column, value", [("model", "layers", 5000), ("model", "kv_heads", 0),
                                                 ("task", "input_len", 0), ("task", "kv_cache_mem_fraction", 0.001)])
def test_a_model_spec_and_a_serving_task_give_the_registry_reason(kind, column, value):
    """The model and serving-task specs' fields that are registry columns take the column's check (not a copy of
    its bounds)."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.spec import LMSpec
    from fastmodel.serve.spec import ServeTaskSpec
    from fastmodel.spec.loader import validate

    cls, data = {"model": (LMSpec, load_lm_model("llama3.1-8b").model_dump()),
                 "task": (ServeTaskSpec, {"name": "t", "kind": "serve", "input_len": 1024, "output_len": 128})}[kind]
    with pytest.raises(SpecError) as caught:
        validate(cls, {**data, column: value}, "x.toml", kind)
    assert str(caught.value) == f"x.toml: {kind}.{column}: " + column_problem(COLUMNS[COLUMN_INDEX[column]], value)


@pytest.mark.parametrize("kind, field, column, value", [
    ("system", "gpus_per_node", "gpus_per_node", 1 << 17), ("system", "nvlink_domain_size", "domain_size", 1 << 17),
    ("task", "tp", "tp", 1 << 17), ("task", "pp", "pp", 0), ("task", "ep", "ep", 1 << 17),
    ("task", "instances", "instances", 1 << 25),
])
def test_a_cluster_and_a_serving_task_take_their_columns_bounds(kind, field, column, value):
    """ClusterSpec.gpus_per_node and ServeTaskSpec tp/pp/ep refused above 1024 and instances above 2^20 while
    their columns (run and serving records, sweep axes) allow 2^16 and 2^24: now the column's check. A node is
    the NVLink domain in records (NVL72 racks: gpus_per_node 72) and the domain defaults to a node, so its bound
    is the domain's; instances x tp x pp <= n_gpus (2^24)."""
    from fastmodel.lm.loader import load_cluster
    from fastmodel.lm.spec import ClusterSpec
    from fastmodel.serve.spec import ServeTaskSpec
    from fastmodel.spec.loader import validate

    cls, data = {"system": (ClusterSpec, load_cluster("dgx-h100", 1).model_dump()),
                 "task": (ServeTaskSpec, {"name": "t", "kind": "serve", "input_len": 1024, "output_len": 128})}[kind]
    col = COLUMNS[COLUMN_INDEX[column]]
    assert validate(cls, {**data, field: int(col.hi)}, "x.toml", kind).model_dump()[field] == col.hi
    with pytest.raises(SpecError) as caught:
        validate(cls, {**data, field: value}, "x.toml", kind)
    assert str(caught.value) == f"x.toml: {kind}.{field}: " + column_problem(col, value)


def test_a_zero_that_means_not_set_is_left_out_of_a_spec_or_record():
    """``moe_tp`` (serving records) and ``shard_degree`` (execution) are 0 in their column for "not set" (tp x
    attention_dp / ep; all of dp); a spec or record says that with null. ``moe_tp`` 0 in a record was refused by
    pydantic's own ">= 1" (then 0 * ep != tp read as a layout error), ``shard_degree`` 0 by "greater than 0"."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.spec.loader import validate
    from fastmodel.spec.record_blocks import ZERO_UNSET

    assert column_problem(COLUMNS[COLUMN_INDEX["moe_tp"]], 0) is None                # a sweep axis may say 0
    with pytest.raises(SpecError) as caught:
        validate(ExecutionSpec, {"shard_degree": 0}, "x.toml", "execution")
    assert str(caught.value) == f"x.toml: execution.shard_degree: {ZERO_UNSET}"
    assert validate(ExecutionSpec, {"shard_degree": None}, "x.toml", "execution").shard_degree is None


def test_a_model_may_window_no_layer():
    """``sliding_window_layers`` 0 (a window on no layer: full attention everywhere, kernels/lm/shape.py's share
    min(0, layers) / layers = 0) is in its column and a sweep axis takes it; the model spec refused it with
    pydantic's "greater than 0"."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.spec import LMSpec
    from fastmodel.spec.loader import validate

    data = {**load_lm_model("llama3.1-8b").model_dump(), "sliding_window": 4096}
    assert validate(LMSpec, {**data, "sliding_window_layers": 0}, "x.toml", "model").sliding_window_layers == 0
    with pytest.raises(SpecError) as caught:
        validate(LMSpec, {**data, "sliding_window_layers": -1}, "x.toml", "model")
    assert str(caught.value) == "x.toml: model.sliding_window_layers: -1 is outside [0, 4096]"


def _serve_record(**serve):
    """tests/serve/test_serve_records.py's record with ``serve`` fields replaced."""
    from tests.serve.test_serve_records import RECORD

    return {**copy.deepcopy(RECORD), "serve": {**RECORD["serve"], **serve}}


@pytest.mark.parametrize("where, column, top, message", [
    ("task.concurrency", "batch_size", 1 << 24, "x.toml: task.concurrency: 16777217 is outside [1, 16777216] requests"),
    ("execution.vp", "vp", 1024, "x.toml: execution.vp: 1025 is outside [1, 1024]"),
    ("serve.concurrency", "batch_size", 1 << 24,
     "f.jsonl:3: serve.concurrency: 16777217 is outside [1, 16777216] requests"),
])
def test_a_count_once_bounded_by_hand_takes_its_columns_bound(where, column, top, message):
    """ServeTaskSpec.concurrency, ExecutionSpec.vp (``VirtualStages``) and a serving record's request counts
    (``record_schema.Count``) restated their columns' bounds (1..2^24 of ``batch_size``, 1..1024 of ``vp``) with
    pydantic's wording ("less than or equal to"; for vp, under a ``constrained-int`` union tag): now the column's
    check, so the top is accepted and one past it is refused with the column's reason."""
    from fastmodel.lm.execution import ExecutionSpec
    from fastmodel.serve.records import lower_serve_record
    from fastmodel.serve.spec import ServeTaskSpec
    from fastmodel.spec.loader import validate

    task = {"name": "t", "kind": "serve", "input_len": 1024, "output_len": 128}
    check = {"task.concurrency": lambda n: validate(ServeTaskSpec, {**task, "concurrency": n}, "x.toml", "task"),
             "execution.vp": lambda n: validate(ExecutionSpec, {"vp": n}, "x.toml", "execution"),
             "serve.concurrency": lambda n: lower_serve_record(_serve_record(concurrency=n), "f.jsonl:3")}[where]
    assert COLUMNS[COLUMN_INDEX[column]].hi == top
    check(top)
    with pytest.raises(SpecError) as caught:
        check(top + 1)
    assert str(caught.value) == message
    assert message.endswith(column_problem(COLUMNS[COLUMN_INDEX[column]], top + 1))
