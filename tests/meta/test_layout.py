"""The package layout (issues 9 and 21): three wings with one door each, small modules and functions, no
import cycle, ``fastmodel.sweep`` a function (the shared sweep package is ``fastmodel.sweeps``).

Wings (``fastmodel/madmax``, ``fastmodel/lm``, ``fastmodel/serve`` and their kernels under ``kernels/``)
never import each other, except serving's use of the training wing's layer shape; shared services
(``spec``, ``registry``, ``sweep``, ``io``, ``analysis``, ``plot``, ``schedule``, the shared kernels) never
import a wing; imports inside functions count."""

import ast
import pickle
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: most lines in one module of fastmodel/, kernels/ or tests/ (a test file mirrors a module: split it by topic as
#: the module would be), and in one function of fastmodel/ or kernels/
MAX_LINES = 450
MAX_FUNCTION_LINES = 100
WINGS = ("madmax", "lm", "serve")
#: the modules the root of fastmodel/ may hold (no engine module sits there: each lives in its wing)
ROOT_MODULES = {"__init__", "api", "engines", "errors", "semantics", "testing", "progress_bar"}
#: the modules the root of kernels/ may hold: the kernels every engine shares
SHARED_KERNELS = {"__init__", "jit", "args", "schedule", "streams", "roofline", "nccl", "columns", "finite",
                  "softmax_rate"}

#: source folder -> the package it is installed as (pyproject.toml [tool.setuptools.package-dir])
PACKAGES = {"fastmodel": "fastmodel", "kernels": "fastmodel.kernels", "specs": "fastmodel.specs"}


def _modules() -> dict[str, Path]:
    modules = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def test_no_module_over_the_line_limit():
    long = []
    for folder in ("fastmodel", "kernels", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                long.append(f"{path.relative_to(ROOT).as_posix()}: {lines} lines")
    assert not long, f"split these by responsibility (at most {MAX_LINES} lines each): {long}"


def test_no_function_over_the_line_limit():
    long = []
    for folder in ("fastmodel", "kernels"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"split these (at most {MAX_FUNCTION_LINES} lines each): {long}"


def test_no_engine_module_at_the_root_of_fastmodel_or_kernels():
    root = {p.stem for p in (ROOT / "fastmodel").glob("*.py")}
    assert root <= ROOT_MODULES, f"modules of one engine belong in its wing: {sorted(root - ROOT_MODULES)}"
    kernels = {p.stem for p in (ROOT / "kernels").glob("*.py")}
    assert kernels <= SHARED_KERNELS, f"kernels of one engine belong in kernels/<engine>/: {sorted(kernels - SHARED_KERNELS)}"
    for wing in WINGS:
        assert (ROOT / "fastmodel" / wing / "__init__.py").is_file() and (ROOT / "kernels" / wing).is_dir()
        assert (ROOT / "tests" / wing).is_dir()


def _import_graph(modules: dict[str, Path], inside_functions: bool = False) -> dict[str, set[str]]:
    """Imports between our modules (``from pkg import sub`` depends on ``pkg.sub``, not ``pkg``): module-level
    ones, and with ``inside_functions`` also those inside functions (run when the function runs)."""
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        for node in (ast.walk(tree) if inside_functions else tree.body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [s for s in subs if s in modules]
                if len(targets) < len(subs):
                    targets.append(node.module)
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a list of modules, first = last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    modules = _modules()
    assert {"fastmodel.sweeps", "fastmodel.sweeps.store", "fastmodel.kernels.lm.memory"} <= set(modules)
    assert _cycle(_import_graph(modules)) is None


def test_sweep_is_the_function_and_no_module_is_callable():
    """``fastmodel.sweep`` is the function (fastmodel/api.py) however many submodules of the sweep package
    ``fastmodel.sweeps`` are imported, and no module of the package reassigns a module's class."""
    import subprocess
    import sys

    probe = """
import types, fastmodel
first = fastmodel.sweep
import fastmodel.sweeps, fastmodel.sweeps.store, fastmodel.sweeps.run
from fastmodel.api import sweep
assert first is sweep and fastmodel.sweep is sweep and isinstance(sweep, types.FunctionType)
assert type(fastmodel.sweeps) is types.ModuleType and not callable(fastmodel.sweeps)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "ok", done.stderr
    for path in (ROOT / "fastmodel").rglob("*.py"):
        assert "__class__ =" not in path.read_text(), f"{path}: a module's class is reassigned"


def test_dask_task_pickles_by_module_path():
    """Workers import the store-writing task by its module path, so it must pickle as a reference."""
    from fastmodel.sweeps.store import write_units_task

    data = pickle.dumps(write_units_task)
    assert b"fastmodel.sweeps.store" in data and b"write_units_task" in data
    assert pickle.loads(data) is write_units_task


def _part(module: str) -> str:
    """Which part of the package a module is: a wing (``madmax``, ``lm``, ``serve``), its kernels
    (``kernels.lm``...), the shared kernels (``kernels``), a shared service, or the root (``root``)."""
    parts = module.split(".")
    if parts[:2] == ["fastmodel", "kernels"]:
        return f"kernels.{parts[2]}" if len(parts) > 3 and parts[2] in WINGS else "kernels"
    if len(parts) > 1 and parts[1] in WINGS:
        return parts[1]
    if len(parts) == 1 or parts[1] in ROOT_MODULES or parts[1] == "cli":
        return "root"            # the API, engines.py and the command line sit above the wings
    return "shared"


#: imports that break the wing rules (issue 21 emptied it; keep it empty: share through fastmodel.engines instead)
KNOWN_CROSSINGS: set[tuple[str, str]] = set()


def _crossings() -> set[tuple[str, str]]:
    """Every (importer, imported) pair that breaks a wing rule, imports inside functions included."""
    bad = set()
    modules = _modules()
    for name, deps in _import_graph(modules, inside_functions=True).items():
        a = _part(name)
        for dep in deps:
            b = _part(dep)
            if a in WINGS and b in WINGS and a != b:
                bad.add((name, dep))
            elif a in WINGS and b.startswith("kernels.") and b not in (f"kernels.{a}", "kernels.lm" if a == "serve" else ""):
                bad.add((name, dep))
            elif a == "shared" and (b in WINGS or b.startswith("kernels.")):
                bad.add((name, dep))
            elif a == "kernels" and b not in ("kernels", "shared") or a == "kernels" and dep.split(".")[1] != "registry" \
                    and b == "shared":
                bad.add((name, dep))
            elif a.startswith("kernels.") and b.startswith("kernels.") and b != a and (a, b) != ("kernels.serve", "kernels.lm"):
                bad.add((name, dep))
            elif a.startswith("kernels.") and b in WINGS:
                bad.add((name, dep))
    return bad


def test_wings_never_import_each_other_and_shared_services_no_wing():
    found = _crossings()
    new = sorted(found - KNOWN_CROSSINGS)
    assert not new, f"imports across wings (serving kernels may use kernels/lm's layer shape; shared services use " \
                    f"fastmodel.engines): {new}"
    gone = sorted(KNOWN_CROSSINGS - found)
    assert not gone, f"fixed: remove these from KNOWN_CROSSINGS: {gone}"


def test_the_rule_finder_sees_a_crossing():
    assert _part("fastmodel.lm.sweep") == "lm" and _part("fastmodel.kernels.serve.costs") == "kernels.serve"
    assert _part("fastmodel.kernels.roofline") == "kernels" and _part("fastmodel.sweeps.store") == "shared"
    assert _part("fastmodel.engines") == "root" and _part("fastmodel.cli.run") == "root"


def test_an_engine_imports_nothing_of_the_other_wings():
    """A real-world evaluation imports nothing of the MAD-Max wing, a MAD-Max one nothing of lm or serve."""
    import subprocess
    import sys

    probe = """
import sys, fastmodel
{call}
print(" ".join(m for m in sys.modules if m.startswith(({prefixes}))))
"""
    cases = [("fastmodel.evaluate('llama3.1-70b', 'dgx-h100', 'llm-pretrain', plan='tp8.pp4', num_nodes=16)",
              "'fastmodel.madmax', 'fastmodel.kernels.madmax', 'fastmodel.serve', 'fastmodel.kernels.serve'"),
             ("fastmodel.evaluate('llama2-70b', 'dc-a', 'llm-pretrain', plan='tp,ddp/mp', num_nodes=32)",
              "'fastmodel.lm', 'fastmodel.kernels.lm', 'fastmodel.serve', 'fastmodel.kernels.serve'")]
    for call, prefixes in cases:
        done = subprocess.run([sys.executable, "-c", probe.format(call=call, prefixes=prefixes)],
                              capture_output=True, text=True, timeout=600, env={"FASTMODEL_JIT": "0",
                                                                                 **__import__("os").environ})
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [], (call, done.stdout)


def test_pyproject_lists_every_package():
    """A non-editable install ships exactly the packages pyproject.toml lists: a package left out breaks
    ``pip install .`` (CI's first step) while the editable checkout still works."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - python < 3.11
        import tomli as tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"fastmodel.specs"}
    for folder, package in (("fastmodel", "fastmodel"), ("kernels", "fastmodel.kernels")):
        for init in (ROOT / folder).rglob("__init__.py"):
            found.add(".".join([package, *init.parent.relative_to(ROOT / folder).parts]))
    assert listed == found, f"missing: {sorted(found - listed)}; stale: {sorted(listed - found)}"
