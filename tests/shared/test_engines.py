"""fastmodel/engines.py: the one place an engine is chosen, from the input's content."""

import pytest

from fastmodel import engines
from fastmodel.errors import SpecError
from fastmodel.spec import detect

RUN = {"model": {"layers": 2}, "system": {}, "plan": {"tp": 1}}
SERVE = {"model": {"layers": 2}, "system": {}, "serve": {"tp": 1}}


def test_specs_choose_by_family_and_semantics():
    assert engines.for_specs("llama3.1-70b") is engines.LM
    assert engines.for_specs("llama2-70b") is engines.MADMAX
    assert engines.for_specs({"type": "llm"}) is engines.MADMAX               # the reference's format
    assert engines.for_specs({"family": "lm", "name": "x"}, "default") is engines.LM
    with pytest.raises(SpecError, match="semantics 'default'"):
        engines.for_specs("llama3.1-70b", "madmax")
    with pytest.raises(SpecError, match="real-world cluster"):
        engines.for_specs("llama2-70b", "default", "dgx-h100")


def test_records_choose_by_their_blocks():
    assert engines.for_record(RUN) is engines.LM and detect.is_run_record(RUN)
    assert engines.for_record(SERVE) is engines.SERVE and detect.is_serve_record(SERVE)
    assert engines.for_record({"model": "llama2-70b"}) is None


def test_loading_follows_the_content():
    from fastmodel.lm.spec import LMSpec
    from fastmodel.madmax.spec.system import SystemSpec
    from fastmodel.serve.spec import ServeTaskSpec

    assert isinstance(engines.load_model("llama3.1-70b"), LMSpec)
    assert isinstance(engines.load_system("dc-a"), SystemSpec)
    assert isinstance(engines.load_task("serve-chat"), ServeTaskSpec)
    assert engines.load_system("dgx-h100", num_nodes=2).num_nodes == 2


def test_every_engine_names_its_door_registry_and_batch_kinds():
    import importlib

    for engine in engines.ENGINES.values():
        door = engine.door()
        assert callable(getattr(door, "evaluate_record" if engine.reads_records else "evaluate"))
        importlib.import_module(engine.registry)
        assert engine.batch_kind_classes()
        for kind in engine.batch_kind_classes():
            assert hasattr(kind, "claims") and hasattr(kind, "prepare") and kind.columns


def test_the_api_evaluates_a_record_of_either_engine():
    import json
    from pathlib import Path

    from fastmodel.api import evaluate_record

    data = Path(__file__).resolve().parents[1] / "data" / "runs_dev.jsonl"
    run = evaluate_record(json.loads(data.read_text().splitlines()[0]))
    assert float(run.step_time) > 0
    with pytest.raises(SpecError, match="not a run record"):
        evaluate_record({"model": "llama2-70b"})


def test_a_record_with_a_block_missing_is_named_as_a_record():
    """A record that lacks a block (it has a key only records have: measured, a plan or serve object) is named by
    the block it lacks, never read as a MAD-Max case ("unknown key 'id'") or a spec that needs --system."""
    run = {"id": "r", "system": {"gpu": "H100"}, "plan": {"tp": 8}, "measured": {"step_time_s": 1.0}}
    assert detect.misshapen_record(run) == "model: required block missing (a run record needs model, system, plan)"
    assert detect.misshapen_record({**run, "modle": {}}).startswith("model: required block missing (the record has "
                                                                    "'modle': a misspelling of 'model'?)")
    serving = {"model": {"name": "x"}, "serve": {"tp": 1}}
    assert detect.misshapen_record(serving) == "system: required block missing (a serving record needs model, " \
                                               "system, serve)"
    neither = {"model": {}, "system": {}, "measured": {}}
    assert detect.misshapen_record(neither).startswith("plan: required block missing (a run record needs model, "
                                                       "system, plan; a serving record model, system, serve)")
    for other in (RUN, SERVE, {"case": "c", "model": {}, "system": {}, "task": {}}, {"family": "lm"}, [1]):
        assert detect.misshapen_record(other) is None, other      # records, MAD-Max cases and specs: no problem


def test_a_madmax_model_file_on_a_cluster_is_named(tmp_path):
    """The model is what to change when a MAD-Max model meets a real-world cluster: its file is named."""
    path = tmp_path / "mine.toml"
    path.write_text('family = "llm"\nname = "mine"\n')
    with pytest.raises(SpecError) as error:
        engines.for_specs(str(path), "default", "dgx-h100")
    assert str(error.value).startswith(f"{path}: model: system 'dgx-h100' is a real-world cluster")
    with pytest.raises(SpecError) as error:
        engines.for_specs("llama2-70b", "default", "dgx-h100")
    assert str(error.value).startswith("model: system 'dgx-h100'")      # a built-in name: no file to name


@pytest.mark.parametrize("text, as_kind, reason", [
    ('[model]\nfamily = "lm"\nname = "x"\n', "model", "the fields sit under a [model] table; write them at the top "
                                                       "level of the file, without it"),
    ('[system]\nkind = "cluster"\nname = "x"\n', "system", "the fields sit under a [system] table"),
    ('family = "lm"\nname = "x"\n', "system", 'a model spec (family = "lm"), not a system: give it as the model (-m)'),
    ('kind = "cluster"\nname = "x"\n', "model", 'a cluster spec (kind = "cluster"), not a model: give it as the system (-s)'),
    ('model = "llama3.1-70b"\n[axes]\nnum_nodes = [1]\n', "model", "a sweep file (it has [axes]): run it with "
                                                                    "'fastmodel sweep FILE -o out.nc'"),
])
def test_a_file_given_as_the_wrong_input_says_what_it_is(tmp_path, text, as_kind, reason):
    """A model file wrapped in [model], a model given as the system, a sweep file given as the model: one line
    naming the file and what it is (it was "pair it with a real-world model" or "a MAD-Max system")."""
    path = tmp_path / "f.toml"
    path.write_text(text)
    model, system = (str(path), "dgx-h100") if as_kind == "model" else ("llama3.1-70b", str(path))
    with pytest.raises(SpecError) as error:
        engines.for_specs(model, "default", system)
    assert str(error.value).startswith(f"{path}: {as_kind}: {reason}")
    assert detect.misplaced({"family": "lm", "name": "x"}, "model") is None
    assert detect.misplaced({"name": "dc-a", "device": {}}, "system") is None
