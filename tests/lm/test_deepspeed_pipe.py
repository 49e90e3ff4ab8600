"""DeepSpeed's pipeline engine (docs/model.md §11.31, ``pp_engine_deepspeed``): its sends carry 1/t of the
activation, gathered over the TP group on receipt, and its blocking send/recv order exposes 4(m - 1) + 2(p - 2)
sends and 3(m + p - 1) - 5 gathers per step. The counts are checked against an event simulation of
``TrainSchedule`` written here from microsoft/DeepSpeed v0.5.4 ``runtime/pipe/schedule.py`` lines 189-289; the
seconds by hand."""

import pytest

from fastmodel.kernels.lm import pipeline
from fastmodel.kernels.nccl import allgather_time
from fastmodel.lm.table import row

# --- the schedule, as DeepSpeed v0.5.4 writes it (schedule.py TrainSchedule.steps, _step_to_micro_batch) ----------


def _commands(m, p, s):
    """Stage ``s``'s command list: ``2 (m + p - 1)`` steps; forward micro-batch k at step 2k + s, backward at step
    2k + 2p - 1 - s (the _even/_odd_step_*_id formulas solved for the step); a forward step runs RecvActivation,
    SendGrad (the previous step's micro-batch), ForwardPass; a backward step SendActivation, RecvGrad, BackwardPass."""
    cmds, prev = [], -1
    valid = range(m).__contains__
    for step in range(2 * (m + p - 1)):
        forward = step % 2 == s % 2
        mb = (step - s) // 2 if forward else (step + s + 1 - 2 * p) // 2
        if forward:
            cmds += [("RA", mb)] if valid(mb) and s > 0 else []
            cmds += [("SG", prev)] if valid(prev) and s > 0 else []
        else:
            cmds += [("SA", prev)] if valid(prev) and s < p - 1 else []
            cmds += [("RG", mb)] if valid(mb) and s < p - 1 else []
        cmds += [("F" if forward else "B", mb)] if valid(mb) else []
        prev = mb
    return cmds


def _makespan(m, p, send, gather, tf=1.0, tb=3.0):
    """Each stage runs its commands in order; a send and its receive start together when both stages reach them
    and both end ``send`` later (a blocking NCCL send of a large tensor waits for its receiver); a forward gathers
    its input (not on the first stage), a backward its output and the received gradient (not on the last)."""
    prog = [_commands(m, p, s) for s in range(p)]
    pc, clock, posted = [0] * p, [0.0] * p, {}
    peer = {"SA": ("A", 0, 1), "RA": ("A", -1, 0), "SG": ("G", 0, -1), "RG": ("G", 1, 0)}
    moved = True
    while moved:
        moved = False
        for s in range(p):
            while pc[s] < len(prog[s]):
                kind, mb = prog[s][pc[s]]
                if kind in "FB":
                    clock[s] += tf + gather * (s > 0) if kind == "F" else tb + 2 * gather * (s < p - 1)
                    pc[s] += 1
                    moved = True
                    continue
                tag, src, dst = peer[kind]
                key = (tag, mb, s + src, s + dst)
                if key in posted and posted[key][0] != s:
                    other, ready = posted.pop(key)
                    clock[s] = clock[other] = max(ready, clock[s]) + send
                    pc[s] += 1
                    pc[other] += 1
                    moved = True
                    continue
                posted.setdefault(key, (s, clock[s]))
                break
    assert all(pc[s] == len(prog[s]) for s in range(p))
    return max(clock)


def _counts(m, p):
    counts = getattr(pipeline.deepspeed_exposed_counts, "py_func", pipeline.deepspeed_exposed_counts)
    return counts(float(m), float(p))


@pytest.mark.parametrize(
    "m, p", [(1, 2), (1, 5), (2, 2), (6, 2), (2, 3), (3, 3), (12, 3), (2, 6), (8, 4), (16, 4), (32, 8), (128, 12)]
)
def test_exposed_counts_match_the_event_simulation_of_train_schedule(m, p):
    """Without sends and gathers the schedule runs (m + p - 1)(F + B), 1F1B's time; each send or gather adds its
    count: 4m + 2p - 8 and 3m + 3p - 8 for p >= 3, m >= 2 (240 micro-batches on 35 stages: 1022 and 817)."""
    base = _makespan(m, p, 0.0, 0.0)
    assert base == pytest.approx((m + p - 1) * 4.0, rel=1e-12)
    sends, gathers = _counts(m, p)
    assert (_makespan(m, p, 1e-3, 0.0) - base) / 1e-3 == pytest.approx(sends, abs=1e-6)
    assert (_makespan(m, p, 0.0, 1e-3) - base) / 1e-3 == pytest.approx(gathers, abs=1e-6)


def test_mtnlg_counts_by_hand():
    assert _counts(240, 35) == (1022.0, 817.0)
    assert _counts(160, 35) == (4 * 160 + 2 * 35 - 8, 3 * 160 + 3 * 35 - 8)


