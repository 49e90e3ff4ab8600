"""Memory by kind and by pipeline stage (fastmodel/lm/memory_stages.py, issue 23 item 1): each rank's peak moment of
the memory timeline, the kernel's rules applied to it (docs/model_memory.md "Memory by pipeline stage (report)").

The worst stage must be the kernel's (``memory_allocated``, ``memory_reserved``, ``memory`` by kind,
``memory_peak_stage``) under every schedule; the 1F1B case is derived by hand from the columns."""

import json

import numpy as np
import pytest

from fastmodel.lm.engine import evaluate_table
from fastmodel.lm.memory_stages import (
    StagePeaks,
    kernel_order,
    memory_by_stage,
    shown_stages,
    stage_peaks,
    stage_record,
    stage_table,
)
from fastmodel.lm.table import row
from fastmodel.registry.lm import MEMORY_KINDS
from tests.suite_fixtures import cli, data_lines

#: Megatron 2022 GPT layer (2-matrix GeLU MLP, dropout, unfused attention): s b h (34 + 5 a s / h) per layer
GPT = dict(hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512, gated_mlp=0,
           tied_embeddings=0, dropout=1, flash_attention=0, dp=1, sharding="ddp", grad_reduce_bytes=4)
NO_OVERHEAD = dict(cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0, nccl_p2p_channels_per_peer=0)
K = {kind: i for i, kind in enumerate(MEMORY_KINDS)}
ALLOCATED = [K[k] for k in MEMORY_KINDS if k != "overhead"]
SCHEDULES = {   # 8 layers on pp = 4, micro-batches of 2
    "1f1b": dict(pipeline_schedule="1f1b", global_batch=16),
    "gpipe": dict(pipeline_schedule="gpipe", global_batch=8),             # the last rank is the worst
    "interleaved": dict(pipeline_schedule="interleaved", vp=2, global_batch=16),
    "zb_h1": dict(pipeline_schedule="zb_h1", global_batch=16),
    "dualpipe": dict(pipeline_schedule="dualpipe", global_batch=16),
    "1f1b big head": dict(pipeline_schedule="1f1b", global_batch=16, layers=10, vocab=32000),   # 2.5 layers a rank
}


def kernel(columns: np.ndarray) -> dict:
    return {name: float(v[0]) for name, v in evaluate_table(columns[:, None]).items()}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_worst_stage_is_the_kernel_s_peak(name):
    """Under every schedule the largest stage's allocated bytes are memory_allocated, it is memory_peak_stage, its
    kinds are ``memory`` by kind, its reserved bytes memory_reserved, and it fits as fits_memory says."""
    columns = row(**{**GPT, "layers": 8, "pp": 4, "micro_batch": 2, "allocator_cache_fraction": 0.05,
                     **SCHEDULES[name]})
    peaks, results = stage_peaks(columns), kernel(columns)
    assert peaks.allocated.max() == pytest.approx(results["memory_allocated"], rel=1e-12)
    assert peaks.peak_stage == int(results["memory_peak_stage"])
    for kind in MEMORY_KINDS:
        assert peaks.values[peaks.peak_stage, K[kind]] == pytest.approx(results[f"memory_{kind}"], rel=1e-12, abs=0)
    assert peaks.reserved[peaks.peak_stage] == pytest.approx(results["memory_reserved"], rel=1e-12)
    assert peaks.per_device[peaks.peak_stage] == pytest.approx(results["memory_per_device"], rel=1e-12)
    assert bool(peaks.fits[peaks.peak_stage]) == (results["fits_memory"] == 1.0)
    if name == "gpipe":
        assert peaks.peak_stage == 3


def test_sum_over_kinds_is_the_stage_s_total():
    """Every stage: its kinds sum to memory_per_device; allocated is that less the overhead; reserved is
    (1 + 0.05) x allocated."""
    columns = row(**GPT, layers=8, pp=4, micro_batch=2, global_batch=16, allocator_cache_fraction=0.05)
    peaks = stage_peaks(columns)
    overhead = peaks.values[:, K["overhead"]]
    assert np.all(overhead > 0)        # the CUDA context, cuBLAS workspaces, NCCL buffers: on every stage
    np.testing.assert_allclose(peaks.values.sum(axis=1), peaks.per_device, rtol=1e-14)
    np.testing.assert_allclose(peaks.values[:, ALLOCATED].sum(axis=1), peaks.allocated, rtol=1e-14)
    np.testing.assert_allclose(peaks.reserved, 1.05 * peaks.allocated, rtol=1e-14)


