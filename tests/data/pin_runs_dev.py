"""Regenerate runs_dev_predictions.json, the regression pin of tests/test_validate.py.

Run only when the real-world model changes on purpose: ``python tests/data/pin_runs_dev.py``.
"""

import json
from pathlib import Path

from fastmodel.lm.records import read_records
from fastmodel.lm.validate import rows

HERE = Path(__file__).parent
table = rows(read_records(HERE / "runs_dev.jsonl"))
(HERE / "runs_dev_predictions.json").write_text(
    json.dumps({row["id"]: row["predicted_step_time_s"] for row in table}, indent=1) + "\n")
