"""Diagnostic: is the low-load TP > 1 TTFT gap the prefill allreduces? (docs/model_serving.md §S62). Nothing here
feeds a prediction.

Two tables:

1. ``need``: per (framework, GPU, model, ISL, TP >= 2) at N <= ``--max-n`` (default 8), rows without attention DP or
   expert parallelism, of one split (``--split``, default ``dev``): the mean TTFT gap (measured - predicted, ms), the
   model's prefill collectives (``prefill_comm`` of ``evaluate_record``, ms), the factor ``k = (comm + gap) / comm``
   by which those collectives would have to be slower to close the gap alone, and the extra time that is per
   layer allreduce of the prompt (``gap / (2 L)``, µs: two TP allreduces per layer).
2. ``sources``: published graph-captured times of the allreduce paths the engines take at prefill sizes on H100
   (vLLM's ``benchmark_device_communicators.py``, PR #42324 and PR #24532: ``PUBLISHED``) against the model's
   ``serve_allreduce`` at the same size and TP (H100, vLLM's 8 MiB buffer): published / model; and on 8 B200 the
   nccl-tests all_reduce fit of ``tests/data/b200_microbenchmarks.json`` at the prompt sizes against the model's
   NCCL path.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_tp_allreduce.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--max-n 8] [--split dev]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered, records_by_id  # noqa: E402  (bench/ is not a package)

MIB = 1024 * 1024

# (source, TP, path, MiB, µs) on H100 SXM, BF16, CUDA-graph captured, vLLM's
# benchmarks/kernels/benchmark_device_communicators.py. PR #42324 (2026-05-11, "Support tuned symmetric memory two-shot
# fallback"): the SM 9.0 table whose rows pick multimem, the last before its "SM 10.0 / B200" heading (world size 8).
# PR #24532 (2025-09, "add nccl symmetric memory for all reduce"): its TP 4 table, the (256, 8192) row (4 MiB).
PUBLISHED = (
    ("PR42324", 8, "pynccl", 8.0, 76.0), ("PR42324", 8, "pynccl", 16.0, 121.0),
    ("PR42324", 8, "pynccl", 32.0, 195.0), ("PR42324", 8, "pynccl", 47.84, 267.0),
    ("PR42324", 8, "pynccl", 64.0, 316.0), ("PR42324", 8, "pynccl", 128.0, 561.0),
    ("PR42324", 8, "symm_mem_multimem", 8.0, 46.0), ("PR42324", 8, "symm_mem_multimem", 16.0, 87.0),
    ("PR42324", 8, "symm_mem_multimem", 32.0, 165.0), ("PR42324", 8, "symm_mem_multimem", 47.84, 244.0),
    ("PR24532", 4, "ca_2stage", 4.0, 42.0), ("PR24532", 4, "pynccl", 4.0, 39.0),
)
#: the prompt's allreduce sizes (MiB) the B200 comparison prices: gpt-oss-120b at 1,024 and 8,192 tokens
#: (2 x 2,880 x tokens bytes), Llama-3.1-70B at 1,024 and 8,192 (2 x 8,192 x tokens)
PROMPT_MIB = (5.625, 16.0, 45.0, 128.0)
#: nccl-tests all_reduce on the 8 B200 of runs_dev_b200, fitted over 1 MB-8 GB (SimuMax, the same file as b200.toml)
B200_FIT = Path(__file__).resolve().parent.parent / "tests" / "data" / "b200_microbenchmarks.json"
GIB = 1024.0 ** 3


def plain_layout(s: dict) -> bool:
    """True for a record without attention DP or expert parallelism."""
    return int(s.get("attention_dp") or 1) <= 1 and int(s.get("ep") or 1) <= 1


def model_comm(record: dict) -> float:
    """The model's prefill collectives (s) of one record (``prefill_comm`` of ``evaluate_record``)."""
    from fastmodel.serve.api import evaluate_record
    return float(evaluate_record(record)["prefill_comm"])


def needed(gap: float, comm: float, layers: int) -> tuple[float, float]:
    """(k, extra µs per layer allreduce) that would close a TTFT ``gap`` (s) with the prompt's ``2 layers`` TP
    allreduces alone, given the model's ``comm`` (s) for them: ``k = (comm + gap) / comm``, ``gap / (2 layers)``."""
    return (comm + gap) / comm, 1e6 * gap / (2.0 * layers)


