"""The built-in device files (fastmodel/spec/devices.py, specs/devices/*.toml): the B200 efficiencies are
re-derived here from the microbenchmarks they cite (tests/data/b200_microbenchmarks.json, copied from
MooreThreads/SimuMax@4dcaae513b configs/system/b200_bf16_ceperm.json), through the model's own GEMM form."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.roofline import expert_gemm_roofline, expert_wgrad_roofline, gemm_roofline, tile_quantization
from fastmodel.registry.lm import COLUMN_INDEX, COLUMNS
from fastmodel.spec.devices import device_table

BENCH = json.loads((Path(__file__).parents[1] / "data" / "b200_microbenchmarks.json").read_text())
B200 = device_table()["b200"]


def _shape(key):
    return {name: int(value) for name, value in re.findall(r"\b(\w+)=(\d+)\b", key)}


def _row(device):
    row = np.array([float(c.default) for c in COLUMNS])
    for name, value in device.items():
        row[COLUMN_INDEX[name]] = value
    return row


def test_b200_datasheet():
    """DGX B200 datasheet: 72 PF FP8 training and 144 PF FP4 inference (both with 2:4 sparsity, twice the dense
    rate) and 1,440 GB HBM3e at 64 TB/s over 8 GPUs (180 GB; the file holds the CUDA-visible 178.35 GiB,
    docs/model_memory.md "One capacity per GPU"); BF16 half of FP8; NVLink 5 1.8 TB/s per GPU both ways."""
    assert B200["peak_flops_8"] == 72e15 / 8 / 2 and B200["peak_flops_16"] == B200["peak_flops_8"] / 2
    assert B200["peak_flops_4"] == 144e15 / 8 / 2
    assert B200["hbm_bytes"] == round(178.35 * 2**30) and B200["hbm_bw"] == 64e12 / 8
    assert B200["intra_bw"] == 1.8e12 / 2 and B200["sm_count"] == 148
    for name in ("B200", "dgx-b200", "HGX-B200"):
        assert device_table()[name.lower()] == B200


def test_b200_gemm_efficiency_is_the_flop_weighted_microbenchmark_mean():
    """Each measured GEMM (m, n, k, efficiency e against 2.25 PF) implies the large-GEMM efficiency
    eta = e (k + k_half) / (k Q) of the model's form t = 2 m n (k + k_half) / (P eta Q); weighting by the
    measured time (total FLOPs over total time) gives the device file's gemm_eff_16 to +-0.005."""
    row = _row(B200)
    flops, seconds = 0.0, 0.0
    for key, efficiency in BENCH["matmul"].items():
        s = _shape(key)
        m, n, k = s["m"], s["n"], s["k"]
        quantization = tile_quantization(row, 1.0, float(m), float(n), float(k))
        eta = efficiency * (k + B200["gemm_k_half"]) / (k * quantization)
        flops += 2.0 * m * n * k
        seconds += 2.0 * m * n * k / eta
    assert len(BENCH["matmul"]) == 514
    assert flops / seconds == pytest.approx(B200["gemm_eff_16"], abs=0.005)


def test_b200_grouped_gemms_expose_the_weight_stream():
    """SimuMax's 36 forward grouped GEMMs on B200 (TransformerEngine, 16-bit, 20-160 experts of 128-9832 rows):
    the dense roofline max(compute, memory) is 22% off on average and 41% too fast at <= 256 rows per expert;
    the grouped form (roofline.expert_gemm_roofline) is within 13% on average and 10% in bias, with no
    fitted constant (the device file's gemm_eff_16, hbm_eff and tiles)."""
    row = _row(B200)
    dense, grouped, small = [], [], []
    for key, efficiency in BENCH["group_matmul"].items():
        if "stage=fwd" not in key:
            continue
        s = _shape(key)
        g, m, n, k = (float(s[name]) for name in ("ng", "M", "N", "K"))
        measured = 2.0 * g * m * n * k / (efficiency * BENCH["conventions"]["peak_tflops"] * 1e12)
        dense.append(gemm_roofline(row, g, m, n, k, False, 2.0, 0.0) / measured - 1.0)
        grouped.append(expert_gemm_roofline(row, g, m, n, k, False, 2.0, 0.0) / measured - 1.0)
        small.append(m <= 256)
    dense, grouped, small = np.array(dense), np.array(grouped), np.array(small)
    assert len(grouped) == 36
    assert np.mean(np.abs(dense)) > 0.2 and np.mean(dense[small]) < -0.4
    assert np.mean(np.abs(grouped)) < 0.13 and abs(np.mean(grouped)) < 0.05 and abs(np.mean(grouped[small])) < 0.10


