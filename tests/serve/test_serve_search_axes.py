"""The SLO search's axes: engines, EP, attention DP, speculative decoding, aggregated vs disaggregated pools
(fastmodel/serve/search.py, fastmodel/serve/search_disagg.py, docs/model_serving.md §S17), their statuses and the
single-configuration options and errors of ``fastmodel serve``."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.registry.serve import SERVE_STATUS
from fastmodel.serve.search import X, Y, slo_search

KW = dict(input_len=1024, output_len=256, ttft=0.5, tpot=0.03)


def test_every_axis_is_a_labeled_dimension_and_every_row_names_its_mode_engine_and_layout():
    result = slo_search("mixtral-8x7b", "H100", gpus=4, precisions=("fp8",), engine="trtllm,vllm",
                        concurrency=[4, 16, 64], spec_tokens=(0, 2), spec_acceptance=0.7, modes=("agg", "disagg"),
                        **KW)
    ds = result.dataset
    assert ds.status.dims == ("engine", "device", "precision", "tp", "pp", "ep", "attention_dp", "spec_tokens",
                              "batch_size")
    assert list(ds.engine.values) == ["trtllm", "vllm"] and list(ds.spec_tokens.values) == [0, 2]
    assert list(ds.ep.values) == [1, 2, 4] and list(ds.attention_dp.values) == [1, 2, 4]   # MoE default: powers
    assert ds.disagg_status.dims == ("engine", "precision", "spec_tokens", "prefill_tp", "prefill_workers",
                                     "decode_tp", "decode_workers", "batch_size")   # the decode pool speculates
    assert ds.attrs["slo_modes"] == "agg,disagg"
    modes = {r["mode"] for r in [*result.frontier, result.best]}
    assert modes <= {"agg", "disagg"} and result.best is not None
    for r in result.frontier:
        assert r["engine"] in ("trtllm", "vllm")
        assert {"tp", "pp", "ep", "attention_dp", "spec_tokens"} <= set(r) if r["mode"] == "agg" else \
            {"prefill_tp", "prefill_workers", "decode_tp", "decode_workers"} <= set(r)
    # the best row is the most tokens/s per GPU among every point (both modes) that meets the SLOs
    both = np.concatenate([np.where(ds.meets_slo.values, ds[Y].values, -np.inf).ravel(),
                           np.where(ds.disagg_meets_slo.values, ds[f"disagg_{Y}"].values, -np.inf).ravel()])
    assert result.best[Y] == pytest.approx(both.max(), rel=1e-12)


def test_illegal_combinations_stay_in_the_grid_with_their_status():
    st = SERVE_STATUS
    moe = slo_search("mixtral-8x7b", "H100", gpus=8, precisions=("fp8",), concurrency=[3, 4], ep=[1, 16],
                     attention_dp=[1, 2], modes=("agg", "disagg"), **KW).dataset
    at = dict(engine="trtllm", device="H100", precision="fp8", pp=1, spec_tokens=0)
    assert int(moe.status.sel(dict(at, tp=1, ep=1, attention_dp=2, batch_size=3))) == st["attention_dp_not_dividing"]
    assert int(moe.status.sel(dict(at, tp=1, ep=1, attention_dp=2, batch_size=4))) == st["ok"]
    assert int(moe.status.sel(dict(at, tp=2, ep=16, attention_dp=1, batch_size=4))) == st["ep_not_dividing"]  # 8 experts
    d = moe.disagg_status.sel(engine="trtllm", precision="fp8", spec_tokens=0, batch_size=4)
    assert int(d.sel(prefill_tp=4, prefill_workers=2, decode_tp=1, decode_workers=1)) == st["pools_over_budget"]
    assert int(d.sel(prefill_tp=4, prefill_workers=1, decode_tp=4, decode_workers=1)) == st["ok"]
    assert np.isnan(float(moe.disagg_ttft.sel(engine="trtllm", precision="fp8", spec_tokens=0, batch_size=4,
                                              prefill_tp=8, prefill_workers=8, decode_tp=1, decode_workers=1)))
    dense = slo_search("llama3.1-8b", "H100", gpus=4, precisions=("bf16",), concurrency=[4], attention_dp=[1, 2],
                       **KW).dataset
    assert int(dense.status.sel(dict(at, precision="bf16", tp=1, ep=1, attention_dp=2, batch_size=4))) \
        == st["attention_dp_dense"]
    assert not dense.meets_slo.sel(attention_dp=2).any()


def test_the_best_configuration_is_the_best_of_the_single_evaluations():
    """A small grid evaluated point by point with ``evaluate`` (each engine's profile, steady state): the search's
    best is the feasible point with the most tokens/s per GPU."""
    from fastmodel.serve.api import device_columns, evaluate
    from fastmodel.serve.profiles import profile_columns

    conc, engines = [1, 8, 64, 256], ["trtllm", "sglang"]
    result = slo_search("llama3.1-8b", "H100", gpus=2, precisions=("bf16",), engine=engines, concurrency=conc,
                        spec_tokens=(0, 3), spec_acceptance=0.6, **KW)
    hbm = device_columns("H100")["hbm_bytes"]
    found = []
    for engine, tp, pp, k, c in itertools.product(engines, (1, 2), (1, 2), (0, 3), conc):
        if tp * pp > 2:
            continue
        r = evaluate("llama3.1-8b", "H100", tp=tp, pp=pp, concurrency=c, input_len=1024, output_len=256,
                     client_rounds=0, spec_tokens=k, spec_acceptance=0.6, **profile_columns(engine, None, hbm))
        if r["status"] == "ok" and r["fits_memory"] and r["ttft"] <= 0.5 and r["tpot"] <= 0.03:
            found.append((r[Y], engine, tp, pp, k, c))
    y, engine, tp, pp, k, c = max(found)
    b = result.best
    assert (b["engine"], b["tp"], b["pp"], b["spec_tokens"], b["batch_size"]) == (engine, tp, pp, k, c)
    assert b[Y] == pytest.approx(y, rel=1e-12) and result.feasible == len(found)


@pytest.mark.parametrize("engine, framework", [("trtllm", None), ("vllm", "vLLM 0.18.0")])
def test_a_disaggregated_point_is_the_disagg_evaluation_of_the_same_pools(engine, framework):
    """The search's array form of the closed loop against ``evaluate_disagg`` of a hand-built deployment (vLLM: with
    the decode worker's handoff iterations, docs/model_serving.md S43)."""
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.serve.api import columns
    from fastmodel.serve.disagg import DisaggRecord, evaluate_disagg
    from fastmodel.serve.profiles import profile_columns

    result = slo_search("llama3.1-8b", "H100", gpus=8, precisions=("fp8",), concurrency=[48], modes=("disagg",),
                        engine=engine, **KW)
    ds = result.dataset
    assert "meets_slo" not in ds and "status" not in ds          # the aggregated grid was not asked for
    at = dict(engine=engine, precision="fp8", spec_tokens=0, batch_size=48, prefill_tp=2, prefill_workers=2,
              decode_tp=2, decode_workers=2)
    profile = profile_columns(engine, None, 80 * 2**30)
    common = dict(precision="fp8", input_len=1024, client_rounds=0, **profile)
    prefill = columns("llama3.1-8b", "H100", batch_size=1, tp=2, output_len=2, **common)
    decode = columns("llama3.1-8b", "H100", batch_size=24, tp=2, output_len=256, **common)
    assert prefill[C["hbm_bytes"]] == round(79.11 * 2**30)   # the device file's CUDA-visible total
    rec = DisaggRecord("hand", prefill, decode, 2, 2, 48, 8, 8, {}, "", "H100", (), {"framework": framework})
    [want] = evaluate_disagg([rec])
    assert float(ds.disagg_ttft.sel(at)) == pytest.approx(want["ttft"], rel=1e-9)
    assert float(ds.disagg_tpot.sel(at)) == pytest.approx(want["tpot"], rel=1e-12)
    assert float(ds[f"disagg_{Y}"].sel(at)) == pytest.approx(want["output_tokens_per_s"] / 8, rel=1e-9)
    assert float(ds[f"disagg_{X}"].sel(at)) == pytest.approx(1 / want["tpot"], rel=1e-12)


def test_a_speculating_disaggregated_point_is_the_disagg_evaluation_of_the_same_pools():
    """``spec_tokens`` is an axis of the pools too (docs/model_serving.md S18): the decode worker speculates at the
    search's acceptance, the prefill worker does not, and the first token's iterations last E TPOTs, as
    ``evaluate_disagg`` of the hand-built deployment prices them; k = 0 is the search without drafts."""
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.serve.api import columns
    from fastmodel.serve.disagg import DisaggRecord, evaluate_disagg
    from fastmodel.serve.profiles import profile_columns

    kw = dict(gpus=8, precisions=("fp8",), concurrency=[48], modes=("disagg",), engine="trtllm", **KW)
    ds = slo_search("llama3.1-8b", "H100", spec_tokens=(0, 3), spec_acceptance=0.7, **kw).dataset
    plain = slo_search("llama3.1-8b", "H100", **kw).dataset
    at = dict(engine="trtllm", precision="fp8", batch_size=48, prefill_tp=2, prefill_workers=2, decode_tp=2,
              decode_workers=2)
    common = dict(precision="fp8", input_len=1024, client_rounds=0, **profile_columns("trtllm", None, 80 * 2**30))
    prefill = columns("llama3.1-8b", "H100", batch_size=1, tp=2, output_len=2, **common)
    decode = columns("llama3.1-8b", "H100", batch_size=24, tp=2, output_len=256, spec_tokens=3,
                     spec_acceptance=0.7, **common)
    assert prefill[C["spec_tokens"]] == 0
    [want] = evaluate_disagg([DisaggRecord("hand", prefill, decode, 2, 2, 48, 8, 8, {}, "", "H100", (), {})])
    got = {name: float(ds[f"disagg_{name}"].sel(dict(at, spec_tokens=3))) for name in ("ttft", "tpot", Y)}
    assert got["ttft"] == pytest.approx(want["ttft"], rel=1e-9)
    assert got["tpot"] == pytest.approx(want["tpot"], rel=1e-12)
    assert got[Y] == pytest.approx(want["output_tokens_per_s"] / 8, rel=1e-9)
    for name in ("disagg_ttft", "disagg_tpot", "disagg_status"):
        np.testing.assert_array_equal(ds[name].sel(spec_tokens=0).values, plain[name].sel(spec_tokens=0).values)
    assert got["tpot"] < float(ds.disagg_tpot.sel(dict(at, spec_tokens=0)))


def test_mode_disagg_alone_sweeps_no_aggregated_grid(monkeypatch, tmp_path):
    """``--mode disagg``: only the pools are swept (the aggregated grid's sweep is never called), the dataset holds
    only ``disagg_*`` variables and their coordinates, every row is disaggregated, the pools' answer is the one the
    agg,disagg search gives them, and plot pareto draws the pools' frontier alone with the SLO star."""
    import xarray as xr

    import fastmodel.serve.search as search

    kw = dict(gpus=4, precisions=("fp8",), concurrency=[8, 48], **KW)
    both = slo_search("llama3.1-8b", "H100", modes=("agg", "disagg"), **kw)

    def refuse(*args, **kwargs):
        raise AssertionError("the aggregated grid was swept under --mode disagg")

    monkeypatch.setattr(search, "_agg_grid", refuse)
    alone = slo_search("llama3.1-8b", "H100", modes=("disagg",), **kw)
    ds = alone.dataset
    assert all(name.startswith("disagg_") for name in ds.data_vars) and ds.attrs["slo_modes"] == "disagg"
    assert set(ds.dims) == {"engine", "precision", "spec_tokens", "prefill_tp", "prefill_workers", "decode_tp",
                            "decode_workers", "batch_size"}
    assert ds.attrs["fastmodel_task"] == "serve" and ds.attrs["model"] == "llama3.1-8b"
    assert {r["mode"] for r in alone.frontier} == {"disagg"}
    for name in ds.data_vars:
        np.testing.assert_array_equal(ds[name].values, both.dataset[name].values)
    assert alone.feasible == int(both.dataset.disagg_meets_slo.sum())
    out, png = tmp_path / "disagg.nc", tmp_path / "disagg.png"
    run = CliRunner().invoke(main, ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "0.5", "--tpot",
                                    "30ms", "--gpus", "4", "--search-precision", "fp8", "--search-concurrency", "8",
                                    "--mode", "disagg", "-o", str(out)])
    assert run.exit_code == 0, run.output
    rows = [line.split()[0] for line in run.output.split("layout", 1)[1].splitlines()[1:] if line.strip()]
    assert "disagg" in rows and "agg" not in rows
    assert "status" not in xr.load_dataset(out)
    drawn = CliRunner().invoke(main, ["plot", "pareto", str(out), "-o", str(png)])
    assert drawn.exit_code == 0, drawn.output
    assert "mode=disagg:" in drawn.output and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_search_cli_takes_the_axes_and_prints_mode_engine_and_layout():
    run = CliRunner().invoke(main, ["serve", "--search", "-m", "mixtral-8x7b", "-d", "H100", "--ttft", "1s", "--tpot",
                                    "50ms", "--gpus", "4", "--engine", "trtllm", "--engine", "vllm", "--ep", "1,4",
                                    "--attention-dp", "1", "--mode", "agg,disagg", "--spec-tokens", "0,2",
                                    "--spec-acceptance", "0.8", "--search-concurrency", "8"])
    assert run.exit_code == 0, run.output
    assert "mode   engine precision layout" in run.output and "best meeting the SLOs:" in run.output
    assert "ep4 adp1" in run.output or "ep1 adp1" in run.output


