"""Serving precisions of a record (fastmodel/serve/precisions.py and the FP4 columns of fastmodel/serve/profiles.py):
gpt-oss's MXFP4 experts-only checkpoint by hand, the activations each engine gives MXFP4 GEMMs, the FP4 dev rows'
reading, and vLLM's MXFP4 expert row tiles. The record helpers (RECORD, MOE, ``_with``) are
tests/serve/test_serve_records.py's."""

from __future__ import annotations

import numpy as np
import pytest

from fastmodel.serve.api import device_columns, evaluate_table
from fastmodel.serve.records import lower_serve_record, read_serve_records
from tests.serve.test_serve_records import DATA, MOE, RECORD, _with


def _moe_record(precision, layers="all", framework="TensorRT-LLM 1.2.0rc2", gpu="B200"):
    record = {**RECORD, "framework": framework, "model": MOE, "system": {"gpu": gpu, "n_gpus": 1},
              "serve": {"tp": 1, "precision": precision, "quantized_layers": layers, "input_len": 1024,
                        "output_len": 256, "concurrency": 4}}
    return lower_serve_record(record)


def test_mxfp4_experts_only_checkpoint_keeps_the_rest_bf16_by_hand():
    """gpt-oss's checkpoint: MXFP4 (4 + 8/32 = 4.25 bits) routed experts, every other weight BF16. The weights
    differ from an all-BF16 checkpoint only by the experts: 8 layers x 16 experts x 3 x 2048 x 1024 elements,
    each 2 - 4.25/8 bytes smaller."""
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.registry.serve import SERVE_RESULT_INDEX as R

    bf16, mx = _moe_record("bf16"), _moe_record("mxfp4", "experts")
    assert mx.columns[C["weight_bytes"]] == 4.25 / 8 and mx.columns[C["quant_experts_only"]] == 1.0
    out, _ = evaluate_table(np.stack([bf16.columns, mx.columns], axis=1))
    experts = 8 * 16 * 3 * 2048 * 1024
    assert out[R["weight_memory"], 0] - out[R["weight_memory"], 1] == pytest.approx(experts * (2 - 4.25 / 8),
                                                                                    rel=1e-12)


def test_experts_only_leaves_a_dense_model_at_bf16():
    """A dense model has no routed experts: an experts-only FP4 checkpoint prices every GEMM like BF16, even on
    a device with FP4 tensor cores (B200)."""
    from fastmodel.registry.serve import SERVE_RESULT_INDEX as R

    dense = {**RECORD, "system": {"gpu": "B200", "n_gpus": 2}}
    bf16 = lower_serve_record(_with("serve.precision", "bf16", dense))
    mx = lower_serve_record(_with("serve.quantized_layers", "experts", _with("serve.precision", "mxfp4", dense)))
    nv = lower_serve_record(_with("serve.precision", "fp4", dense))
    out, _ = evaluate_table(np.stack([bf16.columns, mx.columns, nv.columns], axis=1))
    assert out[R["prefill_gemm"], 1] == out[R["prefill_gemm"], 0]
    assert out[R["decode_gemm"], 1] == out[R["decode_gemm"], 0]
    assert out[R["prefill_gemm"], 2] < 0.5 * out[R["prefill_gemm"], 0]     # NVFP4 everywhere: W4A4


def test_engines_pick_the_activations_of_mxfp4_gemms():
    """TensorRT-LLM runs MXFP4 experts with MXFP8 activations on Blackwell (W4A8: the FP8 peak), vLLM's default
    SM100 backend with BF16 ones (W4A16); NVFP4 stays W4A4; without FP4 tensor cores all are weight-only."""
    from fastmodel.kernels.serve.costs import dense_format, gemm_format
    from fastmodel.serve.profiles import fp4_activation

    assert fp4_activation("trtllm", "mxfp4") == (1.0, None)
    assert fp4_activation("vllm", "mxfp4") == (0.0, None)
    assert fp4_activation("sglang", "mxfp4")[0] == 0.0 and "not sourced" in fp4_activation("sglang", "mxfp4")[1]
    assert fp4_activation("vllm", "fp4") == (2.0, None)
    trt, vllm = _moe_record("mxfp4", "experts"), _moe_record("mxfp4", "experts", "vLLM 0.15.1")
    hopper = _moe_record("mxfp4", "experts", gpu="H100-SXM-80GB")
    assert gemm_format(trt.columns) == 1.0 and gemm_format(vllm.columns) == 0.0 and gemm_format(hopper.columns) == 0.0
    assert dense_format(trt.columns) == (0.0, 2.0)
    assert dense_format(_moe_record("fp4").columns) == (2.0, 4.5 / 8)
    b200 = device_columns("B200")
    assert b200["peak_flops_8"] == 2 * b200["peak_flops_16"]     # so W4A8 prefill is the 16-bit one's / 2


