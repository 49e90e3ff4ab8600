"""``fastmodel validate``'s MoE section: the runs of models with routed experts, grouped by how their experts run,
and each run's MoE terms as the model evaluates them.

Groups (the record's lowered columns, after its stack's defaults): the token dispatcher (``moe_dispatcher``:
``alltoall``, ``allgather``, ``deepep/flex``, the one DeepEP code ``fastmodel.registry.lm.MOE_DISPATCHERS`` gives
Megatron-Core's ``flex`` and TorchTitan's ``deepep``, and ``einsum``), the overlap of dispatch and combine with
compute (``moe_a2a_overlap``), the routing (``dropless`` when ``moe_capacity_factor`` is 0, ``capacity``, or
``capacity+pad`` with ``moe_pad_to_capacity``) and the software stack; the scores are ``validate``'s.

Per run, nothing new is computed: the terms the step is built from (``kernels/lm/moe.py`` and
``kernels/lm/layer.py``, docs/model.md §11.14) for one MoE layer, one micro-batch, on the busiest device --
``expert``: the routed experts' grouped-GEMM seconds (``moe_compute``) over the layer's forward compute seconds
(GEMM + attention + memory-bound, ``layer_costs``, full attention); ``load``: the routed rows of the busiest rank
over the balanced share (``load_factor``: ``moe_imbalance``, cut or padded at the capacity factor); ``rows/exp``:
routed rows per local expert (``expert_rows / (E / ep)``; the layer's ``W_FORWARD_ONLY`` seconds, GPU idle after
host syncs, einsum gating and SequentialMLP's loop launches and cat (docs/model.md §11.57), and its backward-only
``W_BACKWARD_MEM`` are not counted as forward compute: out of the share) --
and the step's expert-parallel communication: ``comm_ep`` (dispatch + combine, every pass), ``exposed_ep`` (not
hidden behind compute), the hidden share ``1 - exposed_ep / comm_ep`` and ``exposed_ep / step_time``.
"""

from __future__ import annotations

import numpy as np

from fastmodel.analysis.splits import SPLITS

#: the MoE section's groupings, in print order (the row fields ``moe_fields`` adds, and the software stack), each with
#: the label its groups are printed under (``dispatcher=alltoall``)
MOE_GROUP_KEYS = ("moe_dispatcher", "moe_a2a_overlap", "moe_routing", "stack")
MOE_GROUP_LABELS = {"moe_dispatcher": "dispatcher", "moe_a2a_overlap": "overlap", "moe_routing": "routing",
                    "stack": "stack"}
#: what a row of a dense model carries in the MoE fields (not an MoE run)
DENSE = ""


def _names(codes: dict[str, int]) -> dict[int, str]:
    """Code -> name, names sharing a code joined by ``/`` (``deepep/flex``)."""
    names: dict[int, list[str]] = {}
    for name, code in codes.items():
        names.setdefault(code, []).append(name)
    return {code: "/".join(group) for code, group in names.items()}


def routing_name(cf: float, padded: float) -> str:
    """``dropless`` (capacity factor 0), ``capacity`` (tokens above capacity dropped), ``capacity+pad``."""
    if cf <= 0.0:
        return "dropless"
    return "capacity+pad" if padded > 0.0 else "capacity"


def moe_terms(columns: np.ndarray) -> dict[str, float]:
    """One MoE layer's terms for one micro-batch on the busiest device of a record's column vector: routed-expert
    GEMM share of the layer's forward compute, load factor, routed rows per local expert (module docstring)."""
    from fastmodel.kernels.lm.fp4 import train_gemm_format
    from fastmodel.kernels.lm.layer import N_WORK, W_ATTN, W_GEMM, W_MEM, layer_costs
    from fastmodel.kernels.lm.moe import expert_rows, load_factor, moe_compute
    from fastmodel.registry.lm import COLUMN_INDEX as C

    row = np.ascontiguousarray(columns, dtype=np.float64)
    work = np.zeros(N_WORK)
    layer_costs(row, True, False, work)
    routed = moe_compute(row, train_gemm_format(row))[5]   # the layer's GEMM format (0, 1, 2 NVFP4)
    local = row[C["moe_experts"]] / row[C["ep"]]
    compute = work[W_GEMM] + work[W_ATTN] + work[W_MEM]
    return {"moe_expert_share": float(routed / compute) if compute > 0 else np.nan,
            "moe_load_factor": float(load_factor(row)), "moe_rows_per_expert": float(expert_rows(row)) / local}