def test_b200_expert_weight_gradients_read_the_main_gradient_and_dense_ones_stay_in_eta():
    """SimuMax's 20 grouped weight-gradient GEMMs accumulating into an FP32 main gradient (TE GroupedLinear,
    accumulate=True) and its 16 into a BF16 one, against roofline.expert_wgrad_roofline with the source read of
    4 and 2 bytes per element: mean error 13.5% / 7.5%, the model on the fast side (-13% / -6%), the DeepSeek-V2
    EP 8 and EP 4 shapes (20 x 1,232 and 40 x 616 rows) within 9%; without the read, or with the forward's form
    (what the model charged before), the model is 29-41% too fast. The other direction: the 144 dense FP32
    weight gradients (cuBLASLt NT, 2,048-65,536 tokens) are inside gemm_eff_16 and the dense form stays within 5%
    of them, time-weighted, so dense weight gradients keep it."""
    row = _row(B200)
    peak = BENCH["conventions"]["peak_tflops"] * 1e12
    for dtype, source, mean_error, bias in (("fp32", 4.0, 0.14, -0.13), ("bf16", 2.0, 0.08, -0.06)):
        read, bare, forward = [], [], []
        for key, efficiency in BENCH["group_matmul"].items():
            if "stage=bwd_grad_w" not in key or f"main_grad_dtype={dtype}" not in key:
                continue
            s = _shape(key)
            g, m, n, k = (float(s[name]) for name in ("ng", "M", "N", "K"))
            measured = 2.0 * g * m * n * k / (efficiency * peak)
            read.append(expert_wgrad_roofline(row, g, m, n, k, False, source, 0.0) / measured - 1.0)
            bare.append(expert_wgrad_roofline(row, g, m, n, k, False, 0.0, 0.0) / measured - 1.0)
            forward.append(expert_gemm_roofline(row, g, m, n, k, False, 2.0, 0.0) / measured - 1.0)
            if m in (616.0, 1232.0):
                assert abs(read[-1]) < 0.10, key
        read, bare, forward = np.array(read), np.array(bare), np.array(forward)
        assert len(read) == (20 if dtype == "fp32" else 16)
        assert np.mean(np.abs(read)) < mean_error and bias - 0.01 < np.mean(read) < bias + 0.01
        assert np.mean(bare) < -0.29 and np.mean(forward) < -0.23
    model, measured = 0.0, 0.0
    for key, efficiency in BENCH["matmul"].items():
        if "layout=NT" in key and "out_dtype=fp32" in key:
            s = _shape(key)
            measured += 2.0 * s["m"] * s["n"] * s["k"] / (efficiency * peak)
            model += gemm_roofline(row, 1.0, float(s["m"]), float(s["n"]), float(s["k"]), False, 2.0, 0.0)
    assert abs(model / measured - 1.0) < 0.05


def test_b200_attention_efficiency_is_the_flop_weighted_causal_mean():
    """SimuMax quotes causal flash attention against the non-causal FLOP count (forward 2 s^2 a (dqk + dv),
    backward 5 s^2 a (dqk + dv)); the model counts the causal half (ctx = s/2), so each shape's efficiency
    is half the quoted one, and forward + backward together run 7 units in 2/(f/2) + 5/(b/2)."""
    flops, seconds = 0.0, 0.0
    for key, forward in BENCH["sdp_fwd"].items():
        backward = BENCH["sdp_bwd"][key]
        s = _shape(key)
        base = s["seq_len"] ** 2 * max(s["head_num"], s["kv_head_num"]) * (s["qk_head_dim"] + s["v_head_dim"]) / 2
        flops += 7.0 * base
        seconds += 2.0 * base / (forward / 2) + 5.0 * base / (backward / 2)
    assert flops / seconds == pytest.approx(B200["attn_eff"], abs=0.005)


