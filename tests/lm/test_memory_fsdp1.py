"""FSDP1's flat-gradient concatenation (``fsdp_flat_grad_copy_bytes``, ``memory_peak.backward_moment``), by hand,
and the PyTorch FSDP benchmark's measured GPT-175B peaks (docs/model_memory.md "PyTorch FSDP1 on A100 40 GB:
measured peaks", issue 23)."""

import json
from pathlib import Path

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import M_ACTIVATIONS, M_BUFFERS, N_MEMORY_KINDS
from fastmodel.kernels.lm.memory import memory_row
from fastmodel.kernels.lm.memory_fsdp import fsdp_flat_grad_copy_bytes
from fastmodel.lm.records import lower_record
from fastmodel.lm.table import row
from fastmodel.lm.validate import rows

DATA = Path(__file__).resolve().parents[1] / "data"
NO_OVERHEAD = dict(cuda_context_bytes=0, cublas_workspace_bytes=0, nccl_channels=0, nccl_p2p_channels_per_peer=0)
#: a 16-bit GPT layer (2-matrix GeLU MLP, f = 4 h, dropout, unfused attention) under FSDP on dp = 8 without backward
#: prefetch, as minGPT on PyTorch 1.x FSDP (no FP32 copy, 16-bit gradients)
H, F = 1024, 4096
FSDP1 = dict(hidden=H, ffn=F, heads=16, kv_heads=16, head_dim=64, vocab=1000, seq_len=512, gated_mlp=0,
             tied_embeddings=0, dropout=1, flash_attention=0, dp=8, sharding="fsdp", grad_reduce_bytes=2,
             master_weights=0, layers=4, overlap_param_gather=0, fsdp_version=1, fsdp1_grad_passes=2)


def peak(**values) -> np.ndarray:
    out = np.full(N_MEMORY_KINDS, np.nan)
    memory_row(row(**{**NO_OVERHEAD, "allocator_cache_fraction": 0, **values}), out)
    return out


def test_flat_gradient_copy_is_one_unit_in_the_compute_dtype():
    """The per-parameter gradients autograd concatenates into the flat gradient: 2 B x the unit, a layer
    12 h^2 + 2 h (two norms) or, module-wrapped, the largest module 4 h^2; none for FSDP2 (no flat parameter,
    ``fsdp_version = 2``) or without FSDP."""
    base = dict(FSDP1, micro_batch=1, global_batch=8)
    assert fsdp_flat_grad_copy_bytes(row(**base)) == 2 * (12 * H * H + 2 * H)
    assert fsdp_flat_grad_copy_bytes(row(**base, fsdp_module_wrap=1)) == 2 * 4 * H * H
    assert fsdp_flat_grad_copy_bytes(row(**{**base, "fsdp_version": 2})) == 0.0
    assert fsdp_flat_grad_copy_bytes(row(**{**base, "sharding": "ddp"})) == 0.0


@pytest.mark.parametrize("micro_batch", [1, 4])
def test_module_wrapped_fsdp1_peaks_at_the_larger_backward_moment(micro_batch):
    """Module-wrapped (U = 4 h^2 per unit), full recompute, T = 512 b. The compute moment (GeLU's backward) has
    the unit gathered and its gradient (2 + 2) U and the gradients 2 T h + 2 T f; the moment fc2's flat gradient
    is concatenated has (2 + 2 + 2) U and 2 T h + (2 - 2) T f (fc2's 2 T f input gradient, its 2 T f input
    released), the same working set. b = 1: 2 T f = 4 Mi < 2 U = 8 Mi, the cat is the peak; b = 4: 2 T f = 16 Mi,
    the compute moment stays, as without the flat parameter."""
    t_tok, unit = 512 * micro_batch, 4 * H * H
    plan = dict(FSDP1, fsdp_module_wrap=1, recompute="full", micro_batch=micro_batch, global_batch=8 * micro_batch)
    with_cat, without = peak(**plan), peak(**{**plan, "fsdp_version": 2})
    assert with_cat[M_ACTIVATIONS] == without[M_ACTIVATIONS]
    assert without[M_BUFFERS] == pytest.approx(4 * unit + 2 * t_tok * H + 2 * t_tok * F, rel=1e-12)
    cat = 6 * unit + 2 * t_tok * H
    assert with_cat[M_BUFFERS] == pytest.approx(max(cat, without[M_BUFFERS]), rel=1e-12)
    assert bool(cat > without[M_BUFFERS]) is (micro_batch == 1)