def test_moe_records_under_dualpipe_and_zero_bubble_match_the_kernel():
    """DeepSeek-V3 (DualPipe, pp 16, MoE and MTP) and DeepSeek-V2 (zero bubble, pp 16) public records: the API's
    per-stage Dataset against evaluate_record's worst-rank results."""
    import fastmodel

    records = [json.loads(line) for line in data_lines("runs_moe_public.jsonl", 10**6)]
    chosen = [r for r in records if r["plan"].get("pipeline_schedule") in ("dualpipe", "zero_bubble")]
    assert {r["plan"]["pipeline_schedule"] for r in chosen} == {"dualpipe", "zero_bubble"}
    for record in chosen:
        ds, results = fastmodel.memory_by_stage(record=record), fastmodel.evaluate_record(record)
        assert ds.sizes == {"stage": record["plan"]["pp"], "memory_kind": len(MEMORY_KINDS)}
        assert float(ds.memory_allocated.max()) == pytest.approx(float(results.memory_allocated), rel=1e-12)
        assert ds.attrs["memory_peak_stage"] == int(results.memory_peak_stage)
        worst = ds.isel(stage=ds.attrs["memory_peak_stage"])
        np.testing.assert_allclose(worst.memory.values, results.memory.values, rtol=1e-12)
        assert float(worst.memory_reserved) == pytest.approx(float(results.memory_reserved), rel=1e-12)


def test_1f1b_stages_by_hand():
    """pp = 4, 1F1B, 8 micro-batches of b = 2, 8 layers (2 per rank), T = s b = 1024 tokens, V = 32000, no
    overhead. Rank 0 runs 4 forwards before its first backward: at that backward's start (``B0``) it holds 4
    micro-batches of 2 layers, T h (34 + 5 a s / h) each, and the embedding's dropout mask T h, with the
    buffers of that moment: one activation sent and one received 2 x 2 T h, the activation gradients 2 T h +
    2 x 2 T f less fc2's released input 2 T f. Rank 3 holds one micro-batch: after its forward (``F0``) the 2
    layers and the final-norm and LM-head inputs 4 T h, and the logits and loss workspace 6 T V
    (vocab_parallel: BF16 logits + their FP32 copy) beside the 2 x 2 T h send/receive buffers -- larger than
    its backward's start, which has dropped the head inputs and holds no logits. States: BF16 weights 2, FP32
    gradients 4 and Adam's FP32 master, m, v 12 bytes per parameter (DDP, no distributed optimizer); rank 0
    adds the embedding V h, rank 3 the LM head V h and the final norm's h weights over rank 1's."""
    s, b, h, a, f, v = 512, 2, 1024, 16, 4096, 32000
    t = s * b
    columns = row(**{**GPT, **NO_OVERHEAD, "vocab": v}, layers=8, pp=4, micro_batch=b, global_batch=16,
                  allocator_cache_fraction=0.05)
    peaks = stage_peaks(columns)
    layer = t * h * (34 + 5 * a * s / h)
    assert peaks.labels[0] == "B0" and peaks.labels[3] == "F0"
    first, last, middle = peaks.values[0], peaks.values[3], peaks.values[1]
    assert first[K["activations"]] == pytest.approx(4 * (2 * layer + t * h), rel=1e-12)
    assert first[K["buffers"]] == pytest.approx(4 * t * h + 2 * t * h + 2 * t * f, rel=1e-12)
    assert last[K["activations"]] == pytest.approx(2 * layer + 4 * t * h, rel=1e-12)
    assert last[K["buffers"]] == pytest.approx(6 * t * v + 4 * t * h, rel=1e-12)
    for stage in peaks.values:
        assert stage[K["gradients"]] == pytest.approx(2 * stage[K["weights"]], rel=1e-12)
        assert stage[K["optimizer"]] == pytest.approx(6 * stage[K["weights"]], rel=1e-12)
        assert stage[K["kv_cache"]] == stage[K["overhead"]] == 0.0
    assert first[K["weights"]] - middle[K["weights"]] == pytest.approx(2 * v * h, rel=1e-12)
    assert last[K["weights"]] - middle[K["weights"]] == pytest.approx(2 * (v * h + h), rel=1e-12)
    allocated = [sum(p[ALLOCATED]) for p in (first, last)]
    assert (peaks.allocated[0], peaks.allocated[3]) == pytest.approx(allocated, rel=1e-14)
    assert (peaks.reserved[0], peaks.reserved[3]) == pytest.approx([1.05 * x for x in allocated], rel=1e-14)