def test_b200_forward_attention_efficiency_is_the_forward_shapes_alone():
    """Serving prefill runs the forward kernel only (docs/model_serving.md S48): the same 32 causal shapes, forward
    alone, each at half its quoted (non-causal) efficiency, FLOP-weighted: 0.372, above the forward + backward 0.353.
    The Blackwell files without a microbenchmark of their own carry B200's."""
    flops, seconds = 0.0, 0.0
    for key, forward in BENCH["sdp_fwd"].items():
        s = _shape(key)
        base = s["seq_len"] ** 2 * max(s["head_num"], s["kv_head_num"]) * (s["qk_head_dim"] + s["v_head_dim"]) / 2
        flops += 2.0 * base
        seconds += 2.0 * base / (forward / 2)
    assert flops / seconds == pytest.approx(B200["attn_eff_fwd"], abs=0.0005)
    assert B200["attn_eff_fwd"] > B200["attn_eff"]
    for name in ("gb200", "b300", "gb300"):
        assert device_table()[name]["attn_eff_fwd"] == B200["attn_eff_fwd"]


def test_b200_nvlink_efficiency_is_the_gather_bus_bandwidth():
    """nccl-tests' fitted bus bandwidth of all-gather and reduce-scatter is quoted in GiB/s per 900 GB/s:
    0.6735 x 900 x 2^30 / 1e9 = 650.8 GB/s, 0.723 of the 900 GB/s link; the per-step latency is their mean."""
    nccl = BENCH["nccl"]
    gathers = [nccl[op]["efficient_factor"] * 900 * 2**30 / 1e9 / 900 for op in ("all_gather", "reduce_scatter")]
    assert np.mean(gathers) == pytest.approx(B200["intra_eff"], abs=0.005)
    latency = np.mean([nccl[op]["latency_us"] for op in ("all_gather", "reduce_scatter")]) * 1e-6
    assert latency == pytest.approx(B200["intra_latency"], rel=0.01)


def test_b200_alltoall_rate_and_latency_are_its_own_fit():
    """The same nccl-tests fit for all-to-all (docs/model.md §11.14.7): 0.5968 x 900 x 2^30 / 1e9 = 576.7 GB/s,
    0.641 of the link, and 7.30 us per peer."""
    a2a = BENCH["nccl"]["all2all"]
    assert a2a["efficient_factor"] * 900 * 2**30 / 1e9 / 900 == pytest.approx(B200["alltoall_eff"], abs=0.005)
    assert a2a["latency_us"] * 1e-6 == pytest.approx(B200["alltoall_latency"], rel=0.01)


def test_every_built_in_cluster_names_a_device_file():
    """A cluster's GPU picks its device file; without one it would run on generic (H100-era) efficiencies.
    Every built-in system has one, no exemptions."""
    from importlib import resources

    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - python < 3.11
        import tomli as tomllib

    missing, clusters = set(), 0
    for path in resources.files("fastmodel.specs").joinpath("systems").iterdir():
        if not path.name.endswith(".toml"):
            continue
        spec = tomllib.loads(path.read_text())
        if spec.get("kind") == "cluster":
            clusters += 1
            if spec["gpu"].lower() not in device_table():
                missing.add(spec["gpu"])
    assert clusters > 5 and missing == set()


