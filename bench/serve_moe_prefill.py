"""Diagnostic: the MoE block's own prefill kernels, sized by hand at each low-load MoE row's shapes, against the
row's TTFT shortfall (docs/model_serving.md §S65). Nothing here feeds a prediction.

For every answered MoE row at N <= ``--max-n`` (default 4) without attention DP, a lone prompt of ``T`` = ISL
tokens on one GPU of the TP group (``E_l = E / ep`` local experts, ``I = moe_ffn · ep / tp`` the local expert
width, ``h`` hidden, ``k`` top-k), per MoE layer:

- ``router``: the replicated router GEMM, ``2 T h E`` FLOPs at the 16-bit peak (every engine: a BF16 linear);
- ``permute``: the rows expanded into expert order (TensorRT-LLM ``expandInputRowsKernel``, vLLM DeepGEMM
  ``ep_scatter``, SGLang/vLLM Triton ``moe_align_block_size`` + gathered loads): ``T h + T k h / ep`` elements
  at 2 B, an upper bound (the engines move FP8 or FP4 rows where they quantize first), at the HBM bandwidth;
- ``pad``: the worst-case row padding of a grouped GEMM with 128-row tiles, ``E_l · 127`` rows through the three
  expert matrices, ``2 · 127 E_l · 3 I h`` FLOPs at ``0.179 P8`` (§S29: the slowest published MoE-family kernel
  rate, SGLang PR #3893's Triton block FP8 on H200), an upper bound;
- ``reread``: where the record states the token budget, the expert weights read again by each chunk beyond the
  first, ``(ceil(T / (budget - (N - 1))) - 1) · E_l · 3 I h · w`` bytes (``w`` 1 B FP8, 0.53 B MXFP4/NVFP4,
  2 B otherwise) at the HBM bandwidth.

The combine and the MoE input quantization are priced by the model already (``costs.combine_bytes``,
``quant_kernels``) and are not listed.

``room``: how much longer than modelled a prompt-carrying iteration can be by the row's own TPOT. In a closed loop
of N requests each request, while it decodes, sees the N - 1 others' prompts go through (once per cycle each, the
cycle ``TTFT + (O - 1) TPOT``), so a prefill ``X`` longer than modelled adds ``(N - 1) f X`` to its ``(O - 1)``
decode steps, ``f = (O - 1) TPOT / cycle`` the decoding share of the cycle (measured numbers). What the measured
TPOT leaves above the predicted one bounds it:

    X_max = max(0, TPOT_meas - TPOT_pred) (O - 1) / ((N - 1) f)

A shortfall above ``X_max`` is not time inside the engine's iterations, so no prefill kernel term can close it
without breaking the TPOT (§S24's argument on one row each; here on every row, N >= 2).

A second table splits the shortfall of each (framework, GPU, model, TP) holding both ISL 1,024 and 8,192 at
N <= ``--max-n`` (medians, EP 1) into a per-request part ``A`` and a per-token part ``B`` (ms per 1,000 tokens),
``shortfall = A + B · tokens / 1000`` through the two points. An under-priced expert kernel would add to ``B`` and
shrink it as 1 / TP (the experts are split over the ranks).

The first table prints, per (framework, GPU, model, TP, EP, ISL), the median TTFT shortfall ``measured - predicted``,
the four terms summed over the MoE layers and the median ``X_max`` (ms); ``share`` = the four terms' sum over the
shortfall.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_moe_prefill.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--max-n 4]
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_records  # noqa: E402  (bench/ is not a package)

#: rows of one grouped-GEMM tile (DeepGEMM's contiguous block, Triton's largest BLOCK_SIZE_M; §S42, §S29)
TILE_ROWS = 128
#: the slowest published MoE-family kernel rate, a share of the FP8 peak (§S29: SGLang PR #3893, H200)
SLOW_MOE_SHARE_FP8 = 0.179
#: matrices of a gated expert (gate, up, down)
EXPERT_MATRICES = 3
#: bytes of a 16-bit activation element
ACT_BYTES = 2.0
#: weight bytes per parameter by the record's precision (MXFP4/NVFP4: 4 bits + one 8-bit scale per 32 / 16 ~ 0.53)
WEIGHT_BYTES = {"fp8": 1.0, "fp4": 0.53, "nvfp4": 0.53, "mxfp4": 0.53}
#: the four kernel terms, in the table's order
TERMS = ("router", "permute", "pad", "reread")


def moe_terms(record: dict) -> dict[str, float]:
    """Seconds of the four MoE prefill terms of the module docstring, per MoE layer, for the record's lone prompt."""
    m, s, sysm = record["model"], record["serve"], record["system"]
    t = float(s["input_len"])
    h, e, k = float(m["hidden"]), float(m["moe_experts"]), float(m["moe_topk"])
    tp, ep = float(s["tp"]), float(s.get("ep") or 1)
    local, width = e / ep, float(m["moe_ffn"]) * ep / tp
    bw = float(sysm["hbm_bw_bytes_s"])
    p16 = float(sysm["peak_flops_bf16"])
    p8 = float(sysm.get("peak_flops_fp8") or 2.0 * p16)
    expert_params = local * EXPERT_MATRICES * width * h
    reread = 0.0
    budget = s.get("max_num_tokens")
    if budget:
        chunks = math.ceil(t / max(1.0, float(budget) - (float(s["concurrency"]) - 1.0)))
        reread = (chunks - 1) * expert_params * WEIGHT_BYTES.get(s.get("precision", ""), 2.0) / bw
    return {"router": 2.0 * t * h * e / p16,
            "permute": ACT_BYTES * (t * h + t * k * h / ep) / bw,
            "pad": 2.0 * (TILE_ROWS - 1) * expert_params / (SLOW_MOE_SHARE_FP8 * p8),
            "reread": reread}


