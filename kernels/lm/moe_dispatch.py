"""The expert-parallel dispatch and combine of a MoE layer (docs/model.md §11.14, §11.14.2): the destinations a
token's top-k experts reach under uniform, node-limited or round-robin routing (:func:`distinct_uniform`,
:func:`distinct_round_robin`, :func:`distinct_destinations`; :func:`node_limit_short` for the rule table), DeepEP's
NVLink and RDMA copies (:func:`deepep_time`) and the dispatcher's seconds, with their scale-out part
(:func:`dispatch_time`). The expert mesh, rows and compute are ``kernels/lm/moe.py``. Moved out of it when it neared
the 450-line limit; no change to any function.
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.lm.layout import (
    C_DEEPEP_NVL_BW, C_EP, C_HIDDEN, C_INTER_BW, C_INTER_EFF, C_INTER_LATENCY, C_INTRA_BW, C_INTRA_EFF, C_INTRA_LATENCY,
    C_MOE_DISPATCHER, C_MOE_EXPERTS, C_MOE_FP8_DISPATCH, C_MOE_MAX_NODES, C_MOE_ROUND_ROBIN, C_MOE_TOPK,
    DISPATCH_ALLGATHER, DISPATCH_DEEPEP,
)
from fastmodel.kernels.nccl import allgather_time, alltoall_time, members_per_domain
from fastmodel.kernels.lm.moe import FP8_DISPATCH_BYTES, expert_rows, expert_tp, load_factor, rank_tokens


@njit(inline="always")
def distinct_uniform(experts, holders, k):
    """Expected holders one token's ``k`` experts span, drawn uniformly without replacement from ``experts``
    placed ``experts / holders`` per holder: ``n (1 - C(E - E/n, k) / C(E, k))`` (a holder is missed when all
    ``k`` come from the other ``E - E/n``; the ratio is the product of ``(E - E/n - i) / (E - i)``, i < k)."""
    per = experts / holders
    miss = 1.0
    for i in range(int(k)):
        if experts - per - i <= 0.0:      # fewer than k experts off any holder: every holder is hit (and the
            return holders                # divisor E - i stays > 0; the rule table refuses E < k, node_limit_short)
        miss *= (experts - per - i) / (experts - i)
    return holders * (1.0 - miss)


@njit
def distinct_round_robin(experts, holders, k):
    """Mean holders one token's experts span under TorchTitan's forced round-robin routing: token i takes
    experts ``k i ... k i + k - 1`` mod E (``_debug_force_load_balance_routing``, models/moe/moe.py at
    022f885f34), ``E / holders`` consecutive experts per holder; averaged over the E tokens of one period."""
    e = int(experts)
    kk = int(k)
    per = max(1, e // int(holders))
    total = 0.0
    for i in range(e):
        first = (kk * i) % e
        total += min((first + kk - 1) // per - first // per + 1, holders)
    return total / e


@njit
def node_limit_short(row):
    """True when node-limited routing cannot run: the ``moe_max_nodes`` M < N NVLink domains of the expert-parallel
    group (ep ranks etp apart) hold ``M E / N`` experts, fewer than the ``k`` a token takes (rule table status
    ``node_limit_below_topk``; forced round-robin routing ignores the limit)."""
    limit = row[C_MOE_MAX_NODES]
    ep = row[C_EP]
    if row[C_MOE_EXPERTS] <= 0.0 or limit <= 0.0 or row[C_MOE_ROUND_ROBIN] > 0.0 or ep <= 1.0:
        return False
    domains = ep / members_per_domain(row, ep, expert_tp(row))
    return limit < domains and limit * row[C_MOE_EXPERTS] / domains < row[C_MOE_TOPK]


@njit
def distinct_destinations(row, group, domains):
    """(domains, ranks) one token's ``k`` experts span among the ``domains`` NVLink domains and the ``group``
    ranks of its expert-parallel group (docs/model.md §11.14.2): ``distinct_round_robin`` under forced
    round-robin routing, else ``distinct_uniform``; node-limited routing (``moe_max_nodes`` M < domains, when
    the uniform spread exceeds it) gives M domains and ranks drawn from those M domains' experts."""
    experts = row[C_MOE_EXPERTS]
    k = row[C_MOE_TOPK]
    if row[C_MOE_ROUND_ROBIN] > 0.0:
        return distinct_round_robin(experts, domains, k), distinct_round_robin(experts, group, k)
    spread = distinct_uniform(experts, domains, k)
    limit = row[C_MOE_MAX_NODES]
    if limit > 0.0 and limit < domains and spread > limit:
        return limit, distinct_uniform(experts * limit / domains, group * limit / domains, k)
    return spread, distinct_uniform(experts, group, k)