def test_the_fp4_gpt_oss_records_lower_as_the_mxfp4_experts_only_checkpoint():
    """The dev rows label gpt-oss-120b ``fp4`` (AIC's nvfp4) and ran openai/gpt-oss-120b: each lowers with the
    experts-only flag and a note; the NVFP4 Llama rows do not."""
    from fastmodel.registry.lm import COLUMN_INDEX as C

    records = [r for r in read_serve_records(DATA / "serve_dev_load.jsonl") if r.raw["serve"]["precision"] == "fp4"]
    oss = [r for r in records if r.raw["model"]["name"] == "gpt-oss-120b"]
    assert oss and {r.raw["aic"]["model_path"] for r in oss} == {"openai/gpt-oss-120b"}
    assert all(r.columns[C["quant_experts_only"]] == 1.0 and any("MXFP4" in n for n in r.notes) for r in oss)
    assert all(r.columns[C["quant_experts_only"]] == 0.0 for r in records if r not in oss)


def test_a_generic_fp4_of_gpt_oss_reads_as_its_published_mxfp4_checkpoint():
    """gpt-oss is published only as MXFP4 with the routed experts quantised (precisions.MXFP4_EXPERT_CHECKPOINTS):
    a record's ``fp4`` for it lowers to the same columns as an explicit ``mxfp4`` + ``experts``, with a note; an
    explicit ``quantized_layers`` is kept, and another model's ``fp4`` stays NVFP4."""
    from fastmodel.serve.precisions import published_fp4_checkpoint

    assert published_fp4_checkpoint("openai/gpt-oss-120b", "fp4", None)[:2] == ("mxfp4", "experts")
    assert published_fp4_checkpoint("gpt-oss-120b", "fp4", "all")[:2] == ("mxfp4", "all")
    assert published_fp4_checkpoint("gpt-oss-120b", "fp8", None) == ("fp8", "all", None)
    assert published_fp4_checkpoint("Llama-3.1-70B", "fp4", None) == ("fp4", "all", None)
    explicit = _moe_record("mxfp4", "experts")
    generic = dict(explicit.raw, model={**explicit.raw["model"], "name": "gpt-oss-120b"})
    generic["serve"] = {k: v for k, v in generic["serve"].items() if k != "quantized_layers"}
    generic["serve"]["precision"] = "fp4"
    lowered = lower_serve_record(generic)
    named_explicit = lower_serve_record(dict(generic, serve={**generic["serve"], "precision": "mxfp4",
                                                             "quantized_layers": "experts"}))
    assert np.array_equal(lowered.columns, named_explicit.columns)
    assert any("published MXFP4 checkpoint" in n for n in lowered.notes)
    nvfp4 = lower_serve_record(dict(generic, model={**generic["model"], "name": "some-moe"}))
    assert not np.array_equal(nvfp4.columns, lowered.columns)


def test_vllm_mxfp4_experts_take_the_trtllm_gen_row_tiles():
    """vLLM's default SM100 MXFP4 backend runs FlashInfer's trtllm-gen FP4 MoE, whose token tile per expert is a
    power of two in 8..64 at BF16 activations (profiles.expert_row_tiles): a vLLM gpt-oss record on B200 carries
    (8, 64); TensorRT-LLM (backend not sourced), Hopper (another backend) and NVFP4 keep the library's (0, 0).
    In decode (1-4 rows per expert) the 8-row tile halves the padded BF16 compute of the 16-row one, so the
    MoE layer's GEMM time drops and never rises."""
    from fastmodel.kernels.serve.costs import MOE, layer_gemms
    from fastmodel.registry.lm import COLUMN_INDEX as C
    from fastmodel.serve.profiles import expert_row_tiles

    assert expert_row_tiles("vllm", "mxfp4") == (8.0, 64.0)
    assert expert_row_tiles("trtllm", "mxfp4") == expert_row_tiles("vllm", "fp4") == (0.0, 0.0)

    def tiles(record):
        return record.columns[C["expert_tile_min"]], record.columns[C["expert_tile_max"]]

    vllm = _moe_record("mxfp4", "experts", "vLLM 0.15.1")
    assert tiles(vllm) == (8.0, 64.0)
    assert tiles(_moe_record("mxfp4", "experts")) == (0.0, 0.0)
    assert tiles(_moe_record("mxfp4", "experts", "vLLM 0.15.1", gpu="H100-SXM-80GB")) == (0.0, 0.0)
    library = vllm.columns.copy()
    library[C["expert_tile_min"]] = library[C["expert_tile_max"]] = 0.0
    # TRTLLM-Gen hides its MMA below one 8-row tile under the weight stream (expert_hide_rows 8, S47): there the
    # tile cannot show, so the time never rises; with the math exposed (hide rows 0) the 8-row tile is faster
    exposed, exposed_library = vllm.columns.copy(), library.copy()
    exposed[C["expert_hide_rows"]] = exposed_library[C["expert_hide_rows"]] = 0.0
    for m in (1.0, 4.0):
        assert layer_gemms(vllm.columns, m, MOE, 0.0) <= layer_gemms(library, m, MOE, 0.0)
        assert layer_gemms(exposed, m, MOE, 0.0) < layer_gemms(exposed_library, m, MOE, 0.0)


