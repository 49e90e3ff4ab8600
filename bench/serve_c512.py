"""Diagnostic: the nine vLLM gpt-oss-120b H100 "concurrency 512" rows priced at the server batch they ran
(docs/model_serving.md §S44).

The InferenceX H100 docker recipe hard-coded the client's ``--max-concurrency 512`` from d22bf9ca9 (2025-11-21)
to 4e135fd3f (2025-12-08) while the server ran ``--max-num-seqs=$CONC`` with ``--num-prompts $((CONC * 10))``,
and the result file took ``conc`` from the client's ``max_concurrency``. So a row recorded at 512 ran one CONC
of the sweep grid (4, 8, ..., 64; 4-16 for TP 8 at 8192 x 1024), which the row does not record. ``variants``
writes each row at every grid CONC (scratch copies: ``concurrency`` = ``max_batch_size`` = CONC, ``num_requests``
= 10 CONC, the closed loop the server sees); ``table`` reads their ``validate -o`` CSV and adds the client-side
wait of the run (``fastmodel.serve.drain``: 10 CONC prompts through 512 client slots to CONC server slots).

    python bench/serve_c512.py variants tests/data/serve_dev_load.jsonl /tmp/c512.jsonl
    python -m fastmodel.cli validate /tmp/c512.jsonl -o /tmp/c512.csv
    python bench/serve_c512.py table /tmp/c512.csv tests/data/serve_dev_load.jsonl

The CONC whose model TPOT is nearest the measured one (a diagnostic, not a prediction) is starred; the TTFT at
that CONC is then a check the TPOT did not choose.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fastmodel.serve.drain import drain_ttft  # noqa: E402

#: the client's hard-coded semaphore (benchmarks/gptoss_fp4_h100_docker.sh @25506e87c line 53)
CLIENT_SLOTS = 512
#: prompts per server slot (``--num-prompts $(( $CONC * 10 ))``)
ROUNDS = 10


def grid(serve: dict) -> tuple[int, ...]:
    """The sweep's CONC values for the row's cell (.github/configs/nvidia-master.yaml @25506e87c
    ``gptoss-fp4-h100-vllm``: conc-start 4 to conc-end 64, step 2; TP 8 at 8192 x 1024 to 16)."""
    end = 16 if (serve["tp"], serve["input_len"], serve["output_len"]) == (8, 8192, 1024) else 64
    return tuple(c for c in (4, 8, 16, 32, 64) if c <= end)


def is_semaphore_row(rec: dict) -> bool:
    """True for a record of the vLLM gpt-oss-120b H100 rows recorded at 512 in flight: the client's semaphore
    recorded as the load (§S44), read from the record's fields, not its id."""
    serve = rec.get("serve", {})
    return (serve.get("concurrency") == CLIENT_SLOTS and (rec.get("framework") or "").startswith("vLLM")
            and rec.get("model", {}).get("name") == "gpt-oss-120b"
            and (rec.get("system", {}).get("gpu") or "").startswith("H100"))


def rows(records: str) -> list[dict]:
    """The records of the vLLM gpt-oss-120b H100 rows recorded at 512 in flight (:func:`is_semaphore_row`)."""
    return [rec for rec in map(json.loads, open(records)) if is_semaphore_row(rec)]


def variants(records: str, out_path: str) -> int:
    n = 0
    with open(out_path, "w") as fh:
        for rec in rows(records):
            for conc in grid(rec["serve"]):
                var = json.loads(json.dumps(rec))
                var["id"] = f"{rec['id']}__C{conc}"
                var["serve"].update(concurrency=conc, max_batch_size=conc, num_requests=ROUNDS * conc)
                fh.write(json.dumps(var) + "\n")
                n += 1
    return n


def table(csv_path: str, records: str) -> list[dict]:
    """Per row: measured TTFT/TPOT, and per CONC the model TPOT and the run's mean TTFT."""
    priced = {}
    for row in csv.DictReader(open(csv_path)):
        base, conc = row["id"].rsplit("__C", 1)
        priced.setdefault(base, {})[int(conc)] = row
    out = []
    for rec in rows(records):
        s, m = rec["serve"], rec["measured"]
        at = {}
        for conc, row in sorted(priced.get(rec["id"], {}).items()):
            ttft, tpot = float(row["predicted_ttft_s"]), float(row["predicted_tpot_s"])
            request_s = ttft + (s["output_len"] - 1) * tpot
            at[conc] = (tpot, drain_ttft(ttft, request_s, ROUNDS * conc, CLIENT_SLOTS, conc))
        best = min(at, key=lambda c: abs(math.log(at[c][0] / m["tpot_s"]))) if at else None
        out.append({"cell": f"{s['input_len']}x{s['output_len']} TP {s['tp']}", "ttft": m["ttft_s"],
                    "tpot": m["tpot_s"], "at": at, "best": best})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("variants")
    v.add_argument("records")
    v.add_argument("out")
    t = sub.add_parser("table")
    t.add_argument("csv")
    t.add_argument("records")
    a = p.parse_args(argv)
    if a.cmd == "variants":
        print(f"{variants(a.records, a.out)} variants written to {a.out}")
        return 0
    for r in table(a.csv, a.records):
        cells = " | ".join(f"{'*' if c == r['best'] else ' '}C{c} {tp * 1e3:5.2f} ms {ttft:6.1f} s"
                           for c, (tp, ttft) in r["at"].items())
        print(f"{r['cell']:18s} measured {r['tpot'] * 1e3:5.2f} ms {r['ttft']:6.1f} s | {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
