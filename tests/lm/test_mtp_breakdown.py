"""The MTP modules' layers in the step's breakdown (kernels/lm/mtp_breakdown.py, docs/model.md §11.4 "MTP
module"): the step charges each MTP layer its own time ``t_mtp``; the breakdown holds the same layer part by part,
so the parts add up to the step on an MTP model as on any other."""

import numpy as np
import pytest

from fastmodel.kernels.lm.mtp_breakdown import add_mtp_layers, mtp_layer
from fastmodel.kernels.lm.passes import A_ATTN, A_EP_COMM, A_EP_EXPOSED, A_GEMM, A_RECOMPUTE, N_WORK
from fastmodel.lm.engine import evaluate_table
from fastmodel.registry.lm import BREAKDOWN, RESULT_INDEX
from fastmodel.registry.lm import COLUMN_INDEX as C

PARTS = BREAKDOWN.overlapped     # the parts that add up to step_time (registry/lm.py)


def _deepseek_v3(system: str, **execution) -> np.ndarray:
    """``fastmodel run -m deepseek-v3 -s SYSTEM -t llm-pretrain --nodes 128 -p tp2.pp8.ep64 -x uneven_stages=true
    -x sequence_parallel=true`` (one MTP module, mtp_layers = 1)."""
    from fastmodel.lm.loader import load_lm_model
    from fastmodel.lm.sweep import point_columns
    from fastmodel.lm.task import load_train_task

    train = load_train_task("llm-pretrain")
    return point_columns(load_lm_model("deepseek-v3"), system, train, plan=train.mesh("tp2.pp8.ep64"), num_nodes=128,
                         execution={"uneven_stages": True, "sequence_parallel": True, **execution})


def _results(columns: np.ndarray) -> dict:
    return {k: float(v[0]) for k, v in evaluate_table(columns[:, None]).items()}


@pytest.mark.parametrize("system, execution", [("dgx-h100", {}), ("dgx-b200", {"precision": "fp4"})])
def test_the_step_is_the_sum_of_its_parts_on_an_mtp_model(system, execution):
    """Before, the breakdown counted the MTP layer as one of the last rank's ordinary layers while the step charged
    t_mtp: on DeepSeek-V3 (H100, bf16) the parts were 0.045 s below the step. Now the step is their sum, and each
    part the MTP layer touches alone (the LM head has no attention, recompute or EP) grows by m x (its MTP layer's
    seconds) from mtp_layers = 0 to 1, the layer's own passes (mtp_layer: MoE, at 16-bit GEMMs under fp4)."""
    columns = _deepseek_v3(system, **execution)
    assert columns[C["mtp_layers"]] == 1.0 and columns[C["step_overhead_s"]] == 0.0
    r = _results(columns)
    assert r["step_time"] == pytest.approx(sum(r[k] for k in PARTS), rel=1e-12)
    none = columns.copy()
    none[C["mtp_layers"]] = 0.0
    r0 = _results(none)
    assert r0["step_time"] == pytest.approx(sum(r0[k] for k in PARTS), rel=1e-12)
    m = columns[C["global_batch"]] / (columns[C["micro_batch"]] * columns[C["dp"]])   # 32 micro-batches
    assert m == 32.0
    mtp = np.zeros(N_WORK)
    t_mtp = mtp_layer(columns, mtp)[0]
    assert t_mtp > 0.0
    for part, slot in (("time_attention", A_ATTN), ("time_recompute", A_RECOMPUTE), ("comm_ep", A_EP_COMM),
                       ("exposed_ep", A_EP_EXPOSED)):
        assert r[part] - r0[part] == pytest.approx(m * mtp[slot], rel=1e-9, abs=1e-12), part


def test_add_mtp_layers_swaps_the_ordinary_layers_parts_for_the_mtp_layers():
    """count x (d_mtp - work) per part, by hand: 3 MTP layers of GEMM 2 s and attention 0.5 s in place of ordinary
    layers of GEMM 1.5 s and attention 0.25 s add 3 x 0.5 = 1.5 s and 3 x 0.25 = 0.75 s; a count of 0 (the busiest
    rank is not the last) adds nothing, even beside an undefined (NaN) vector."""
    out = np.zeros(len(RESULT_INDEX))
    work, d_mtp = np.zeros(N_WORK), np.zeros(N_WORK)
    work[A_GEMM], work[A_ATTN], d_mtp[A_GEMM], d_mtp[A_ATTN] = 1.5, 0.25, 2.0, 0.5
    add_mtp_layers(out, 3.0, work, d_mtp)
    assert out[RESULT_INDEX["time_gemm"]] == pytest.approx(1.5)
    assert out[RESULT_INDEX["time_attention"]] == pytest.approx(0.75)
    assert np.count_nonzero(out) == 2
    add_mtp_layers(out, 0.0, work, np.full(N_WORK, np.nan))
    assert np.count_nonzero(out) == 2 and not np.isnan(out).any()
