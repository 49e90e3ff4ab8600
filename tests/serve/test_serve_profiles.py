"""One default engine on every serving path, and engines named with a version (fastmodel/serve/profiles.py
``engine_choice``, ``engine_profile``; docs/model_serving.md S13)."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.serve.api import columns, device_columns, evaluate, evaluate_table, sweep
from fastmodel.serve.profiles import (
    DEFAULT_ENGINE,
    KNOWN_VERSIONS,
    default_engine_note,
    engine_choice,
    parse_framework,
    profile_columns,
    record_engine,
)

ROOT = Path(__file__).resolve().parents[2]
KW = dict(tp=4, concurrency=16, precision="fp8")


def test_engine_choice_reads_a_name_and_a_version_as_a_record_framework():
    """A user's engine text goes through parse_framework (the records' parser): the version's first three numbers
    count (1.0.0rc3 is 1.0.0, 0.12 is 0.12.0); no text is the default engine at its newest version, with the note."""
    assert engine_choice(None) == (DEFAULT_ENGINE, None, [default_engine_note()])
    assert engine_choice("") == engine_choice(None)
    assert DEFAULT_ENGINE == "trtllm" and "TensorRT-LLM profile" in default_engine_note()
    assert engine_choice("vllm") == ("vllm", None, [])
    assert engine_choice("vLLM 0.10.2") == ("vllm", (0, 10, 2), [])
    assert engine_choice("TensorRT-LLM 1.0.0rc3") == ("trtllm", (1, 0, 0), [])
    assert engine_choice("vllm 0.12") == ("vllm", (0, 12, 0), [])
    assert engine_choice("SGLang 0.5.6.post2") == ("sglang", (0, 5, 6), [])


@pytest.mark.parametrize("text, words", [
    ("vllm 0.13.0", ["vLLM version '0.13.0' is not known", "nearest 0.12.0", "known: 0.10.2, 0.11.2, 0.12.0"]),
    ("trtllm 1.1", ["TensorRT-LLM version '1.1' is not known", "nearest 1.0.0", "known: 1.0.0, 1.2.0, 1.3.0"]),
    ("vllm latest", ["'latest' is not a version", "known: 0.10.2"]),
    ("vlm", ["unknown engine 'vlm'", "choose one of trtllm, vllm, sglang"]),
])
def test_an_unknown_engine_or_version_is_one_line_naming_the_choices(text, words):
    """0.13.0 against the known vLLM versions: |13 - 12| = 1 minor apart from 0.12.0, 2 from 0.15.1, so 0.12.0 is
    the nearest; 1.1 (1.1.0) is 1 minor from 1.0.0 and from 1.2.0, the lower wins the tie."""
    with pytest.raises(SpecError) as error:
        engine_choice(text, "task.engine", "sweep.toml")
    message = str(error.value)
    assert "\n" not in message and message.startswith("sweep.toml: task.engine:")
    for word in words:
        assert word in message


def test_the_known_versions_cover_every_serving_record():
    """Every version a dev serving record names is known: a user can state any version the model was checked at.
    The unseen public file (serve_public.jsonl: SGLang 0.5.6, vLLM 0.19.1) names versions no profile was checked at;
    its records take the nearest profile, as any record does."""
    versions = set()
    for path in sorted((ROOT / "tests" / "data").glob("serve_dev_*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                engine, version = parse_framework(json.loads(line).get("framework"))
                if engine is not None and version is not None:
                    versions.add((engine, (version + (0, 0))[:3]))
    assert versions and all(v in KNOWN_VERSIONS[e] for e, v in versions), versions


def test_a_record_without_framework_takes_the_default_engine_with_its_note():
    engine, version, notes = record_engine(None)       # the engine whose profile_columns the record lowers with
    assert (engine, version) == (DEFAULT_ENGINE, None) and notes == [default_engine_note()]
    engine, version, notes = record_engine("FooServe 1.0")       # unknown engine: unchanged wording
    assert (engine, version) == ("trtllm", None) and "TensorRT-LLM profile" in notes[0]


def test_evaluate_without_an_engine_is_the_default_engine_and_says_so():
    """The registry column defaults differ from TensorRT-LLM's profile in custom_allreduce_bytes (0: NCCL, against
    4 MiB + 1) and host_op_s (0 against 20 us); evaluate() without an engine now takes the profile, as records
    without framework and the search do; a column given by name still replaces the profile's."""
    default, trtllm = evaluate("llama3.1-70b", "H200", **KW), evaluate("llama3.1-70b", "H200", engine="trtllm", **KW)
    assert default["tpot"] == trtllm["tpot"] and default["ttft"] == trtllm["ttft"]
    assert default["notes"] == default_engine_note() and trtllm["notes"] == ""
    raw_out, _ = evaluate_table(columns("llama3.1-70b", "H200", **KW)[:, None])
    bare = evaluate("llama3.1-70b", "H200", custom_allreduce_bytes=0, host_op_s=0.0, **KW)
    assert bare["tpot"] == pytest.approx(float(raw_out[[r.name for r in _results()].index("tpot"), 0]), rel=1e-12)
    assert bare["tpot"] != default["tpot"]


def _results():
    from fastmodel.registry.serve import SERVE_RESULTS

    return SERVE_RESULTS


