"""Golden tests: the LLM cases made by running the MAD-Max reference unmodified."""

import json

import pytest

import fastmodel
from fastmodel.batch import run_batch
from fastmodel.errors import FastmodelError

from conftest import assert_matches_reference, dev_cases, illegal_cases

LLM_DEV = dev_cases("LLM")
LLM_ILLEGAL = illegal_cases("LLM")


def test_there_are_llm_cases():
    assert len(LLM_DEV) >= 15 and len(LLM_ILLEGAL) >= 5


@pytest.mark.parametrize("case", LLM_DEV, ids=[c["case"] for c in LLM_DEV])
def test_dev_case_single(case):
    ds = fastmodel.evaluate(case["model"], case["system"], case["task"], semantics="madmax")
    assert_matches_reference({name: ds[name].item() for name in ds.data_vars}, case["expected"], case["case"])


def test_dev_cases_through_batch_in_order():
    lines = [json.dumps(c) for c in LLM_DEV]
    records = list(run_batch(lines, semantics="madmax"))
    assert [r["case"] for r in records] == [c["case"] for c in LLM_DEV]
    for record, case in zip(records, LLM_DEV):
        assert record["status"] == "ok", record
        assert_matches_reference(record, case["expected"], case["case"])


@pytest.mark.parametrize("case", LLM_ILLEGAL, ids=[c["case"] for c in LLM_ILLEGAL])
def test_illegal_case_rejected_single(case):
    with pytest.raises(FastmodelError) as info:
        fastmodel.evaluate(case["model"], case["system"], case["task"])
    message = str(info.value)
    assert "\n" not in message and message


def test_illegal_cases_rejected_in_batch():
    records = list(run_batch([json.dumps(c) for c in LLM_ILLEGAL]))
    assert len(records) == len(LLM_ILLEGAL)
    for record in records:
        assert record["status"].startswith("error: "), record
        assert "\n" not in record["status"]


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


def test_other_families_rejected_with_reason_not_crash():
    cases = [c for c in dev_cases("DLRM")][:2]
    records = list(run_batch([json.dumps(c) for c in cases]))
    assert all("not supported yet" in r["status"] for r in records)
