"""Input and output: atomic file writes, output-path rules, store ownership, batch evaluation.

``atomic`` (every file written whole), ``outputs`` (never replace an input),
``store`` (sweep stores on disk: ownership, resume flags), ``batch`` and its
helpers (JSONL cases in, one result line per case out). Nothing is imported here.
"""
