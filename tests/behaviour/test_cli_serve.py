"""``fastmodel serve`` (fastmodel/cli/serve.py) as a user meets it: what --precision means on the device given,
options that apply only together, and what the engine default is."""

from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.serve.profiles import default_engine_note
from tests.suite_fixtures import one_line_error

#: the note every run without --engine prints on stderr, once, after the model's and precision's notes
DEFAULT = f"note: {default_engine_note()}\n"

ARGS = ("serve", "-m", "llama3.1-8b", "--concurrency", "4", "--json")


def _serve(*args):
    return CliRunner().invoke(main, [*ARGS, *args], catch_exceptions=False)


def test_fp4_without_fp4_tensor_cores_says_it_runs_weight_only():
    """H100's device file has no FP4 peak (peak_flops_4 unset: 0), B200's 9 PFLOP/s dense: FP4 weights on H100 are
    dequantised into 16-bit GEMMs (docs/model_serving.md S12), which a record's lowering notes and `serve -m`
    now notes too (on stderr); on B200 they run W4A4, with no note."""
    from fastmodel.serve.api import device_columns

    assert device_columns("H100").get("peak_flops_4", 0.0) == 0.0 and device_columns("B200")["peak_flops_4"] == 9e15
    hopper = _serve("-d", "H100", "--precision", "fp4")
    assert hopper.exit_code == 0, hopper.output
    assert hopper.stderr == "note: fp4 on H100 (no FP4 tensor cores): weight-only, dequantised into 16-bit GEMMs\n" \
        + DEFAULT
    blackwell = _serve("-d", "B200", "--precision", "fp4")
    assert blackwell.exit_code == 0 and blackwell.stderr == DEFAULT
    assert _serve("-d", "H100", "--precision", "fp8", "--engine", "trtllm").stderr == ""


