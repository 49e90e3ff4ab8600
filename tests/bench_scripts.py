"""Scripts of bench/ loaded as modules, and the input files they read, for the tests that check their tables by
hand."""

import csv
import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str):
    """The module of ``bench/<name>.py`` (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_validated(tmp_path: Path, records: list[dict], header: list[str], rows: list[list]) -> tuple[str, str]:
    """The two files a serving diagnostic of bench/ reads: ``records`` one JSON object a line in
    ``tmp_path/r.jsonl``, and a ``fastmodel validate -o`` CSV of ``header`` and ``rows`` in ``tmp_path/v.csv``.
    Returns their paths as (CSV, records), the order the scripts take them in."""
    recs, table = tmp_path / "r.jsonl", tmp_path / "v.csv"
    recs.write_text("".join(json.dumps(record) + "\n" for record in records))
    with open(table, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return str(table), str(recs)
