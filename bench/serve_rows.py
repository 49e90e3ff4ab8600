"""The answered serving rows of a ``fastmodel validate -o`` CSV joined with their records' ``serve`` blocks: the
shared reader of the serving diagnostics (bench/serve_blocking.py, bench/serve_floor.py,
bench/serve_trt_triton_moe.py, bench/serve_qwen3_trt_floor.py)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator


def records_by_id(records_path: str) -> dict[str, dict]:
    """{id: record} of a JSONL records file (a later record of the same id wins)."""
    recs = {}
    with open(records_path) as fh:
        for line in fh:
            rec = json.loads(line)
            recs[rec["id"]] = rec
    return recs


def answered(csv_path: str, by_id: dict) -> Iterator[tuple[dict, dict]]:
    """(CSV row, ``by_id[id]``) of every row with status ``ok`` whose id is a key of ``by_id``."""
    with open(csv_path) as fh:
        for row in csv.DictReader(fh):
            found = by_id.get(row["id"])
            if found is not None and row["status"] == "ok":
                yield row, found


def answered_records(csv_path: str, records_path: str) -> Iterator[tuple[dict, dict]]:
    """(CSV row, record) of every row with status ``ok`` whose id is a record of ``records_path`` (JSONL)."""
    yield from answered(csv_path, records_by_id(records_path))


def answered_rows(csv_path: str, records_path: str) -> Iterator[tuple[dict, dict]]:
    """(CSV row, record's ``serve`` block) of every row with status ``ok`` whose id is a record of
    ``records_path`` (JSONL)."""
    yield from answered(csv_path, {k: rec["serve"] for k, rec in records_by_id(records_path).items()})


def group_rows(csv_path: str, records_path: str, model: str, gpu: str, engine: str) -> Iterator[tuple[dict, dict]]:
    """:func:`answered_rows` of one model and GPU whose ``framework`` starts with ``engine``."""
    for row, s in answered_rows(csv_path, records_path):
        if row["model"] == model and row["gpu"] == gpu and row["framework"].startswith(engine):
            yield row, s