def test_a_stated_version_sets_the_profile_of_that_version():
    """vLLM's async scheduling (overlap_step) is off up to 0.12 and on from 0.15.1 (profiles.py): --engine
    "vLLM 0.10.2" prices the step without the overlap, the newest profile with it."""
    old, new = (evaluate("llama3.1-70b", "H200", engine=e, **KW) for e in ("vLLM 0.10.2", "vllm"))
    assert profile_columns("vllm", (0, 10, 2), 1e12)["overlap_step"] == 0 and old["tpot"] != new["tpot"]
    assert evaluate("llama3.1-70b", "H200", engine="vllm 0.18.0", **KW)["tpot"] == new["tpot"]


def test_sweep_takes_the_engine_per_device():
    """vLLM's budget follows the GPU's memory (8192 tokens from 70 GiB, else 2048): a device axis takes each device's
    profile, the same as one evaluate() per device; without an engine the default's note is in the attrs."""
    devices = ["H100", "a100-sxm4-40gb"]
    assert [profile_columns("vllm", None, device_columns(d)["hbm_bytes"])["max_num_tokens"] for d in devices] == \
        [8192, 2048]
    ds = sweep("llama3.1-8b", device=devices, engine="vllm", load_mode="concurrency", batch_size=[64],
               input_len=4096, output_len=64)
    for device in devices:
        one = evaluate("llama3.1-8b", device, engine="vllm", concurrency=64, input_len=4096, output_len=64)
        assert float(ds.ttft.sel(device=device).item()) == pytest.approx(one["ttft"], rel=1e-12)
    plain = sweep("llama3.1-8b", device="H100", batch_size=[1, 8])
    assert default_engine_note() in plain.attrs["notes"]
    trt = sweep("llama3.1-8b", device="H100", batch_size=[1, 8], engine="trtllm")
    assert np.array_equal(plain.tpot.values, trt.tpot.values) and trt.attrs["notes"] == ""


SWEEP = """
model = "llama3.1-8b"
system = "H100"
[task]
name = "t"
kind = "serve"
input_len = 512
output_len = 64
concurrency = 8
{engine}
[axes]
tp = [1, 2]
"""


def _sweep_file(tmp_path, engine_line: str):
    from click.testing import CliRunner

    from fastmodel.cli import main

    path = tmp_path / "s.toml"
    path.write_text(SWEEP.format(engine=engine_line))
    out = tmp_path / "s.nc"
    out.unlink(missing_ok=True)
    return CliRunner().invoke(main, ["sweep", str(path), "-o", str(out)], catch_exceptions=False), out


def test_a_serving_sweep_file_takes_an_engine_and_notes_the_default_once(tmp_path):
    """A serving task's ``engine`` (a name and a known version, as --engine takes it) sets its profile: the sweep
    equals evaluate() under that engine; without it the default engine, with its note once on stderr; an unknown
    version is one line naming the file and task.engine."""
    import xarray as xr

    run, out = _sweep_file(tmp_path, 'engine = "vLLM 0.10.2"')
    assert run.exit_code == 0 and "note:" not in run.stderr, run.output
    tpot = xr.open_dataset(out, engine="scipy").tpot.sel(tp=2).item()
    kw = dict(tp=2, concurrency=8, input_len=512, output_len=64)
    assert tpot == pytest.approx(evaluate("llama3.1-8b", "H100", engine="vllm 0.10.2", **kw)["tpot"], rel=1e-12)
    run, out = _sweep_file(tmp_path, "")
    assert run.exit_code == 0 and run.stderr.count(default_engine_note()) == 1, run.output
    tpot = xr.open_dataset(out, engine="scipy").tpot.sel(tp=2).item()
    assert tpot == pytest.approx(evaluate("llama3.1-8b", "H100", engine="trtllm", **kw)["tpot"], rel=1e-12)
    run, _ = _sweep_file(tmp_path, 'engine = "vllm 0.13.0"')
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert "s.toml: task.engine: vLLM version '0.13.0' is not known; nearest 0.12.0" in run.output


def test_engine_help_names_exactly_the_columns_a_profile_sets():
    """``--engine`` sets an engine's profile (``profile_columns``) and nothing else; its help names those columns
    (``PROFILE_COLUMNS``, every engine, version and memory size) and the engine-dependent columns only a record's
    framework sets (``RECORD_ENGINE_COLUMNS``: registry columns, none of them in a profile)."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.registry.lm import COLUMN_INDEX
    from fastmodel.serve.profiles import PROFILE_COLUMNS, RECORD_ENGINE_COLUMNS

    for engine, versions in KNOWN_VERSIONS.items():
        for version in (None, *versions):
            for hbm in (40 * 2**30, 80 * 2**30, 192 * 2**30):
                assert tuple(profile_columns(engine, version, hbm)) == PROFILE_COLUMNS, (engine, version, hbm)
    assert set(RECORD_ENGINE_COLUMNS) <= set(COLUMN_INDEX) and set(PROFILE_COLUMNS) <= set(COLUMN_INDEX)
    assert not set(RECORD_ENGINE_COLUMNS) & set(PROFILE_COLUMNS)
    text = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    assert "It sets the profile's columns only: " + ", ".join(PROFILE_COLUMNS) + ";" in text
    assert "(" + ", ".join(RECORD_ENGINE_COLUMNS) + ": FP4 activations" in text
    vllm = columns("llama3.1-70b", "H100", **KW, **profile_columns("vllm", None, 80 * 2**30))
    default = columns("llama3.1-70b", "H100", **KW)
    for name in RECORD_ENGINE_COLUMNS:        # the engine's profile leaves them where the column builder put them
        assert vllm[COLUMN_INDEX[name]] == default[COLUMN_INDEX[name]], name