def test_mi300x_datasheet_and_mesh():
    """AMD MI300X data sheet: 1,307.4 / 2,614.9 TFLOP/s BF16 / FP8 dense, no FP4, 192 GB HBM3 (ROCm's HSA pool: 201,310,208 KiB = 191.98 GiB) at
    5.3 TB/s, 304 CUs; 7 Infinity Fabric links of 64 GB/s one way to its 7 peers, a direct mesh of 8 (a pair of GPUs
    reaches 1/7 of the 448 GB/s). gemm_eff_16: MAMF 668.4 / 1,307.4 x H100's 0.75 / 0.803."""
    mi300x = device_table()["mi300x"]
    assert mi300x["peak_flops_16"] == 1307.4e12 and mi300x["peak_flops_8"] == 2614.9e12 and mi300x["peak_flops_4"] == 0
    assert mi300x["hbm_bytes"] == 201310208 * 2**10 and mi300x["hbm_bw"] == 5.3e12 and mi300x["sm_count"] == 304
    assert mi300x["intra_bw"] == 7 * 64e9 and mi300x["nvlink_mesh_max"] == 8
    assert mi300x["gemm_eff_16"] == pytest.approx(668.4 / 1307.4 * 0.75 / (794.5 / 989), abs=0.005)
    assert mi300x["gemm_eff_8"] == pytest.approx(mi300x["gemm_eff_16"] * 70.9 / 80.3, abs=0.005)


def test_gb200_is_b200_at_its_own_datasheet():
    """GB200 runs B200's measured efficiencies (same die) at the NVL72 datasheet's dense peaks (rack / 72 / 2)."""
    gb200 = device_table()["gb200"]
    assert gb200["peak_flops_16"] == 360e15 / 72 / 2 and gb200["peak_flops_4"] == 1440e15 / 72 / 2
    for name in ("gemm_eff_16", "attn_eff", "intra_eff", "intra_latency", "sm_count", "gemm_k_half"):
        assert gb200[name] == B200[name]


def test_blackwell_fp8_gemm_efficiency_is_bf16_times_the_xla_sm100_ratio():
    """OpenXLA's sm_100 GEMM table (tests/data/xla_sm100_matmul.json): at m = n = k = 4,096 FP8 E4M3 reaches
    2.765e15 of 4.5e15 = 0.6144, BF16 1.4169e15 of 2.25e15 = 0.6297; r = 0.6144 / 0.6297 = 0.976, the largest r of
    the excerpt (2,048^3: 1.4277 / 4.5 over 0.9858 / 2.25 = 0.724). gemm_eff_8 = 0.49 x 0.976 = 0.478 on B200 and
    GB200 (sm_100), carried to B300 and GB300."""
    table = json.loads((Path(__file__).parents[1] / "data" / "xla_sm100_matmul.json").read_text())["matmul"]
    ratio = {(e["m"], e["n"], e["k"]): (e["fp8"] / 4.5e15) / (e["bf16"] / 2.25e15) for e in table}
    assert ratio[(4096, 4096, 4096)] == pytest.approx(0.976, abs=0.001)
    assert ratio[(2048, 2048, 2048)] == pytest.approx(0.724, abs=0.001)
    assert max(ratio, key=ratio.get) == (4096, 4096, 4096)
    assert 0.49 * 0.976 == pytest.approx(0.478, abs=0.0005)
    for name in ("b200", "gb200", "b300", "gb300"):
        device = device_table()[name]
        assert device["gemm_eff_8"] == pytest.approx(device["gemm_eff_16"] * ratio[(4096, 4096, 4096)], abs=0.005)


def test_no_device_note_suggests_only_the_same_model_number():
    """A GPU typo gets the nearest device name of the same model number; another device (MI250X is not an
    MI300X) gets none, and the note says there is no device file."""
    from fastmodel.spec.devices import no_device_note

    assert "did you mean 'h100-sxm-80gb'" in no_device_note("H100-SXN")
    assert "did you mean 'a100-sxm4-80gb'" in no_device_note("A100-SXM4-80G")
    for other in ("MI250X", "TPUv5", "b20"):
        assert no_device_note(other) == f"no built-in device file for {other!r}: generic efficiencies"


def test_the_shared_h100_test_fixture_is_the_h100_device_file():
    """tests/suite_fixtures.H100 says it holds specs/devices/h100-sxm.toml's values; hand derivations rest on it."""
    from tests.suite_fixtures import H100

    device = device_table()["h100"]
    assert {key: device[key] for key in H100} == pytest.approx(H100, rel=1e-12)
