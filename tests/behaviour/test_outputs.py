"""Outputs never destroy a file (issue 25 item 3): every command that writes follows one rule
(fastmodel/io/outputs.py): an existing file is refused without --force, and a file of another kind is refused
even with it. Each writer is tried on a file of its own kind and on files of every other kind."""

import json
from pathlib import Path

import pytest

from fastmodel.io.outputs import content_kind
from tests.suite_fixtures import DATA, cli, data_lines, one_line_error

RUNS = DATA / "runs_dev.jsonl"

#: a file of each kind, as the first bytes a user's file might have
SAMPLES = {
    "json": '{"id": "run-1", "model": {"layers": 80}}\n{"id": "run-2"}\n',
    "csv": "id,step_time\nrun-1,1.5\n",
    "toml": "# fastmodel calibration\n\n[calibration]\nformat = 1\n",
    "png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
    "svg": '<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"></svg>\n',
    "netcdf": b"CDF\x01\0\0\0\0",
    "text": "my notes\n",
}


def _write(path: Path, kind: str) -> bytes:
    data = SAMPLES[kind]
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path.read_bytes()


def test_content_kinds():
    for kind, data in SAMPLES.items():
        assert content_kind(data if isinstance(data, bytes) else data.encode()) == kind, kind
    assert content_kind(b"") == content_kind(b"\n \n") == "empty"
    assert content_kind(b"[[tiers]]\ndomain_size = 8\n") == "toml"
    assert content_kind(b'[{"a": 1}]') == "json" and content_kind(b"\x89HDF\r\n\x1a\n") == "binary"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "runs.jsonl"
    path.write_text("\n".join(data_lines("runs_dev.jsonl", 3)) + "\n")
    return path


def _writers(runs):
    """(command args without the output, how the output is given, the kind it writes, output suffix)."""
    timeline = ["plot", "timeline", "-m", "llama3.1-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "--nodes", "1",
                "--dpi", "20"]
    return [
        (["validate", runs], "-o", "csv", ".csv"),
        (["validate", runs], "--plot", "png", ".png"),
        (["calibrate", runs, "--folds", "0"], "-o", "toml", ".toml"),
        (["serve", "-m", "llama3.1-8b"], "-o", "json", ".jsonl"),
        (["serve", "-m", "llama3.1-8b"], "-o", "csv", ".csv"),
        (["batch", runs], "-o", "json", ".jsonl"),
        (timeline, "-o", "png", ".png"),
        (timeline, "-o", "svg", ".svg"),
    ]


def test_every_writer_refuses_an_existing_file_and_another_kind_even_with_force(tmp_path, runs):
    for args, flag, kind, suffix in _writers(runs):
        target = tmp_path / f"out{suffix}"
        for other in SAMPLES:
            if other == kind:
                continue
            before = _write(target, other)
            one_line_error(cli(*args, flag, target, "--force"), "refusing to replace it (even with --force)")
            assert target.read_bytes() == before, (args, other)
        target.unlink()
        first = cli(*args, flag, target)
        assert first.exit_code == 0, (args, first.output)
        made = target.read_bytes()
        assert content_kind(made) == kind, (args, made[:40])
        one_line_error(cli(*args, flag, target), "exists; pass --force to replace it")
        assert target.read_bytes() == made
        again = cli(*args, flag, target, "--force")
        assert again.exit_code == 0, (args, again.output)
        assert content_kind(target.read_bytes()) == kind
        target.unlink()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") or p.name.endswith(".lock")]


def test_a_jsonl_of_runs_never_becomes_a_table_a_calibration_or_a_figure(tmp_path, runs):
    """The cases of the issue: validate -o / --plot and calibrate -o onto a copy of the runs."""
    for flag, name, extra in (("-o", "rows.csv", []), ("--plot", "v.png", []), ("-o", "cal.toml", ["--folds", "0"])):
        copy = tmp_path / name
        copy.write_bytes(runs.read_bytes())
        command = "calibrate" if name.endswith(".toml") else "validate"
        one_line_error(cli(command, runs, flag, copy, "--force", *extra), "is a JSON/JSONL file")
        assert copy.read_bytes() == runs.read_bytes()


def test_calibrate_never_silently_replaces_an_earlier_calibration(tmp_path, runs):
    cal = tmp_path / "cal.toml"
    assert cli("calibrate", runs, "-o", cal, "--folds", "0").exit_code == 0
    earlier = cal.read_text()
    result = cli("calibrate", runs, "-o", cal, "--folds", "0", "--prior", "2")
    one_line_error(result, "exists; pass --force")
    assert cal.read_text() == earlier
    assert cli("calibrate", runs, "-o", cal, "--folds", "0", "--prior", "2", "--force").exit_code == 0
    assert cal.read_text() != earlier


