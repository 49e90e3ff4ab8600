"""``fastmodel serve --search -o`` writes the searched sweep; ``fastmodel plot pareto`` draws its frontier with the
SLOs (fastmodel/serve/search.py, fastmodel/plot/serving.py, docs/model_serving.md §S17)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.serve.search import X, Y, slo_search

ARGS = ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "0.5", "--tpot", "30ms", "--gpus", "4",
        "--input-len", "1024", "--output-len", "256"]


def test_search_writes_its_sweep_with_the_budget_and_the_slos(tmp_path):
    out = tmp_path / "search.nc"
    run = CliRunner().invoke(main, [*ARGS, "-o", str(out)])
    assert run.exit_code == 0, run.output
    ds = xr.load_dataset(out)
    assert ds.attrs["slo_ttft_s"] == 0.5 and ds.attrs["slo_tpot_s"] == pytest.approx(0.03) and ds.attrs["slo_gpus"] == 4
    sizes = ds.tp * ds.pp * ds.attention_dp          # dims engine, device, precision, tp, pp, ep, attention_dp, ...
    within = (sizes <= 4).broadcast_like(ds.status).transpose(*ds.status.dims).values
    assert (ds.within_budget.values.astype(bool) == within).all()
    meets = (ds.status.values == 0) & ds.fits_memory.values.astype(bool) & within & (ds.ttft.values <= 0.5) \
        & (ds.tpot.values <= 0.03)
    assert (ds.meets_slo.values.astype(bool) == meets).all() and meets.any()
    again = CliRunner().invoke(main, [*ARGS, "-o", str(out)])
    assert again.exit_code == 2 and "--force" in again.output       # the output rule: no silent overwrite


def test_plot_pareto_of_a_search_marks_the_tpot_target_and_the_best_point(tmp_path):
    from fastmodel.plot.serving import serving_pareto

    result = slo_search("llama3.1-8b", "H100", input_len=1024, output_len=256, ttft=0.5, tpot=0.03, gpus=4)
    fig, ax = serving_pareto(result.dataset, "precision")
    assert ax.best == (pytest.approx(result.best[X]), pytest.approx(result.best[Y]))
    [line] = [g for g in ax.get_lines() if g.get_gid() == "slo-tpot"]
    assert line.get_xdata()[0] == pytest.approx(1 / 0.03)
    for xv, yv, _ in ax.frontiers.values():   # no frontier point needs more GPUs than the budget
        ds = result.dataset
        over = ds.within_budget.values == 0
        assert not np.any(np.isin(np.round(xv, 9), np.round(ds[X].values[over], 9))
                          & np.isin(np.round(yv, 9), np.round(ds[Y].values[over], 9)))
    out = tmp_path / "search.nc"
    assert CliRunner().invoke(main, [*ARGS, "-o", str(out)]).exit_code == 0
    png = tmp_path / "pareto.png"
    run = CliRunner().invoke(main, ["plot", "pareto", str(out), "--curve", "precision", "-o", str(png)])
    assert run.exit_code == 0, run.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "precision = fp8:" in run.output
    for axis in ("--x", "--y"):     # a misspelt variable: one line (plot/serving.py), not xarray's KeyError
        typo = CliRunner().invoke(main, ["plot", "pareto", str(out), axis, "tpott", "-o", str(tmp_path / "t.png")])
        assert typo.exit_code == 2 and typo.output.startswith("error: unknown variable 'tpott' (did you mean 'tpot'?)")


def test_slo_targets_read_as_durations():
    """``--ttft 2s --tpot 50ms`` (issue 24's example): a service-level target may exceed the 1 s ceiling of a
    device latency; a day is the most a target may be."""
    from fastmodel.spec.quantity import parse_quantity

    assert parse_quantity("2s", "duration") == 2.0 and parse_quantity("50ms", "duration") == pytest.approx(0.05)
    with pytest.raises(ValueError, match="implausibly large"):
        parse_quantity(2e5, "duration")
    run = CliRunner().invoke(main, ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "2s",
                                    "--tpot", "50ms", "--gpus", "2"])
    assert run.exit_code == 0 and "TTFT <= 2000 ms and TPOT <= 50 ms" in run.output
    for ttft, tpot, line in (("-2s", "50ms", "error: --ttft: -2 s: an SLO must be a positive duration, e.g. 2s or 50ms"),
                             ("2s", "0", "error: --tpot: 0 s: an SLO must be a positive duration, e.g. 2s or 50ms")):
        bad = CliRunner().invoke(main, ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", ttft,
                                        "--tpot", tpot, "--gpus", "2"])
        assert bad.exit_code == 2 and bad.output == line + "\n", bad.output


def test_search_plans_for_the_steady_state_without_a_start_wave():
    """A deployment in service has no benchmark client's start wave: the search's TTFT is the steady state's."""
    from fastmodel.serve.api import evaluate

    result = slo_search("llama3.1-8b", "H100", input_len=1024, output_len=256, ttft=0.5, tpot=0.03, gpus=4)
    b = result.best
    kw = dict(tp=b["tp"], pp=b["pp"], precision=b["precision"], input_len=1024, output_len=256,
              concurrency=b["batch_size"], chunked_prefill=0, mixed_prefill=1, overlap_step=1, kv_on_demand=0,
              max_num_tokens=8192, max_batch_size=2048)
    assert b["ttft"] == pytest.approx(evaluate("llama3.1-8b", "H100", client_rounds=0, **kw)["ttft"], rel=1e-12)
    assert b["ttft"] < evaluate("llama3.1-8b", "H100", client_rounds=10, **kw)["ttft"]


def test_a_bare_slo_number_far_beyond_an_interactive_service_gets_a_note():
    """``--tpot 50`` is 50 s per token (a bare number is seconds): it runs, with a one-line note naming the
    millisecond spelling; ``--tpot 0.05`` and ``--tpot 50ms`` get none."""
    base = ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--gpus", "1", "--ttft", "2"]
    noted = CliRunner().invoke(main, [*base, "--tpot", "50"])
    assert noted.exit_code == 0
    assert ("note: --tpot 50 reads as 50 s (a number without a unit is seconds); write e.g. 50ms for milliseconds\n"
            in noted.stderr)
    for quiet in ("0.05", "50ms"):
        run = CliRunner().invoke(main, [*base, "--tpot", quiet])
        assert run.exit_code == 0 and "reads as" not in run.stderr


def test_a_search_too_large_for_memory_is_refused_before_it_runs(monkeypatch):
    """A search grid over half the available memory is one line and exit 2 before any axis is built (a
    --search-concurrency of 10^9 used to take minutes and 12 GB before running out of memory)."""
    import fastmodel.sweeps.size as size

    monkeypatch.setattr(size, "available_memory_bytes", lambda: 1 << 20)       # 1 MiB: 2,048 points are too many
    run = CliRunner().invoke(main, [*ARGS, "--search-concurrency", "2048"])
    assert run.exit_code == 2 and run.output.startswith("error: ") and run.output.count("\n") == 1, run.output
    assert "configurations" in run.output and "--search-concurrency" in run.output
    monkeypatch.undo()
    run = CliRunner().invoke(main, [*ARGS, "--search-concurrency", str(10**9)])
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output


def test_a_search_with_nothing_legal_says_why():
    """--ep 3 on a dense model: every point is illegal; the first line named only '0 configurations fit'. It
    names the status that ruled out most points, and exits 3 as a sweep of no legal point does (exit 0 before);
    the one line of no configuration meeting the SLOs, not an empty table."""
    run = CliRunner().invoke(main, [*ARGS, "--ep", "3"])
    assert run.exit_code == 3, run.output
    [first] = run.stdout.splitlines()
    assert first.startswith("no configuration meets TTFT <= 500 ms and TPOT <= 30 ms: none of the") \
        and "none is legal" in first and "ep" in first, first


def test_engine_names_take_a_records_spelling_and_a_typo_gets_the_nearest():
    """`--engine vLLM` / `TensorRT-LLM` are the engines a record's framework names; `vlm` is a typo of vllm."""
    from fastmodel.errors import SpecError
    from fastmodel.serve.search import engine_list

    assert engine_list("vLLM,TensorRT-LLM") == ["vllm", "trtllm"]
    assert engine_list(["SGLang", "sglang"]) == ["sglang"]
    with pytest.raises(SpecError, match=r"^--engine: unknown engine 'vlm' \(did you mean 'vllm'\?\); choose one of "
                                        r"trtllm, vllm, sglang, optionally with a version"):
        engine_list("vlm")
    # a version, as a record's framework states it (profiles.engine_choice): labels that read back the same way
    assert engine_list("vLLM 0.10.2, trtllm,TensorRT-LLM 1.0.0rc3") == ["vllm 0.10.2", "trtllm", "trtllm 1.0.0"]
    assert engine_list(None) == ["trtllm"]
    with pytest.raises(SpecError, match=r"vLLM version '0.13' is not known; nearest 0.12.0; known: 0.10.2"):
        engine_list("vllm 0.13")


def test_the_frontier_table_widens_the_engine_column_to_a_versioned_label():
    """A versioned engine label ("vllm 0.10.2") overflowed the 6-character column and shifted its row."""
    import xarray as xr

    from fastmodel.serve.search import SearchResult, X, Y, format_search

    def row(engine):
        return {"mode": "agg", "engine": engine, "precision": "fp8", "tp": 4, "pp": 1, "ep": 1, "attention_dp": 1,
                "spec_tokens": 0, "batch_size": 16, "ttft": 0.2, "tpot": 0.02, X: 50.0, Y: 900.0, "meets_slo": True}

    result = SearchResult(xr.Dataset(), [row("trtllm"), row("vllm 0.10.2")], None, 2, 2)
    lines = format_search(result, 2.0, 0.05).splitlines()
    table = [line for line in lines if line.startswith(("mode", "agg"))]
    assert len(table) == 3
    assert len({line.index("precision") + 9 if line.startswith("mode") else line.index("fp8") + 3 for line in table}) == 1
    narrow = format_search(SearchResult(xr.Dataset(), [row("trtllm")], None, 1, 1), 2.0, 0.05)
    assert "mode   engine precision" in narrow                      # six characters while every label fits


def test_search_notes_no_weight_only_path_where_every_engine_refuses_the_precision():
    """serve --search printed "fp4 on A100 ...: weight-only" above "none is legal (most are no_fp4)" when every
    searched engine refuses FP4 weights there (TensorRT-LLM: weight-only FP4 from compute capability 9.0,
    docs/model_serving.md S63); the note stays where one engine runs them (vLLM's FP4 Marlin from 8.0)."""
    from fastmodel.cli.serve_search import _search_precision_notes

    note = "fp4 on A100 (no FP4 tensor cores): weight-only, dequantised into 16-bit GEMMs"
    assert _search_precision_notes("llama3.1-8b", "A100", ("fp4",), ("trtllm",)) == []
    assert note in _search_precision_notes("llama3.1-8b", "A100", ("fp4",), ("vllm",))
    assert note in _search_precision_notes("llama3.1-8b", "A100", ("fp4", "bf16"), ("trtllm", "vllm"))


def test_nothing_legal_names_every_status_with_its_count():
    """`serve -m deepseek-v3 --search --ep 3`: the points of pp 2 and 4 (61 layers) fail the pipeline check
    first, so "none is legal (most are layers_not_divisible_by_pp)" hid the cause of every pp-1 point, the --ep
    the user gave (ep_not_dividing). Each status is named with its count, most first."""
    from fastmodel.serve.search import none_legal

    names = "ok heads_not_divisible_by_tp layers_not_divisible_by_pp ep_not_dividing"
    status = xr.DataArray(np.array([[2, 2], [2, 3], [2, 3]], dtype=np.int8), dims=("pp", "ep"),
                          attrs={"flag_meanings": names})
    said = none_legal(xr.Dataset({"status": status}))
    assert said == "; none is legal (4 layers_not_divisible_by_pp, 2 ep_not_dividing)", said
    status[0, 0] = 0
    assert none_legal(xr.Dataset({"status": status})) == ""
