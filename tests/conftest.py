import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

#: reference `expected` key -> fastmodel result variable
EXPECTED_TO_VARIABLE = {
    "iteration_time_s": "iteration_time",
    "throughput_qps": "throughput",
    "t_gemm_s": "time_gemm",
    "t_emb_s": "time_emb",
    "t_all2all_s": "time_all2all",
    "t_allreduce_s": "time_allreduce",
    "t_allgather_s": "time_allgather",
    "t_reducescatter_s": "time_reducescatter",
    "emb_cap_per_device": "weight_memory_emb",
    "transformer_cap_per_device": "weight_memory_dense",   # LLM, LLM_MoE, ViT
    "mlp_cap_per_device": "weight_memory_dense",           # DLRM, DLRM_MoE
    "global_bs": "global_batch",
    "eff_flops": "eff_flop_per_s",
}


def read_cases(name: str) -> list[dict]:
    with open(DATA / name) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def dev_cases(model_type: str | None = None) -> list[dict]:
    cases = read_cases("madmax_cases_dev.jsonl")
    return [c for c in cases if model_type is None or c["model"]["type"] == model_type]


def illegal_cases(model_type: str | None = None) -> list[dict]:
    cases = read_cases("madmax_cases_illegal.jsonl")
    return [c for c in cases if model_type is None or c["model"].get("type") == model_type]


def assert_matches_reference(result: dict, expected: dict, case: str) -> None:
    """1e-9 relative on every value; exposed/overlapped to 1e-9 x iteration time."""
    for key, name in EXPECTED_TO_VARIABLE.items():
        if key not in expected:  # the dense-part key differs per family
            continue
        got, want = float(result[name]), expected[key]
        assert got == pytest.approx(want, rel=1e-9, abs=0.0), f"{case}: {name} {got!r} != {want!r}"
    scale = expected["iteration_time_s"]
    for key, name in (("exposed_comm_s", "exposed_comm"), ("overlapped_comm_s", "overlapped_comm")):
        got, want = float(result[name]), expected[key]
        assert abs(got - want) <= 1e-9 * scale, f"{case}: {name} {got!r} != {want!r}"
    assert int(result["num_compute_ops"]) == expected["n_comp_traces"], case
    assert int(result["num_comm_ops"]) == expected["n_comm_traces"], case
