"""Megatron-LM 2021-22's pipeline exchanges (docs/model.md §11.52, ``pp_exchange_2021``): every exchange blocking
(``_communicate``: ``batch_isend_irecv``, wait, ``torch.cuda.synchronize``), and without sequence parallelism the
sent tensor scatter-gathered over the TP group. The critical path's counts are checked against an event simulation
of the call order written here from NVIDIA/Megatron-LM de7dc40f88 ``megatron/schedules.py`` lines 141-456; the
seconds by hand."""

import pytest

from fastmodel.kernels.lm import pipeline, pipeline_2021
from fastmodel.kernels.nccl import allgather_time
from fastmodel.lm.table import row

# --- the schedules, as de7dc40f88 writes them -------------------------------------------------------------------


def _x(ops, send_next=False, send_prev=False, recv_prev=False, recv_next=False):
    """One ``_communicate`` call; ``p2p_communication``'s wrappers skip it on the first / last stage, as do
    exchanges with nothing to send or receive."""
    if send_next or send_prev or recv_prev or recv_next:
        ops.append(("X", send_next, send_prev, recv_prev, recv_next))


def _interleaved(p, m, v, r):
    """Rank ``r``'s calls in ``forward_backward_pipelining_with_interleaving`` (lines 141-360)."""
    total, every = m * v, m == p
    warmup = total if every else min(2 * (p - r - 1) + (v - 1) * p, total)      # lines 169-178
    fchunk = lambda k: (k % (p * v)) // p                                        # noqa: E731  get_model_chunk_id
    bchunk = lambda k: v - 1 - fchunk(k)                                         # noqa: E731
    first = lambda c: r == 0 and c == 0                                          # noqa: E731
    last = lambda c: r == p - 1 and c == v - 1                                   # noqa: E731
    ops = []
    _x(ops, recv_prev=not first(0))                                              # line 233
    for k in range(warmup):                                                      # lines 235-269
        ops.append(("F", k))
        recv_prev = not (r == 0 and fchunk(k + 1) == 0) and k != total - 1
        if k == warmup - 1 and not every:
            _x(ops, send_next=not last(fchunk(k)), recv_prev=recv_prev, recv_next=r != p - 1)
        else:
            _x(ops, send_next=not last(fchunk(k)), recv_prev=recv_prev)
    steady = total - warmup
    for k in range(steady):                                                      # lines 272-340
        ops += [("F", k + warmup), ("B", k)]
        recv_prev = not (r == 0 and fchunk(k + warmup - (p - 1)) == v - 1) and k != steady - 1
        recv_next = not (r == p - 1 and bchunk(k - (p - 1)) == 0)
        _x(ops, not last(fchunk(k + warmup)), not first(bchunk(k)), recv_prev, recv_next)
    if every:                                                                    # lines 344-346
        _x(ops, recv_next=not last(fchunk(total - 1)))
    for k in range(steady, total):                                               # lines 347-358
        ops.append(("B", k))
        recv_next = not (r == p - 1 and bchunk(k + 1) == v - 1) and k != total - 1
        _x(ops, send_prev=not first(bchunk(k)), recv_next=recv_next)
    return ops


def _one_chunk(p, m, r):
    """Rank ``r``'s calls in ``forward_backward_pipelining_without_interleaving`` (lines 363-456)."""
    warmup = min(p - r - 1, m)
    first, last = r == 0, r == p - 1
    ops = []
    for i in range(warmup):
        _x(ops, recv_prev=not first)
        ops.append(("F", i))
        _x(ops, send_next=not last)
    if m > warmup:
        _x(ops, recv_prev=not first)
    for i in range(m - warmup):
        ops.append(("F", i + warmup))
        _x(ops, send_next=not last, recv_next=not last)                          # send_forward_recv_backward
        ops.append(("B", i))
        _x(ops, send_prev=not first, recv_prev=not first and i != m - warmup - 1)
    for i in range(warmup):
        _x(ops, recv_next=not last)
        ops.append(("B", m - warmup + i))
        _x(ops, send_prev=not first)
    return ops


