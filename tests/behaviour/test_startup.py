"""Start-up: commands that need no kernels import neither numba nor xarray (checked in a fresh interpreter)."""

import json
import subprocess
import sys

import pytest

PROBE = r"""
import json, sys
from fastmodel.cli import main
sys.argv = ["fastmodel", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit:
    pass
heavy = [name for name in ("numba", "xarray", "pandas", "matplotlib", "pyarrow") if name in sys.modules]
print("HEAVY=" + json.dumps(heavy), file=sys.stderr)
"""


def heavy_modules(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True, check=True)
    line = next(x for x in done.stderr.splitlines() if x.startswith("HEAVY="))
    return json.loads(line[len("HEAVY="):])


@pytest.mark.parametrize("args", [["--help"], ["specs", "list"], ["run", "--help"], ["batch", "--help"]])
def test_commands_without_kernels_import_neither_numba_nor_xarray(args):
    assert heavy_modules(*args) == []


def test_run_imports_numba_but_not_xarray():
    assert heavy_modules("run", "-m", "llama-7b", "-s", "dc-a", "-t", "llm-pretrain-fsdp") == ["numba"]


def test_package_import_is_lazy():
    code = "import sys, fastmodel; print(sorted(m for m in ('numba', 'xarray', 'pydantic') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    import fastmodel

    assert fastmodel.evaluate is fastmodel.api.evaluate and "sweep" in dir(fastmodel)
    with pytest.raises(AttributeError):
        fastmodel.no_such_name
