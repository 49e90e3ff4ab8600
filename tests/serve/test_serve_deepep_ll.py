"""DeepEP's low-latency dispatch and combine (``kernels/serve/deepep_ll.py``, docs/model_serving.md S39)."""

from __future__ import annotations

import pytest

from fastmodel.registry.lm import COLUMN_INDEX as C
from fastmodel.serve.api import columns

US = 1e-6


def _h800(ep: float):
    """DeepEP's benchmark setting (docs/legacy.md @dd758caf): H800, 8 GPUs per NVLink domain, CX7 ~50 GB/s,
    NVLink ~160 GB/s, hidden 7168, top-8."""
    row = columns("mixtral-8x7b", "H100", tp=1, attention_dp=16, ep=16, batch_size=16).copy()
    row[C["hidden"]], row[C["moe_topk"]], row[C["ep"]] = 7168.0, 8.0, ep
    row[C["inter_bw"]], row[C["intra_bw"]], row[C["intra_eff"]], row[C["domain_size"]] = 50e9, 160e9, 1.0, 8.0
    return row


def test_ep64_row_of_deepeps_table_by_hand():
    """README EP 64 row (128 tokens): dispatch 173 us, combine 314 us. Messages: 7168 FP8 + 7168/128 x 4 scale
    + 16 header = 7408 B; 14336 B BF16. Fixed time from the EP 16 row: 118 - 128*8*7408*(8/16)/50e9 = 42.142 us,
    195 - 128*8*14336*(8/16)/50e9 = 48.199 us. EP 64 (8 nodes): 56/64 of the copies cross the NIC:
    dispatch 42.142 + 7,585,792 x 0.875 / 50e9 = 42.142 + 132.751 = 174.893 us (+1.1 %);
    combine 48.199 + 14,680,064 x 0.875 / 50e9 = 48.199 + 256.901 = 305.100 us (-2.8 %)."""
    from fastmodel.kernels.serve.deepep_ll import (
        LL_COMBINE_FIXED_S,
        LL_DISPATCH_FIXED_S,
        deepep_ll_time,
        dispatch_message_bytes,
        ll_direction_time,
    )
    assert dispatch_message_bytes(7168.0) == 7408.0
    assert LL_DISPATCH_FIXED_S == pytest.approx(42.142 * US, abs=1e-9)
    assert LL_COMBINE_FIXED_S == pytest.approx(48.199 * US, abs=1e-9)
    row = _h800(64.0)
    dispatch = ll_direction_time(row, 128.0, 7408.0, LL_DISPATCH_FIXED_S)
    combine = ll_direction_time(row, 128.0, 14336.0, LL_COMBINE_FIXED_S)
    assert dispatch == pytest.approx(174.893 * US, abs=2e-9)
    assert combine == pytest.approx(305.100 * US, abs=2e-9)
    assert abs(dispatch / (173 * US) - 1.0) < 0.02 and abs(combine / (314 * US) - 1.0) < 0.03
    assert deepep_ll_time(row, 128.0) == pytest.approx(dispatch + combine, rel=1e-12)


def test_one_domain_runs_over_nvlink_and_ep1_sends_nothing():
    """EP 8 (one node): 7/8 of the copies go over NVLink at 160 GB/s, none over the NIC:
    42.142 + 7,585,792 x 7/8 / 160e9 = 42.142 + 41.485 = 83.627 us (README 77 us, +8.6 %)."""
    from fastmodel.kernels.serve.deepep_ll import LL_DISPATCH_FIXED_S, deepep_ll_time, ll_direction_time
    assert ll_direction_time(_h800(8.0), 128.0, 7408.0, LL_DISPATCH_FIXED_S) == pytest.approx(83.627 * US, abs=2e-9)
    assert deepep_ll_time(_h800(1.0), 128.0) == 0.0
    assert deepep_ll_time(_h800(64.0), 0.0) == 0.0


def test_layer_comm_charges_the_low_latency_kernels_and_the_record_selects_them():
    """Under attention DP with ``moe_dispatcher`` 4 the MoE block's two all-to-alls are ``deepep_ll_time`` of
    the rank's tokens; ``serve.moe_a2a = "deepep_ll"`` sets the code on every engine; a disaggregated record
    passes it to the decode pool only."""
    from fastmodel.kernels.serve.allreduce import serve_allreduce
    from fastmodel.kernels.serve.costs import layer_comm, serve_etp
    from fastmodel.kernels.serve.deepep_ll import deepep_ll_time
    from fastmodel.serve.disagg import pool_record
    from fastmodel.serve.profiles import moe_dispatcher

    row = columns("mixtral-8x7b", "H100", tp=1, attention_dp=16, ep=16, batch_size=64, moe_dispatcher="deepep_ll")
    assert row[C["moe_dispatcher"]] == 4.0
    h, m = row[C["hidden"]], 64.0
    expected = serve_allreduce(row, 2.0 * m / 16.0 * h, 1.0, 1.0) + deepep_ll_time(row, m / 16.0) \
        + serve_allreduce(row, 2.0 * m / 16.0 * h, serve_etp(row), 16.0)
    assert layer_comm(row, m, 1.0) == pytest.approx(expected, rel=1e-12)
    for engine in ("sglang", "vllm", "trtllm"):
        assert moe_dispatcher(engine, 16, 2, False, "deepep_ll") == 4.0
    assert moe_dispatcher("sglang", 16, 2, False) == 1.0
    data = {"system": {}, "serve": {"input_len": 8, "output_len": 8, "moe_a2a": "deepep_ll"},
            "disagg": {"prefill": {"tp": 1, "ep": 16}, "decode": {"tp": 1, "ep": 16}}}
    assert pool_record(data, "decode", 4, 8)["serve"]["moe_a2a"] == "deepep_ll"
    assert "moe_a2a" not in pool_record(data, "prefill", 4, 8)["serve"]


def test_deepep_ll_is_refused_in_training_and_noted_without_attention_dp():
    """The low-latency kernels are priced for serving decode only: a training plan that names them is one line
    naming the field; a serving record that states them without attention DP (no dispatch to run) gets a note."""
    import json
    from pathlib import Path

    import pytest

    from fastmodel.errors import SpecError
    from fastmodel.lm.records import lower_record

    data = Path(__file__).resolve().parents[1] / "data"
    run = next(json.loads(line) for line in (data / "runs_moe_public.jsonl").read_text().splitlines()
               if json.loads(line)["plan"].get("moe_dispatcher") == "deepep")
    run["plan"]["moe_dispatcher"] = "deepep_ll"
    with pytest.raises(SpecError, match="plan.moe_dispatcher: 'deepep_ll' is DeepEP's low-latency decode kernels"):
        lower_record(run, "runs.jsonl:1")
    from fastmodel.serve.records import lower_serve_record

    record = json.loads((data / "serve_dev_load.jsonl").read_text().splitlines()[0])
    record["serve"]["moe_a2a"] = "deepep_ll"
    notes = lower_serve_record(record, "serve.jsonl:1").notes
    assert any(note.startswith("serve.moe_a2a = deepep_ll without attention DP") for note in notes)