def test_the_python_api_names_its_own_argument_and_the_cli_its_flag(tmp_path, runs):
    """Leftover of the last stop: the output rule said "pass --force" to a Python caller too, who has no flags
    (and the sweep store's "(--force, overwrite=True)" named both). fastmodel.calibrate says force=True and
    fastmodel.sweep overwrite=True / resume=True; the commands say --force / --resume (cli/common.SHARED_FLAGS
    through flag_names, the one translation)."""
    import fastmodel
    from fastmodel.errors import FastmodelError, SweepError

    cal = tmp_path / "cal.toml"
    _write(cal, "toml")
    with pytest.raises(FastmodelError, match=r"cal\.toml exists; pass force=True to replace it$"):
        fastmodel.calibrate(str(runs), folds=0, output=str(cal))
    one_line_error(cli("calibrate", runs, "-o", cal, "--folds", "0"), "cal.toml exists; pass --force to replace it")
    notes = tmp_path / "notes.toml"
    _write(notes, "text")
    with pytest.raises(FastmodelError, match=r"refusing to replace it \(even with force=True\)"):
        fastmodel.calibrate(str(runs), folds=0, output=str(notes), force=True)
    one_line_error(cli("calibrate", runs, "-o", notes, "--force"), "refusing to replace it (even with --force)")
    axes = {"num_nodes": [2], "plan": ["fsdp/ddp"]}
    store = str(tmp_path / "s.zarr")
    fastmodel.sweep("llama-7b", "dc-a", "llm-pretrain", axes, store=store)
    with pytest.raises(SweepError, match=r"exists; complete it \(resume=True\) or replace it \(overwrite=True\)$"):
        fastmodel.sweep("llama-7b", "dc-a", "llm-pretrain", axes, store=store)
    with pytest.raises(SweepError, match=r"different sweep definition; cannot resume it \(pass overwrite=True "
                                         r"instead of resume=True to replace it\)$"):
        fastmodel.sweep("llama-7b", "dc-a", "llm-pretrain", {**axes, "num_nodes": [4]}, store=store, resume=True)
    other = tmp_path / "other.zarr"
    other.mkdir()
    with pytest.raises(SweepError, match=r"refusing to delete it \(even with overwrite=True\)"):
        fastmodel.sweep("llama-7b", "dc-a", "llm-pretrain", axes, store=str(other), overwrite=True)
    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text('model = "llama-7b"\nsystem = "dc-a"\ntask = "llm-pretrain"\n\n[axes]\nnum_nodes = [4]\n'
                          'plan = ["fsdp/ddp"]\n')
    one_line_error(cli("sweep", sweep_file, "-o", store, "--resume"),
                   "cannot resume it (pass --force instead of --resume to replace it)")


def test_serve_writes_the_rows_it_prints(tmp_path):
    out = tmp_path / "s.jsonl"
    printed = cli("serve", "-m", "llama3.1-8b", "--json", "-o", out)
    assert printed.exit_code == 0
    assert json.loads(out.read_text()) == json.loads(printed.stdout.splitlines()[0])


@pytest.mark.parametrize("command, name, writes", [
    (["batch", RUNS], "out.xlsx", "JSON/JSONL"),
    (["batch", RUNS], "out.jsonl.gz", "JSON/JSONL"),
    (["validate", RUNS], "rows.h5", "CSV"),
    (["serve", "-m", "llama3.1-8b"], "rows.xls", "JSON/JSONL"),
])
def test_a_name_of_a_format_fastmodel_never_writes_is_refused(tmp_path, command, name, writes):
    """`-o out.xlsx` (or .gz, .h5): JSON lines or CSV under a spreadsheet's, an archive's or HDF5's name would fail
    in the program the name opens, so the name is refused before any work and nothing is written."""
    out = tmp_path / name
    one_line_error(cli(*command, "-o", out), f"a {out.suffix} name, but this command writes {writes} here")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command, flag, named", [
    (["validate", RUNS], "-o", ".csv"),
    (["calibrate", RUNS, "--folds", "0"], "-o", ".toml"),
    (["serve", "-m", "llama3.1-8b"], "-o", ".jsonl or .csv"),
    (["serve", "--search", "-m", "llama3.1-8b", "--gpus", "1", "--ttft", "2s", "--tpot", "50ms"], "-o", ".nc"),
])
def test_dash_is_standard_output_only_where_a_command_writes_there(tmp_path, monkeypatch, command, flag, named):
    """`-o -` was skipped by the output checks as standard output, then written as a file named "-" (replaced by
    the next run without --force); only batch writes to standard output, everyone else refuses it in one line."""
    monkeypatch.chdir(tmp_path)
    result = cli(*command, flag, "-")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("error: -: ") and f"name a {named} file" in result.output, result.output
    assert list(tmp_path.iterdir()) == []
    batch = cli("batch", RUNS, "-o", "-")
    assert batch.exit_code == 0 and batch.output.count('"status"') == len(RUNS.read_text().splitlines())
    assert list(tmp_path.iterdir()) == []
    one_line_error(cli("batch", RUNS, "-o", ""), "'': an empty output name; name a .jsonl or .csv file")