@pytest.mark.parametrize("args, field", [
    (["--attention-dp", "3", "--concurrency", "8"], "--attention-dp"),
    (["--attention-dp", "2", "--batch-size", "5"], "--attention-dp"),
    (["--spec-tokens", "3", "--concurrency", "8"], "--spec-acceptance"),
    (["--engine", "vllm,sglang"], "--engine"),
    (["--engine", "tgi"], "--engine"),
    (["--mode", "disagg"], "--mode"),
    (["--ep", "1,2"], "--ep"),
])
def test_bad_single_configurations_are_one_line_naming_the_field(args, field):
    run = CliRunner().invoke(main, ["serve", "-m", "mixtral-8x7b", "-d", "H100", "--tp", "2", *args])
    assert run.exit_code == 2
    lines = [x for x in run.output.splitlines() if x.strip()]
    assert len(lines) == 1 and field in lines[0], run.output


def test_the_search_refuses_unknown_modes_and_engines():
    from fastmodel.errors import SpecError

    with pytest.raises(SpecError, match="^modes: "):       # the argument from Python (the CLI: --mode)
        slo_search("llama3.1-8b", "H100", modes=("agg", "split"), **KW)
    with pytest.raises(SpecError, match="^engine: "):
        slo_search("llama3.1-8b", "H100", engine=["vllm", "tgi"], **KW)


