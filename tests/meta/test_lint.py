"""The tree passes ruff with the configuration in pyproject.toml (well under a second)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_check_is_clean():
    pytest.importorskip("ruff", reason="ruff comes with the test extra: pip install -e '.[test]'")
    command = [sys.executable, "-m", "ruff"] if shutil.which("ruff") is None else ["ruff"]
    result = subprocess.run([*command, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
