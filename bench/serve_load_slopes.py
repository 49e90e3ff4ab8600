"""Diagnostic: how the decode step grows with the load, measured against the model (docs/model_serving.md §S64).
Nothing here feeds a prediction.

Three tables over the answered rows of one split (default ``dev``) of a ``validate -o`` CSV, the nine client-semaphore
rows of §S44 left out (a client semaphore recorded as the load):

1. ``doubling``: for each series of one (engine, framework, gpu, model, precision, TP, ISL, OSL) measured at ``N``
   and ``2 N`` in flight, the ratio of the measured TPOT increment to the predicted one,
   ``(TPOT_meas(2N) - TPOT_meas(N)) / (TPOT_pred(2N) - TPOT_pred(N))``; median per (model, TP, 2 N). Every cost the
   two loads share (host, launches, the per-step floor) cancels, so a ratio below 1 says the model grows too fast
   with the batch, above 1 too slowly. With uniform routing (§S3) an MoE step's expert stream grows as
   ``f(N) = 1 - (1 - k/E)^N`` (the share of the experts touched), so routing that touches fewer experts than
   uniform at a middle load and all of them at a large one gives ratios below 1 while ``f`` rises and above 1
   once uniform routing has saturated.
2. ``mixing``: the mean signed TPOT error by the model's prefill share of its TPOT,
   ``(TPOT_pred - T_d) / TPOT_pred`` with ``T_d`` the decode-only iteration at the running batch (the CSV's naive
   baseline, ``measured (1 + baseline_error)``): the part of TPOT the model gives to the prefill chunks that ride in
   the decode iterations (§S7). No trend means those chunks are not where the error is.
3. ``routing``: the mean signed TPOT error of the MoE rows by the uniform-routing share ``f`` at the CSV's
   ``batch_size`` and by TP.
4. ``ttft by load``: the mean signed TTFT error by (model, engine) and the load's band of requests in flight. A
   queue of prompts behind the decodes that the model mispriced would move it with the load; a lone prefill it
   mispriced would not.

``--sensitivity NAME`` also prices one change that is not applied (§S64): it re-validates the records interpreted
(FASTMODEL_JIT=0) with the change patched in and prints the TPOT and TTFT MAPE of the CSV and of the change per split.
- ``hidden-w4a16``: the expert GEMMs of FP4 weights on a device without FP4 tensor cores (Hopper's W4A16 Triton
  ``matmul_ogs`` and Marlin paths) hide their MMA under the weight stream at one row tile (``roofline.hides_math``
  true where the rows per expert are at most the row tile), as §S38 and §S47 found for Marlin and TRTLLM-Gen below
  their own limits.
- ``combine``: one more attention kernel per layer (FlashAttention-3's split-KV combine) in every iteration of a vLLM
  row (``kv_write_kernel`` 1) on compute capability 9.x: an upper bound, every layer and every batch.

    FASTMODEL_JIT=0 python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_load_slopes.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--split dev]
    FASTMODEL_JIT=0 python bench/serve_load_slopes.py /tmp/v.csv tests/data/serve_dev_load.jsonl --sensitivity combine
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_c512 import is_semaphore_row  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_records  # noqa: E402  (bench/ is not a package)

#: the rows whose load a client semaphore recorded (§S44): left out of every table, found by their record's fields
#: (``serve_c512.is_semaphore_row``), not their id (review15 #9)
SEMAPHORE_ROWS = "client-semaphore"
#: upper edges of the prefill-share buckets (table 2) and of the uniform-routing share buckets (table 3)
MIX_EDGES = (0.01, 0.05, 0.1, 0.2, 0.3, 1.0)
F_EDGES = (0.3, 0.5, 0.75, 0.9, 0.97, 1.0)
#: upper edges of the load bands (requests in flight) of table 4
LOAD_EDGES = (4, 8, 16, 32, 64, float("inf"))


def split_records(csv_path: str, records_path: str, split: str = "dev") -> list[tuple[dict, dict]]:
    """(CSV row, record) of the answered rows of one split (``all``: every split), the client-semaphore rows
    (:func:`serve_c512.is_semaphore_row`, §S44) left out."""
    return [(r, rec) for r, rec in answered_records(csv_path, records_path)
            if (split == "all" or r.get("split") == split) and not is_semaphore_row(rec)]


def expert_share(record: dict, batch: float) -> float | None:
    """Uniform routing's share of the experts a step of ``batch`` tokens touches, ``1 - (1 - k/E)^batch`` (§S3);
    None for a dense model or a model given by name only."""
    model = record.get("model")
    if not isinstance(model, dict) or not model.get("moe_experts"):
        return None
    experts, topk = float(model["moe_experts"]), float(model["moe_topk"])
    return 1.0 - (1.0 - min(topk, experts) / experts) ** batch


def prefill_share(row: dict) -> float:
    """The model's share of its TPOT that is not the decode-only iteration at the running batch:
    ``1 - T_d / TPOT_pred``, ``T_d = measured (1 + baseline_error_tpot_s)`` (the naive baseline's TPOT)."""
    naive = float(row["measured_tpot_s"]) * (1.0 + float(row["baseline_error_tpot_s"]))
    return 1.0 - naive / float(row["predicted_tpot_s"])


def bucket(value: float, edges: tuple[float, ...]) -> float:
    """The first edge at or above ``value`` (the last edge for anything beyond it)."""
    for edge in edges:
        if value <= edge:
            return edge
    return edges[-1]


def doublings(rows: list[tuple[dict, dict]]) -> list[dict]:
    """One entry per series measured at N and 2 N (the first row of a repeated N): model, tp, n2 and the ratio of
    the measured to the predicted TPOT increment (None when the predicted one is 0)."""
    series = defaultdict(dict)
    for row, rec in rows:
        s = rec["serve"]
        if "concurrency" not in s:
            continue
        key = (row["engine"], row["framework"], row["gpu"], row["model"], row["precision"], int(s["tp"]),
               int(s["input_len"]), int(s["output_len"]))
        series[key].setdefault(int(s["concurrency"]), (float(row["measured_tpot_s"]), float(row["predicted_tpot_s"])))
    out = []
    for key, points in series.items():
        for n, (meas, pred) in points.items():
            if 2 * n in points:
                meas2, pred2 = points[2 * n]
                ratio = (meas2 - meas) / (pred2 - pred) if pred2 != pred else None
                out.append({"model": key[3], "tp": key[5], "n2": 2 * n, "ratio": ratio})
    return out


def doubling_table(entries: list[dict]) -> dict[tuple, tuple[float, int]]:
    """{(model, tp, n2): (median ratio, series)} of :func:`doublings`' entries that have a ratio."""
    acc = defaultdict(list)
    for e in entries:
        if e["ratio"] is not None:
            acc[(e["model"], e["tp"], e["n2"])].append(e["ratio"])
    return {k: (statistics.median(v), len(v)) for k, v in sorted(acc.items())}


def mean_error_by(rows: list[tuple[dict, dict]], key, metric: str = "tpot_s") -> dict[tuple, tuple[float, int]]:
    """{key(row, record): (mean signed error % of ``metric``, rows)}; rows whose key is None or whose error is
    empty are left out."""
    acc = defaultdict(list)
    for row, rec in rows:
        k = key(row, rec)
        if k is not None and row.get(f"error_{metric}") not in ("", None):
            acc[k].append(float(row[f"error_{metric}"]))
    return {k: (100.0 * statistics.mean(v), len(v)) for k, v in sorted(acc.items())}


def mixing_key(row: dict, rec: dict) -> tuple:
    """(engine, prefill-share bucket) of one row."""
    return row["engine"], bucket(prefill_share(row), MIX_EDGES)


def load_key(row: dict, rec: dict) -> tuple | None:
    """(model, engine, load band: the first ``LOAD_EDGES`` edge at or above the requests in flight) of a
    concurrency row; None for another load."""
    n = rec["serve"].get("concurrency")
    return None if n is None else (row["model"], row["engine"], bucket(float(n), LOAD_EDGES))


def routing_key(row: dict, rec: dict) -> tuple | None:
    """(model, TP, uniform-routing share bucket at the CSV's batch_size) of an MoE row; None for a dense one."""
    f = expert_share(rec, float(row["batch_size"]))
    return None if f is None else (row["model"], int(rec["serve"]["tp"]), bucket(f, F_EDGES))


def semaphore_ids(records_path: str) -> set[str]:
    """Ids of the records whose load a client semaphore recorded (:func:`serve_c512.is_semaphore_row`, §S44)."""
    import json

    with open(records_path) as fh:
        return {rec["id"] for rec in map(json.loads, fh) if is_semaphore_row(rec)}


def mape(rows, metric: str, split: str, leave_out: frozenset | set = frozenset()) -> float:
    """MAPE (%) of ``error_<metric>`` over the answered rows of one split (``all``: every split) with a finite
    error, the rows whose id is in ``leave_out`` (:func:`semaphore_ids`) left out."""
    errors = [abs(float(r[f"error_{metric}"])) for r in rows
              if r["status"] == "ok" and (split == "all" or r.get("split") == split)
              and r["id"] not in leave_out and r.get(f"error_{metric}") not in ("", None)
              and float(r[f"error_{metric}"]) == float(r[f"error_{metric}"])]
    return 100.0 * statistics.mean(errors) if errors else float("nan")


def hides_at_one_tile(hides_math, expert_row_tile):
    """``roofline.hides_math`` with the sensitivity's rule added: FP4 weights on a device without an FP4 peak hide
    their MMA where the rows per expert ``m`` are at most the row tile (one row tile per expert)."""
    from fastmodel.kernels.columns import C_FP4_GEMM, C_PEAK_FLOPS_4

    def hides(row, groups, m):
        if row[C_FP4_GEMM] > 0.0 and row[C_PEAK_FLOPS_4] <= 0.0 and m <= expert_row_tile(row, m):
            return True
        return hides_math(row, groups, m)
    return hides


def with_combine_kernel(attention_launches):
    """``attention.attention_launches`` plus one kernel per layer of the stage (``kernel_overhead_s``) for a vLLM row
    (``kv_write_kernel`` > 0) on compute capability 9.x."""
    from fastmodel.kernels.columns import C_COMPUTE_CAPABILITY, C_KERNEL_OVERHEAD_S, C_KV_WRITE_KERNEL, C_LAYERS, C_PP

    def launches(row):
        extra = 0.0
        if row[C_KV_WRITE_KERNEL] > 0.0 and 9.0 <= row[C_COMPUTE_CAPABILITY] < 10.0:
            extra = row[C_LAYERS] / row[C_PP] * row[C_KERNEL_OVERHEAD_S]
        return attention_launches(row) + extra
    return launches


def sensitivity_rows(records_path: str, name: str) -> list[dict]:
    """``validate`` rows of ``records_path`` (held-out split beside it) with the change ``name`` patched in
    (``hidden-w4a16``: :func:`hides_at_one_tile`; ``combine``: :func:`with_combine_kernel`); the kernels must run
    interpreted (FASTMODEL_JIT=0), and the originals are restored after."""
    from fastmodel.api import validate
    from fastmodel.kernels import jit, roofline
    from fastmodel.kernels.serve import attention, evaluate, load

    if not jit.INTERPRETED:
        raise SystemExit("--sensitivity patches a kernel: run it with FASTMODEL_JIT=0")
    if name == "hidden-w4a16":
        targets = [(roofline, "hides_math", hides_at_one_tile(roofline.hides_math, roofline.expert_row_tile))]
    elif name == "combine":
        patched = with_combine_kernel(attention.attention_launches)
        # every module that imports it by name: the concurrency loop and evaluate's static-batch / max-throughput
        # paths (decode_fixed_costs, _fixed; review15 #8)
        targets = [(m, "attention_launches", patched) for m in (attention, load, evaluate)]
    else:
        raise SystemExit(f"--sensitivity: unknown {name!r} (hidden-w4a16, combine)")
    originals = [(module, attr, getattr(module, attr)) for module, attr, _ in targets]
    for module, attr, value in targets:
        setattr(module, attr, value)
    try:
        return validate(records_path, heldout=True).rows
    finally:
        for module, attr, value in originals:
            setattr(module, attr, value)


def print_sensitivity(csv_path: str, records_path: str, name: str) -> None:
    """TPOT and TTFT MAPE per split of the CSV and of :func:`sensitivity_rows` (with and without the
    client-semaphore rows)."""
    import csv

    with open(csv_path) as fh:
        before = list(csv.DictReader(fh))
    after = sensitivity_rows(records_path, name)
    semaphore = semaphore_ids(records_path)
    print(f"\nsensitivity {name}: split | metric | CSV | changed | CSV without {SEMAPHORE_ROWS} | changed without")
    for split in ("dev", "held-out"):
        for metric in ("tpot_s", "ttft_s"):
            cells = [mape(rows, metric, split, out) for out in (frozenset(), semaphore) for rows in (before, after)]
            print(f"{split} | {metric} | " + " | ".join(f"{c:.2f}" for c in cells))


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--sensitivity", choices=("hidden-w4a16", "combine"), help="also price one change (S64)")
    args = ap.parse_args()
    rows = split_records(args.csv, args.records, args.split)
    print(f"{len(rows)} {args.split} rows (the {SEMAPHORE_ROWS} rows left out)")
    print("\n1. measured / predicted TPOT increment from N to 2 N: model | TP | 2 N | median | series")
    for (model, tp, n2), (med, n) in doubling_table(doublings(rows)).items():
        print(f"{model} | {tp} | {n2} | {med:.2f} | {n}")
    print("\n2. mean TPOT error by the model's prefill share of TPOT: engine | share <= | bias % | rows")
    for (engine, edge), (bias, n) in mean_error_by(rows, mixing_key).items():
        print(f"{engine} | {edge:g} | {bias:+.1f} | {n}")
    print("\n3. mean TPOT error of the MoE rows by uniform routing's expert share f: model | TP | f <= | bias % | rows")
    for (model, tp, edge), (bias, n) in mean_error_by(rows, routing_key).items():
        print(f"{model} | {tp} | {edge:g} | {bias:+.1f} | {n}")
    print("\n4. mean TTFT error by the load: model | engine | in flight <= | bias % | rows")
    for (model, engine, edge), (bias, n) in mean_error_by(rows, load_key, "ttft_s").items():
        print(f"{model} | {engine} | {edge:g} | {bias:+.1f} | {n}")
    if args.sensitivity:
        print_sensitivity(args.csv, args.records, args.sensitivity)


if __name__ == "__main__":
    main()