def moe_fields(record, results: dict, i: int) -> dict:
    """The MoE columns of one validation row (``DENSE`` and NaN for a dense model): the groups and the terms."""
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.registry.lm import MOE_A2A_OVERLAPS, MOE_DISPATCHERS

    col = record.columns
    fields = {"moe_dispatcher": DENSE, "moe_a2a_overlap": DENSE, "moe_routing": DENSE, "moe_expert_share": np.nan,
              "moe_load_factor": np.nan, "moe_rows_per_expert": np.nan}
    for name in ("comm_ep", "exposed_ep", "comm_ep_scale_out"):
        fields[name] = results[name][i]
    if col[C["moe_experts"]] <= 0:
        return fields
    fields["moe_dispatcher"] = _names(MOE_DISPATCHERS)[int(col[C["moe_dispatcher"]])]
    fields["moe_a2a_overlap"] = _names(MOE_A2A_OVERLAPS)[int(col[C["moe_a2a_overlap"]])]
    fields["moe_routing"] = routing_name(col[C["moe_capacity_factor"]], col[C["moe_pad_to_capacity"]])
    fields.update(moe_terms(col))
    return fields


def refused_moe_fields(raw: dict) -> dict:
    """A refused record's MoE group fields: ``(refused)`` when its model states routed experts, else ``DENSE``."""
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    try:
        moe = float(model.get("moe_experts") or 0) > 0
    except (TypeError, ValueError):
        moe = False
    return {key: "(refused)" if moe else DENSE for key in MOE_GROUP_KEYS[:3]}


def is_moe(row: dict) -> bool:
    return row.get("moe_dispatcher", DENSE) != DENSE


def _record_line(row: dict, split: str) -> str:
    """One MoE run: its groups, error, and terms (``-`` where it has no prediction)."""
    name = f"{row['id'][:52]:52s}" + (f" {split:8s}" if split else "")
    groups = f"{row['moe_dispatcher']:12s} {row['moe_a2a_overlap']:8s} {row['moe_routing']:12s}"
    if row["status"] != "ok":
        return f"  {name} {groups} {row['status']}"
    comm, exposed, step = row["comm_ep"], row["exposed_ep"], row["predicted_step_time_s"]
    hidden = f"{100 * (1 - exposed / comm):5.0f}%" if comm > 0 else f"{'-':>6s}"
    return (f"  {name} {groups} {100 * row['error']:+6.1f}% {100 * row['moe_expert_share']:6.0f}% "
            f"{row['moe_load_factor']:5.2f} {row['moe_rows_per_expert']:8.0f} {1e3 * comm:9.1f} {1e3 * exposed:9.1f} "
            f"{hidden} {100 * exposed / step:5.1f}%")


def format_moe(table: list[dict], by_split: bool = False) -> str:
    """The MoE section as text: step-time scores by dispatcher, overlap, routing and stack over the MoE runs, then
    one line per MoE run; empty when no row is an MoE run. With ``by_split``, every group twice (dev, held-out)."""
    from fastmodel.lm.validate import _group_lines, score_header

    moe = [row for row in table if is_moe(row)]
    if not moe:
        return ""
    lines = ["", f"MoE runs ({len(moe)} of {len(table)}): step time by dispatcher, overlap, routing and stack"]
    for key in MOE_GROUP_KEYS:
        label = MOE_GROUP_LABELS[key]
        lines += ["", f"MoE step time by {label}", score_header()]
        labelled = [{**row, "moe_group": f"{label}={row[key]}"} for row in moe]
        if not by_split:
            lines += _group_lines(labelled, "moe_group", "").values()
            continue
        per_split = [_group_lines([row for row in labelled if row["split"] == split], "moe_group", split)
                     for split in SPLITS]
        for name in sorted(set().union(*per_split)):
            lines += [split_lines[name] for split_lines in per_split if name in split_lines]
    lines += ["", "MoE runs; one MoE layer, one micro-batch, busiest device: expert = routed-expert GEMM share of the "
              "layer's forward compute,", "load = load factor used (imbalance or capacity), rows/exp = routed rows "
              "per local expert; per step: EP comm (dispatch + combine), exposed, hidden share, exposed / step",
              f"  {'run':52s}{' split   ' if by_split else ''} {'dispatcher':12s} {'overlap':8s} {'routing':12s} {'error':>7s} {'expert':>7s} "
              f"{'load':>5s} {'rows/exp':>8s} {'EP ms':>9s} {'exposed':>9s} {'hidden':>6s} {'/step':>6s}"]
    ordered = sorted(moe, key=lambda row: (SPLITS.index(row["split"]), row["id"])) if by_split else moe
    lines += [_record_line(row, row["split"] if by_split else "") for row in ordered]
    return "\n".join(lines)
