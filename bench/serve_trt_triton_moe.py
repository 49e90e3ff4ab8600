"""Diagnostic: TensorRT-LLM's OpenAI-Triton MoE on Hopper against the H200 gpt-oss-120b gap (docs/model_serving.md §S37).

Three pieces of arithmetic that §S37 prices against the measured gap, and the gap itself:

- ``triton_mxfp4_padding``: the shapes TensorRT-LLM's ``TritonMXFP4FusedMoEMethod`` stores per rank. Its
  ``create_weights`` pads the hidden size to ``k_alignment`` = 128 and the fused gate-up width to
  ``n_alignment`` = 256; ``shard_and_pad_tensor`` first pads the sharded axis to ``alignment x moe_tp`` and
  cuts it into ``moe_tp`` equal shards (``alignment`` 128 for each of w1 and w3, ``n_alignment // 2``).
  Returned with the ratio of padded to unpadded expert GEMM work (= weight bytes).
- ``ep_busiest_experts``: under expert parallelism a decode step lasts as long as the rank that reads the most
  experts. With uniform independent routing each expert is touched with ``p = 1 - (1 - k/E)^n`` and a rank's
  ``E/ep`` experts give a Binomial(E/ep, p) count; the expected maximum over ``ep`` independent ranks is
  ``sum_j (1 - F(j)^ep)``. Real routing is skewed, so this is a lower bound on the imbalance.
- ``gaps``: measured − predicted TTFT and TPOT of the TensorRT-LLM gpt-oss-120b H200 rows by TP, prompt length
  and concurrency.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_trt_triton_moe.py /tmp/v.csv tests/data/serve_dev_load.jsonl
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from math import comb
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import group_rows  # noqa: E402  (bench/ is not a package)

K_ALIGNMENT = 128   # TritonMXFP4FusedMoEMethod.__init__: k_alignment
N_ALIGNMENT = 256   # n_alignment = 2 x k_alignment


def _pad(x: int, a: int) -> int:
    return -(-x // a) * a


def triton_mxfp4_padding(hidden: int, ffn: int, moe_tp: int) -> tuple[int, int, int, int, float]:
    """(K1, N1, K2, N2, ratio): gate-up GEMM (K1 x N1) and down GEMM (K2 x N2) per expert and rank as stored, and
    their padded / unpadded multiply-adds (``2 ffn/tp x hidden`` and ``ffn/tp x hidden``)."""
    shard = _pad(ffn, (N_ALIGNMENT // 2) * moe_tp) // moe_tp      # w1, w3: shard axis padded, then cut
    k1, n1 = _pad(hidden, K_ALIGNMENT), _pad(2 * shard, N_ALIGNMENT)
    k2, n2 = _pad(shard, K_ALIGNMENT), _pad(hidden, N_ALIGNMENT)
    base = 3.0 * hidden * ffn / moe_tp
    return k1, n1, k2, n2, (k1 * n1 + k2 * n2) / base


def ep_busiest_experts(experts: int, topk: int, tokens: int, ep: int) -> tuple[float, float]:
    """(expected experts on the busiest of ``ep`` ranks, mean per rank) for a step of ``tokens`` tokens."""
    p = 1.0 - (1.0 - topk / experts) ** tokens
    n = experts // ep
    cdf, acc = [], 0.0
    for j in range(n + 1):
        acc += comb(n, j) * p ** j * (1.0 - p) ** (n - j)
        cdf.append(min(acc, 1.0))
    return sum(1.0 - cdf[j] ** ep for j in range(n)), n * p


def gaps(csv_path: str, records_path: str, model: str = "gpt-oss-120b", gpu: str = "H200-SXM-141GB",
         engine: str = "TensorRT-LLM") -> dict:
    """{(tp, input_len, concurrency): [(TTFT gap s, TPOT gap s)]} of the answered rows of one engine, model and
    GPU with ep = 1 and no attention DP."""
    out = defaultdict(list)
    for row, s in group_rows(csv_path, records_path, model, gpu, engine):
        if int(s.get("attention_dp") or 1) > 1 or int(s.get("ep") or 1) > 1:
            continue
        out[(int(s["tp"]), int(s["input_len"]), int(s["concurrency"]))].append(
            (float(row["measured_ttft_s"]) - float(row["predicted_ttft_s"]),
             float(row["measured_tpot_s"]) - float(row["predicted_tpot_s"])))
    return out


def main() -> None:
    ap = validated_parser(__doc__)
    args = ap.parse_args()
    print("moe_tp | K1 x N1 | K2 x N2 | padded / unpadded")
    for tp in (1, 2, 4, 8):
        k1, n1, k2, n2, r = triton_mxfp4_padding(2880, 2880, tp)
        print(f"{tp} | {k1} x {n1} | {k2} x {n2} | {r:.4f}")
    print("ep | N | busiest rank's experts | mean")
    for ep in (2, 4, 8):
        for n in (4, 8, 16):
            hi, mean = ep_busiest_experts(128, 4, n, ep)
            print(f"{ep} | {n} | {hi:.2f} | {mean:.2f}")
    print("tp | ISL | N | rows | mean TTFT gap (ms) | mean TPOT gap (ms)")
    for key, rows in sorted(gaps(args.csv, args.records).items()):
        print(" | ".join(str(k) for k in key) + f" | {len(rows)} | {statistics.mean(g for g, _ in rows) * 1e3:6.1f}"
              f" | {statistics.mean(t for _, t in rows) * 1e3:5.2f}")


if __name__ == "__main__":
    main()