def test_layer_wrapped_fsdp1_concatenates_at_the_end_of_the_layer():
    """Layer-wrapped (L = 12 h^2 + 2 h), no recompute, T = 512: the layer's cat comes after its last weight
    gradient, its working set released (none here), the gradients into and out of the layer 2 x 2 T h: buffers
    (2 + 2) L + 2 L + 4 T h against the compute moment's (2 + 2) L + 2 T h + 2 T f."""
    t_tok, layer = 512, 12 * H * H + 2 * H
    plan = dict(FSDP1, micro_batch=1, global_batch=8)
    with_cat, without = peak(**plan), peak(**{**plan, "fsdp_version": 2})
    assert without[M_BUFFERS] == pytest.approx(4 * layer + 2 * t_tok * H + 2 * t_tok * F, rel=1e-12)
    assert with_cat[M_BUFFERS] == pytest.approx(6 * layer + 4 * t_tok * H, rel=1e-12)
    assert with_cat[M_ACTIVATIONS] == without[M_ACTIVATIONS]


#: mrshenli/ptd_benchmark delay/fsdp_GPT175B_ws{ws}_bs{bs}_vs50000_blk256_checkpoint_fp16_transformer.txt: "max mem",
#: torch.cuda.max_memory_allocated // 1e6 (trainer.py at 6beb905 / 63e940a); minGPT GPT-175B, sequence 256,
#: vocabulary 50,000, module-wrapped FSDP (ShardedGPT's default wrap="linear"; the file suffix is the unused flag)
MEASURED_MB = {(128, 8): 15296, (128, 16): 21491, (128, 24): 27685, (128, 32): 33880, (64, 8): 20761, (64, 16): 26956}


#: the same files' three runs without recompute (``..._noop_fp16_transformer.txt``: no checkpoint_wrapper)
MEASURED_NO_RECOMPUTE_MB = {(128, 1): 22500, (128, 2): 35830, (64, 1): 27965}


def _benchmark_row(ws: int, bs: int, recompute: str = "full") -> dict:
    for line in (DATA / "runs_dev.jsonl").read_text().splitlines():
        data = json.loads(line)
        if data["id"] == "aws-fsdp-gpt3-175b-s512-n128":
            break
    data["model"].update(seq_len=256, vocab=50000)
    data["system"]["n_gpus"] = ws
    data["plan"].update(dp=ws, shard_degree=ws, micro_batch=bs, global_batch=bs * ws, recompute=recompute)
    [result] = rows([lower_record(data)])
    return result


@pytest.mark.parametrize("ws, bs", sorted(MEASURED_MB))
def test_pytorch_fsdp_benchmark_gpt175b_peaks(ws, bs):
    """The kernel's allocated peak plus what the benchmark's trainer and its reentrant checkpoint keep and the
    model does not (docs/model_memory.md): the logits ``out`` held through the backward (``loss = out.sum();
    loss.backward(); del out``) 2 T V, the recomputed block's output held by the checkpoint's backward 2 T h,
    less the MLP dropout mask released before fc2's cat T h; equals the measured peak within 0.1 %."""
    t_tok, h, v = 256 * bs, 12288, 50000
    result = _benchmark_row(ws, bs)
    unmodelled = 2 * t_tok * v + 2 * t_tok * h - t_tok * h
    assert result["memory_allocated"] + unmodelled == pytest.approx(MEASURED_MB[(ws, bs)] * 1e6, rel=1e-3)


@pytest.mark.parametrize("ws, bs", sorted(MEASURED_NO_RECOMPUTE_MB))
def test_pytorch_fsdp_benchmark_gpt175b_peaks_without_recompute(ws, bs):
    """Without recompute the measured peak is the LM head's flat-gradient ``cat`` (3 x 2 V h, V h = 614.4 M
    parameters; docs/model_memory.md), which the model does not have: it peaks at a layer's ``cat`` (3 x 2 U,
    U = 4 h^2 + 4 h = 604.0 M), and lands within 0.5 % below the measured peak only because U is close to V h
    (1.7 % smaller). A tolerance the model meets, not a derivation: below the measured, by less than 1 %."""
    h, v = 12288, 50000
    unit, head = 4 * h * h + 4 * h, v * h
    assert 0 < 1 - unit / head < 0.02
    measured = MEASURED_NO_RECOMPUTE_MB[(ws, bs)] * 1e6
    assert -0.01 < _benchmark_row(ws, bs, "none")["memory_allocated"] / measured - 1 < 0
