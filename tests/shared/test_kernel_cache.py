"""Compiled kernels are cached per user, keyed by version and kernel source, never inside the package."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import fastmodel.kernels
import fastmodel.registry as registry
from fastmodel.kernels import jit

KERNELS = Path(fastmodel.kernels.__file__).resolve().parent

_PROBE = """
import numpy as np, sys
from fastmodel.kernels import jit
from fastmodel.kernels.madmax.collectives import collective_bandwidth
from fastmodel.kernels.madmax.layout import N_COLUMNS
row = np.ones(N_COLUMNS)
collective_bandwidth(row, 1, 1, 0)
print(jit.cache_dir("madmax"))
"""


def _run_probe(tmp_path, **env_over):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(env_over)
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def _index_files(folder: Path) -> set[Path]:
    return set(folder.rglob("*.nbi"))


def test_kernel_cache_lands_in_the_user_cache_not_in_the_package(tmp_path):
    before = _index_files(KERNELS)
    where = _run_probe(tmp_path, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert where.is_relative_to(tmp_path / "xdg" / "fastmodel")
    assert jit.kernel_source_key(engine="madmax") in where.name and "-madmax-" in where.name
    assert any(p.name.startswith("collectives.collective_bandwidth") for p in _index_files(where))
    assert _index_files(KERNELS) == before  # nothing new inside the installed package


def test_numba_cache_dir_is_honoured(tmp_path):
    where = _run_probe(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "mine"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert where.is_relative_to(tmp_path / "mine")
    assert _index_files(where)
    assert not (tmp_path / "xdg").exists()


def _keys(folder):
    return {engine: jit.kernel_source_key(folder, engine=engine) for engine in (*jit.ENGINES, jit.SHARED)}


#: an edited file -> the engines whose cache key must change (the others keep theirs: one cache per engine)
EDITS = {
    "madmax/layout.py": {"madmax"}, "madmax/costs.py": {"madmax"}, "madmax/collectives.py": {"madmax"},
    "lm/layer.py": {"lm", "serve"}, "lm/layout.py": {"lm", "serve"},
    "serve/costs.py": {"serve"},
    "schedule.py": {"madmax", "lm", "serve", "shared"}, "roofline.py": {"madmax", "lm", "serve", "shared"},
    "finite.py": {"madmax", "lm", "serve", "shared"},
}


def test_editing_a_kernel_file_changes_the_key_of_exactly_the_engines_that_compile_it(tmp_path):
    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    keys = _keys(copy)
    assert keys == _keys(KERNELS) and len(set(keys.values())) == len(keys)
    for name, engines in EDITS.items():  # helpers, not only the entry file
        path = copy / name
        original = path.read_bytes()
        path.write_bytes(original.replace(b"\n", b"\n\n", 1))
        changed = {engine for engine, key in _keys(copy).items() if key != keys[engine]}
        assert changed == engines, name
        path.write_bytes(original)
        assert _keys(copy) == keys


def test_each_kernel_module_belongs_to_its_engine():
    assert jit.engine_of("fastmodel.kernels.lm.step") == "lm"
    assert jit.engine_of("fastmodel.kernels.serve.evaluate") == "serve"
    assert jit.engine_of("fastmodel.kernels.madmax.costs") == "madmax"
    assert jit.engine_of("fastmodel.kernels.schedule") == jit.SHARED


def test_every_kernel_module_compiles_through_the_project_decorator():
    for path in [*KERNELS.rglob("*.py"), *(Path(__file__).resolve().parents[2] / "bench").glob("*.py")]:
        if path.name == "jit.py":
            continue
        text = path.read_text()
        assert "from numba import njit" not in text and "from numba import prange" not in text, path


def test_editing_the_registry_the_kernels_compile_in_changes_the_cache_key(tmp_path):
    sources = [Path(p) for p in jit._constant_sources()]
    # the registry modules the layouts derive from (lm_chunk, lm_engine, lm_eval, lm_experts, lm_fsdp1, lm_lowprec, lm_muon, lm_offload, lm_overhead,
    # lm_pipeline, lm_positions, lm_sdpa, lm_step and lm_straggler hold rows of lm's column table, lm_status its status codes): every
    # registry/lm_*.py module, so a new one cannot be left out of the key
    lm_parts = sorted(p.name for p in Path(registry.__file__).parent.glob("lm_*.py"))
    assert lm_parts == ["lm_chunk.py", "lm_cudagraph.py", "lm_engine.py", "lm_eval.py", "lm_experts.py", "lm_fsdp1.py",
                        "lm_lowprec.py", "lm_muon.py", "lm_offload.py", "lm_overhead.py",
                        "lm_pipeline.py", "lm_positions.py", "lm_sdpa.py", "lm_status.py", "lm_step.py",
                        "lm_straggler.py"]
    assert [p.name for p in sources] == ["lm.py", *lm_parts, "madmax.py", "serve.py", "variables.py"]
    copies = []
    for path in sources:
        copy = tmp_path / path.name
        copy.write_bytes(path.read_bytes())
        copies.append(copy)
    key = jit.kernel_source_key(KERNELS, copies)
    assert key == jit.kernel_source_key(KERNELS)
    for copy in copies:
        original = copy.read_bytes()
        copy.write_bytes(original.replace(b"\n", b"\n\n", 1))
        assert jit.kernel_source_key(KERNELS, copies) != key, copy.name
        copy.write_bytes(original)
    # an engine's key reads its own registry and the shared variables, not another engine's
    assert [p.name for p in jit._constant_sources("lm")] == ["lm.py", *lm_parts, "variables.py"]


# --- first use speaks (issue 25 item 7) -------------------------------------------------------------------------

def test_a_cold_compile_says_so_once_and_a_cached_load_says_nothing(tmp_path):
    """numba's compile event fires only on a cache miss: one note per engine on stderr, then silence."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache"), "FASTMODEL_COMPILE_NOTE": "1"}

    def probe():
        full = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "FASTMODEL_JIT")}
        done = subprocess.run([sys.executable, "-c", _PROBE], env={**full, **env}, capture_output=True, text=True,
                              timeout=600, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return [line for line in done.stderr.splitlines() if line.startswith("compiling")]

    first = probe()
    assert first == [f"compiling the MAD-Max kernels for first use, {jit.FIRST_USE['madmax']} (once: later runs "
                     "load them from the cache; 'fastmodel warmup' compiles every engine ahead)"]
    assert probe() == []
    env["FASTMODEL_COMPILE_NOTE"] = "0"
    shutil.rmtree(tmp_path / "cache")
    assert probe() == []          # silenced on request (and by default when stderr is not a terminal)


_COMMANDS_AFTER_WARMUP = {
    "serve": [["serve", "-m", "llama3.1-8b"], ["serve", "-m", "llama3.1-8b", "--max-throughput"]],
    "lm": [["validate", str(Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl")],
           ["plot", "timeline", "-m", "llama3.1-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "1",
            "-p", "tp2.pp2", "-o", "t.png", "--dpi", "20"]],
}


def test_warmup_compiles_what_the_commands_use(tmp_path):
    """After ``fastmodel warmup ENGINE`` the engine's commands, each in a fresh interpreter, compile nothing."""
    env = {k: v for k, v in os.environ.items() if k not in ("FASTMODEL_JIT",)}
    env["FASTMODEL_COMPILE_NOTE"] = "1"

    def fastmodel(*args):
        done = subprocess.run([sys.executable, "-m", "fastmodel.cli", *args], env=env, capture_output=True,
                              text=True, timeout=900, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done

    for engine, commands in _COMMANDS_AFTER_WARMUP.items():
        done = fastmodel("warmup", engine)
        assert done.stdout.startswith(f"{engine}: ") and " kernels ready in " in done.stdout, done.stdout
        for args in commands:
            assert "compiling" not in fastmodel(*args).stderr, args
    result = subprocess.run([sys.executable, "-m", "fastmodel.cli", "warmup", "gpu"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "'gpu' is not one of" in result.stderr