@njit
def deepep_time(row, nbytes_per_copy, tokens, group, stride):
    """One DeepEP dispatch or combine (DeepSeek-V3 report sec. 3.2.2; DeepEP "normal" kernels at bfded34): a
    token crosses the scale-out network once per remote domain that holds one of its experts, then NVLink
    forwards it once to each other rank of that domain that holds one (``is_token_in_rank``); inside one domain
    it goes once to each other destination rank. The two hops run concurrently, the slower sets the time.
    Inside one domain a device's measured DeepEP rate ``deepep_nvl_bw`` (received bytes, own share included, per
    second; docs/model.md §11.14.6) sets the time where given."""
    g_in = members_per_domain(row, group, stride)
    domains = group / g_in
    spread, ranks = distinct_destinations(row, group, domains)
    intra = row[C_INTRA_BW] * row[C_INTRA_EFF]
    if domains <= 1.0 and row[C_DEEPEP_NVL_BW] > 0.0:
        return tokens * ranks * nbytes_per_copy / row[C_DEEPEP_NVL_BW]
    if domains <= 1.0:
        return tokens * ranks * nbytes_per_copy * (group - 1.0) / group / intra + row[C_INTRA_LATENCY]
    remote = spread * (domains - 1.0) / domains
    network = tokens * remote * nbytes_per_copy / (row[C_INTER_BW] * row[C_INTER_EFF])
    nvlink = tokens * ranks * nbytes_per_copy * (g_in - 1.0) / g_in / intra
    return max(nvlink, network) + row[C_INTER_LATENCY]


@njit
def dispatch_time(row):
    """(seconds, scale-out seconds) of one micro-batch's dispatch + combine in the forward pass on one device;
    the second is the time the bytes that cross the NICs (tier 1) take at its bandwidth.

    ``alltoall`` (Megatron-Core, TorchTitan default): an all-to-all over the ``ep`` ranks ``etp`` apart of
    every assignment ``T_r k x load`` (NCCL sends each copy; the remote share crosses the scale-out tier), then
    an all-gather over ``etp``; the combine mirrors it (reduce-scatter, all-to-all) in 16-bit.
    ``allgather``: the ``etp ep`` group all-gathers every rank's tokens and reduce-scatters the outputs.
    ``deepep``: ``deepep_time`` per direction. Dispatch bytes are ``FP8_DISPATCH_BYTES`` per element with
    ``moe_fp8_dispatch``, else 2.
    """
    ep = row[C_EP]
    etp = expert_tp(row)
    h = row[C_HIDDEN]
    tokens_r = rank_tokens(row)
    send = FP8_DISPATCH_BYTES if row[C_MOE_FP8_DISPATCH] > 0.0 else 2.0
    load = load_factor(row)
    nic = row[C_INTER_BW] * row[C_INTER_EFF]
    mode = row[C_MOE_DISPATCHER]
    if mode == DISPATCH_ALLGATHER:
        group = ep * etp
        gathered = group * tokens_r * h
        total = allgather_time(row, gathered * send, group, 1.0) + allgather_time(row, gathered * 2.0, group, 1.0)
        g_in = members_per_domain(row, group, 1.0)
        out = (group - 1.0) / group * gathered * (send + 2.0) / (g_in * nic) if g_in < group else 0.0
        return total, out
    a2a = 0.0
    out = 0.0
    if ep > 1.0:
        g_in = members_per_domain(row, ep, etp)
        if mode == DISPATCH_DEEPEP:
            a2a = deepep_time(row, h * send, tokens_r * load, ep, etp) + deepep_time(row, h * 2.0, tokens_r * load, ep, etp)
            if g_in < ep:
                domains = ep / g_in
                out = tokens_r * load * distinct_destinations(row, ep, domains)[0] * (domains - 1.0) / domains \
                    * h * (send + 2.0) / nic
        else:
            copies = tokens_r * row[C_MOE_TOPK] * load * h
            a2a = alltoall_time(row, copies * send, ep, etp) + alltoall_time(row, copies * 2.0, ep, etp)
            out = copies * (send + 2.0) * (ep - g_in) / ep / nic
    gather = 0.0
    if etp > 1.0:
        rows = expert_rows(row) * h
        gather = allgather_time(row, rows * send, etp, 1.0) + allgather_time(row, rows * 2.0, etp, 1.0)
    return a2a + gather, out