def test_fp8_without_fp8_tensor_cores_runs_weight_only_where_the_engine_does():
    """docs/model_serving.md S55 (coverage walk): vLLM runs FP8 checkpoints on Ampere weight-only (W8A16, its FP8
    Marlin kernels), so ``fp8_weight_only`` (vLLM's profile) answers fp8 on an A100 instead of ``no_fp8``. By hand,
    W8A16 is the int8 weight-only configuration (precision code 0, 1 byte per weight, 16-bit GEMMs) with the same
    KV format: the two are equal result for result. TensorRT-LLM (the default engine) still refuses it; on a GPU
    with FP8 tensor cores the column changes nothing."""
    from fastmodel.serve.api import evaluate, sweep

    kw = dict(tp=2, input_len=1024, output_len=256, concurrency=16)
    fp8 = evaluate("llama3.1-8b", "A100", engine="vllm", precision="fp8", kv_precision="fp8", **kw)
    int8 = evaluate("llama3.1-8b", "A100", engine="vllm", precision="int8", kv_precision="fp8", **kw)
    assert fp8["status"] == int8["status"] == "ok"
    assert {k: v for k, v in fp8.items() if k != "notes"} == {k: v for k, v in int8.items() if k != "notes"}
    moe = evaluate("mixtral-8x7b", "A100", engine="vLLM 0.10.2", precision="fp8", tp=4, ep=4, concurrency=8)
    assert moe["status"] == "ok" and moe["tpot"] > 0
    assert evaluate("llama3.1-8b", "A100", precision="fp8", **kw)["status"] == "no_fp8"      # TensorRT-LLM
    assert evaluate("llama3.1-8b", "A100", engine="vllm", precision="fp8", fp8_weight_only=0, **kw)["status"] == \
        "no_fp8"
    on = evaluate("llama3.1-8b", "H100", engine="vllm", precision="fp8", **kw)
    off = evaluate("llama3.1-8b", "H100", engine="vllm", precision="fp8", fp8_weight_only=0, **kw)
    assert on["status"] == "ok" and on["tpot"] == off["tpot"] and on["ttft"] == off["ttft"]
    grid = sweep("llama3.1-8b", device=["A100", "H100"], precision="fp8", engine="vllm", load_mode="concurrency",
                 batch_size=16, tp=2, input_len=1024, output_len=256)
    assert list(grid.status.values.ravel()) == [0, 0]
    assert grid.tpot.sel(device="A100").item() == pytest.approx(fp8["tpot"], rel=1e-12)


def test_a_record_of_fp8_on_a_gpu_without_fp8_is_answered_by_vllm_and_refused_by_tensorrt_llm():
    """A serving record: vLLM's fp8 on an A100 lowers weight-only, with a note; TensorRT-LLM's is one line naming
    system.peak_flops_fp8 and the rule."""
    from fastmodel.errors import SpecError

    record = _with("system.gpu", "A100-SXM4-80GB")
    lowered = lower_serve_record(record)
    assert any("weight-only W8A16" in n for n in lowered.notes)
    _, status = evaluate_table(lowered.columns[:, None])
    assert int(status[0]) == 0
    with pytest.raises(SpecError, match=r"system\.peak_flops_fp8: serve\.precision is fp8 but the device has no FP8 "
                                        r"peak and TensorRT-LLM 1\.2\.0 runs no weight-only FP8"):
        lower_serve_record(_with("framework", "TensorRT-LLM 1.2.0", record))


