"""The hurried user's second walk of 2026-12-07 (brief "walk": sweeps over fields the lowering reads, the serving
precision axis, ``serve --search``, ``calibrate``, ``plot``, ``validate``, ``batch``, ``specs``, ``best``). Each
case is a defect found on the walk, the message or status it now gives; no test here compiles a kernel at a new
signature (refusals before any evaluation, synthetic datasets, the pure functions the sweep calls)."""

from tests.suite_fixtures import cli, one_line_error

HEAD = 'model = "llama3.1-8b"\nsystem = "dgx-h100"\ntask = "llm-pretrain"\n'


def _sweep_file(tmp_path, axes: str, execution: str = ""):
    path = tmp_path / "s.toml"
    path.write_text(HEAD + (f"[execution]\n{execution}\n" if execution else "") + "[axes]\n" + axes + "\n")
    return path


def test_a_model_axis_that_needs_head_dim_names_head_dim(tmp_path):
    """Was ``axes.heads: 24 does not make a valid Llama 3.1 8B: required when hidden (4096) is not a multiple of
    heads (24)``: "required" of no field (the model validator's FieldValueError path was dropped)."""
    path = _sweep_file(tmp_path, 'plan = ["tp8"]\nheads = [32, 24]')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"),
                   "axes.heads: 24 does not make a valid Llama 3.1 8B: head_dim: required when hidden (4096) is not "
                   "a multiple of heads (24)")
    path = _sweep_file(tmp_path, 'plan = ["tp8"]\nhidden = [4096, 4128]\nheads = [32, 64]')
    one_line_error(cli("sweep", path, "-o", tmp_path / "o.nc"),
                   "hidden = 4128, heads = 64 do not make a valid Llama 3.1 8B: head_dim: required when hidden")