@pytest.mark.parametrize("command", [["validate", str(RUNS), "-o"], ["validate", str(RUNS), "--plot"],
                                     ["serve", "-m", "llama3.1-8b", "-o"]])
def test_an_empty_output_name_is_refused_before_any_work(tmp_path, monkeypatch, command):
    """`-o ''` was read as "no output" (exit 0, nothing written) where batch refuses it: one line everywhere."""
    monkeypatch.chdir(tmp_path)
    result = cli(*command, "")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("error: ") and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc: a folder where even root creates no file")
def test_a_folder_that_takes_no_file_is_refused_before_any_work(tmp_path, runs):
    """`best r.nc --csv DIR/t.csv` with a DIR that refuses new files (no write permission, a read-only file
    system; /proc refuses one even to root, whom ``os.access`` lets through) failed only when the finished table
    was written: every writer now creates and removes a file there first (``io.outputs._probe_folders``). best's
    input is a file that is there (an absent one is named first, before the output, since the walk of 2026-12-07b)
    but no result: the refusal comes before it is opened."""
    for args, flag, _, suffix in [*_writers(runs), (["best", runs, "--by", "step_time"], "--csv", "csv", ".csv")]:
        one_line_error(cli(*args, flag, f"/proc/fastmodel-out{suffix}"), f"/proc/fastmodel-out{suffix}: cannot "
                       "write in /proc: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command, name, what", [
    (["batch", str(RUNS), "-o"], "out.csv/", "output"),
    (["validate", str(RUNS), "-o"], "table.csv/", "table"),
    (["sweep", "llama3_70b_h100_plans", "-o"], "out.nc/", "dataset"),
])
def test_an_output_name_ending_in_a_slash_is_refused(tmp_path, monkeypatch, command, name, what):
    """Hurried-user walk: `batch -o out.csv/` and `sweep -o out.nc/` wrote the files out.csv and out.nc (pathlib
    drops the '/'); a name ending in '/' names a directory: one line, nothing written."""
    monkeypatch.chdir(tmp_path)
    one_line_error(cli(*command, name), f"{name}: ends in '/', so names a directory; name the {what} file")
    assert list(tmp_path.iterdir()) == []


def test_the_outputs_a_ctrl_c_reports_are_per_command_never_process_wide(tmp_path, capsys):
    """Issue 23: the outputs checked and written were one module-level list and dict, which a long-lived process
    (the Python API, a test session) grew call after call. Now each command has its own log (``output_log``): a
    second command's Ctrl-C names its own outputs only, a call outside any log records nothing, and a nested log
    leaves the enclosing one as it was."""
    import fastmodel.io.outputs as outputs
    from fastmodel.cli.common import friendly
    from fastmodel.io.atomic import atomic_write

    def write(path):
        with outputs.claim_output(str(path), "csv", what="table"), atomic_write(path) as handle:
            handle.write("a,b\n1,2\n")

    first, second, figure = tmp_path / "first.csv", tmp_path / "second.csv", tmp_path / "fig.png"

    @friendly
    def command(table):
        write(table)
        outputs.check_output(str(figure), "png", what="figure")
        raise KeyboardInterrupt

    for table in (first, second):
        with pytest.raises(SystemExit):
            command(table)
        assert capsys.readouterr().err == f"interrupted: {table} written whole; {figure} not written\n"
    assert not hasattr(outputs, "WRITTEN") and not hasattr(outputs, "PENDING")
    write(tmp_path / "api.csv")                       # as the Python API writes: no log open, nothing kept
    outputs.check_output(str(tmp_path / "api.png"), "png")
    with outputs.output_log() as outer:
        write(tmp_path / "outer.csv")
        with outputs.output_log() as inner:
            assert (inner.written, inner.pending) == ([], {})
            outputs.check_output(str(figure), "png")
        assert (outer.written, outer.pending, inner.pending) == ([str(tmp_path / "outer.csv")], {}, {str(figure): False})
    assert outputs.OutputLog().interrupted() == "" and outer.interrupted() == f": {tmp_path / 'outer.csv'} written whole"
