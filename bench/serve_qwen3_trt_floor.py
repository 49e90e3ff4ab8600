"""Diagnostic: the ~170 ms TTFT floor of the Qwen3-235B-A22B-FP8 TensorRT-LLM 1.0.0rc3 H100 rows (docs/model_serving.md §S41).

Three pieces of arithmetic that §S41 prices against the floor, and the floor itself:

- ``QWEN3_MOE_LAYER_OPS``: the Python-level dispatcher calls one Qwen3-MoE decoder layer issues in an eager
  (prompt-carrying) iteration of TensorRT-LLM's PyTorch backend with block-scaled FP8 linears and experts on SM90
  (§S41's table; §S21's convention: one op per ``torch.ops`` / ``torch`` call, tensor views included).
  ``eager_host_s`` is §S21's ``L x ops x host_op_s``; ``ops_per_layer_needed`` is the count a host floor would need
  to fill ``(TTFT - 2 TPOT) / L`` (§S21's "measured against it").
- ``prompts_per_iteration``: without chunked prefill the scheduler takes whole prompts up to the token budget
  aiconfigurator's benchmark rule sets, ``tau = B + ISL + 1500`` rounded up to 32 (§S34), beside the decodes of
  the other ``B - k`` requests: ``k (ISL - 1) <= tau - B``.
- ``isl_table``: measured and predicted TTFT of the TensorRT-LLM Qwen3 H100 rows by TP, concurrency, output
  length and prompt length.

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_qwen3_trt_floor.py /tmp/v.csv tests/data/serve_dev_load.jsonl
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import group_rows  # noqa: E402  (bench/ is not a package)

#: (piece, calls) of one Qwen3-MoE decoder layer at TP > 1 (at TP 1 the two fused all-reduce + norm calls are the
#: two residual RMSNorm calls: the same count); docs/model_serving.md §S41 gives the source of each line
QWEN3_MOE_LAYER_OPS = (
    ("all-reduce + residual RMSNorm after attention (PRE_MOE_FUSION)", 1),
    ("all-reduce + next layer's residual RMSNorm after the MoE (POST_MOE_FUSION)", 1),
    ("QKV projection, FP8 block scales on SM90: fp8_quantize_1x128, fp8_block_scaling_gemm", 2),
    ("q/k RMSNorm + RoPE: fused_qk_norm_rope, position_ids.view", 2),
    ("attention: q.new_empty, attention_inplace", 2),
    ("output projection, FP8 block scales", 2),
    ("Qwen3MoE.forward: view(-1, hidden), view(orig_shape)", 2),
    ("router (Qwen3Gate): weight.t(), cublas_mm", 2),
    ("routing: renorm_moe_routing_op", 1),
    ("experts (CutlassFusedMoE.forward_chunk): two weight views, fused_moe (quantizes inside)", 3),
)
#: aiconfigurator's benchmark rule: agg max_num_tokens = B + ISL + 1500, rounded up to tokens_per_block 32 (§S34)
BUDGET_MARGIN = 1500
TOKENS_PER_BLOCK = 32


def layer_ops() -> int:
    """Dispatcher calls of one layer: the sum of ``QWEN3_MOE_LAYER_OPS``."""
    return sum(n for _, n in QWEN3_MOE_LAYER_OPS)


def eager_host_s(layers: int, ops: float, host_op_s: float) -> float:
    """§S21's host issue time of one eager iteration: ``layers x ops x host_op_s``."""
    return layers * ops * host_op_s


def ops_per_layer_needed(ttft_s: float, tpot_s: float, layers: int, host_op_s: float) -> float:
    """Ops per layer a host floor would need to fill ``(TTFT - 2 TPOT) / layers`` at ``host_op_s`` each."""
    return (ttft_s - 2.0 * tpot_s) / layers / host_op_s


def token_budget(concurrency: int, isl: int) -> int:
    """``max_num_tokens`` of aiconfigurator's agg benchmark rule at batch cap B = ``concurrency`` (§S34)."""
    return -(-(concurrency + isl + BUDGET_MARGIN) // TOKENS_PER_BLOCK) * TOKENS_PER_BLOCK


def prompts_per_iteration(isl: int, concurrency: int) -> int:
    """Whole prompts one iteration takes under that budget while the other requests decode:
    the largest ``k <= B`` with ``k ISL + (B - k) <= tau``."""
    tau = token_budget(concurrency, isl)
    return min(concurrency, (tau - concurrency) // (isl - 1))


def isl_table(csv_path: str, records_path: str, model: str = "Qwen3-235B-A22B-FP8", gpu: str = "H100-SXM-80GB",
              engine: str = "TensorRT-LLM") -> dict:
    """{(tp, concurrency, output_len): {input_len: (measured TTFT s, predicted TTFT s, measured TPOT s)}} of the
    answered concurrency rows of one engine, model and GPU."""
    out = defaultdict(dict)
    for row, s in group_rows(csv_path, records_path, model, gpu, engine):
        if not s.get("concurrency"):
            continue
        out[(int(s["tp"]), int(s["concurrency"]), int(s["output_len"]))][int(s["input_len"])] = (
            float(row["measured_ttft_s"]), float(row["predicted_ttft_s"]), float(row["measured_tpot_s"]))
    return out


def main() -> None:
    ap = validated_parser(__doc__)
    args = ap.parse_args()
    for piece, n in QWEN3_MOE_LAYER_OPS:
        print(f"{n} | {piece}")
    ops = layer_ops()
    print(f"{ops} ops per layer: 94 x {ops} x 20 us = {eager_host_s(94, ops, 20e-6) * 1e3:.2f} ms per eager iteration")
    print("tp | N | OSL | ISL: measured / predicted TTFT ms (k prompts per iteration) | ops per layer needed")
    for (tp, n, osl), by_isl in sorted(isl_table(args.csv, args.records).items()):
        cells = [f"{i}: {m * 1e3:.0f} / {p * 1e3:.0f} (k {prompts_per_iteration(i, n)})"
                 for i, (m, p, _) in sorted(by_isl.items())]
        need = [ops_per_layer_needed(m, t, 94, 20e-6) for m, _, t in by_isl.values()]
        print(f"{tp} | {n} | {osl} | " + " | ".join(cells) + f" | {min(need):.0f}..{max(need):.0f}")


if __name__ == "__main__":
    main()
