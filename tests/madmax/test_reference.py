"""Golden tests: every case made by running the MAD-Max reference unmodified (all families)."""

import json
from collections import Counter

import pytest

import fastmodel
from fastmodel.errors import FastmodelError, PlanError, SpecError
from fastmodel.io.batch import run_batch
from fastmodel.testing import assert_matches_reference, dev_cases, illegal_cases

DEV = dev_cases()
#: the reference cannot run DLRM_Transformer at all (its module fails at import), so those
#: "illegal" cases are inputs fastmodel evaluates (tests/test_lower_dlrm.py covers the family)
ILLEGAL = [c for c in illegal_cases() if not c["rule"].startswith("unsupported_family")]
UNSUPPORTED_BY_REFERENCE = [c for c in illegal_cases() if c["rule"].startswith("unsupported_family")]


def test_every_family_has_cases():
    families = Counter(c["model"]["type"] for c in DEV)
    assert set(families) == {"LLM", "LLM_MoE", "ViT", "DLRM", "DLRM_MoE"}
    assert min(families.values()) >= 8 and len(ILLEGAL) >= 40


@pytest.mark.parametrize("case", DEV, ids=[c["case"] for c in DEV])
def test_dev_case_single(case):
    ds = fastmodel.evaluate(case["model"], case["system"], case["task"], semantics="madmax")
    assert_matches_reference({name: ds[name].item() for name in ds.data_vars}, case["expected"], case["case"])


def test_dev_cases_through_batch_in_order():
    lines = [json.dumps(c) for c in DEV]
    records = list(run_batch(lines, semantics="madmax"))
    assert [r["case"] for r in records] == [c["case"] for c in DEV]
    for record, case in zip(records, DEV):
        assert record["status"] == "ok", record
        assert_matches_reference(record, case["expected"], case["case"])


#: the reference's rule (prefix of each case's "rule") -> how fastmodel must reject it:
#: a PlanError with this rule, or a SpecError naming a field that starts with this path
REJECTED_BY = {
    "first_degree": PlanError, "global_batch_mismatch": PlanError, "len_mismatch": PlanError, "repeat": PlanError,
    "fsdp_not_first": PlanError, "degree_le_1": PlanError, "product_ne_devices": PlanError,
    "more_than_2_levels": PlanError, "dlrm_tp_odd": ("tp_odd_layers", PlanError),
    "unknown_strategy_dense": PlanError, "unknown_strategy_emb": PlanError,
    "bad_bytes_per_param": "model.bytes_per_nonemb_param", "moe_active_gt_experts": "model.num_active_experts",
    "all_frozen": "task.freeze_emb", "single_node_ar_perc": "system.ar_perc_intra",
    "devices_not_divisible": "system.num_devices", "unknown_model_type": "model.type",
    "unknown_system_type": "system.type", "unknown_task_type": "task.type", "missing_freeze_flags": "task.freeze_",
    "zero_layers": "model.num_",
}


@pytest.mark.parametrize("case", ILLEGAL, ids=[c["case"] for c in ILLEGAL])
def test_illegal_case_rejected_single(case):
    """Rejected for the reference's reason, in one line."""
    with pytest.raises(FastmodelError) as info:
        fastmodel.evaluate(case["model"], case["system"], case["task"])
    message = str(info.value)
    assert "\n" not in message and message
    expected = REJECTED_BY[case["rule"].split(":")[0]]
    if expected is PlanError or isinstance(expected, tuple):
        rule = expected[0] if isinstance(expected, tuple) else case["rule"].split(":")[0]
        assert isinstance(info.value, PlanError) and info.value.rule == rule, message
    else:
        assert isinstance(info.value, SpecError) and info.value.field.startswith(expected), message


def test_illegal_cases_rejected_in_batch():
    records = list(run_batch([json.dumps(c) for c in ILLEGAL]))
    assert len(records) == len(ILLEGAL)
    for record in records:
        assert record["status"].startswith("error: "), record
        assert "\n" not in record["status"]


@pytest.mark.parametrize("case", UNSUPPORTED_BY_REFERENCE, ids=[c["case"] for c in UNSUPPORTED_BY_REFERENCE])
def test_dlrm_transformer_inputs_the_reference_cannot_run_are_evaluated(case):
    ds = fastmodel.evaluate(case["model"], case["system"], case["task"], semantics="madmax")
    assert ds.iteration_time.item() > 0 and ds.time_gemm.item() > 0


def _as_llm(case):
    """An LLM_MoE illegal case re-typed as a dense LLM (expert fields dropped)."""
    model = {k: v for k, v in case["model"].items() if k not in ("num_experts", "num_active_experts")}
    model["type"] = "LLM"
    return model


FAMILY_FREE_RULES = [
    c for c in illegal_cases("LLM_MoE")
    if not c["rule"].startswith(("moe_", "global_batch_mismatch: shipped"))
]


@pytest.mark.parametrize("case", FAMILY_FREE_RULES, ids=[c["case"] for c in FAMILY_FREE_RULES])
def test_family_free_rules_also_reject_dense_llm(case):
    """Rules that do not depend on experts reject the same input as a dense LLM."""
    with pytest.raises(FastmodelError):
        fastmodel.evaluate(_as_llm(case), case["system"], case["task"])
