"""Diagnostic: the predicted TTFT of the long-prompt closed-loop rows split into its parts, and the lone prefill
their own measurements imply under three queue forms (docs/model_serving.md §S61). Nothing here feeds a prediction.

Two tables over the records of one (model, ISL, OSL) whose KV cache holds every request (``batch_size`` = N and,
by the record's own Little's law, at least 95 % of N decoding: ``implied_running``, §S26), the held-out split left
out (``heldout.json`` beside the records; ``--heldout`` keeps it):

1. ``parts``: per (engine, GPU, precision, TP, N) the measured and predicted TTFT and the model's parts (§S7): the
   prompt's own prefill iterations ``S`` (decodes riding along included), the station queue ``R − S``, the waits
   ``(o + h) TPOT``, the steady state, the start wave and its share ``1 / client_rounds``.
2. ``implied``: per (engine, GPU, precision, TP) with at least three loads, the lone prefill ``S`` that best fits the
   measured TTFT of every load (least mean |relative error|) when the TTFT is built as §S7 builds it from the
   record's own numbers:

       TTFT(N) = (1 − 1/R) (S (1 + w(φ)) + o · TPOT) + (1/R) · m̄(N) · S,   φ = λ (N − 1)/N · S,
       λ = N / (TTFT + (O − 1) TPOT)   (Little's law on the measured TTFT and TPOT)

   with ``m̄(N)`` the start wave's mean iterations at the row's token budget (``load.wave_iterations``), ``o`` the
   overlap step and the boundary wait, and the waiting time in units of ``S``: ``w = φ / (1 − φ)`` (Schweitzer's
   MVA, exponential service: the model's before §S61), ``φ / (2 (1 − φ))`` (the same with a deterministic prompt
   service: the prompt in service has ``S / 2`` left, the M/D/1 mean; the model's since §S61, which takes half of a
   prompt's share ``D`` of the station) or 0 (no queue). ``S*`` over the model's ``S`` is
   how far the lone prefill is off; the fit's residual says which queue form the loads agree with.

    FASTMODEL_JIT=0 python -m fastmodel.cli validate tests/data/serve_dev_load.jsonl -o /tmp/v.csv
    FASTMODEL_JIT=0 python bench/serve_ttft_parts.py /tmp/v.csv tests/data/serve_dev_load.jsonl [--isl 8192]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import validated_parser  # noqa: E402  (bench/ is not a package)
from serve_rows import answered_records  # noqa: E402  (bench/ is not a package)

FORMS = ("mva", "md1", "none")
#: share of the requests in flight that must be decoding by the record's own Little's law (``fits_all``)
FULL = 0.95


def waiting(form: str, phi: float) -> float:
    """Mean wait in the prefill station in units of the prompt's service, at busy share ``phi`` < 1."""
    if form == "mva":
        return phi / (1.0 - phi)
    if form == "md1":
        return 0.5 * phi / (1.0 - phi)
    return 0.0


def built_ttft(s: float, point: dict, form: str) -> float:
    """§S7's mean TTFT of one measured load at lone prefill ``s`` (``point``: n, ttft, tpot, out, o, rounds,
    wave; ``wave`` the start wave's mean iterations); inf when the station would saturate."""
    n = point["n"]
    lam = n / (point["ttft"] + (point["out"] - 1.0) * point["tpot"])
    phi = lam * (n - 1.0) / n * s
    if phi >= 1.0:
        return float("inf")
    share = 1.0 / point["rounds"] if point["rounds"] > 0 and n > 1 else 0.0
    steady = s * (1.0 + waiting(form, phi)) + point["o"] * point["tpot"]
    return (1.0 - share) * steady + share * point["wave"] * s


def implied_s(points: list[dict], form: str, grid: int = 4000) -> tuple[float, float]:
    """(S, mean |relative error|) of the lone prefill that fits the measured TTFT of ``points`` best, searched on
    ``grid`` steps up to the smallest measured TTFT (a TTFT holds at least one prefill)."""
    best = (float("nan"), float("inf"))
    for s in np.linspace(0.0, min(p["ttft"] for p in points), grid + 1)[1:]:
        err = float(np.mean([abs(built_ttft(s, p, form) / p["ttft"] - 1.0) for p in points]))
        if err < best[1]:
            best = (float(s), err)
    return best