def _makespan(p, m, v, send, gather, f=1.0, b=2.0):
    """Each rank runs its calls in order; a chunk's forward takes ``f / v``, its backward ``b / v``. A transfer
    starts when its sender's and its receiver's exchanges are both posted and lasts ``send`` times the sends out
    of the sender's exchange (one NIC) or the receives into the receiver's, whichever is more; an exchange ends
    with its last transfer (the synchronize), then gathers each tensor it received (``gather`` each)."""
    prog = [_interleaved(p, m, v, r) if v > 1 else _one_chunk(p, m, r) for r in range(p)]
    fifo = {}
    for r in range(p):
        for i, op in enumerate(prog[r]):
            for name, flag in zip(("sn", "sp", "rp", "rn"), op[1:]):
                if op[0] == "X" and flag:
                    fifo.setdefault((name, r), []).append(i)
    peer = {}
    for r in range(p):
        for name, other, dual, q in (("sn", "rp", "sn", (r + 1) % p), ("sp", "rn", "sp", (r - 1) % p),
                                     ("rp", "sn", "sn", (r - 1) % p), ("rn", "sp", "sp", (r + 1) % p)):
            mine, theirs = fifo.get((name, r), []), fifo.get((other, q), [])
            assert len(mine) == len(theirs)
            for i, j in zip(mine, theirs):
                peer[(name, r, i)] = (q, j)
    sends = lambda r, i: prog[r][i][1] + prog[r][i][2]                           # noqa: E731
    receives = lambda r, i: prog[r][i][3] + prog[r][i][4]                        # noqa: E731
    pc, clock, posted = [0] * p, [0.0] * p, {}
    moved = True
    while moved:
        moved = False
        for r in range(p):
            while pc[r] < len(prog[r]):
                op = prog[r][pc[r]]
                if op[0] != "X":
                    clock[r] += (f if op[0] == "F" else b) / v
                    pc[r] += 1
                    moved = True
                    continue
                posted[(r, pc[r])] = clock[r]
                end = clock[r]
                for name, flag in zip(("sn", "sp", "rp", "rn"), op[1:]):
                    q, j = peer[(name, r, pc[r])] if flag else (None, None)
                    if flag and (q, j) not in posted:
                        break
                    if flag:
                        out = (r, pc[r]) if name in ("sn", "sp") else (q, j)
                        into = (q, j) if name in ("sn", "sp") else (r, pc[r])
                        width = max(sends(*out), receives(*into))
                        end = max(end, max(clock[r], posted[(q, j)]) + width * send)
                else:
                    clock[r] = end + gather * receives(r, pc[r])
                    pc[r] += 1
                    moved = True
                    continue
                break
    assert all(pc[r] == len(prog[r]) for r in range(p))
    return max(clock)


def _counts(m, p, v):
    counts = getattr(pipeline_2021.sync_exchange_counts, "py_func", pipeline_2021.sync_exchange_counts)
    return counts(float(m), float(p), float(v))


@pytest.mark.parametrize("p, m, v", [
    (2, 1, 1), (2, 2, 1), (2, 12, 1), (3, 1, 1), (3, 2, 1), (3, 6, 1), (4, 2, 1), (4, 8, 1), (8, 4, 1), (12, 40, 1),
    (2, 2, 2), (2, 6, 3), (2, 16, 4), (3, 3, 2), (3, 6, 2), (4, 4, 3), (4, 28, 3), (8, 16, 4), (8, 48, 2),
])
def test_counts_match_the_event_simulation_of_the_2021_schedules(p, m, v):
    """Without exchanges the schedules run m t + (p - 1)/v t (the bubble the model charges, §11.7: the warm-up
    counts agree); each send or gather adds its count, for F : B = 1 : 2 and 1 : 3 alike."""
    t = 3.0
    base = _makespan(p, m, v, 0.0, 0.0)
    assert base == pytest.approx(m * t + (p - 1) / v * t if m >= p else (m + p - 1) * t, rel=1e-12)
    sends, gathers = _counts(m, p, v)
    assert (_makespan(p, m, v, 1e-3, 0.0) - base) / 1e-3 == pytest.approx(sends, abs=1e-6)
    assert (_makespan(p, m, v, 0.0, 1e-3) - base) / 1e-3 == pytest.approx(gathers, abs=1e-6)
    slow = _makespan(p, m, v, 0.0, 0.0, b=3.0)
    assert (_makespan(p, m, v, 1e-3, 0.0, b=3.0) - slow) / 1e-3 == pytest.approx(sends, abs=1e-6)