def test_a_named_models_published_checkpoint_sets_quant_experts_only():
    """``quant_experts_only`` of a named model's published checkpoint: gpt-oss's generic fp4 is its MXFP4
    experts-only checkpoint (1), an explicit mxfp4 quantizes every layer (0). The record lowering's reading of
    ``quantized_layers`` is held by test_mxfp4_experts_only_checkpoint_keeps_the_rest_bf16_by_hand ("experts": 1)
    and test_the_fp4_gpt_oss_records_lower_as_the_mxfp4_experts_only_checkpoint (the NVFP4 rows: 0)."""
    from fastmodel.serve.precisions import published_precision_columns

    assert published_precision_columns("gpt-oss-120b", "fp4")["quant_experts_only"] == 1.0
    assert published_precision_columns("gpt-oss-120b", "mxfp4")["quant_experts_only"] == 0.0


def test_a_sweep_reads_the_published_checkpoint_by_name_unless_it_sets_quant_experts_only():
    """``checkpoint_model_name``, the one rule of ``serve.api.sweep`` and the sweep file's plan: a model named by a
    string keeps its name; a model given as columns, or a sweep that sets ``quant_experts_only`` itself (an axis
    or a fixed value), reads none (the generic precision columns, the sweep's own value)."""
    from fastmodel.serve.precisions import checkpoint_model_name

    assert checkpoint_model_name("gpt-oss-120b", {"precision": ["fp4"], "batch_size": [8]}) == "gpt-oss-120b"
    assert checkpoint_model_name("gpt-oss-120b", {"precision", "quant_experts_only"}) is None
    assert checkpoint_model_name({"hidden": 2880.0}, {"precision"}) is None
    assert checkpoint_model_name(None, {}) is None


def test_a_precision_axis_of_gpt_oss_gives_its_published_checkpoint_at_each_value():
    """fp4 of gpt-oss is its published MXFP4 experts-only checkpoint (``published_fp4_checkpoint``) at a
    precision axis's value as in one evaluation: ``quant_experts_only`` and the MXFP4 columns follow the value
    (before, the axis set only the generic fp4 columns: B200, batch 8, 1024/256 tokens, TTFT 0.0384 s against
    0.0505 s for ``evaluate``); the sweep file's plan likewise, its base too for a fixed fp4."""
    from pathlib import Path

    from fastmodel.serve.api import evaluate, sweep
    from fastmodel.serve.sweep_file import serve_plan
    from fastmodel.sweeps.run import run_in_memory

    kw = dict(batch_size=8, input_len=1024, output_len=256, tp=2)    # BF16 120B: no KV room on one B200
    swept = sweep("gpt-oss-120b", device="B200", precision=["bf16", "fp4"], **{k: [v] for k, v in kw.items()})
    specs = Path(__file__).resolve().parents[2] / "specs"
    plan = serve_plan(None, "gpt-oss-120b", "B200", "serve-chat", {"precision": ["bf16", "fp4"], "batch_size": [8], "tp": [2]},
                      specs)
    assert (plan.task.input_len, plan.task.output_len) == (1024, 256)
    filed = run_in_memory(plan, require_ok=False)
    for precision in ("bf16", "fp4"):
        one = evaluate("gpt-oss-120b", "B200", precision=precision, **kw)
        for ds in (swept, filed):
            assert float(ds.ttft.sel(precision=precision).squeeze()) == one["ttft"]
            assert float(ds.tpot.sel(precision=precision).squeeze()) == one["tpot"]


@pytest.mark.parametrize("device, engine, refused", [
    ("A100", "TensorRT-LLM", True), ("L40S", "TensorRT-LLM", True),      # Ampere 8.0, Ada 8.9 < 9.0
    ("H100", "TensorRT-LLM", False), ("H200", "TensorRT-LLM", False),    # Hopper: its MXFP4 MoE path
    ("A100", "vLLM", False), ("L40S", "vLLM", False), ("A100", "SGLang", False),   # FP4 Marlin / Triton from 8.0
    ("MI300X", "vLLM", False), ("B200", "TensorRT-LLM", False),          # no compute capability; FP4 tensor cores
])
def test_fp4_refusal_by_engine_and_architecture(device, engine, refused):
    """docs/model_serving.md S63, by hand: FP4 weights on a GPU without FP4 tensor cores are refused exactly where
    the device's compute capability is below the engine's weight-only start (FP4_WEIGHT_ONLY_CC: TensorRT-LLM 9.0,
    vLLM and SGLang 8.0); AMD states none and is not refused; a GPU with FP4 tensor cores never is."""
    from fastmodel.serve.precisions import fp4_refusal
    from fastmodel.serve.profiles import FP4_WEIGHT_ONLY_CC

    key = {"TensorRT-LLM": "trtllm", "vLLM": "vllm", "SGLang": "sglang"}[engine]
    for precision in ("fp4", "mxfp4"):
        reason = fp4_refusal(precision, device_columns(device), FP4_WEIGHT_ONLY_CC[key], engine, device)
        assert (reason is not None) == refused
        if refused:
            cc = device_columns(device)["compute_capability"]
            assert reason.startswith(f"{precision} on {device} (compute capability {cc:.1f}, no FP4 tensor cores): "
                                     f"{engine} runs FP4 weights weight-only from compute capability 9.0 on")
    assert fp4_refusal("fp8", device_columns("A100"), 9.0, engine, "A100") is None


