"""Plan columns of the Muon optimizer: its Newton-Schulz iteration and how its work is spread over ranks.

Rows of ``fastmodel.registry.lm.PLAN_COLUMNS`` (name, units, default, doc, lo, hi, fittable, option), kept here so the
registry module stays readable. They are read only when ``optimizer = muon`` (``OPTIMIZER_CODES``); docs/model.md
§11.7 "Muon" and docs/model_memory.md "Optimizer states" give the equations, kernels/lm/muon.py computes them.
Sources: KellerJordan/Muon@00ba60d ``muon.py`` (the library) and the modded-nanogpt speed-run records of October
2024 (KellerJordan/modded-nanogpt@f411b3d3 records/track_1_short/2024-10-1*/ logs, which print their code).
"""

from __future__ import annotations

MUON_PLAN_ROWS = (
    ("muon_ns_steps", "1", 5, "Muon: Newton-Schulz iterations per update (muon.py ``ns_steps=5``; the October "
     "2024 modded-nanogpt records ``backend_steps=5``).", 1, 64, False, "number"),
    ("muon_ns_gram_square", "1", 1, "Muon: 1 = one iteration is A = X X^T, B = b A + c A A, X = a X + B X "
     "(muon.py@00ba60d zeropower_via_newtonschulz5: 4 m^2 n + 2 m^3 FLOPs for an m x n update, m <= n); 0 = "
     "A = X X^T, B = A X, X = a X + b B + c A B (modded-nanogpt records of October 2024: 6 m^2 n FLOPs).", 0, 1,
     False, "flag"),
    ("muon_distributed", "1", 1, "Muon: 1 = the matrices are dealt round-robin over the data-parallel ranks, "
     "each orthogonalizes its own and keeps only their momentum, and the updated matrices are all-gathered "
     "(muon.py@00ba60d class Muon; the 2024-10-17 DistributedMuon record all-reduces a bf16 update buffer, the "
     "same bus volume); 0 = every rank orthogonalizes every matrix (SingleDeviceMuon; the 2024-10-10 and "
     "2024-10-14 records).", 0, 1, False, "flag"),
)
