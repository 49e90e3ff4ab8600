"""No hang and no inf as a result (issue 25 item 2): every command on records and specs of absurd magnitude
(a bandwidth of 1e-300 B/s, a global batch of 1e300, a peak of 1e-300 FLOP/s) ends at once with one line
naming the field (the record schema's bounds) and never reports ``inf``; records at the edge of the bounds
are evaluated and end the same way; below the input checks, a configuration whose results overflow gets
status ``not_finite`` (engines, sweeps, batches), never an ``inf``.

The hang was ``cli_warnings`` (fastmodel/lm/calibrate/use.py) re-issuing a non-calibration warning (numpy's
overflow RuntimeWarning) inside its own recording context, so the list it was reading grew without end. Each
command runs in a fresh interpreter under a timeout, the way a user runs it (warnings on, as by default).
"""

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"
#: seconds one command may take (a cold kernel cache compiles for about a minute; a hang never ends)
LIMIT_S = 400
INF = re.compile(r"(?<![\w.])-?inf\b|\bnan%|\bnan s\b")


def _record(change) -> dict:
    record = json.loads((DATA / "runs_dev.jsonl").read_text().splitlines()[0])
    change(record)
    return record


EXTREME_RUNS = {
    "bandwidth": lambda r: r["system"].update(intra_node_bw_bytes_s_per_gpu=1e-300,
                                              inter_node_bw_bytes_s_per_gpu=1e-300),
    "global_batch": lambda r: r["plan"].update(global_batch=1e300),
    "peak": lambda r: r["system"].update(peak_flops_bf16=1e-300),
    "hbm_bandwidth": lambda r: r["system"].update(hbm_bw_bytes_s=1e-300),
}

SERVE_RECORD = {
    "id": "extreme-serve", "model": {"name": "Llama-3.1-8B", "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32,
                                     "kv_heads": 8, "head_dim": 128, "vocab": 128256, "ffn_kind": "swiglu3"},
    "system": {"gpu": "H100-SXM-80GB", "n_gpus": 1, "peak_flops_bf16": 989e12, "hbm_bytes": 85899345920,
               "hbm_bw_bytes_s": 1e-300, "intra_node_bw_bytes_s_per_gpu": 450e9,
               "inter_node_bw_bytes_s_per_gpu": 50e9, "gpus_per_node": 8},
    "serve": {"tp": 1, "pp": 1, "precision": "bf16", "input_len": 512, "output_len": 128, "batch_size": 4},
}