def model_parts(record: dict) -> dict:
    """The model's TTFT parts of one concurrency record (§S7): S (the prompt's own iterations, ``own``), the station
    response R, steady state, start wave, its share, TPOT, rate, the waits ``o`` (the overlap step and the boundary
    wait) and the point of ``built_ttft`` (measured). Reads ``load.loop_state``'s arguments at the solved rate (S,
    and ``o`` as ``steady_loop`` passes it, not a copy of its rule: review8 #11), so the kernels must run
    interpreted (FASTMODEL_JIT=0)."""
    from fastmodel.kernels import jit
    from fastmodel.kernels.serve import load
    from fastmodel.registry.lm import COLUMN_INDEX as CI
    from fastmodel.serve.records import lower_any

    if not jit.INTERPRETED:
        raise SystemExit("serve_ttft_parts.py reads the loop's state: run it with FASTMODEL_JIT=0")
    row = lower_any(record).columns
    n = float(record["serve"]["concurrency"])
    out, dec, pre, work = np.zeros(8), np.zeros(4), np.zeros(4), np.zeros(4)
    seen = {}
    state = load.loop_state

    def spy(lam, running, own, share, t_d, per_token, mixed, steps, overlap, wait):
        result = state(lam, running, own, share, t_d, per_token, mixed, steps, overlap, wait)
        seen.update(own=own, response=result[1], overlap=overlap)
        return result

    load.loop_state = spy
    try:
        load.steady_loop(row, n, dec, pre, out, work)
    finally:
        load.loop_state = state
    rounds = row[CI["client_rounds"]]
    o = seen["overlap"]
    waves, _ = load.wave_iterations(n / row[CI["attention_dp"]], row[CI["input_len"]], row[CI["max_num_tokens"]],
                                    row[CI["chunked_prefill"]] > 0)
    m = record["measured"]
    point = {"n": n, "ttft": m["ttft_s"], "tpot": m["tpot_s"], "out": row[CI["output_len"]], "o": o,
             "rounds": rounds, "wave": waves}
    return {"S": seen["own"], "R": seen["response"], "steady": out[0], "wave": out[6], "tpot": out[1],
            "lam": out[2], "share": 1.0 / rounds if rounds > 0 and n > 1 else 0.0, "o": o, "point": point}


def heldout_ids(records_path: str) -> set[str]:
    """Ids of the held-out split of ``records_path`` (``heldout.json`` beside it; none when absent)."""
    split = Path(records_path).with_name("heldout.json")
    if not split.exists():
        return set()
    return set(json.loads(split.read_text())["files"].get(Path(records_path).name, []))


def fits_all(row: dict, n: int) -> bool:
    """True when the model's KV cache holds all ``n`` requests and the record's own Little's law has at least
    ``FULL`` of them decoding (``implied_running``, §S26: fewer means a measured wait for KV room)."""
    return float(row["batch_size"]) >= n and float(row.get("implied_running") or "nan") >= FULL * n


def cells(csv_path: str, records_path: str, model: str, isl: int, osl: int, heldout: bool) -> dict:
    """{(engine, gpu, precision, tp): [(N, measured, predicted, parts)]} of the answered rows of one model and
    (ISL, OSL) whose KV cache holds every request, without batch waiting, sorted by N."""
    skip = set() if heldout else heldout_ids(records_path)
    acc = defaultdict(list)
    for row, rec in answered_records(csv_path, records_path):
        s = rec["serve"]
        if (rec["id"] in skip or row["model"] != model or s.get("input_len") != isl or s.get("output_len") != osl
                or "concurrency" not in s or s.get("batch_wait_iters") or not fits_all(row, s["concurrency"])):
            continue
        key = (row["engine"], row["gpu"], row["precision"], int(s["tp"]))
        acc[key].append((int(s["concurrency"]), float(row["measured_ttft_s"]), float(row["predicted_ttft_s"]),
                         model_parts(rec)))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in sorted(acc.items())}


def main(argv=None) -> None:
    parser = validated_parser(__doc__)
    parser.add_argument("--model", default="Llama-3.1-70B")
    parser.add_argument("--isl", type=int, default=8192)
    parser.add_argument("--osl", type=int, default=1024)
    parser.add_argument("--heldout", action="store_true", help="keep the held-out rows")
    args = parser.parse_args(argv)
    table = cells(args.csv, args.records, args.model, args.isl, args.osl, args.heldout)
    print("parts (s): cell N | measured model | S queue waits steady | wave x share")
    for key, points in table.items():
        for n, meas, pred, p in points:
            queue = p["R"] - p["S"]
            print(f"{' '.join(map(str, key)):40s} N{n:<4d} {meas:7.3f} {pred:7.3f} | {p['S']:.3f} {queue:.3f} "
                  f"{p['steady'] - p['R']:.3f} {p['steady']:.3f} | {p['wave']:.3f} x {p['share']:.2f}")
    print("\nimplied lone prefill S* (s) by queue form, over the model's S at the smallest N; fit MAPE %")
    for key, points in table.items():
        if len(points) < 3:
            continue
        line = f"{' '.join(map(str, key)):40s} N {points[0][0]}-{points[-1][0]} model S {points[0][3]['S']:.3f}"
        for form in FORMS:
            s, err = implied_s([p["point"] for *_, p in points], form)
            line += f" | {form} {s:.3f} ({s / points[0][3]['S']:.2f}, {100 * err:.1f})"
        print(line)


if __name__ == "__main__":
    main()