def test_speculative_decoding_on_one_configuration_and_as_a_record_field(tmp_path):
    from fastmodel.serve.api import evaluate

    run = CliRunner().invoke(main, ["serve", "-m", "llama3.1-70b", "-d", "H200", "--tp", "8", "--precision", "fp8",
                                    "--concurrency", "8", "--spec-tokens", "3", "--spec-acceptance", "0.7", "--json"])
    assert run.exit_code == 0, run.output
    got = json.loads(run.stdout.splitlines()[0])
    want = evaluate("llama3.1-70b", "H200", tp=8, precision="fp8", concurrency=8, spec_tokens=3,
                    spec_acceptance=0.7)["tpot"]
    plain = evaluate("llama3.1-70b", "H200", tp=8, precision="fp8", concurrency=8)["tpot"]
    assert got["tpot"] == pytest.approx(want, rel=1e-12) and want != pytest.approx(plain, rel=1e-3)


def test_speculative_decoding_record_fields_lower_to_the_columns_and_need_an_acceptance():
    from fastmodel.errors import SpecError
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.serve.records import lower_serve_record
    from tests.serve.test_serve_records import RECORD, _with

    spec = _with("serve.spec_acceptance", 0.75, _with("serve.spec_tokens", 2))
    columns = lower_serve_record(spec, "f.jsonl:1").columns
    assert columns[C["spec_tokens"]] == 2 and columns[C["spec_acceptance"]] == 0.75
    assert lower_serve_record(RECORD, "f.jsonl:1").columns[C["spec_tokens"]] == 0
    with pytest.raises(SpecError, match=r"f\.jsonl:1: serve\.spec_acceptance: required with spec_tokens"):
        lower_serve_record(_with("serve.spec_tokens", 2), "f.jsonl:1")
    static = _with("serve.batch_size", 16, _with("serve.concurrency", KeyError, spec))   # every load speculates (S18)
    assert lower_serve_record(static, "f.jsonl:1").columns[C["spec_tokens"]] == 2
    with pytest.raises(SpecError, match=r"serve\.spec_acceptance"):
        lower_serve_record(_with("serve.spec_acceptance", 1.5, spec), "f.jsonl:1")


