"""The DGX Cloud benchmarking recipe plans of Grok-1 314B (``tests/data/dgxc_plans.jsonl``, plan-only records).

Each plan ran on NVIDIA's clusters as a published benchmarking recipe (``tests/data/make_dgxc_plans.py`` cites
the launcher lines and the NeMo script): fastmodel must answer every one, predict that it fits under the
default margin, and predict an MFU inside the physical band of ``test_recipe_plans.py`` (0.15-0.75 of the
precision's dense peak; the bounds' reasons are given there and were not chosen from fastmodel's output).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.lm.records import read_records
from fastmodel.lm.rules import plan_status
from fastmodel.lm.validate import predict_records
from tests.bench_scripts import load_script

DATA = Path(__file__).resolve().parents[1] / "data"
PLANS = DATA / "dgxc_plans.jsonl"
MFU_LOW, MFU_HIGH = 0.15, 0.75


def _generator():
    return load_script(DATA / "make_dgxc_plans.py")


@pytest.fixture(scope="module")
def predicted():
    records = read_records(PLANS)
    status = np.zeros(len(records), dtype=np.int8)
    return records, status, predict_records(records, status)


def test_the_file_is_what_the_generator_writes_from_the_cited_launcher():
    """24 plans = 4 GPUs x 3 scales (metadata.yaml) x 2 dtypes; the H100 plan by hand from grok1/launch.sh:
    TP 4, PP 8, CP 2 on 512 GPUs -> DP 512 / 64 = 8; global batch 2 x 512 = 1,024 -> 128 micro-batches of 1."""
    generator = _generator()
    rows = [json.loads(line) for line in PLANS.read_text().splitlines() if line.strip()]
    expected = [generator.record(gpu, n, dtype) for gpu, (_, scales) in generator.PLANS.items()
                for n in scales for dtype in ("bf16", "fp8")]
    assert rows == json.loads(json.dumps(expected)) and len(rows) == 24
    h100 = next(r for r in rows if r["id"] == "dgxc-grok1-314b-h100-bf16-n512")
    assert (h100["plan"]["dp"], h100["plan"]["global_batch"], h100["plan"]["grad_accum"]) == (8, 1024, 128)
    assert all("measured" not in r for r in rows)


def test_every_grok_plan_is_answered_fits_and_has_a_sane_mfu(predicted):
    records, status, results = predicted
    codes = plan_status(np.stack([r.columns for r in records], axis=1))
    assert [r.id for r, code in zip(records, codes) if code] == []
    assert [r.id for r, code in zip(records, status) if code] == []
    assert [r.id for r, fits in zip(records, results["fits_memory"]) if fits != 1.0] == []
    assert [r.id for r, mfu in zip(records, results["mfu"]) if not MFU_LOW <= mfu <= MFU_HIGH] == []


def test_token_drop_pads_experts_to_capacity_so_hardware_flops_follow_the_routed_work(predicted):
    """Capacity factor 1.0 with padding (MegatronTokenDropCallback): every expert computes exactly its capacity
    tokens x k / E x 1.0 = the average routed load, so the step's hardware FLOPs are the model FLOPs up to the
    attention convention (HFU within 5% of MFU), not the capacity-times-EP blow-up of issue 22."""
    _, _, results = predicted
    assert np.all(np.abs(results["hfu"] / results["mfu"] - 1) < 0.05)
