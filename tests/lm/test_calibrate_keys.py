"""Calibration keys a software stack by the stack profile the model resolves (``overlay.stack_key``), not by its
framework text: the review finding that the fms-fsdp rows and the PyTorch 1.10 FSDP row shared one stack table."""

from pathlib import Path

import pytest
import tomllib

from fastmodel.lm.calibrate import Calibration, apply_calibration, parse_calibration
from fastmodel.lm.calibrate import fit as fit_module
from fastmodel.lm.calibrate.overlay import record_stack_key, stack_key, stack_name, to_toml
from fastmodel.lm.records import read_records
from fastmodel.registry.lm import COLUMN_INDEX as C

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"


@pytest.fixture(scope="module")
def records():
    return sorted(read_records(RUNS), key=lambda r: r.id)


@pytest.mark.parametrize("framework, stack", [
    ("PyTorch 1.10 FSDP (minGPT), FP16, SGD", "pytorch fsdp"),
    ("PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)", "pytorch fsdp"),
    ("NeMo (MLPerf v3.1 submission, NGC 23.09)", "nemo"),
    ("Megatron-LM v0.8, TE 1.9", "megatron-lm"),
    ("TorchTitan (FSDP2), PyTorch nightly mid-2024", "torchtitan"),
    ("Megatron-DeepSpeed (3D)", "megatron-deepspeed"),
    # one stack built for two CUDA versions is one stack (runs_small_public: +cu121 and +cu124)
    ("PyTorch 2.4+cu121 DDP + torch.compile", "pytorch ddp + torch.compile"),
    ("PyTorch 2.5 +cu124 DDP + torch.compile", "pytorch ddp + torch.compile"),
    (None, None), ("", None), ("(unknown)", None),
])
def test_stack_name_is_the_framework_without_versions_or_details(framework, stack):
    assert stack_name(framework) == stack


@pytest.mark.parametrize("framework, stack, key", [
    # the profile the model resolves, whatever the text's head says (the former text key in the comment)
    ("PyTorch FSDP (post-2.2 nightly) + SDPA FlashAttention-2 (fms-fsdp)", None, "fms-fsdp"),   # "pytorch fsdp"
    ("PyTorch 1.10 FSDP (minGPT), FP16, SGD", None, "pytorch-fsdp"),                           # "pytorch fsdp"
    ("NeMo (MLPerf v3.1 submission, NGC 23.09)", None, "megatron-core"),                       # "nemo"
    ("Megatron-DeepSpeed (3D)", None, "megatron-2021"),                                       # "megatron-deepspeed"
    ("OLMo-core (TorchTitan FSDP2)", None, "torchtitan"),                                     # "olmo-core"
    ("DeepSpeed 0.3 ZeRO-3", "megatron-2021", "megatron-2021"),   # an explicit stack wins over the text
    # a text naming no profile: its own key under default; no text, no key (an explicit default adds none)
    ("llm.c train_gpt2cu (commit 7d4ba62)", None, "default:llm.c train_gpt2cu"),
    ("HAI-LLM", "default", "default:hai-llm"),
    (None, None, None), (None, "default", None), ("(unknown)", None, None),
])
def test_stack_key_is_the_resolved_profile(framework, stack, key):
    assert stack_key(framework, stack) == key


def test_an_fms_fsdp_run_and_a_pytorch_fsdp_run_are_calibrated_apart(records):
    """The review finding (MEDIUM): the fms-fsdp rows and the PyTorch 1.10 FSDP row all reduce to the text key
    "pytorch fsdp"; the model runs them under two profiles (fms-fsdp: BF16 gradient reduction, no copy-out;
    pytorch-fsdp 1.x: no flash attention, dropout), so the fit gives them two stack parameters, and a table of
    one reaches only its own runs."""
    fms = [r for r in records if r.stack == "fms-fsdp"]
    old = [r for r in records if r.stack == "pytorch-fsdp"]
    assert fms and old and {stack_name(r.raw.get("framework")) for r in fms + old} == {"pytorch fsdp"}
    params = fit_module.candidate_parameters(fms + old)
    groups = {p.group: set(p.rows.tolist()) for p in params if p.column == "stack_compute_eff"}
    assert groups == {"stack:fms-fsdp": set(range(len(fms))),
                      "stack:pytorch-fsdp": set(range(len(fms), len(fms + old)))}
    cal = Calibration(header={"format": 2, "fitted_on": "x", "fitted_at": "now"},
                      stacks={"fms-fsdp": {"stack_compute_eff": 0.81}})
    assert all(r.columns[C["stack_compute_eff"]] == 0.81 for r in apply_calibration(fms, cal))
    assert all(r.columns[C["stack_compute_eff"]] == 1.0 for r in apply_calibration(old, cal))


def test_every_record_key_is_the_profile_its_columns_were_lowered_with(records):
    for r in records:
        key = record_stack_key(r)
        assert key == r.stack or (r.stack == "default" and (key is None or key.startswith("default:"))), r.id


def test_stack_tables_round_trip_through_toml(records):
    cal = Calibration(header={"format": 2, "fitted_on": "x", "fitted_at": "now"},
                      stacks={"fms-fsdp": {"stack_compute_eff": 0.81}, "default:llm.c": {"host_layer_s": 0.002}})
    text = to_toml(cal)
    assert '[stack."fms-fsdp"]\ncompute_eff = 0.81' in text
    assert '[stack."default:llm.c"]\nhost_layer_s = 0.002' in text
    back = parse_calibration(tomllib.loads(text))
    assert back.stacks == cal.stacks
    fsdp = [r for r in records if r.stack == "fms-fsdp"]
    other = [r for r in records if r.stack != "fms-fsdp"]
    assert fsdp and other
    assert all(r.columns[C["stack_compute_eff"]] == 0.81 for r in apply_calibration(fsdp, back))
    assert all(r.columns[C["stack_compute_eff"]] == 1.0 for r in apply_calibration(other, back))


def test_a_stack_left_physical_is_noted_under_its_stack_not_as_a_device():
    cal = Calibration(header={"format": 2, "fitted_on": "x", "fitted_at": "now"})
    text = to_toml(cal, device_notes={"stack:megatron-core": ["left physical (1): compute_eff: too weak"]})
    assert '[stack."megatron-core"]\n# left physical (1): compute_eff: too weak' in text
    assert "[device." not in text
    back = parse_calibration(tomllib.loads(text))
    assert back.devices == {} and back.stacks == {"megatron-core": {}}
