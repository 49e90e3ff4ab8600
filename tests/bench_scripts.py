"""Scripts of bench/ (and the generators of tests/data) loaded as modules, and the input files the serving
diagnostics read, for the tests that check their tables by hand."""

import csv
import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_script(path: Path):
    """The module of the script at ``path``, named by its stem (bench/ and tests/data are not packages)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_bench(name: str):
    """The module of ``bench/<name>.py``."""
    return load_script(BENCH / f"{name}.py")


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
