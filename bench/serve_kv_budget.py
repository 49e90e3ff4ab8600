"""Diagnostic: the KV cache each engine sizes, and the running batch it admits, on the rows where KV binds
(docs/model_serving.md §S66).

For every answered row of a ``validate -o`` CSV whose model running batch is below its concurrency, or whose
measured running batch (§S26 ``implied_running``) is below 0.9 of it at 16 or more in flight, it prints the model's
KV capacity (GiB, tokens), the tokens a running request holds and the batch that fits, beside the running batch
the record's own TTFT and TPOT imply, and the capacity under the other engines' rules from the same weights and
workspace: TensorRT-LLM's ``f (HBM - m)``, vLLM's ``f HBM - m``, SGLang's ``mem_fraction_static HBM - weights``
(its automatic fraction, :func:`sglang_fraction`).

    FASTMODEL_JIT=0 python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl -o /tmp/load.csv
    FASTMODEL_JIT=0 python bench/serve_kv_budget.py /tmp/load.csv tests/data/serve_dev_load.jsonl
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered  # noqa: E402  (bench/ is not a package)

from fastmodel.registry.lm import COLUMN_INDEX  # noqa: E402

GIB = 2**30
#: SGLang 0.5.6.post2's reserve floor on GPUs above 60 GiB: 10 GiB (``server_args.py:848-891``, serving_facts §1)
SGLANG_RESERVE_FLOOR_BYTES = 10 * GIB
SGLANG_FLOOR_ABOVE_BYTES = 60 * GIB


def sglang_graph_bs(tp: float, gpu: str = "") -> float:
    """SGLang 0.5.6.post2's default ``cuda_graph_max_bs``: 512 on B200 or at TP >= 4, else 256 (H100/H200;
    ``server_args.py:898-925``, docs/sources/serving_facts.md §1). Other GPUs take the Hopper rule [A]."""
    return 512.0 if tp >= 4 or "B200" in gpu.upper() else 256.0


def sglang_fraction(hbm_bytes: float, chunk_tokens: float, tp: float, pp: float = 1.0, gpu: str = "") -> float:
    """SGLang 0.5.6.post2's automatic ``mem_fraction_static``: round((total - reserved) / total, 3) with reserved
    (MiB) = 512 + 1.5 max(chunk, 2048) + 2 cuda_graph_max_bs + 1024 tp pp / 8, at least 10 GiB on a GPU above
    60 GiB (``server_args.py:848-891``, docs/sources/serving_facts.md §1; :func:`sglang_graph_bs`)."""
    reserved = (512 + 1.5 * max(chunk_tokens, 2048) + 2 * sglang_graph_bs(tp, gpu) + 1024 * tp * pp / 8) * 2**20
    if hbm_bytes > SGLANG_FLOOR_ABOVE_BYTES:
        reserved = max(reserved, SGLANG_RESERVE_FLOOR_BYTES)
    return round((hbm_bytes - reserved) / hbm_bytes, 3)


def budgets(col, weights: float, workspace: float, gpu: str = "") -> dict[str, float]:
    """KV bytes per device under each engine's rule from the same memory terms (docs/model_serving.md §S66): the
    kernel's ``kv_capacity`` with the record's ``kv_budget_of_total`` set to 0 (TensorRT-LLM) and 1 (vLLM, with
    ``kv_snapshot_after_nccl`` 1 as from 0.11.0; the record's own allreduce buffers), and
    SGLang's automatic fraction of the whole HBM less the weights."""
    from fastmodel.kernels.serve.memory import kv_capacity

    c = COLUMN_INDEX
    out = {}
    for engine, rule in (("trtllm", 0.0), ("vllm", 1.0)):
        row = col.copy()
        row[c["kv_budget_of_total"]] = rule
        row[c["kv_snapshot_after_nccl"]] = rule      # vLLM >= 0.11.0's snapshot (S66)
        out[engine] = float(kv_capacity(row, weights, workspace))
    hbm = col[c["hbm_bytes"]]
    fraction = sglang_fraction(hbm, col[c["max_num_tokens"]], col[c["tp"]], col[c["pp"]], gpu)
    out["sglang"] = max(0.0, fraction * hbm - weights)
    return out


def held_tokens(input_len: float, output_len: float, on_demand: bool) -> float:
    """Tokens a running request holds on average: the whole request when admission reserves it (TensorRT-LLM's
    GUARANTEED_NO_EVICT), the prompt and half the output when blocks come on demand (vLLM, SGLang; §S9)."""
    return input_len + (0.5 * output_len if on_demand else output_len)


#: the CSV columns this diagnostic reads beside the shared join's (``id``, ``status``); ``implied_running`` is
#: written by ``validate -o`` since §S26
NEEDED = ("load_mode", "batch_size", "implied_running", "framework", "gpu")


def rows(csv_path: str, records_path: str):
    """(CSV row, record columns) of the answered concurrency rows where KV binds in the model or the measurement
    (``serve_rows.answered``); ValueError naming the CSV and the column when one of :data:`NEEDED` is missing."""
    from fastmodel.serve.records import read_serve_records

    with open(csv_path) as fh:
        header = next(csv.reader(fh), [])
    missing = [k for k in ("id", "status", *NEEDED) if k not in header]
    if missing:
        raise ValueError(f"{csv_path}: no column {missing[0]!r} (validate -o writes it; implied_running since S26)")
    recs = {r.id: r.columns for r in read_serve_records(records_path) if hasattr(r, "columns")}
    for row, columns in answered(csv_path, recs):
        if row["load_mode"] != "concurrency":
            continue
        n = float(columns[COLUMN_INDEX["batch_size"]])
        implied = float(row["implied_running"] or "nan")
        if float(row["batch_size"]) < n or (n >= 16 and implied < 0.9 * n):
            yield row, columns


def table(csv_path: str, records_path: str) -> list[str]:
    """One line per row where KV binds (see the module docstring)."""
    from fastmodel.kernels.serve.attention import kv_bytes_per_token
    from fastmodel.kernels.serve.memory import activation_memory, kv_capacity, weight_memory

    c = COLUMN_INDEX
    out = ["engine GPU TP ISLxOSL N | model KV GiB, k tokens, held, room, batch | implied | KV GiB trt / vllm / sglang"]
    for row, col in rows(csv_path, records_path):
        n = col[c["batch_size"]]
        weights = weight_memory(col)
        workspace = activation_memory(col, min(n, col[c["max_batch_size"]]))
        cap = kv_capacity(col, weights, workspace)
        token = kv_bytes_per_token(col)
        held = held_tokens(col[c["input_len"]], col[c["output_len"]], col[c["kv_on_demand"]] > 0)
        b = budgets(col, weights, workspace, row["gpu"])
        implied = row["implied_running"]
        out.append(f"{row['framework'][:14]:14s} {row['gpu']} {col[c['tp']]:.0f} "
                   f"{col[c['input_len']]:.0f}x{col[c['output_len']]:.0f} {n:.0f} | {cap / GIB:.1f}, "
                   f"{cap / token / 1e3:.0f}, {held:.0f}, {math.floor(cap / (token * held))}, {row['batch_size']} | "
                   f"{float(implied) if implied else math.nan:.1f} | "
                   + " / ".join(f"{b[k] / GIB:.1f}" for k in ("trtllm", "vllm", "sglang")))
    return out


def main() -> None:
    args = validated_parser(__doc__).parse_args()
    try:
        lines = table(args.csv, args.records)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print("\n".join(lines))


if __name__ == "__main__":
    main()