def by_group(csv_path: str, records_path: str, max_n: int, split: str, comm=model_comm) -> dict:
    """{(framework, gpu, model, isl, tp): [(gap s, comm s, layers)]} of the rows at TP >= 2, N <= max_n,
    plain layout, of ``split`` ("all": every row)."""
    records = records_by_id(records_path)
    out = defaultdict(list)
    for row, rec in answered(csv_path, records):
        s = rec["serve"]
        if int(s["tp"]) < 2 or int(s.get("concurrency") or 0) > max_n or not plain_layout(s):
            continue
        if split != "all" and row.get("split", split) != split:
            continue
        key = (row["framework"], row["gpu"], row["model"], int(s["input_len"]), int(s["tp"]))
        gap = float(row["measured_ttft_s"]) - float(row["predicted_ttft_s"])
        out[key].append((gap, comm(rec), int(rec["model"]["layers"])))
    return out


def source_ratios() -> list[tuple[str, int, str, float, float, float, float]]:
    """[(source, TP, path, MiB, published µs, model µs, published / model)] of :data:`PUBLISHED` against the model's
    ``serve_allreduce`` on H100 at that TP with vLLM's 8 MiB buffer (``custom_allreduce_bytes``, docs S19)."""
    from fastmodel.kernels.serve.allreduce import serve_allreduce
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.api import columns
    out = []
    for source, tp, path, mib, us in PUBLISHED:
        row = columns("llama3.1-70b", "H100", tp=tp, input_len=1024, output_len=128, batch_size=1).copy()
        row[COLUMN_INDEX["custom_allreduce_bytes"]] = 8.0 * MIB
        model = 1e6 * serve_allreduce(row, mib * MIB, float(tp), 1.0)
        out.append((source, tp, path, mib, us, model, us / model))
    return out


def b200_fit_us(mib: float, fit: dict, n: int = 8) -> float:
    """µs of an allreduce of ``mib`` MiB over ``n`` B200 by the nccl-tests fit ``fit`` (``nccl.all_reduce`` of
    ``b200_microbenchmarks.json``): ``latency_us (n - 1) scale + scale (n - 1) / n B / (efficient_factor 900 GiB/s)``
    (its ``conventions``: intercept = latency_us (n - 1) scale, busbw = efficient_factor x 900 GiB/s)."""
    scale = fit["scale"]
    return fit["latency_us"] * (n - 1) * scale + 1e6 * scale * (n - 1) / n * mib * MIB / (fit["efficient_factor"] * 900.0 * GIB)


def b200_ratios(path=B200_FIT) -> list[tuple[float, float, float, float]]:
    """[(MiB, fit µs, model µs, fit / model)] at :data:`PROMPT_MIB` over 8 B200: the nccl-tests fit against the
    model's ``serve_allreduce`` with TensorRT-LLM's 4 MiB buffer (every prompt size takes NCCL, as it does there)."""
    import json

    from fastmodel.kernels.serve.allreduce import serve_allreduce
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.api import columns
    fit = json.loads(Path(path).read_text())["nccl"]["all_reduce"]
    row = columns("llama3.1-70b", "B200", tp=8, input_len=1024, output_len=128, batch_size=1).copy()
    row[COLUMN_INDEX["custom_allreduce_bytes"]] = 4.0 * MIB
    out = []
    for mib in PROMPT_MIB:
        us, model = b200_fit_us(mib, fit), 1e6 * serve_allreduce(row, mib * MIB, 8.0, 1.0)
        out.append((mib, us, model, us / model))
    return out


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--max-n", type=int, default=8)
    ap.add_argument("--split", default="dev")
    args = ap.parse_args()
    print("framework | gpu | model | isl | tp | rows | gap ms | model comm ms | k to close | extra us/allreduce")
    for key, rows in sorted(by_group(args.csv, args.records, args.max_n, args.split).items()):
        gap = sum(r[0] for r in rows) / len(rows)
        comm = sum(r[1] for r in rows) / len(rows)
        fw, gpu, model, isl, tp = key
        k, extra = needed(gap, comm, rows[0][2])
        print(f"{fw} | {gpu} | {model} | {isl} | {tp} | {len(rows)} | {gap * 1e3:.1f} | {comm * 1e3:.1f} | "
              f"{k:.2f} | {extra:.0f}")
    print("\nsource | TP | path | MiB | published us (H100) | model us | published / model")
    for source, tp, path, mib, us, model, ratio in source_ratios():
        print(f"{source} | {tp} | {path} | {mib} | {us:.0f} | {model:.1f} | {ratio:.2f}")
    print("\nMiB | nccl-tests fit us (8 B200) | model us (NCCL) | fit / model")
    for mib, us, model, ratio in b200_ratios():
        print(f"{mib} | {us:.1f} | {model:.1f} | {ratio:.2f}")


if __name__ == "__main__":
    main()
