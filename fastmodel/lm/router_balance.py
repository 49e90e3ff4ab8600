"""Load imbalance of dropless MoE routing by the router's balancing method (docs/model.md §11.14.5).

A plan's ``moe_balance`` names how the router kept expert loads even; the table below holds, per method, the
published per-expert imbalance ``MaxVio = max_i load_i / mean - 1`` (Wang et al. 2024, arXiv 2408.15664). It is
lowered to the ``moe_expert_maxvio`` column when the plan and its stack leave ``moe_imbalance`` unset, and the
kernel (``kernels/lm/moe.py`` ``rank_imbalance``) turns it into the busiest expert-parallel rank's factor at each
point's ``ep``: a rank holds ``E / ep`` experts, so its load is an average of theirs and varies less than one
expert's.
"""

from __future__ import annotations

#: balancing methods a plan may name (``moe_balance``): Switch/GShard auxiliary loss (Megatron-Core
#: ``--moe-router-load-balancing-type aux_loss``), DeepSeek's sequence-wise loss (``seq_aux_loss``), DeepSeek-V3's
#: bias-based auxiliary-loss-free balancing (``--moe-router-enable-expert-bias``), Sinkhorn (``sinkhorn``), no
#: balancing (``none``) and forced balance (round robin: TorchTitan ``_debug_force_load_balance``, Megatron-Core
#: ``--moe-router-force-load-balancing``)
BALANCE_METHODS = ("aux_loss", "seq_aux_loss", "aux_free", "sinkhorn", "none", "forced")

#: per-expert MaxVio by method, where a measurement is published: Wang et al. 2024 Table 1 (MaxVio_global on the
#: validation set, the 3B model trained on 200B tokens, the larger of its two): auxiliary-loss-controlled 0.52,
#: loss-free 0.04; forced balance is exact by construction. The other methods have no published per-expert
#: figure: they leave ``moe_imbalance`` at its default (1) with a note.
EXPERT_MAXVIO: dict[str, float] = {"aux_loss": 0.52, "aux_free": 0.04, "forced": 0.0}


def expert_maxvio(method: str, notes: list[str] | None = None) -> float | None:
    """The per-expert MaxVio of ``method`` (the ``moe_expert_maxvio`` column), or None (with a note) where none
    is published for it."""
    maxvio = EXPERT_MAXVIO.get(method)
    if maxvio is None and notes is not None:
        notes.append(f"moe_balance = {method!r}: no published per-expert load imbalance; moe_imbalance stays 1 "
                     "(docs/model.md §11.14.5)")
    return maxvio
