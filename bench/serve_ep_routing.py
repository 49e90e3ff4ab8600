"""Diagnostic: the experts one decode step of Qwen3-235B-A22B reads on its busiest rank, under uniform routing and
under aiconfigurator's power-law routing generator, priced against the measured TPOT (docs/model_serving.md §S54).
Nothing here feeds a prediction.

The model reads ``E (1 - (1 - k/E)^T)`` distinct experts per MoE layer for a step of ``T`` tokens, ``1/ep`` of them
per rank (uniform independent routing, §S3). Two departures are priced, each as a change of the expert weight
stream only (``layers x experts x 3 hidden moe_ffn x bytes / etp`` at ``hbm_bw x hbm_eff``; decode at these
batches is weight-bound, §S3):

- ``busy``: under expert parallelism the layer lasts as long as the rank that reads the most experts; with uniform
  routing a rank's count is Binomial(E/ep, p) (``serve_trt_triton_moe.ep_busiest_experts``).
- ``pl``: aiconfigurator's MoE collector draws per-expert token loads from a power law (``collector/*/collect_moe.py``
  ``power_law_logits_v3``, documented in ``collector/README`` "Power-Law Distribution in MoE Workload Simulation"):
  ``E`` loads on ``[1, 0.8 T]`` (``[0.01, 2]`` when ``T k <= E``) by the inverse CDF, scaled to ``T k`` and rounded,
  the rounding remainder handed to the largest loads, and the EP group with the most tokens is the one timed. Its
  document gives ``alpha = 1.2`` for Qwen3-235B "by latency matching" on CNN/DailyMail and OpenOrca. Re-implemented
  here from that description; the count is the experts with a non-zero load on the most loaded group.

The batch of a row is its measured ``implied_running`` (§S26, model-free).

    python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl --heldout -o /tmp/v.csv
    python bench/serve_ep_routing.py /tmp/v.csv tests/data/serve_dev_load.jsonl
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import records_by_id  # noqa: E402  (bench/ is not a package)
from serve_trt_triton_moe import ep_busiest_experts  # noqa: E402  (bench/ is not a package)

#: HBM efficiency of the H100 and H200 device files (specs/devices/h100-sxm.toml, h200-sxm.toml)
HBM_EFF = 0.80
#: bytes per expert weight by the record's precision (FP8 block scales are 1/16,384 of a byte and left out)
WEIGHT_BYTES = {"fp8": 1.0, "fp4": 4.25 / 8.0, "bf16": 2.0}


def uniform_touched(experts: int, topk: int, tokens: float) -> float:
    """Distinct experts a step of ``tokens`` tokens reads under uniform routing: E (1 - (1 - k/E)^T)."""
    return experts * (1.0 - (1.0 - topk / experts) ** tokens)


def power_law_quantile(u, alpha: float, lo: float, hi: float):
    """Inverse CDF of the power law ``x^-alpha`` on ``[lo, hi]`` at ``u`` in [0, 1]."""
    a = 1.0 - alpha
    return ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)


def power_law_loads(rng, tokens: int, experts: int, topk: int, alpha: float) -> np.ndarray:
    """Token count per expert of one draw of aiconfigurator's generator (module docstring); sums to ``tokens topk``."""
    lo, hi = (1.0, 0.8 * tokens) if tokens * topk > experts else (0.01, 2.0)
    x = power_law_quantile(rng.random(experts), alpha, lo, hi)
    loads = np.round(x / x.sum() * tokens * topk).astype(int)
    order = np.argsort(-loads, kind="stable")
    delta = tokens * topk - int(loads.sum())
    for i in range(abs(delta)):
        if delta > 0:
            loads[order[i % experts]] += 1
        else:
            j = order[-(i % experts) - 1]
            loads[j if loads[j] > 0 else int(np.argmax(loads))] -= 1
    return loads