SLOW_CLUSTER = """kind = "cluster"
name = "slow"
gpu = "H100-SXM-80GB"
num_nodes = 2
gpus_per_node = 8
peak_flops_bf16 = "989 TFLOP/s"
hbm_bytes = "80 GiB"
hbm_bw_bytes_s = "3350 GB/s"
intra_node_bw_bytes_s_per_gpu = 1e-300
inter_node_bw_bytes_s_per_gpu = 1e-300
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("extreme")
    lines = []
    for name, change in EXTREME_RUNS.items():
        record = _record(change)
        record["id"] = f"extreme-{name}"
        (path / f"{name}.json").write_text(json.dumps(record))
        lines.append(json.dumps(record))
    (path / "runs.jsonl").write_text((DATA / "runs_dev.jsonl").read_text().splitlines()[0] + "\n"
                                     + "\n".join(lines) + "\n")
    (path / "serve.json").write_text(json.dumps(SERVE_RECORD))
    (path / "serve.jsonl").write_text(json.dumps(SERVE_RECORD) + "\n")
    (path / "slow.toml").write_text(SLOW_CLUSTER)
    (path / "sweep.toml").write_text('model = "llama3.1-8b"\nsystem = "slow.toml"\ntask = "llm-pretrain"\n'
                                     '[axes]\nplan = ["dp", "tp8"]\n')
    (path / "specs.jsonl").write_text(json.dumps({"model": "llama3.1-8b", "system": "slow.toml",
                                                  "task": "llm-pretrain", "plan": "tp8"}) + "\n")
    return path


def _fastmodel(folder, *args):
    """Exit code, stdout and stderr of the console command (``python -m fastmodel.cli``) run in ``folder``."""
    with warnings.catch_warnings():
        done = subprocess.run([sys.executable, "-W", "default", "-m", "fastmodel.cli", *args], cwd=folder,
                              capture_output=True, text=True, timeout=LIMIT_S)
    assert "Traceback" not in done.stderr, done.stderr
    assert not INF.search(done.stdout), done.stdout       # never a report of inf
    return done.returncode, done.stdout, done.stderr


def _one_line_error(code, out, err, *names):
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), (code, out, err)
    assert any(name in err for name in names), err


@pytest.mark.parametrize("name", sorted(EXTREME_RUNS))
def test_every_command_on_a_record_of_absurd_magnitude_ends_in_one_line(folder, name):
    """The record schema refuses a magnitude outside the registry's bounds before any work, naming the
    field; nothing hangs, nothing prints inf."""
    field = {"bandwidth": "system.intra_node_bw", "global_batch": "plan.global_batch", "peak": "system.peak_flops",
             "hbm_bandwidth": "system.hbm_bw"}[name]
    for args in (["run", "-m", f"{name}.json"], ["run", "-m", f"{name}.json", "--json"],
                 ["plot", "timeline", "-m", f"{name}.json", "-o", f"{name}.png"]):
        _one_line_error(*_fastmodel(folder, *args), field)
    assert not (folder / f"{name}.png").exists()


def test_batch_validate_calibrate_and_serve_on_records_of_absurd_magnitude(folder):
    code, out, err = _fastmodel(folder, "batch", "runs.jsonl", "-o", "-")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [row["status"] == "ok" for row in rows] == [True] + [False] * len(EXTREME_RUNS), out
    assert all(row["status"].startswith("error: ") and "\n" not in row["status"] for row in rows[1:])
    code, out, err = _fastmodel(folder, "calibrate", "runs.jsonl")    # left out of the fit, named, as validate does
    assert code == 0 and "refused, left out of the fit: runs.jsonl:2: system." in err and "Traceback" not in err
    code, out, err = _fastmodel(folder, "validate", "runs.jsonl")    # a miss: validate never stops a file
    assert code == 0 and "refused (a miss): runs.jsonl:2: system." in err and "Traceback" not in err
    for args in (["serve", "serve.jsonl"], ["run", "-m", "serve.json"]):
        _one_line_error(*_fastmodel(folder, *args), "system.hbm_bw_bytes_s")
    code, out, _ = _fastmodel(folder, "batch", "serve.jsonl", "-o", "-")
    assert code == 3 and "system.hbm_bw_bytes_s" in json.loads(out.splitlines()[0])["status"]   # its only line


#: a record at the edges of the registry's bounds (every magnitude accepted, the most extreme allowed)
EDGE = {"system": {"intra_node_bw_bytes_s_per_gpu": 1e8, "inter_node_bw_bytes_s_per_gpu": 1e7,
                   "hbm_bw_bytes_s": 1e9, "peak_flops_bf16": 1e9}}


def test_every_command_on_records_at_the_edge_of_the_bounds_ends_without_inf(folder):
    """In-bounds extremes are evaluated: each command ends at once with a finite report or one line (status
    not_finite if a result overflowed), never inf and never a warning loop."""
    record = _record(lambda r: [r[block].update(values) for block, values in EDGE.items()])
    record["plan"].update(global_batch=record["plan"]["micro_batch"] * (1 << 20), grad_accum=1 << 20)
    record["id"] = f"{record['id']}-edge"     # its own id: calibrate refuses one id on two lines (8fe0a09)
    (folder / "edge.json").write_text(json.dumps(record))
    (folder / "edge.jsonl").write_text(json.dumps(record) + "\n" + json.dumps(_record(lambda r: None)) + "\n")
    for args in (["run", "-m", "edge.json"], ["run", "-m", "edge.json", "--json"], ["batch", "edge.jsonl", "-o", "-"],
                 ["validate", "edge.jsonl"], ["calibrate", "edge.jsonl", "--folds", "0"],
                 ["plot", "timeline", "-m", "edge.json", "-o", "edge.png", "--dpi", "20"]):
        code, out, err = _fastmodel(folder, *args)
        assert code == 0 or (code == 2 and err.count("\n") == 1 and "not_finite" in err), (args, err)


def test_a_configuration_whose_results_overflow_raises_one_line():
    """The engines' own guard, below the input checks: a column vector that overflows (a bandwidth of 1e-300
    B/s, built past every check) is a one-line NotFiniteError, its batch status not_finite."""
    import numpy as np

    from fastmodel.errors import NotFiniteError
    from fastmodel.lm.engine import NOT_FINITE, evaluate_one, evaluate_table
    from fastmodel.lm.sweep import point_columns
    from fastmodel.registry.lm import COLUMN_INDEX

    columns = point_columns("llama3.1-8b", "dgx-h100", global_batch=256, plan="tp8", num_nodes=2)
    evaluate_one(columns, "fine")
    columns[COLUMN_INDEX["intra_bw"]] = columns[COLUMN_INDEX["inter_bw"]] = 1e-300
    with pytest.raises(NotFiniteError, match=r"^plan 'tp8': not_finite: a result is not a finite number"):
        evaluate_one(columns, "plan 'tp8'")
    status = np.zeros(1, dtype=np.int8)
    results = evaluate_table(columns[:, None], status)
    assert status[0] == NOT_FINITE and np.isnan(results["step_time"][0])


def test_specs_of_absurd_magnitude_are_refused_in_one_line(folder):
    """Spec files are checked for plausible magnitudes before any work (fastmodel/spec/quantity.py)."""
    for args in (["run", "-m", "llama3.1-8b", "-s", "slow.toml", "-t", "llm-pretrain", "--plan", "tp8"],
                 ["sweep", "sweep.toml", "-o", "s.nc"]):
        code, out, err = _fastmodel(folder, *args)
        assert code == 2 and err.count("\n") == 1 and "implausibly small" in err, err
    assert not (folder / "s.nc").exists()
    code, out, err = _fastmodel(folder, "batch", "specs.jsonl", "-o", "-")
    assert code == 3 and "implausibly small" in json.loads(out)["status"]     # every line an error: exit 3


def test_sweep_points_of_absurd_magnitude_get_the_status_not_finite():
    """A grid whose points overflow (a cluster built past the spec checks) keeps them with status not_finite and
    NaN results, beside the finite ones; a serving grid likewise."""
    import numpy as np

    from fastmodel.errors import SpecError
    from fastmodel.lm.loader import load_cluster
    from fastmodel.lm.sweep import lm_sweep
    from fastmodel.registry.lm import COLUMN_INDEX, STATUS_CODES
    from fastmodel.registry.serve import SERVE_STATUS
    from fastmodel.serve.api import columns, evaluate_table
    from fastmodel.serve.api import sweep as serve_sweep

    slow = load_cluster("dgx-h100").model_copy(update={"intra_node_bw_bytes_s_per_gpu": 1e-300,
                                                       "inter_node_bw_bytes_s_per_gpu": 1e-300})
    ds = lm_sweep("llama3.1-8b", slow, global_batch=256, axes={"plan": ["dp", "tp8"], "num_nodes": [1]})
    assert (ds.status.values == STATUS_CODES["not_finite"]).all()
    assert np.isnan(ds.step_time.values).all() and np.isnan(ds.memory.values).all()
    one = lm_sweep("llama3.1-8b", "dgx-h100", global_batch=256, num_nodes=1, axes={"plan": ["dp"]})
    assert int(one.status.squeeze()) == 0 and np.isfinite(float(one.step_time.squeeze()))
    # a serving axis value outside its column's bounds is bad input, named in one line (not a point's status)
    with pytest.raises(SpecError, match="hbm_bw: 1e-300 is outside"):
        serve_sweep("llama3.1-8b", device="H100", hbm_bw=[3.35e12, 1e-300], batch_size=[1, 8])
    # a table built past those checks keeps the overflowing configuration with status not_finite and NaN results
    table = np.repeat(columns("llama3.1-8b", "H100", batch_size=8)[:, None], 2, axis=1)
    table[COLUMN_INDEX["hbm_bw"], 1] = 1e-300
    results, status = evaluate_table(table)
    assert status.tolist() == [0, SERVE_STATUS["not_finite"]]
    assert np.isfinite(results[:, 0]).all() and np.isnan(results[:, 1]).all()


def test_cli_warnings_passes_other_warnings_on_once_and_ends():
    """The root cause: a warning other than a calibration one, raised inside ``cli_warnings``, is re-issued
    once after it, with the caller's filters (here: printed once; as an error under -W error)."""
    code = ("import warnings\nfrom fastmodel.lm.calibrate.use import cli_warnings\n"
            "with cli_warnings():\n    warnings.warn('overflow here', RuntimeWarning)\nprint('ended')\n")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ended\n", done.stderr
    assert done.stderr.count("RuntimeWarning: overflow here") == 1, done.stderr
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "RuntimeWarning: overflow here" in done.stderr