# --- the seconds ----------------------------------------------------------------------------------------------

#: a small 3D run: TP 4 inside a 4-GPU NVLink domain, PP 4 across domains (the NICs), 8 micro-batches of 2 x 1024 tokens, h 2048
RUN = dict(
    layers=8,
    hidden=2048,
    ffn=8192,
    heads=16,
    kv_heads=16,
    head_dim=128,
    vocab=1000,
    seq_len=1024,
    micro_batch=2,
    global_batch=16,
    tp=4,
    pp=4,
    dp=1,
    n_gpus=16,
    domain_size=4,
    sharding="ddp",
    inter_bw=25e9,
    inter_eff=0.8,
    inter_latency=10e-6,
    hbm_bw=2.0e12,
    hbm_eff=0.8,
    collective_overhead_s=20e-6,
)


def _p2p(**values):
    p2p = getattr(pipeline.pipeline_p2p, "py_func", pipeline.pipeline_p2p)
    return p2p(row(**{**RUN, **values}), 8.0)


def test_partitioned_blocking_sends_by_hand():
    """c = 2 B x 2 x 1024 x 2048 = 8,388,608 B. Megatron's 1F1B: 2(p - 1) + 2m = 22 exposed sends of c at
    c / (25e9 x 0.8) + 10 us = 429.4 us: 9.447 ms. DeepSpeed: each send c/4 = 2,097,152 B, 114.86 us; 4 x 8 + 2 x 4
    - 8 = 32 of them, 3.676 ms; 3 x 8 + 3 x 4 - 8 = 28 gathers of c over the 4 TP ranks, each the all-gather plus
    20 us of issue plus (3 + 4/4) c through HBM at 2e12 x 0.8 (20.97 us)."""
    c = 2.0 * 2 * 1024 * 2048
    comm, exposed = _p2p()
    send = c / (25e9 * 0.8) + 10e-6
    assert exposed == pytest.approx(22 * send, rel=1e-12)
    assert comm == pytest.approx(2 * (8 + 4 - 1) * send, rel=1e-12)
    comm, exposed = _p2p(pp_engine_deepspeed=1)
    part = c / 4 / (25e9 * 0.8) + 10e-6
    assert part == pytest.approx(114.8576e-6, rel=1e-6)
    gather = allgather_time(row(**RUN), c, 4.0, 1.0) + 20e-6 + 4.0 * c / (2.0e12 * 0.8)
    assert exposed == pytest.approx(32 * part + 28 * gather, rel=1e-12)
    assert comm == exposed          # blocking: what is on the critical path is all exposed (review HIGH 1)


def test_the_exact_pipeline_path_refuses_deepspeed_blocking_sends():
    """The exact path runs each send on its own stream; DeepSpeed's blocking order is in the step kernel only."""
    from fastmodel.errors import UnsupportedError
    from fastmodel.lm.pipeline import send_time

    columns = row(**RUN, pp_engine_deepspeed=1)
    with pytest.raises(UnsupportedError, match="plan.pp_engine_deepspeed"):
        send_time(columns)
    assert send_time(row(**RUN)) > 0.0


def test_without_tp_nothing_is_gathered_and_interleaving_keeps_megatron_sends():
    """TP 1 (one GPU a node): whole sends, no gathers, 32 of them; vp 2 is not DeepSpeed's schedule: the flag is ignored."""
    c = 2.0 * 2 * 1024 * 2048
    _, exposed = _p2p(tp=1, n_gpus=4, domain_size=1, pp_engine_deepspeed=1)
    assert exposed == pytest.approx(32 * (c / (25e9 * 0.8) + 10e-6), rel=1e-12)
    values = dict(vp=2, pipeline_schedule="interleaved")
    assert _p2p(**values, pp_engine_deepspeed=1) == _p2p(**values)


# --- which runs get it ------------------------------------------------------------------------------------------


class _Execution:
    def __init__(self, sharding, precision="bf16"):
        self.sharding, self.precision = sharding, precision
        self.moe_dispatcher = "none"


def test_the_stacks_set_the_engine_where_deepspeed_runs():
    from fastmodel.lm.stacks import deepspeed, megatron_2021

    assert megatron_2021.defaults(_Execution("zero1"), "Megatron-DeepSpeed (3D)")["pp_engine_deepspeed"]
    vtrain = "Megatron-LM (vTrain ground truth, 2023-24; data/README: Megatron-DeepSpeed codebase)"
    assert "pp_engine_deepspeed" not in megatron_2021.defaults(_Execution("ddp"), vtrain)
    assert "pp_engine_deepspeed" not in megatron_2021.defaults(_Execution("distopt"), "Megatron-LM")
    assert deepspeed.defaults(_Execution("zero1", "fp16"), "GPT-NeoX (Megatron + DeepSpeed ZeRO-1)")[
        "pp_engine_deepspeed"
    ]
