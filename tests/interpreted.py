"""Run a snippet with the kernels interpreted (``FASTMODEL_JIT=0``) in a fresh interpreter, for a test that needs
an njit helper on its own.

Called from Python, an njit helper compiles as an entry point of its own at the test's argument types, with every
callee it does not share with a compiled kernel: the GEMM-list helpers (``shape.layer_gemm_time``,
``serve.costs.layer_gemms``, ``shape.mlp_gemm_time``) took two to four minutes each on a cold cache, a third of
the suite's compile time. Interpreted, the same arithmetic runs in a few seconds (``kernels/jit.py``
``INTERPRETED``: the kernels are the same Python functions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_interpreted(code: str):
    """Run ``code`` (which sets a JSON-serialisable ``result``) under ``FASTMODEL_JIT=0`` from the checkout's
    root and return ``result``; floats come back exactly (JSON keeps a float's shortest repr)."""
    env = {**os.environ, "FASTMODEL_JIT": "0"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    script = f"{code}\nimport json as _json, sys as _sys\n_sys.stdout.write('\\n' + _json.dumps(result))\n"
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])
