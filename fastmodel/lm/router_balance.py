"""Load imbalance of dropless MoE routing by the router's balancing method (docs/model.md §11.14.5).

A plan's ``moe_balance`` names how the router kept expert loads even; the table below holds, per method, the
published per-expert imbalance ``MaxVio = max_i load_i / mean - 1`` (Wang et al. 2024, arXiv 2408.15664,
eq. 5), and :func:`rank_maxvio` turns it into the busiest expert-parallel rank's: a rank holds ``E / ep``
experts, so its load is an average of theirs and varies less than one expert's. The busiest rank's factor
``1 + MaxVio_rank`` is the ``moe_imbalance`` column (``kernels/lm/moe.py`` ``load_factor``) when the plan and
its stack leave ``moe_imbalance`` unset.
"""

from __future__ import annotations

import math

#: balancing methods a plan may name (``moe_balance``): Switch/GShard auxiliary loss (Megatron-Core
#: ``--moe-router-load-balancing-type aux_loss``), DeepSeek's sequence-wise loss (``seq_aux_loss``), DeepSeek-V3's
#: bias-based auxiliary-loss-free balancing (``--moe-router-enable-expert-bias``), Sinkhorn (``sinkhorn``), no
#: balancing (``none``) and forced balance (round robin: TorchTitan ``_debug_force_load_balance``, Megatron-Core
#: ``--moe-router-force-load-balancing``)
BALANCE_METHODS = ("aux_loss", "seq_aux_loss", "aux_free", "sinkhorn", "none", "forced")

#: per-expert MaxVio by method, where a measurement is published: Wang et al. 2024 Table 1 (MaxVio_global on the
#: validation set, the 3B model trained on 200B tokens, the larger of its two): auxiliary-loss-controlled 0.52,
#: loss-free 0.04; forced balance is exact by construction. The other methods
#: have no published per-expert figure: they leave ``moe_imbalance`` at its default (1) with a note.
EXPERT_MAXVIO: dict[str, float] = {"aux_loss": 0.52, "aux_free": 0.04, "forced": 0.0}


def rank_maxvio(expert_maxvio: float, experts: int, ep: int) -> float:
    """MaxVio of the busiest of ``ep`` ranks holding ``experts / ep`` experts each, from the per-expert MaxVio.

    Expert loads over the mean are read as ``1 + sigma z_i`` with independent standard normal ``z_i``; the
    expected largest of N such is ``sigma sqrt(2 ln N)`` (Gaussian extreme-value asymptote, David and Nagaraja,
    Order Statistics, 3rd ed. 2003, sec. 10.5), so ``sigma = MaxVio_e / sqrt(2 ln E)``. A rank's load is the
    mean of ``g = E / ep`` experts: ``sigma / sqrt(g)``, and its busiest of ``ep`` is
    ``MaxVio_rank = MaxVio_e sqrt(ep ln ep / (E ln E))``: 0 at ``ep = 1`` (one rank holds every expert),
    ``MaxVio_e`` at ``ep = E`` (one expert per rank)."""
    if ep <= 1 or experts <= 1 or expert_maxvio <= 0.0:
        return 0.0
    ep = min(ep, experts)
    return expert_maxvio * math.sqrt(ep * math.log(ep) / (experts * math.log(experts)))


def balance_imbalance(method: str, experts: int, ep: int, notes: list[str] | None = None) -> float | None:
    """The ``moe_imbalance`` column of ``method`` (``1 + rank_maxvio``), or None (with a note) where no
    per-expert figure is published for it."""
    maxvio = EXPERT_MAXVIO.get(method)
    if maxvio is None:
        if notes is not None:
            notes.append(f"moe_balance = {method!r}: no published per-expert load imbalance; moe_imbalance "
                         "stays 1 (docs/model.md §11.14.5)")
        return None
    return 1.0 + rank_maxvio(maxvio, experts, ep)
