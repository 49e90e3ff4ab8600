"""bench/_args.py: the options the bench scripts share, parsed one way, and the scripts' command lines kept."""

import argparse
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import BENCH, load_bench

#: the serving diagnostics that take (CSV, records) through ``_args.validated_parser``
DIAGNOSTICS = ("serve_blocking", "serve_ep_routing", "serve_floor", "serve_gptoss_ttft", "serve_kind_split",
               "serve_kv_budget", "serve_load_slopes", "serve_qwen3_trt_floor", "serve_tp_allreduce", "serve_tp_split",
               "serve_tpot_split", "serve_trt_triton_moe")


def test_validated_parser_takes_the_csv_then_the_records_and_the_docstring_line():
    args = load_bench("_args")
    parser = args.validated_parser("First line.\n\nMore text.")
    assert parser.description == "First line."
    parsed = parser.parse_args(["v.csv", "r.jsonl"])
    assert (parsed.csv, parsed.records) == ("v.csv", "r.jsonl")
    with pytest.raises(SystemExit):
        parser.parse_args(["v.csv"])             # the records file is required


def test_previous_defaults_to_none_and_takes_a_commit():
    args = load_bench("_args")
    parser = argparse.ArgumentParser()
    args.add_previous(parser)
    assert parser.parse_args([]).previous == "none"
    assert parser.parse_args(["--previous", "781bc61"]).previous == "781bc61"


@pytest.mark.parametrize("name", DIAGNOSTICS)
def test_each_diagnostic_reads_its_two_files_through_the_shared_parser(name, monkeypatch):
    """Every diagnostic's main builds its parser with ``validated_parser`` (caught here before it reads a file)."""
    module = load_bench(name)
    seen = []

    def stop(doc):
        seen.append(doc)
        raise SystemExit(0)

    monkeypatch.setattr(module, "validated_parser", stop)
    monkeypatch.setattr(sys, "argv", [name])
    with pytest.raises(SystemExit):
        module.main()
    assert seen == [module.__doc__]


def test_no_bench_script_spells_the_shared_options_again():
    """``--previous`` with the "none" default and the (csv, records) pair are parsed in bench/_args.py only."""
    again = []
    for path in sorted(Path(BENCH).glob("*.py")):
        text = path.read_text()
        if path.name != "_args.py" and ('add_argument("records")' in text
                                        or 'add_argument("--previous", default="none"' in text):
            again.append(path.name)
    assert again == ["serve_c512.py"]            # its subcommands take (records, out) and (csv, records)
