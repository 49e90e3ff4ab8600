"""Freeze the held-out split of the dev data (issue 26 item 7): run once, never re-run to change it.

For every dev file, within each ``source`` group, the records whose ``sha256(id)`` is among the smallest
20% (at least one in a group of three or more) are held out. No rule, constant or default of the model may
be developed or tuned on them: ``fastmodel validate --split heldout`` reports them beside the dev split, and
every score quoted in-sample is printed with the held-out one next to it.

    python tests/data/freeze_heldout.py     # writes tests/data/heldout.json (refuses to overwrite it)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = ("runs_dev.jsonl", "runs_dev_small.jsonl", "runs_dev_b200.jsonl", "serve_dev_load.jsonl",
         "serve_dev_disagg.jsonl")
SHARE = 0.2


def heldout_ids(path: Path) -> list[str]:
    groups: dict[str, list[str]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            groups[str(record.get("source"))].append(str(record["id"]))
    chosen = []
    for ids in groups.values():
        k = math.floor(SHARE * len(ids))
        if k == 0 and len(ids) >= 3:
            k = 1
        chosen += sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:k]
    return sorted(chosen)


def main() -> None:
    out = HERE / "heldout.json"
    if out.exists():
        raise SystemExit(f"{out} exists: the held-out split is frozen")
    data = {"rule": "per source group, the 20% of ids with the smallest sha256 (>= 1 in groups of >= 3); "
                    "frozen 2026-12-02 before any tuning of issues 22-26",
            "files": {name: heldout_ids(HERE / name) for name in FILES}}
    out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