def test_two_stage_one_chunk_by_hand():
    """p = 2, m = 2, F = 1, B = 2, send s. Rank 0: F0 [0, 1], ``send_forward`` to rank 1, which waits in
    ``recv_forward``: [1, 1 + s]. Rank 0: F1 [1 + s, 2 + s], then ``send_forward_recv_backward``; rank 1: F0
    [1 + s, 2 + s], B0 [2 + s, 4 + s], ``send_backward_recv_forward`` meets it: both directions at once, [4 + s,
    4 + 2s]. Rank 0: B0 [4 + 2s, 6 + 2s] (its ``send_backward`` is none: first stage), ``recv_backward``; rank 1:
    F1, B1 [4 + 2s, 7 + 2s], ``send_backward``: [7 + 2s, 7 + 3s]; rank 0's B1 [7 + 3s, 9 + 3s]. 3 sends: m + 1,
    against 2 (m + p - 1) = 6 in §11.7's closed form."""
    assert _makespan(2, 2, 1, 1e-3, 0.0) == pytest.approx(9.0 + 3e-3, rel=1e-12)
    assert _counts(2, 2, 1) == (3.0, 3.0)


def test_table1_counts_by_hand():
    """GPT-76.1B (p 4, v 3, m 28): 2 (84 + 2) = 172 sends, 171 gathers; GPT-1T (p 64, m 512, 1F1B):
    2 (576) - 5 = 1147; GPT-39.1B (p 2, m 12): 13, where the closed form of §11.7 counts 2 (m + p - 1) = 26."""
    assert _counts(28, 4, 3) == (172.0, 171.0)
    assert _counts(512, 64, 1) == (1147.0, 1147.0)
    assert _counts(12, 2, 1) == (13.0, 13.0)


# --- the seconds ----------------------------------------------------------------------------------------------

#: TP 4 inside a 4-GPU NVLink domain, PP 4 across domains (the NICs), 8 micro-batches of 2 x 1024 tokens, h 2048
RUN = dict(layers=8, hidden=2048, ffn=8192, heads=16, kv_heads=16, head_dim=128, vocab=1000, seq_len=1024,
           micro_batch=2, global_batch=16, tp=4, pp=4, dp=1, n_gpus=16, domain_size=4, sharding="ddp",
           inter_bw=25e9, inter_eff=0.8, inter_latency=10e-6, hbm_bw=2.0e12, hbm_eff=0.8, collective_overhead_s=20e-6)


def _p2p(**values):
    p2p = getattr(pipeline.pipeline_p2p, "py_func", pipeline.pipeline_p2p)
    return p2p(row(**{**RUN, **values}), 8.0)


def test_blocking_scatter_gathered_exchanges_by_hand():
    """c = 2 B x 2 x 1024 x 2048 = 8,388,608 B. 1F1B, p 4, m 8: 2 (8 + 4) - 5 = 19 exchanges. Blocking alone
    (code 1): each the whole c at c / (25e9 x 0.8) + 10 us = 429.4 us, 8.159 ms, all exposed. Scatter-gathered
    (code 2): each send c/4, 114.86 us, and 19 gathers of c over the 4 TP ranks, each the all-gather, 20 us of
    issue and the copy-out 2c through HBM at 2e12 x 0.8 (10.49 us)."""
    c = 2.0 * 2 * 1024 * 2048
    comm, exposed = _p2p(pp_exchange_2021=1)
    assert exposed == comm == pytest.approx(19 * (c / (25e9 * 0.8) + 10e-6), rel=1e-12)
    assert exposed == pytest.approx(8.159e-3, rel=1e-3)
    comm, exposed = _p2p(pp_exchange_2021=2)
    part = c / 4 / (25e9 * 0.8) + 10e-6
    gather = allgather_time(row(**RUN), c, 4.0, 1.0) + 20e-6 + 2.0 * c / (2.0e12 * 0.8)
    assert exposed == comm == pytest.approx(19 * part + 19 * gather, rel=1e-12)