def test_fp4_without_a_weight_only_path_is_no_fp4_in_a_sweep_and_one_line_in_serve():
    """The kernel's no_fp4 (kernels/serve/evaluate.py ``no_fp4_path``) gives a sweep a status, never a crash: FP4 on
    A100 under TensorRT-LLM; vLLM answers it weight-only, and Hopper under TensorRT-LLM keeps its answer.
    ``fastmodel serve`` refuses it in one line naming --precision, exit 2."""
    from click.testing import CliRunner

    from fastmodel.cli import main
    from fastmodel.registry.serve import SERVE_STATUSES
    from fastmodel.serve.api import evaluate, sweep

    kw = dict(tp=2, input_len=1024, output_len=256, concurrency=16, precision="fp4")
    assert evaluate("llama3.1-8b", "A100", engine="trtllm", **kw)["status"] == "no_fp4"
    assert evaluate("llama3.1-8b", "A100", engine="vllm", **kw)["status"] == "ok"
    assert evaluate("llama3.1-8b", "H100", engine="trtllm", **kw)["status"] == "ok"
    grid = sweep("llama3.1-8b", device=["A100", "L40S", "H100"], precision="fp4", engine="trtllm",
                 load_mode="concurrency", batch_size=16, tp=2, input_len=1024, output_len=256)
    names = [SERVE_STATUSES[int(code)].name for code in grid.status.values.ravel()]
    assert names == ["no_fp4", "no_fp4", "ok"]
    result = CliRunner().invoke(main, ["serve", "-m", "llama3.1-8b", "-d", "L40S", "--tp", "2", "--precision", "fp4",
                                       "--concurrency", "16"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "error: --precision: fp4 on L40S (compute capability 8.9, no FP4 tensor cores): TensorRT-LLM (the default "
        "engine) runs FP4 weights weight-only from compute capability 9.0 on, none below (vLLM's and SGLang's FP4 "
        "Marlin / Triton kernels run from 8.0; docs/model_serving.md S63)")


def test_a_record_of_fp4_below_hopper_is_refused_under_tensorrt_llm_and_answered_under_vllm():
    """A serving record: vLLM's fp4 on an A100 lowers weight-only, with a note; TensorRT-LLM's is one line naming
    serve.precision and the rule (validate counts it a miss)."""
    from fastmodel.errors import SpecError

    record = _with("system.gpu", "A100-SXM4-80GB", _with("serve.precision", "fp4"))
    lowered = lower_serve_record(record)
    assert any("fp4 on A100-SXM4-80GB (no FP4 tensor cores): weight-only" in n for n in lowered.notes)
    with pytest.raises(SpecError, match=r"serve\.precision: fp4 on A100-SXM4-80GB \(compute capability 8\.0, no FP4 "
                                        r"tensor cores\): TensorRT-LLM 1\.2\.0 runs FP4 weights weight-only from "
                                        r"compute capability 9\.0 on"):
        lower_serve_record(_with("framework", "TensorRT-LLM 1.2.0", record))


def test_a_record_without_a_framework_names_the_default_engine_in_its_refusal():
    """review11 #10: a record with no ``framework`` said "the default engine runs ...", not which; it names the
    engine ``record_engine`` picked, as the CLI does: TensorRT-LLM (the default engine) on an NVIDIA GPU, for FP4
    and for FP8 alike."""
    from fastmodel.errors import SpecError

    fp4 = _with("system.gpu", "A100-SXM4-80GB", _with("serve.precision", "fp4"))
    fp8 = _with("system.gpu", "A100-SXM4-80GB")
    for record in (fp4, fp8):
        record.pop("framework", None)
    with pytest.raises(SpecError, match=r"TensorRT-LLM \(the default engine\) runs FP4 weights weight-only from "):
        lower_serve_record(fp4)
    with pytest.raises(SpecError, match=r"TensorRT-LLM \(the default engine\) runs no weight-only FP8"):
        lower_serve_record(fp8)