def test_fits_per_stage_takes_the_rank_s_own_margin_and_expandable_segments():
    """fits: memory_per_device <= HBM - margin, the margin the stage's own allocator cache: 0.05 x allocated,
    0.013 x allocated under expandable segments, where memory_reserved still takes 0.05 (the kernel's rule).
    An HBM of the worst stage's per-device bytes + 0.03 x its allocated bytes fits it only under expandable
    segments; a --memory-margin of 0 fits it, one of 1 byte more than that slack does not."""
    plan = dict(**GPT, layers=8, pp=4, micro_batch=2, global_batch=16, allocator_cache_fraction=0.05,
                allocator_cache_fraction_expandable=0.013)
    worst = stage_peaks(row(**plan))
    hbm = worst.per_device[0] + 0.03 * worst.allocated[0]
    default, expandable = (stage_peaks(row(**plan, hbm_bytes=hbm, allocator_expandable_segments=e)) for e in (0, 1))
    assert not default.fits[0] and expandable.fits[0]
    np.testing.assert_allclose(expandable.reserved, 1.05 * expandable.allocated, rtol=1e-14)
    assert kernel(row(**plan, hbm_bytes=hbm, allocator_expandable_segments=1))["fits_memory"] == 1.0
    assert stage_peaks(row(**plan, hbm_bytes=hbm), memory_margin=0.0).fits[0]
    assert not stage_peaks(row(**plan, hbm_bytes=hbm), memory_margin=0.03 * worst.allocated[0] + 1).fits[0]


def test_dataset_dims_and_variables():
    columns = row(**GPT, layers=8, pp=4, micro_batch=2, global_batch=16)
    ds, peaks = memory_by_stage(columns, "gpt"), stage_peaks(columns)
    assert ds.memory.dims == ("stage", "memory_kind") and list(ds.memory_kind.values) == list(MEMORY_KINDS)
    assert list(ds.stage.values) == [0, 1, 2, 3] and list(ds.peak_moment.values) == list(peaks.labels)
    np.testing.assert_array_equal(ds.memory.values, peaks.values)
    np.testing.assert_array_equal(ds.memory_reserved.values, peaks.reserved)
    assert ds.attrs["memory_peak_stage"] == peaks.peak_stage and ds.attrs["title"] == "gpt"
    # each coordinate says what it is, as every variable does (the memory_kind coordinate had no attrs)
    for name in ("stage", "memory_kind"):
        assert ds[name].attrs["long_name"] and ds[name].attrs["description"], name
    assert all(kind in ds.memory_kind.attrs["description"] for kind in MEMORY_KINDS)


def test_kernel_order_and_the_stages_shown_beyond_16():
    """The ranks in memory_row's order; beyond 16 stages the report shows the first, the last and the 6 largest
    (the peak among them) and says how many it left out."""
    assert kernel_order(1) == [0] and kernel_order(5) == [0, 4, 1, 2, 3]
    pp = 32
    allocated = np.arange(pp, dtype=float) % 10    # largest: 9 (stages 9, 19, 29), 8 (8, 18, 28)
    values = np.zeros((pp, len(MEMORY_KINDS)))
    values[:, K["activations"]] = allocated
    peaks = StagePeaks(tuple(MEMORY_KINDS), values, ("B0",) * pp, allocated, 1.05 * allocated, allocated,
                       np.ones(pp, bool), 9, 80.0 * 2**30, "synthetic")
    assert shown_stages(peaks) == [0, 8, 9, 18, 19, 28, 29, 31]
    lines = stage_table(peaks)
    assert len(lines) == 2 + 8 + 1 and "(24 of 32 stages left out" in lines[-1]
    assert lines[2 + 2].split()[0] == "9*"     # the peak stage marked
    assert lines[1].split()[1:] == ["activations", "allocated", "reserved", "peak", "moment"]
    assert len(stage_record(peaks)["stages"]) == pp
    assert shown_stages(peaks, limit=32) == list(range(pp))


