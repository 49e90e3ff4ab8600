"""Command-line options several bench scripts share, parsed one way (bench/ is not a package: a script run as
``python bench/X.py`` has bench/ on its path; one loaded by the tests puts it there before importing this)."""

from __future__ import annotations

import argparse

PREVIOUS_HELP = "a commit to measure next to this tree ('none': skip)"


def add_previous(parser: argparse.ArgumentParser) -> None:
    """``--previous COMMIT``: the commit a timing bench also measures, right after this tree
    (``bench_batch.trees``); "none", the default, skips it."""
    parser.add_argument("--previous", default="none", help=PREVIOUS_HELP)


def validated_parser(doc: str) -> argparse.ArgumentParser:
    """The parser of a serving diagnostic: its description the first line of ``doc`` (the script's docstring),
    and the two files it reads (``serve_rows.answered_rows``), a ``fastmodel validate -o`` CSV and the records
    it was made from, in that order."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("records")
    return parser