def test_gpt_oss_fp4_names_its_published_checkpoint():
    """gpt-oss is published only as MXFP4 experts (precisions.MXFP4_EXPERT_CHECKPOINTS): --precision fp4 reads as
    that checkpoint, and on H200 (no FP4 tensor cores) as weight-only mxfp4; both say so, naming --precision."""
    run = CliRunner().invoke(main, ["serve", "-m", "gpt-oss-120b", "-d", "H200", "--tp", "2", "--concurrency", "4",
                                    "--precision", "fp4", "--json"], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    notes = run.stderr.splitlines()
    assert notes[0].startswith("note: --precision fp4 of gpt-oss-120b: read as its published MXFP4 checkpoint")
    assert notes[1] == "note: mxfp4 on H200 (no FP4 tensor cores): weight-only, dequantised into 16-bit GEMMs"


def test_spec_acceptance_without_draft_tokens_is_refused_not_ignored():
    """An acceptance rate with no draft tokens (no --spec-tokens, or 0) changed nothing and said nothing."""
    one_line_error(_serve("--spec-acceptance", "0.7"), "--spec-acceptance", "--spec-tokens > 0")
    one_line_error(_serve("--spec-tokens", "0", "--spec-acceptance", "0.7"), "--spec-acceptance")
    one_line_error(_serve("--spec-tokens", "3"), "--spec-acceptance: required")


def test_the_engine_default_is_what_the_help_says():
    """Without --engine a configuration kept the serving columns' defaults, which are TensorRT-LLM's profile less
    its eager host issue time (host_op_s 20 us) and its 4 MiB custom allreduce (custom_allreduce_bytes 0: NCCL),
    while the search and a record without framework took the whole profile: TPOT 15.10 ms against 14.56 ms with
    --engine trtllm. Now every path takes the default engine (TensorRT-LLM's newest profile) and says so once on
    stderr, outside the --json line."""
    import json

    from fastmodel.registry.lm import COLUMNS
    from fastmodel.serve.api import columns, device_columns
    from fastmodel.serve.profiles import profile_columns

    kw = dict(tp=4, concurrency=16)
    bare = columns("llama3.1-70b", "H200", **kw)
    trtllm = columns("llama3.1-70b", "H200", **kw, **profile_columns("trtllm", None, device_columns("H200")["hbm_bytes"]))
    differ = {c.name: (bare[i], trtllm[i]) for i, c in enumerate(COLUMNS) if bare[i] != trtllm[i]}
    # engine_nvidia_only prices nothing: it decides the engine_not_on_device status on an AMD device (S56);
    # fp4_weight_only_cc neither: no_fp4 below Hopper for FP4 weights without FP4 tensor cores (S63)
    assert differ == {"host_op_s": (0.0, 20e-6), "custom_allreduce_bytes": (0.0, 4 * 2**20 + 1),
                      "engine_nvidia_only": (0.0, 1.0), "fp4_weight_only_cc": (0.0, 9.0)}
    args = ["serve", "-m", "llama3.1-70b", "-d", "H200", "--tp", "4", "--concurrency", "16", "--precision", "fp8",
            "--json"]
    plain = CliRunner().invoke(main, args, catch_exceptions=False)
    named = CliRunner().invoke(main, [*args, "--engine", "trtllm"], catch_exceptions=False)
    assert plain.stderr == DEFAULT and named.stderr == ""
    assert json.loads(plain.stdout)["tpot"] == json.loads(named.stdout)["tpot"]
    text = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    assert "Default (with a note): the default engine," in text and "newest profile (docs/model_serving.md S13)" in text
    assert "NCCL allreduces" not in text


def test_an_engine_takes_a_known_version_as_a_record_names_it():
    """--engine "vLLM 0.10.2" is the record's spelling: vLLM's profile at 0.10.2 (async scheduling off, overlap_step
    0), not the newest; an unknown version is one line naming the known ones and the nearest (exit 2)."""
    import json

    from fastmodel.serve.api import evaluate

    old = CliRunner().invoke(main, [*ARGS, "-d", "H200", "--engine", "vLLM 0.10.2"], catch_exceptions=False)
    new = CliRunner().invoke(main, [*ARGS, "-d", "H200", "--engine", "vllm"], catch_exceptions=False)
    assert old.exit_code == 0 and old.stderr == "" and new.exit_code == 0
    tpot = json.loads(old.stdout)["tpot"]
    assert tpot == evaluate("llama3.1-8b", "H200", engine="vllm 0.10.2", concurrency=4)["tpot"] != \
        json.loads(new.stdout)["tpot"]
    one_line_error(_serve("-d", "H200", "--engine", "vLLM 0.13"), "--engine", "vLLM version '0.13' is not known",
                   "nearest 0.12.0", "known: 0.10.2, 0.11.2, 0.12.0, 0.15.1, 0.18.0")


def test_the_mtp_note_holds_under_speculative_decoding():
    """DeepSeek-V3's MTP layers note said "not served (no speculative decoding)" even with --spec-tokens 1, which
    is MTP speculative decoding; with draft tokens it says how the draft is priced (S18: a one-layer draft head)
    and that the MTP layers' own weights are still not counted. Without them the note is unchanged."""
    from fastmodel.serve.models import UNSERVED

    args = ("serve", "-m", "deepseek-v3", "-d", "H200", "--tp", "8", "--ep", "8", "--concurrency", "8",
            "--precision", "fp8", "--json")
    plain = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert plain.exit_code == 0 and plain.stderr.splitlines()[0].endswith(UNSERVED["mtp_layers"])
    spec = CliRunner().invoke(main, [*args, "--spec-tokens", "1", "--spec-acceptance", "0.8"], catch_exceptions=False)
    assert spec.exit_code == 0, spec.output
    note = spec.stderr.splitlines()[0]
    assert note.startswith("note: DeepSeek-V3: model.mtp_layers = 1: with --spec-tokens its draft steps are priced")
    assert "no speculative decoding" not in spec.stderr and "weights are not counted" in note


def test_a_request_count_above_the_column_is_one_line():
    """Review L12: --concurrency 99999999 was answered (TTFT 5.8e9 ms) though a serving task or record refuses it:
    every request count of the command line is a value of the batch_size column, [1, 2^24] requests."""
    runner = CliRunner()
    for flag in ("--concurrency", "--batch-size"):
        result = runner.invoke(main, ["serve", "-m", "llama3.1-8b", flag, "99999999"])
        one_line_error(result, f"{flag}: 99999999 is outside [1, 16777216] requests")
    search = runner.invoke(main, ["serve", "-m", "llama3.1-8b", "-d", "H100", "--search", "--ttft", "2s", "--tpot",
                                  "50ms", "--search-concurrency", "99999999"])
    one_line_error(search, "--search-concurrency: 99999999 is outside [1, 16777216] requests")
    assert runner.invoke(main, ["serve", "-m", "llama3.1-8b", "--concurrency", "16777216", "--json"]).exit_code == 0


def _single(*args):
    return CliRunner().invoke(main, ["serve", "-m", "llama3.1-70b", *args])


def test_hurried_walk_9_single_runs_name_the_flag_the_value_and_the_rule():
    """Walk 9 of ``serve`` single runs, before -> after: '--input-len 8k' said "'8k' is not a valid integer
    range" (a count takes no unit: 8k is 8000 or 8192 tokens, the user says which); '-d H10' said 'device: ...', the
    Python argument, and '-m llama3.1-8bb' 'model: ...'; '--batch-size 8 --concurrency 8' said 'load: give exactly
    one of batch_size, concurrency, max_throughput'; '--tp 3' on 64 heads named no number. Each is one line, exit 2."""
    for args, said in (
            (("--input-len", "8k"), "Invalid value for '--input-len': '8k': a count takes no unit suffix; write the "
                                    "whole number (8k tokens: 8000 or 8192)"),
            (("--output-len", "2.5"), "Invalid value for '--output-len': '2.5' is not a whole number"),
            (("--input-len", "-5"), "Invalid value for '--input-len': -5 is not in the range x>=1."),
            (("-d", "H10"), "error: --device: unknown device 'H10' (did you mean 'h100'?)"),
            (("--batch-size", "8", "--concurrency", "8"), "error: give one of --batch-size, --concurrency, "
                                                          "--max-throughput (got --batch-size, --concurrency)"),
            (("--tp", "3"), "not evaluated (heads_not_divisible_by_tp: batch 1: serve.tp = 3 does not divide the "
                            "model's 64 query heads (model.heads), so its heads do not split over tp)"),
            (("--engine", "vlm"), "error: --engine: unknown engine 'vlm' (did you mean 'vllm'?)"),
            (("--precision", "bf61"), "'bf61' is not one of bf16, fp16, fp8, fp4, mxfp4, int8, int4 (did you mean "
                                      "'bf16'?)")):
        one_line_error(_single(*args), said)
    one_line_error(CliRunner().invoke(main, ["serve", "-m", "llama3.1-8bb"]), "error: --model: unknown model "
                   "'llama3.1-8bb' (did you mean 'llama3.1-8b'?)")


def test_a_model_name_given_as_records_points_at_dash_m():
    """Walk 9: 'fastmodel serve llama3.1-8b' (-m left out) said 'llama3.1-8b: cannot read: No such file or
    directory'; a name that is no file and no path says a model goes with -m. A missing .jsonl stays 'cannot read'."""
    one_line_error(CliRunner().invoke(main, ["serve", "llama3.1-8b"]), "error: llama3.1-8b: no such file; RECORDS is "
                   "a serving-record file (JSONL), a model goes with -m: fastmodel serve -m llama3.1-8b")
    one_line_error(CliRunner().invoke(main, ["serve", "runs.jsonl"]), "error: runs.jsonl: cannot read")
