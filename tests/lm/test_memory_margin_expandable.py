"""The allocator mode as a plan column: under expandable segments a run keeps less free (docs/model_memory.md
"Expandable segments (``allocator_expandable_segments``)"), derived by hand.

The default allocator's margin is ``allocator_cache_fraction x memory_allocated`` (0.05). Under
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` a failed allocation unmaps every whole free page of its one
segment per stream (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp, Note [Expandable Segments]), so the margin is
``allocator_cache_fraction_expandable x memory_allocated`` (0.013, [M] TorchTitan's DeepEP snapshot: 1.61 of 122.28 GB
cached). ``memory_reserved`` keeps ``allocator_cache_fraction`` in both modes (pages stay cached until a failure).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.analysis.margin import default_margin_bytes, unrecoverable_share
from fastmodel.errors import SweepError
from fastmodel.kernels.lm.evaluate import unrecoverable_cache_share, usable_hbm_bytes
from fastmodel.lm.execution import ExecutionSpec
from fastmodel.lm.records import lower_record
from fastmodel.lm.stacks import resolve
from fastmodel.lm.sweep import lm_sweep
from fastmodel.lm.validate import rows
from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.registry.lm import COLUMNS
from tests.suite_fixtures import cli, one_line_error

DATA = Path(__file__).resolve().parents[1] / "data"
GIB = 2**30
H100_HBM = 84943715697  # specs/devices/h100-sxm.toml: 79.11 GiB CUDA-visible
A100_40_HBM = 42412802048  # specs/devices/a100-sxm4.toml: 39.50 GiB CUDA-visible


def _row(expandable: float) -> np.ndarray:
    row = np.array([c.default for c in COLUMNS], dtype=np.float64)
    row[C["hbm_bytes"]], row[C["allocator_expandable_segments"]] = H100_HBM, expandable
    return row


def _raw(record_id: str, name: str = "runs_dev.jsonl") -> dict:
    for line in (DATA / name).read_text().splitlines():
        data = json.loads(line)
        if data["id"] == record_id:
            return data
    raise KeyError(record_id)


def test_the_columns_and_their_sourced_values():
    """The plan column is a 0/1 execution flag, off by default; the expandable share is the snapshot's
    1.61 / 122.28 = 0.0132 rounded to 0.013 ([M], pytorch/torchtitan@022f885f34 compare_deepep_vs_baseline.py)."""
    flag = COLUMNS[C["allocator_expandable_segments"]]
    assert (flag.default, flag.lo, flag.hi, flag.option, flag.group) == (0, 0, 1, "flag", "plan")
    share = COLUMNS[C["allocator_cache_fraction_expandable"]]
    assert share.default == 0.013 and share.group == "device"
    assert (123.89 - 122.28) / 122.28 == pytest.approx(share.default, abs=0.0005)


def test_one_h100_plan_by_hand_under_both_modes():
    """70 GiB allocated: the default allocator keeps 0.05 x 70 = 3.5 GiB free (75.61 GiB usable); expandable
    segments keep 0.013 x 70 = 0.91 GiB (78.20 GiB usable)."""
    allocated = 70 * GIB
    default, expandable = _row(0.0), _row(1.0)
    assert unrecoverable_cache_share(default) == unrecoverable_share(default) == 0.05
    assert unrecoverable_cache_share(expandable) == unrecoverable_share(expandable) == 0.013
    assert default_margin_bytes(default, allocated) == pytest.approx(3.5 * GIB, rel=1e-15)
    assert default_margin_bytes(expandable, allocated) == pytest.approx(0.91 * GIB, rel=1e-12)
    assert usable_hbm_bytes(expandable, allocated) == pytest.approx(H100_HBM - 0.91 * GIB, rel=1e-15)
    assert (usable_hbm_bytes(expandable, allocated) - usable_hbm_bytes(default, allocated)) / GIB == pytest.approx(
        3.5 - 0.91, rel=1e-12
    )
    # a user's usable_hbm_fraction still replaces either rule
    expandable[C["usable_hbm_fraction"]] = 0.9
    assert usable_hbm_bytes(expandable, allocated) == pytest.approx(0.9 * H100_HBM, rel=1e-15)


def test_a_plan_flips_fit_between_modes_and_reserved_does_not_move():
    """aws-fsdp-gpt3-175b-s512-n128 (PyTorch 1.10: the default allocator, its record as it is) is 0.29 GiB over:
    37.92 + 0.05 x 37.42 = 39.79 > 39.50 GiB (0.09 over before FSDP1's flat-gradient copy was counted, issue 23).
    The same plan under expandable segments (a counterfactual: 1.10 predates the option) keeps 0.013 x 37.42 =
    0.49 GiB free: 37.92 + 0.49 = 38.40 <= 39.50, it fits."""
    raw = _raw("aws-fsdp-gpt3-175b-s512-n128")
    [off] = rows([lower_record(raw)])
    on_raw = json.loads(json.dumps(raw))
    on_raw["plan"]["allocator_expandable_segments"] = True
    [on] = rows([lower_record(on_raw)])
    allocated, per_device = on["memory_allocated"], on["memory_per_device"]
    assert (allocated, per_device) == (off["memory_allocated"], off["memory_per_device"])
    assert on["memory_reserved"] == off["memory_reserved"] == pytest.approx(1.05 * allocated, rel=1e-12)
    assert (per_device + 0.05 * allocated - A100_40_HBM) / GIB == pytest.approx(0.29, abs=0.01)
    assert (A100_40_HBM - per_device - 0.013 * allocated) / GIB == pytest.approx(1.10, abs=0.01)
    assert off["fits_memory"] is False and on["fits_memory"] is True


def resolved(framework, **fields):
    return resolve(ExecutionSpec(framework=framework, **fields), pp=1, layers=32).allocator_expandable_segments


def test_stacks_set_it_where_their_launcher_does():
    """TorchTitan's run_train.sh (a5e57e4a9 on) and Megatron-Bridge's performance launcher (b7b4e11b
    PERF_ENV_VARS, dropped for Llama under Megatron-FSDP) set expandable segments; FSDP2 without TorchTitan,
    Megatron-LM's own launcher, NeMo and the rest set none. A record's own value wins."""
    assert resolved("TorchTitan (FSDP2 + EP, torch.compile)") is True
    assert resolved("PyTorch FSDP2") is None and resolved("Megatron-LM") is None and resolved("NeMo") is None
    bridge = "Megatron-Bridge (NeMo 26.04 container era; Megatron-Core, Transformer Engine)"
    assert resolved(bridge) is True and resolved(bridge, sharding="fsdp") is None
    assert resolved("TorchTitan", allocator_expandable_segments=False) is False
    # the 2024 TorchTitan rows state false: their launcher (0413364) predates the option
    titan_2024 = lower_record(_raw("torchtitan-a100-llama3-8b-s8192-n64-mb1-selective_op"))
    assert titan_2024.columns[C["allocator_expandable_segments"]] == 0.0
    deepep = lower_record(_raw("torchtitan-deepep-qwen3-30b-a3b-b200-n8-lbs8", "runs_moe_public.jsonl"))
    assert deepep.columns[C["allocator_expandable_segments"]] == 1.0


def test_a_value_other_than_0_or_1_is_one_line(tmp_path):
    """A record or execution spec takes a boolean (one line naming file and field; the CLI exits 2); a sweep
    axis takes 0/1 or false/true and refuses 0.5 in one line before any point is evaluated."""
    spec = tmp_path / "sweep.toml"
    spec.write_text(
        'model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n'
        "[execution]\nallocator_expandable_segments = 2\n[axes]\nmicro_batch = [1]\n"
    )
    one_line_error(
        cli("sweep", spec, "-o", tmp_path / "out.nc"), "execution.allocator_expandable_segments", "valid boolean"
    )
    spec.write_text(
        'model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n'
        "[axes]\nallocator_expandable_segments = [0, 0.5]\n"
    )
    one_line_error(
        cli("sweep", spec, "-o", tmp_path / "out.nc"),
        "axes.allocator_expandable_segments: 0.5 is not a switch (0 or 1, false or true)",
    )
    with pytest.raises(SweepError, match="axes.allocator_expandable_segments: 2 is outside"):
        lm_sweep("llama3.1-8b", "dgx-h100", "llm-pretrain", axes={"allocator_expandable_segments": [0, 2]})