def iteration_room(ttft_meas: float, tpot_meas: float, tpot_pred: float, n: float, out: float) -> float:
    """``X_max`` of the module docstring (seconds; inf for one request in flight, which sees no other prompt)."""
    if n <= 1.0 or out <= 1.0:
        return float("inf")
    decoding = (out - 1.0) * tpot_meas
    share = decoding / (ttft_meas + decoding)
    return max(0.0, tpot_meas - tpot_pred) * (out - 1.0) / ((n - 1.0) * share)


def moe_layer_count(model: dict) -> float:
    """MoE layers of a record's model: every layer after ``dense_layers`` (the records' MoE models here have
    none), one in ``moe_layer_freq``."""
    layers = float(model["layers"]) - float(model.get("dense_layers") or 0)
    return math.floor(layers / max(1.0, float(model.get("moe_layer_freq") or 1)))


def by_group(csv_path: str, records_path: str, max_n: int) -> dict:
    """{(framework, gpu, model, tp, ep, isl): [(shortfall s, {term: s over the MoE layers, "room": X_max})]} of
    the MoE rows at N <= ``max_n`` without attention DP that measured and predicted TTFT and TPOT."""
    out = defaultdict(list)
    for row, rec in answered_records(csv_path, records_path):
        s, m = rec["serve"], rec["model"]
        # a static-batch or max-throughput record has no concurrency: not a low-load row here (review15 #8)
        if s.get("concurrency") is None:
            continue
        if not m.get("moe_experts") or int(s.get("attention_dp") or 1) > 1 or int(s["concurrency"]) > max_n:
            continue
        if not all(row[c] for c in ("measured_ttft_s", "predicted_ttft_s", "measured_tpot_s", "predicted_tpot_s")):
            continue
        ttft, tpot = float(row["measured_ttft_s"]), float(row["measured_tpot_s"])
        gap = ttft - float(row["predicted_ttft_s"])
        layers = moe_layer_count(m)
        terms = {name: layers * v for name, v in moe_terms(rec).items()}
        terms["room"] = iteration_room(ttft, tpot, float(row["predicted_tpot_s"]), float(s["concurrency"]),
                                       float(s["output_len"]))
        key = (row["framework"], row["gpu"], row["model"], int(s["tp"]), int(s.get("ep") or 1), int(s["input_len"]))
        out[key].append((gap, terms))
    return out


def summary(entries: list) -> tuple[float, dict[str, float]]:
    """(median shortfall, {term: median}) of one group's rows."""
    gap = statistics.median(g for g, _ in entries)
    return gap, {name: statistics.median(t[name] for _, t in entries) for name in entries[0][1]}


def token_split(short_1k: float, short_8k: float) -> tuple[float, float]:
    """(A, B) of ``shortfall = A + B · tokens / 1000`` through the shortfalls at 1,024 and 8,192 tokens (same unit
    as the shortfalls; B per 1,000 tokens)."""
    per_1k = (short_8k - short_1k) / ((8192 - 1024) / 1000.0)
    return short_1k - 1.024 * per_1k, per_1k


def split_rows(groups: dict) -> dict:
    """{(framework, gpu, model, tp): (A s, B s per 1,000 tokens)} of the EP-1 groups of :func:`by_group` that hold
    both ISL 1,024 and 8,192."""
    out = {}
    for key, entries in groups.items():
        fw, gpu, model, tp, ep, isl = key
        other = groups.get((fw, gpu, model, tp, ep, 8192))
        if ep == 1 and isl == 1024 and other:
            out[(fw, gpu, model, tp)] = token_split(summary(entries)[0], summary(other)[0])
    return out


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--max-n", type=int, default=4)
    args = ap.parse_args()
    groups = by_group(args.csv, args.records, args.max_n)
    print("framework | gpu | model | tp | ep | isl | rows | shortfall (ms) | router | permute | pad | reread | share"
          " | room (ms)")
    for key in sorted(groups):
        gap, terms = summary(groups[key])
        total = sum(terms[n] for n in TERMS)
        share = total / gap if gap > 0 else float("nan")
        print(" | ".join(str(x) for x in key) + f" | {len(groups[key])} | {1e3 * gap:.1f} | "
              + " | ".join(f"{1e3 * terms[n]:.2f}" for n in TERMS) + f" | {share:.2f} | {1e3 * terms['room']:.1f}")
    print("\nframework | gpu | model | tp | A (ms) | B (ms per 1k tokens)")
    for key, (a, b) in sorted(split_rows(groups).items()):
        print(" | ".join(str(x) for x in key) + f" | {1e3 * a:.1f} | {1e3 * b:.2f}")


if __name__ == "__main__":
    main()
