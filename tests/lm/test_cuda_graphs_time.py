"""CUDA graphs in the step time (docs/model.md §11.37): a captured layer is issued by its graph replay, not op by op.

Hand derivation on a host-bound toy plan (the 12-layer A100 GPT of tests/lm/test_host_issue.py, 4 micro-batches,
full recompute: forward, recomputed forward and backward each take one forward's issue time). A micro-batch lasts
max(GPU time, 12 layers x 3 passes x ops x host_op_s):

- eager, 60 operators per layer forward at 1 ms each: 4 x 12 x 3 x 60 ms = 8.64 s, far above the GPU's time;
- per-layer graphs: the replay's 3 calls (TE graph.py ``Graphed``: copy into the static input, replay, detach):
  4 x 12 x 3 x 3 ms = 0.432 s, still host-bound;
- one full-iteration graph: no per-layer issue, the GPU's own step.
"""

import copy
import json
from pathlib import Path

import pytest

from fastmodel.errors import SpecError
from fastmodel.kernels.lm.host_step import GRAPH_REPLAY_OPS, issued_host_ops
from fastmodel.lm.records import lower_record
from fastmodel.lm.sweep import lm_sweep
from fastmodel.lm.table import row
from fastmodel.registry.lm import COLUMN_INDEX as C
from tests.lm.test_host_issue import SMALL
from tests.suite_fixtures import one

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
EAGER = dict(SMALL, host_ops_layer=60, host_op_s=1e-3)


def test_a_host_bound_step_eager_per_layer_graphs_and_full_iteration_by_hand():
    eager, layer, full = (one(**EAGER, cuda_graphs=scope) for scope in ("none", "layer", "full_iteration"))
    gpu = one(**SMALL)
    assert GRAPH_REPLAY_OPS == 3.0
    assert eager["step_time"] - eager["time_optimizer"] == pytest.approx(4 * 12 * 3 * 60 * 1e-3, rel=1e-12)
    assert layer["step_time"] - layer["time_optimizer"] == pytest.approx(4 * 12 * 3 * 3 * 1e-3, rel=1e-12)
    assert layer["time_host_wait"] == pytest.approx(layer["step_time"] - gpu["step_time"], rel=1e-12)
    assert full["time_host_wait"] == 0.0 and full["step_time"] == gpu["step_time"]
    # a graph replay that is cheaper than the GPU's micro-batch leaves the GPU's step (3 x 20 us per layer pass)
    assert one(**dict(EAGER, host_op_s=20e-6), cuda_graphs="layer")["step_time"] == gpu["step_time"]
    # a stack that counts no operators (the CPU runs ahead) is unchanged by graphs
    assert one(**SMALL, cuda_graphs="layer")["step_time"] == gpu["step_time"]


def test_what_a_graph_cannot_hold_stays_eager():
    moe = dict(moe_experts=8, moe_topk=2, moe_ffn=1024, host_ops_layer=60)
    # dropless MoE: Megatron-Core graphs its experts only with drop-and-pad MoE (transformer_config.py@d98e8a6 2844),
    # under either scope: without capacity and padding the dynamic shapes make MoE layers uncapturable
    # (Megatron-LM d98e8a6 megatron/core/transformer/moe/README.md "CUDA Graph", line 514): 60 issued each
    padded = dict(moe, moe_capacity_factor=1.0, moe_pad_to_capacity=1)
    assert issued_host_ops(row(**moe, cuda_graphs="layer")) == 60
    assert issued_host_ops(row(**moe, cuda_graphs="full_iteration")) == 60
    assert issued_host_ops(row(**padded, cuda_graphs="layer")) == 3
    assert issued_host_ops(row(**padded, cuda_graphs="full_iteration")) == 0
    assert issued_host_ops(row(**padded, cuda_graphs="none")) == 60
    # a stack whose MoE layer syncs the host on its token counts: nothing is captured, the syncs stay charged
    synced = dict(moe, moe_sync_issue_ops=31, host_op_s=20e-6)
    for scope in ("layer", "full_iteration"):
        assert issued_host_ops(row(**synced, cuda_graphs=scope)) == 60
    # fewer counted operators than the replay's calls: the count stays
    assert issued_host_ops(row(host_ops_layer=2, cuda_graphs="layer")) == 2


def test_records_state_graphs_as_a_boolean_or_a_scope():
    rows = [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()]
    mlperf = next(r for r in rows if r["id"].startswith("mlperf-v40-gpt3-175b-eos-dfw_n1344"))
    record = lower_record(mlperf)
    assert record.columns[C["cuda_graphs"]] == 1  # true: per-layer graphs (TE, the _cg configs)
    assert not any("cuda_graphs" in note for note in record.notes)  # modelled, no "recorded, not modelled" note
    full = copy.deepcopy(mlperf)
    full["plan"]["cuda_graphs"] = "full_iteration"
    assert lower_record(full).columns[C["cuda_graphs"]] == 2
    full["plan"]["cuda_graphs"] = "whole_step"
    with pytest.raises(SpecError, match=r"plan\.cuda_graphs") as error:
        lower_record(full)
    assert "\n" not in str(error.value)