def power_law_busiest(
    tokens: int, experts: int, topk: int, ep: int, alpha: float, draws: int = 200, seed: int = 0
) -> tuple[float, float]:
    """(mean experts with tokens on the most loaded of ``ep`` groups, mean experts with tokens in all) over draws."""
    rng = np.random.default_rng(seed)
    busy, total = [], []
    for _ in range(draws):
        loads = power_law_loads(rng, tokens, experts, topk, alpha).reshape(ep, experts // ep)
        busy.append(int((loads[int(np.argmax(loads.sum(axis=1)))] > 0).sum()))
        total.append(int((loads > 0).sum()))
    return float(np.mean(busy)), float(np.mean(total))


def expert_stream_s(model: dict, serve: dict, bw: float, experts: float) -> float:
    """Seconds to stream ``experts`` routed experts per MoE layer on one rank: layers x experts x 3 h f bytes / etp
    at ``bw`` (bytes/s, already times the efficiency)."""
    etp = serve["tp"] / (serve.get("ep") or 1)
    nbytes = 3.0 * model["hidden"] * model["moe_ffn"] * WEIGHT_BYTES[serve["precision"]] / etp
    return model["layers"] * experts * nbytes / bw


def price(
    csv_path: str,
    records_path: str,
    mode: str,
    model_name: str = "Qwen3-235B-A22B-FP8",
    split: str = "dev",
    alpha: float = 1.2,
) -> tuple[float, float, dict]:
    """(TPOT MAPE of the split before, after adding the weight-stream change of ``mode`` to the rows of
    ``model_name``, {(engine, tp, ep, N): [(error before, error after, added s)]})."""
    recs = records_by_id(records_path)
    cache, groups, before, after = {}, {}, [], []
    with open(csv_path) as fh:
        for row in csv.DictReader(fh):
            rec = recs.get(row["id"])
            if rec is None or row["status"] != "ok" or row["split"] != split:
                continue
            meas, pred = float(row["measured_tpot_s"]), float(row["predicted_tpot_s"])
            added = 0.0
            m, s = rec["model"], rec["serve"]
            if m["name"] == model_name and not s.get("attention_dp"):
                ep, tokens = s.get("ep") or 1, max(1, round(float(row["implied_running"])))
                E, k = m["moe_experts"], m["moe_topk"]
                if mode == "busy":
                    new = ep_busiest_experts(E, k, tokens, ep)[0]
                else:
                    key = (tokens, ep)
                    if key not in cache:
                        cache[key] = power_law_busiest(tokens, E, k, ep, alpha)[0]
                    new = cache[key]
                bw = rec["system"]["hbm_bw_bytes_s"] * HBM_EFF
                added = expert_stream_s(m, s, bw, new - uniform_touched(E, k, tokens) / ep)
                groups.setdefault((row["engine"], s["tp"], ep, s["concurrency"]), []).append(
                    (pred / meas - 1.0, (pred + added) / meas - 1.0, added)
                )
            before.append(abs(pred / meas - 1.0))
            after.append(abs((pred + added) / meas - 1.0))
    return 100.0 * statistics.mean(before), 100.0 * statistics.mean(after), groups


def main() -> None:
    ap = validated_parser(__doc__)
    ap.add_argument("--split", default="dev")
    args = ap.parse_args()
    print("T | ep | uniform per rank | uniform busiest | power-law 1.2 busiest | power-law all")
    for tokens in (4, 8, 16, 32, 64, 128):
        for ep in (4, 8):
            hi, mean = ep_busiest_experts(128, 8, tokens, ep)
            pl_busy, pl_all = power_law_busiest(tokens, 128, 8, ep, 1.2)
            print(f"{tokens} | {ep} | {mean:.2f} | {hi:.2f} | {pl_busy:.2f} | {pl_all:.1f}")
    for mode in ("busy", "pl"):
        b, a, groups = price(args.csv, args.records, mode, split=args.split)
        print(
            f"\n{mode}: {args.split} TPOT MAPE {b:.2f} -> {a:.2f} %\nengine | tp | ep | N | rows | bias before -> "
            "after % | added ms"
        )
        for key, v in sorted(groups.items()):
            print(
                " | ".join(map(str, key)) + f" | {len(v)} | {100 * statistics.mean(x for x, _, _ in v):+.1f} -> "
                f"{100 * statistics.mean(y for _, y, _ in v):+.1f} | {1e3 * statistics.mean(z for *_, z in v):+.2f}"
            )


if __name__ == "__main__":
    main()