def test_a_serving_task_spec_takes_speculative_decoding():
    from fastmodel.serve.spec import load_serve_task
    from fastmodel.serve.sweep_plan import SERVE_FIXED

    task = load_serve_task({"name": "t", "kind": "serve", "input_len": 128, "output_len": 64, "concurrency": 8,
                            "spec_tokens": 3, "spec_acceptance": 0.6})
    assert (task.spec_tokens, task.spec_acceptance) == (3, 0.6) and {"spec_tokens", "spec_acceptance"} <= set(SERVE_FIXED)


def test_plot_pareto_of_a_search_with_both_modes_draws_the_disaggregated_frontier(tmp_path):
    from fastmodel.plot.serving import serving_pareto

    out = tmp_path / "search.nc"
    run = CliRunner().invoke(main, ["serve", "--search", "-m", "llama3.1-8b", "-d", "H100", "--ttft", "0.5", "--tpot",
                                    "30ms", "--gpus", "4", "--engine", "trtllm,sglang", "--mode", "agg,disagg",
                                    "--input-len", "1024", "--output-len", "256", "-o", str(out)])
    assert run.exit_code == 0, run.output
    result = slo_search("llama3.1-8b", "H100", gpus=4, engine="trtllm,sglang", modes=("agg", "disagg"), **KW)
    fig, ax = serving_pareto(result.dataset, "engine")
    assert set(ax.frontiers) == {"trtllm", "sglang", "mode=disagg"}
    assert ax.best == (pytest.approx(result.best[X]), pytest.approx(result.best[Y]))
    png = tmp_path / "pareto.png"
    run = CliRunner().invoke(main, ["plot", "pareto", str(out), "--curve", "engine", "-o", str(png)])
    assert run.exit_code == 0, run.output
    assert "\nmode=disagg:" in run.output and "engine = sglang:" in run.output and "P1xtp" in run.output