def test_cuda_graphs_is_a_sweep_axis():
    # the Megatron-DeepSpeed stack counts 60 operators per layer forward (docs/model.md §11.7); at 1 ms each the
    # eager step is host-bound: 32 layers x 3 passes x 60 ms = 5.76 s of issue per micro-batch; per-layer graphs
    # issue 32 x 3 x 3 ms = 0.288 s, below the GPU's micro-batch here (about 0.34 s: no wait), and one
    # full-iteration graph nothing: the GPU's own step. One node, tp 8: dp 1, 8 micro-batches of 1 sequence
    execution = {"framework": "Megatron-DeepSpeed", "recompute": "full", "host_op_s": 1e-3}
    ds = lm_sweep(
        "llama3.1-8b",
        "dgx-h100",
        global_batch=8,
        num_nodes=1,
        execution=execution,
        axes={"cuda_graphs": ["none", "layer", "full_iteration"], "tp": [8]},
    )
    wait, step = ds.time_host_wait.values.ravel(), ds.step_time.values.ravel()
    assert ds.time_host_wait.dims[0] == "cuda_graphs"
    assert wait[0] > 0.0 and wait[2] == 0.0 and wait[1] < wait[0]
    assert step[0] - step[2] == pytest.approx(wait[0], rel=1e-9)  # eager: the GPU's step plus the host wait
    gpu_mb = 32 * 3 * 60e-3 - wait[0] / 8  # the GPU's micro-batch, from the eager wait
    assert 0.288 < gpu_mb < 5.76
    assert wait[1] == pytest.approx(8 * max(0.0, 32 * 3 * 3e-3 - gpu_mb), abs=1e-12)


def test_a_boolean_names_the_scope_everywhere_the_column_is_read_by_name():
    # review LOW 13: records read true as layer and false as none (§11.37); an [execution] field, -x and a sweep
    # axis read them the same way, and a number is still no scope
    from fastmodel.lm.loader import load_execution
    from fastmodel.lm.record_schema import PlanBlock
    from fastmodel.spec.columns import encode

    plan = dict(tp=1, pp=1, global_batch=8)      # a record's plan block: the execution option's field (option_fields)
    assert [PlanBlock.model_validate({**plan, "cuda_graphs": v}).cuda_graphs
            for v in (True, False, "full_iteration")] == ["layer", "none", "full_iteration"]
    assert load_execution({"cuda_graphs": True}).cuda_graphs == "layer"
    assert load_execution({"cuda_graphs": False}).cuda_graphs == "none"
    assert load_execution({"cuda_graphs": "full_iteration"}).cuda_graphs == "full_iteration"
    with pytest.raises(SpecError, match=r"cuda_graphs"):
        load_execution({"cuda_graphs": 2})
    assert (encode("cuda_graphs", True), encode("cuda_graphs", False)) == (1, 0)
    assert encode("sequence_parallel", True) is True  # a switch's boolean is no code name
    execution = {"framework": "Megatron-DeepSpeed", "recompute": "full", "host_op_s": 1e-3}
    sweep = dict(model="llama3.1-8b", system="dgx-h100", global_batch=8, num_nodes=1, execution=execution)
    named = lm_sweep(**sweep, axes={"cuda_graphs": ["none", "layer"], "tp": [8]})
    booleans = lm_sweep(**sweep, axes={"cuda_graphs": [False, True], "tp": [8]})
    assert list(booleans.cuda_graphs.values) == ["none", "layer"]
    assert (booleans.step_time.values == named.step_time.values).all()
    assert booleans.time_host_wait.values.ravel()[1] < booleans.time_host_wait.values.ravel()[0]


def test_moe_a2a_overlap_booleans_read_as_records_read_them_everywhere():
    """A record's older boolean moe_a2a_overlap (RUNS.md: true is batch-level overlap, false none) was refused as an
    [execution] field, by -x and on a sweep axis; now each reads it as the record does (BOOLEAN_CODE_NAMES)."""
    from fastmodel.cli.execution import parse_set
    from fastmodel.lm.loader import load_execution
    from fastmodel.lm.record_schema import PlanBlock
    from fastmodel.spec.columns import boolean_name, encode

    plan = dict(tp=1, pp=1, global_batch=8)      # a record's plan block: the execution option's field (option_fields)
    assert [PlanBlock.model_validate({**plan, "moe_a2a_overlap": v}).moe_a2a_overlap
            for v in (True, False, "dualpipe")] == ["batch", "none", "dualpipe"]
    assert load_execution({"moe_a2a_overlap": True}).moe_a2a_overlap == "batch"
    assert load_execution({"moe_a2a_overlap": False}).moe_a2a_overlap == "none"
    key, value = parse_set("moe_a2a_overlap=true")
    assert load_execution({key: value}).moe_a2a_overlap == "batch"
    with pytest.raises(SpecError, match=r"moe_a2a_overlap"):
        load_execution({"moe_a2a_overlap": 1})          # a number is no overlap name
    assert (encode("moe_a2a_overlap", True), encode("moe_a2a_overlap", False)) == (1, 0)
    assert [boolean_name("moe_a2a_overlap", v) for v in (False, True)] == ["none", "batch"]
    sweep = dict(model="llama3.1-8b", system="dgx-h100", global_batch=8, num_nodes=1)
    booleans = lm_sweep(**sweep, axes={"moe_a2a_overlap": [False, True], "tp": [8]})
    assert list(booleans.moe_a2a_overlap.values) == ["none", "batch"]
