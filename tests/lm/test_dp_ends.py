"""The data-parallel step of a pipeline's two end ranks (kernels/lm/dp_step.py ``_data_parallel_ranks``, docs/model.md
§11.27): where :func:`ends_alike` holds (no explicit layout, no MTP modules, not Muon, the head's parameters with a
tied copy equal to the embedding's) the first rank's step alone is taken; it must equal, to the bit, the two-call
result (``_data_parallel_ends``: the first rank's step and the last's with its drain) on hand-chosen pipelined rows
-- pp 2 to 8, vp 1 and > 1, dense and MoE, DDP and distributed optimizer, tied and untied, the loss in the split.
Rows outside the rule (explicit layout, MTP, Muon) keep the two calls; DualPipe keeps its one rank."""

import numpy as np
import pytest

from fastmodel.kernels.lm.dp_step import (
    END_FIRST,
    END_LARGER,
    _data_parallel_ends,
    _data_parallel_ranks,
    _data_parallel_step,
    ends_alike,
)
from fastmodel.kernels.lm.layout import N_RESULTS, R_COMM_DP, R_EXPOSED_DP, R_TIME_OPTIMIZER
from fastmodel.kernels.lm.memory_states import layers_per_stage
from fastmodel.kernels.lm.passes import N_WORK, W_PARAMS
from fastmodel.kernels.lm.step import busiest_stage
from fastmodel.lm.table import row

DENSE = dict(layers=32, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=32000, seq_len=2048,
             gated_mlp=1, tied_embeddings=0, micro_batch=1, global_batch=64, dp=2, n_gpus=8, pp=4,
             sharding="distopt", grad_reduce_bytes=4, overlap_grad_reduce=1, overlap_param_gather=1)
MOE = dict(DENSE, moe_experts=16, moe_topk=2, moe_ffn=1024, dense_layers=1, ep=2, n_gpus=8)
INTERLEAVED = dict(vp=2, pipeline_schedule="interleaved")

#: (name, columns, the one-call rule holds)
ROWS = [
    ("dense pp2 ddp", dict(DENSE, pp=2, dp=4, sharding="ddp"), True),
    ("dense pp4 vp2 distopt", dict(DENSE, **INTERLEAVED), True),
    ("dense pp4 vp2 no overlap (drain credited)", dict(DENSE, **INTERLEAVED, overlap_grad_reduce=0), True),
    ("dense pp8 tied", dict(DENSE, pp=8, dp=1, n_gpus=8, tied_embeddings=1), True),
    ("dense pp8 vp4 tied dp2", dict(DENSE, pp=8, dp=2, n_gpus=16, tied_embeddings=1, vp=4,
                                    pipeline_schedule="interleaved"), True),
    ("dense pp4 loss in split", dict(DENSE, embedding_loss_in_split=1, layers=30), True),
    ("moe pp4", dict(MOE), True),
    ("moe pp2 vp2 ddp", dict(MOE, pp=2, dp=4, sharding="ddp", **INTERLEAVED), True),
    ("dense pp4 explicit layout", dict(DENSE, last_stage_layers=11), False),
    ("moe pp4 vp2 explicit layout", dict(MOE, **INTERLEAVED, last_stage_layers=12), False),
    ("moe pp4 mtp", dict(MOE, mtp_layers=1), False),
    ("moe pp4 muon (a dense layer on rank 0)", dict(MOE, optimizer="muon"), False),
]


def _prepared(values):
    columns = row(**values)
    work = np.zeros(N_WORK)
    stage_mb = busiest_stage(columns, work)[0]
    micro_batches = values["global_batch"] / (values["micro_batch"] * values["dp"])
    return columns, work, work[W_PARAMS], micro_batches, stage_mb


def _first_rank_alone(columns, work, head, micro_batches, stage_mb):
    out = np.zeros(N_RESULTS)
    before, after = _data_parallel_step(columns, work.copy(), layers_per_stage(columns), head, micro_batches,
                                        stage_mb, out, END_FIRST, 0.0)
    return out[R_COMM_DP], out[R_TIME_OPTIMIZER], before + after


@pytest.mark.parametrize("name,values,alike", ROWS, ids=[r[0] for r in ROWS])
def test_one_call_equals_the_two_end_ranks(name, values, alike):
    columns, work, head, micro_batches, stage_mb = _prepared(values)
    assert ends_alike(columns, head) == alike
    one = np.zeros(N_RESULTS)
    total = _data_parallel_ranks(columns, work.copy(), head, micro_batches, stage_mb, one)
    two = np.zeros(N_RESULTS)
    before, after = _data_parallel_ends(columns, work.copy(), head, micro_batches, stage_mb, two)
    two[R_EXPOSED_DP] = before + after - two[R_TIME_OPTIMIZER]
    assert one[R_COMM_DP] > 0.0 and one[R_TIME_OPTIMIZER] > 0.0
    for index in (R_COMM_DP, R_TIME_OPTIMIZER, R_EXPOSED_DP):
        assert one[index] == two[index]         # bit for bit, as docs/performance.md states
    assert total == before + after
    if not alike:       # outside the rule the first rank alone would be wrong: the rule is what makes it exact
        first = _first_rank_alone(columns, work, head, micro_batches, stage_mb)
        assert first != pytest.approx((two[R_COMM_DP], two[R_TIME_OPTIMIZER], before + after), rel=1e-9)


def test_the_head_parameters_decide_the_rule():
    """An untied head and a tied copy are V h / t parameters, as the embedding: alike. Any other head (here
    one element more) is not: the last rank's step may then be the longer one."""
    columns, work, head, _, _ = _prepared(dict(DENSE))
    assert head == 32000 * 1024 and ends_alike(columns, head)
    assert not ends_alike(columns, head + 1.0)
    tied, _, tied_head, _, _ = _prepared(dict(DENSE, tied_embeddings=1))
    assert tied_head == 0.0 and ends_alike(tied, tied_head)


def test_dualpipe_keeps_its_one_rank():
    values = dict(DENSE, pp=4, pipeline_schedule="dualpipe")
    columns, work, head, micro_batches, stage_mb = _prepared(values)
    one = np.zeros(N_RESULTS)
    total = _data_parallel_ranks(columns, work.copy(), head, micro_batches, stage_mb, one)
    direct = np.zeros(N_RESULTS)
    before, after = _data_parallel_step(columns, work.copy(), layers_per_stage(columns), head, micro_batches,
                                        stage_mb, direct, END_LARGER, 0.0)
    assert total == before + after and one[R_COMM_DP] == direct[R_COMM_DP]
