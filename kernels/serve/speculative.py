"""Speculative decoding (``spec_tokens``, ``spec_acceptance``; docs/model_serving.md §S18): the draft steps' costs
and the tokens a verify step emits, for every load mode (a static batch and max_throughput in
``kernels/serve/evaluate.py``, the closed loop in ``kernels/serve/load.py``) and the disaggregated decode pool.

With ``k`` draft tokens (an MTP or EAGLE head: one decoder layer and the LM head on the target's features) of
i.i.d. acceptance ``a``, a decode step verifies ``k + 1`` tokens of every request after ``k`` draft steps at
``m = n`` and emits ``E = (1 - a^(k+1)) / (1 - a)`` tokens on average (Leviathan, Kalman & Matias, ICML 2023,
Eq. 1).
"""

from fastmodel.kernels.jit import njit
from fastmodel.kernels.columns import C_ATTENTION_DP, C_LAYERS, C_PP, C_SPEC_ACCEPTANCE, C_SPEC_TOKENS
from fastmodel.kernels.serve.costs import LAUNCH, body_costs, head_costs


@njit(inline="always")
def accepted_tokens(row):
    """Tokens a speculative decode step emits per request on average at ``spec_tokens = k`` draft tokens of i.i.d.
    acceptance ``a``: (1 - a^(k+1)) / (1 - a) (Leviathan et al., ICML 2023, Eq. 1; k + 1 at a = 1); 1 without
    drafts. The one form of the expectation: every load mode (§S18) and the disaggregated decode pool (its
    ``py_func``) call it."""
    k = row[C_SPEC_TOKENS]
    if k <= 0.0:
        return 1.0
    a = row[C_SPEC_ACCEPTANCE]
    return k + 1.0 if a >= 1.0 else (1.0 - a ** (k + 1.0)) / (1.0 - a)


@njit
def draft_costs(row, n, k, costs):
    """Adds the ``k`` draft steps of ``n`` requests to ``costs``: each one decoder layer and the LM head (an MTP or
    EAGLE head: one decoder layer on the target's features; docs/model_serving.md §S18)."""
    # the draft step is priced in ``costs`` itself (no scratch allocated per configuration, review11 #7): what
    # was there is kept in four locals and added back, the same operations as costs[j] += k x draft[j]
    c0, c1, c2, c3 = costs[0], costs[1], costs[2], costs[3]
    for j in range(4):
        costs[j] = 0.0
    body_costs(row, n, LAUNCH, costs, -1.0)
    layers = row[C_LAYERS] / row[C_PP]
    for j in range(4):
        costs[j] /= layers
    head_costs(row, n / row[C_ATTENTION_DP], LAUNCH, costs)
    costs[0] = c0 + k * costs[0]
    costs[1] = c1 + k * costs[1]
    costs[2] = c2 + k * costs[2]
    costs[3] = c3 + k * costs[3]


@njit
def speculate(row, n, k, costs):
    """Speculative decoding (``spec_tokens = k`` > 0, acceptance ``a``): the verify step in ``costs`` plus k draft
    steps (``draft_costs``), all divided by the tokens a step emits on average (``accepted_tokens``). The KV of a
    request is read once per verify step (GQA decode attention is memory-bound)."""
    draft_costs(row, n, k, costs)
    emitted = accepted_tokens(row)
    for j in range(4):
        costs[j] /= emitted
