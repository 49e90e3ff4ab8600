"""The answered serving rows of a ``fastmodel validate -o`` CSV joined with their records' ``serve`` blocks: the
shared reader of the serving diagnostics (bench/serve_blocking.py, bench/serve_floor.py,
bench/serve_trt_triton_moe.py, bench/serve_qwen3_trt_floor.py)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator


def answered_rows(csv_path: str, records_path: str) -> Iterator[tuple[dict, dict]]:
    """(CSV row, record's ``serve`` block) of every row with status ``ok`` whose id is a record of
    ``records_path`` (JSONL)."""
    serve = {}
    with open(records_path) as fh:
        for line in fh:
            rec = json.loads(line)
            serve[rec["id"]] = rec["serve"]
    with open(csv_path) as fh:
        for row in csv.DictReader(fh):
            s = serve.get(row["id"])
            if s is not None and row["status"] == "ok":
                yield row, s


def group_rows(csv_path: str, records_path: str, model: str, gpu: str, engine: str) -> Iterator[tuple[dict, dict]]:
    """:func:`answered_rows` of one model and GPU whose ``framework`` starts with ``engine``."""
    for row, s in answered_rows(csv_path, records_path):
        if row["model"] == model and row["gpu"] == gpu and row["framework"].startswith(engine):
            yield row, s