def test_plot_pareto_curve_mode_of_a_search_draws_the_aggregated_against_the_disaggregated_frontier(tmp_path):
    """``--curve mode`` on an SLO search (its table prints ``mode``): one frontier of every aggregated point (the
    frontier of the per-engine frontiers' union) and the disaggregated one; not a dimension, it was refused."""
    from fastmodel.plot.pareto import pareto_mask
    from fastmodel.plot.serving import serving_pareto

    result = slo_search("llama3.1-8b", "H100", gpus=4, engine="trtllm,sglang", modes=("agg", "disagg"), **KW)
    _, by_engine = serving_pareto(result.dataset, "engine")
    _, by_mode = serving_pareto(result.dataset, "mode")
    assert set(by_mode.frontiers) == {"agg", "disagg"}
    assert np.array_equal(by_mode.frontiers["disagg"][0], by_engine.frontiers["mode=disagg"][0])
    xs = np.concatenate([by_engine.frontiers[e][0] for e in ("trtllm", "sglang")])
    ys = np.concatenate([by_engine.frontiers[e][1] for e in ("trtllm", "sglang")])
    on = pareto_mask(xs, ys, "max", "max")
    assert sorted(by_mode.frontiers["agg"][0]) == sorted(xs[on])
    out = tmp_path / "search.nc"
    result.dataset.to_netcdf(out)
    run = CliRunner().invoke(main, ["plot", "pareto", str(out), "--curve", "mode", "-o", str(tmp_path / "p.png")])
    assert run.exit_code == 0, run.output
    assert "mode = agg:" in run.output and "mode = disagg:" in run.output and "P1xtp" in run.output


def test_the_search_api_refuses_speculative_decoding_without_an_acceptance():
    """The Python API holds the CLI's rule: draft tokens with no acceptance rate are one line naming it."""
    from fastmodel.errors import SpecError

    with pytest.raises(SpecError, match="^spec_acceptance: "):
        slo_search("llama3.1-8b", "H100", gpus=2, precisions=("bf16",), concurrency=[4], spec_tokens=(0, 3),
                   input_len=1024, output_len=256, ttft=2.0, tpot=0.05)


def test_precision_options_take_any_case_and_a_typo_gets_the_nearest():
    """`--precision FP8` is fp8 (cli/serve.py: case-insensitive choices); `fp9` is one line naming fp8."""
    args = ["serve", "-m", "llama3.1-8b", "-d", "H100", "--batch-size", "1", "--json"]
    upper = CliRunner().invoke(main, [*args, "--precision", "FP8", "--kv-precision", "BF16"])
    lower = CliRunner().invoke(main, [*args, "--precision", "fp8", "--kv-precision", "bf16"])
    assert upper.exit_code == 0 and upper.output == lower.output
    typo = CliRunner().invoke(main, [*args, "--precision", "fp9"])
    assert typo.exit_code == 2 and "(did you mean 'fp8'?)" in typo.output and typo.output.count("\n") == 1