def test_run_prints_the_stage_table_and_json():
    """fastmodel run, pp 4: the table under the memory block, a row per stage, * on memory_peak_stage, its allocated
    column memory_allocated; --json carries every stage. pp 1: no table, the allocated / reserved line."""
    args = ["run", "-m", "llama3-70b", "-s", "dgx-h100", "--nodes", "4", "-t", "llm-pretrain", "-p", "tp4.pp4"]
    text = cli(*args).output.splitlines()
    data = json.loads(cli(*args, "--json").output)
    at = text.index("memory by pipeline stage (GiB; each stage at its peak moment, * = memory_peak_stage)")
    assert text[at - 1].startswith("memory allocated ") and len(text) == at + 2 + 4
    heads = text[at + 1].split()
    rows = {int(line.split()[0].rstrip("*")): line.split() for line in text[at + 2:]}
    peak = int(data["memory_peak_stage"])
    assert [s for s, cells in rows.items() if cells[0].endswith("*")] == [peak]
    assert float(rows[peak][heads.index("allocated")]) == pytest.approx(data["memory_allocated"] / 2**30, abs=0.006)
    stages = data["memory_by_stage"]["stages"]
    assert len(stages) == 4 and data["memory_by_stage"]["memory_peak_stage"] == peak
    assert max(s["memory_allocated"] for s in stages) == pytest.approx(data["memory_allocated"], rel=1e-12)
    assert stages[peak]["memory_reserved"] == pytest.approx(data["memory_reserved"], rel=1e-12)
    single = cli("run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain", "-p", "tp8")
    assert "memory by pipeline stage" not in single.output and "memory allocated " in single.output
    assert "memory_by_stage" not in json.loads(cli("run", "-m", "llama3-8b", "-s", "dgx-h100", "-t", "llm-pretrain",
                                                   "-p", "tp8", "--json").output)


def test_run_record_table_and_refusals(tmp_path):
    """A run record with pp > 1 (DeepSeek-V3, pp 16) gets the table of all 16 stages; the API refuses a MAD-Max
    model (one line naming the field)."""
    import fastmodel
    from fastmodel.errors import SpecError

    record = next(r for r in map(json.loads, data_lines("runs_moe_public.jsonl", 10**6))
                  if r["plan"].get("pipeline_schedule") == "dualpipe")
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    text = cli("run", "-m", path).output.splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith("memory by pipeline stage"))
    assert len(text) == at + 2 + 16
    with pytest.raises(SpecError, match="memory by pipeline stage"):
        fastmodel.memory_by_stage("dlrm-a-transformer", "dc-a", "dlrm-a-train")


def test_run_with_a_calibration_and_a_margin(tmp_path):
    """A calibration sets only fittable (time) columns: the calibrated run's stages are the uncalibrated ones and
    still end at its memory_allocated. --memory-margin: every stage fits against HBM less it (a margin of 0
    fits the stages of 70B tp4.pp4 under 79.1 GiB; one of 79 GiB fits none)."""
    from fastmodel.lm.calibrate import read_calibration
    from fastmodel.lm.report import run_one

    cal = tmp_path / "cal.toml"
    cal.write_text('[calibration]\nformat = 2\nfitted_on = "hand.jsonl"\nfitted_at = "2026-11-30T00:00:00Z"\n\n'
                   '[device."H100-SXM-80GB"]\nhbm_eff = 0.4\nintra.eff = 0.8\ninter.eff = 0.85\n')
    config = ("llama3-70b", "dgx-h100", "llm-pretrain")
    base = run_one(*config, plan="tp4.pp4", num_nodes=4).record
    calibrated = run_one(*config, plan="tp4.pp4", num_nodes=4, calibration=read_calibration(cal)).record
    assert calibrated["time_memory_bound"] != base["time_memory_bound"]
    assert calibrated["memory_by_stage"] == base["memory_by_stage"]
    assert max(s["memory_allocated"] for s in calibrated["memory_by_stage"]["stages"]) == calibrated["memory_allocated"]
    for margin, fits in ((0.0, lambda s: s["memory_per_device"] <= base["memory_by_stage"]["hbm_bytes"]),
                         (79 * 2**30, lambda s: False)):
        record = run_one(*config, plan="tp4.pp4", num_nodes=4, memory_margin=margin).record
        assert [s["fits_memory"] for s in record["memory_by_stage"]["stages"]] == \
            [fits(s) for s in record["memory_by_stage"]["stages"]]