def test_interleaved_and_sequence_parallel_by_hand():
    """vp 2 (p 4, m 8): 2 (16 + 2) = 36 sends, 35 gathers, where Megatron-Core's closed form exposes the chains'
    2 (p v - 1) = 14. Sequence parallelism sends the s/t slice whole (cfd2e21607 lines 63-65): 19 sends of c/4,
    no gather. TP 1: whole sends, no gather."""
    c = 2.0 * 2 * 1024 * 2048
    part = c / 4 / (25e9 * 0.8) + 10e-6
    gather = allgather_time(row(**RUN), c, 4.0, 1.0) + 20e-6 + 2.0 * c / (2.0e12 * 0.8)
    values = dict(vp=2, pipeline_schedule="interleaved", layers=16)
    _, exposed = _p2p(**values, pp_exchange_2021=2)
    assert exposed == pytest.approx(36 * part + 35 * gather, rel=1e-12)
    assert _p2p(**values)[1] == pytest.approx(14 * (c / (25e9 * 0.8) + 10e-6), rel=1e-12)
    _, exposed = _p2p(sequence_parallel=1, pp_exchange_2021=2)
    assert exposed == pytest.approx(19 * part, rel=1e-12)
    _, exposed = _p2p(tp=1, n_gpus=4, domain_size=1, pp_exchange_2021=2)
    assert exposed == pytest.approx(19 * (c / (25e9 * 0.8) + 10e-6), rel=1e-12)


def test_deepspeed_engine_and_other_schedules_keep_their_sends():
    """DeepSpeed's engine comes first (§11.31); GPipe is not a schedule of that code: the flag is not read."""
    assert _p2p(pp_engine_deepspeed=1, pp_exchange_2021=2) == _p2p(pp_engine_deepspeed=1)
    assert _p2p(pipeline_schedule="gpipe", pp_exchange_2021=2) == _p2p(pipeline_schedule="gpipe")


def test_the_exact_pipeline_path_refuses_them():
    from fastmodel.errors import UnsupportedError
    from fastmodel.lm.pipeline import send_time

    with pytest.raises(UnsupportedError, match="plan.pp_exchange_2021"):
        send_time(row(**RUN, pp_exchange_2021=1))


# --- which runs get it ------------------------------------------------------------------------------------------


class _Execution:
    def __init__(self, sharding, precision="fp16"):
        self.sharding, self.precision = sharding, precision
        self.moe_dispatcher = "none"


def test_the_stack_sets_the_exchanges_by_codebase():
    """Megatron-LM (the SC21 scripts, Korthikanti 2022): blocking and scatter-gathered (2); a Megatron-DeepSpeed
    text (vTrain): blocking only (1); DeepSpeed's engine keeps its own sends (its flag wins in the kernel)."""
    from fastmodel.lm.stacks import megatron_2021

    assert megatron_2021.defaults(_Execution("ddp"), "Megatron-LM PTD-P")["pp_exchange_2021"] == 2.0
    assert megatron_2021.defaults(_Execution("ddp"), None)["pp_exchange_2021"] == 2.0
    vtrain = "Megatron-LM (vTrain ground truth, 2023-24; data/README: Megatron-DeepSpeed codebase)"
    assert megatron_2021.defaults(_Execution("ddp"), vtrain)["pp_exchange_2021"] == 1.0
    both = megatron_2021.defaults(_Execution("zero1", "bf16"), "Megatron-DeepSpeed (3D)")
    assert both["pp_engine_deepspeed"] and both["pp_exchange_2021"] == 1.0


@pytest.mark.parametrize("value, reason", [(1.5, "1.5 is not a code of pp_exchange_2021: 0, 1 or 2"),
                                           (0.5, "0.5 is not a code of pp_exchange_2021: 0, 1 or 2"),
                                           (3, "3 is outside \\[0, 2\\]")])
def test_the_code_takes_whole_numbers_only(value, reason):
    """Review 5 F3: 1.5 ran silently as code 1; now refused as 3 is, with one reason (registry/validators.py)."""
    from pydantic import ValidationError

    from fastmodel.lm.execution import ExecutionSpec

    with pytest.raises(ValidationError, match=reason):
        ExecutionSpec(pp_exchange_2021=value)
    assert all(ExecutionSpec(pp_exchange_2021=code).pp_exchange_2021 == code for code in (0, 1, 2))
