"""Activations per device (kernels/lm/memory_activations.py) as the memory kernel reports them, by memory kind.

Golden values come from Korthikanti et al. 2022 (Figures 1 and 7, via the CSV in tests/data) or are derived by
hand below from the equations in docs/model_memory.md; no expectation calls the kernel's helpers. The helpers
(``memory``, ``small`` and its SMALL model) are tests/lm/test_memory.py's.
"""

import csv

import numpy as np
import pytest

from fastmodel.kernels.lm.layout import (
    M_ACTIVATIONS,
    M_GRADIENTS,
    M_OPTIMIZER,
    M_WEIGHTS,
)
from tests.lm.test_memory import DATA, GIB, memory, small

# --- Korthikanti et al. 2022 ---------------------------------------------------------------------------------------

#: Table 3 of the paper (the models of Figures 1 and 7): layers, hidden, heads; seq 2048, vocab 51200
KORTHIKANTI_MODELS = {"GPT-22B": (48, 6144, 64), "GPT-175B": (96, 12288, 96), "GPT-530B": (105, 20480, 128),
                      "GPT-1T": (128, 25600, 160)}
#: Korthikanti Sec. 6: the CSV's modes as (sequence_parallel, recompute)
KORTHIKANTI_MODES = {"none": (0, "none"), "seq": (1, "none"), "sel": (0, "selective"),
                     "seq+sel": (1, "selective"), "full": (0, "full")}
#: interleaving stages per pipeline rank of the paper's runs (Table 3; also runs_dev.jsonl's vp)
KORTHIKANTI_VP = {"GPT-22B": 1, "GPT-175B": 3, "GPT-530B": 3, "GPT-1T": 1}


def korthikanti_rows(figure: str) -> list[dict]:
    with open(DATA / "korthikanti2022_fig1_fig7_memory_via_calculon.csv") as handle:
        lines = [line for line in handle if not line.startswith("#")]
    return [r for r in csv.DictReader(lines) if r["figure"] == figure]


def korthikanti_memory(r: dict, mode: str) -> np.ndarray:
    """The paper's setting: Megatron 2022 GPT (2-matrix GeLU MLP, dropout, unfused softmax attention, tied
    embeddings), BF16 with FP32 gradients and Adam, one data-parallel replica."""
    layers, hidden, heads = KORTHIKANTI_MODELS[r["model"]]
    sp, recompute = KORTHIKANTI_MODES[mode]
    vp = KORTHIKANTI_VP[r["model"]]
    return memory(layers=layers, hidden=hidden, ffn=4 * hidden, heads=heads, kv_heads=heads,
                  head_dim=hidden // heads, vocab=51200, seq_len=2048, gated_mlp=0, tied_embeddings=1, dropout=1,
                  flash_attention=0, tp=int(r["TP"]), pp=int(r["PP"]), vp=vp, dp=1, sharding="distopt",
                  micro_batch=int(r["micro_batch"]), global_batch=int(r["global_batch"]), recompute=recompute,
                  sequence_parallel=sp, pipeline_schedule="interleaved" if vp > 1 else "1f1b",
                  grad_reduce_bytes=4, optimizer="adam")


@pytest.mark.parametrize("r", korthikanti_rows("fig1"), ids=lambda r: f"{r['model']}-{r['mode']}")
def test_korthikanti_figure1_activations(r):
    out = korthikanti_memory(r, r["mode"])
    assert out[M_ACTIVATIONS] / GIB == pytest.approx(float(r["activations_GiB"]), rel=0.05)


@pytest.mark.parametrize("r", korthikanti_rows("fig1"), ids=lambda r: f"{r['model']}-{r['mode']}")
def test_korthikanti_figure1_params_and_optimizer(r):
    """Figure 1's bars count the transformer layers only: each equals 18 bytes x 12 L h^2 / (t p) to four
    digits (2 BF16 weight + 4 FP32 gradient + 12 Adam; Megatron-LM docs/distrib_optimizer.md), without the
    word embedding the first rank also holds. The kernel counts it (V h / t parameters at the same 18 bytes),
    so the expectation is the figure plus that hand-derived share. Where the first rank's peak is the end of a
    micro-batch's backward at the word embedding, the gradients also hold the lookup's 16-bit weight gradient
    2 V h / t beside the FP32 ones (4 bytes a parameter, a third of Adam's 12): that transient is set aside."""
    layers, hidden, heads = KORTHIKANTI_MODELS[r["model"]]
    out = korthikanti_memory(r, r["mode"])
    embedding = 18.0 * 51200 * hidden / int(r["TP"])
    expected = float(r["params_plus_optimizer_GiB"]) * GIB + embedding
    transient = out[M_GRADIENTS] - out[M_OPTIMIZER] / 3.0
    lookup_grad = 2.0 * 51200 * hidden / int(r["TP"])
    assert transient == pytest.approx(0.0, abs=1.0) or transient == pytest.approx(lookup_grad, rel=1e-9)
    held = out[M_WEIGHTS] + out[M_GRADIENTS] - transient + out[M_OPTIMIZER]
    assert held == pytest.approx(expected, rel=0.05)
    # the transformer layers alone reproduce the figure within 0.5 %
    assert held - embedding == pytest.approx(float(r["params_plus_optimizer_GiB"]) * GIB, rel=0.005)


@pytest.mark.parametrize("model", list(KORTHIKANTI_MODELS))
def test_korthikanti_figure7_recompute_ratios(model):
    rows = {r["mode"]: r for r in korthikanti_rows("fig7") if r["model"] == model}
    none = korthikanti_memory(rows["none"], "none")[M_ACTIVATIONS]
    for mode, r in rows.items():
        pct = 100.0 * korthikanti_memory(r, mode)[M_ACTIVATIONS] / none
        assert abs(pct - float(r["activation_pct_of_none"])) <= 5.0, (mode, pct)


def test_activations_korthikanti_table2_no_parallelism():
    """s b h (34 + 5 a s / h) per layer (Korthikanti Table 2, no parallelism), plus the embedding dropout mask
    s b h. The peak is at the start of the layer's backward, after the head's: the final-norm input 2 s b h and
    output-layer input 2 s b h have been released by then (kernels/lm/memory_peak.py backward_passed_head_bytes)."""
    s, b, h, a, layers = 512, 2, 1024, 16, 4
    per_layer = s * b * h * (34 + 5 * a * s / h)
    expected = layers * per_layer + s * b * h
    out = small(dropout=1, flash_attention=0)
    assert out[M_ACTIVATIONS] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("sp", [0, 1])
def test_activations_korthikanti_table2_tensor_parallel(sp):
    """TP t=4: s b h (10 + 24/t + 5 a s/(h t)); with SP: s b h (34/t + 5 a s/(h t)) (Korthikanti Table 2).
    Without SP the peak is the loss (the head inputs 4 s b h are held): a layer's backward adds 2 s b h incoming
    and 2 s b f / t = 2 s b h MLP gradients (fc2's input released first) but has released the head inputs 4 s b h,
    a net 0, below the logits 6 s b V / t. With SP the backward's net (2 + 2 - 4) s b h / t + 2 s b h = 1.5 s b h
    exceeds the logits 6 s b 1000 / 4 = 1.46 s b h: the head inputs are gone at the peak."""
    s, b, h, a, t, layers = 512, 2, 1024, 16, 4, 4
    per_layer = s * b * h * ((34 / t if sp else 10 + 24 / t) + 5 * a * s / (h * t))
    rep = t if sp else 1
    expected = layers * per_layer + (0 if sp else 4 * s * b * h) + s * b * h / rep
    out = small(dropout=1, flash_attention=0, tp=t, sequence_parallel=sp)
    assert out[M_ACTIVATIONS] == pytest.approx(expected, rel=1e-12)


def test_activations_gqa_gated_mlp_flash():
    """Llama-style layer (GQA 32 query / 8 KV heads of 128, SwiGLU f = 14336, flash, no dropout), T = s b:
    two norm inputs and two linear inputs 2 T h each, Q 2 T a d, K and V 2 T kv d each, O 2 T a d, log-sum-exp 4 T a,
    gate+up output 4 T f, SwiGLU output 2 T f; the last rank adds 4 T h for the final norm and head input."""
    s, b, h, a, kv, d, f, layers = 4096, 1, 4096, 32, 8, 128, 14336, 2
    t_tok = s * b
    per_layer = (8 * t_tok * h + 2 * t_tok * a * d + 2 * 2 * t_tok * kv * d + 2 * t_tok * a * d + 4 * t_tok * a
                 + 4 * t_tok * f + 2 * t_tok * f)
    expected = layers * per_layer + 4 * t_tok * h
    out = memory(layers=layers, hidden=h, ffn=f, heads=a, kv_heads=kv, head_dim=d, vocab=128256, seq_len=s,
                 gated_mlp=1, micro_batch=b, global_batch=b, dp=1, flash_attention=1, dropout=0)
    assert out[M_ACTIVATIONS] == pytest.approx(expected, rel=1e-12)
    # GQA stores less than full multi-head attention: the K and V terms shrink by kv/a
    mha = memory(layers=layers, hidden=h, ffn=f, heads=a, kv_heads=a, head_dim=d, vocab=128256, seq_len=s,
                 gated_mlp=1, micro_batch=b, global_batch=b, dp=1)
    assert mha[M_ACTIVATIONS] - out[M_ACTIVATIONS] == pytest.approx(layers * 4 * t_tok * (a - kv) * d, rel=1e-12)


def test_op_level_selective_checkpointing_and_eager_kernels():
    """The GQA/SwiGLU layer above (T = 4096, h 4096, a 32, kv 8, d 128, f 14336), two layers.
    Op-level SAC keeps the block input 2 T h, wq output 2 T a d, wv output 2 T kv d, attention output
    2 T a d and its log-sum-exp 4 T a, w1 output 2 T f, w2 output 2 T h; while one block is recomputed its
    full activations (8 T h + 4 T a d + 4 T kv d + 4 T a + 6 T f) are live again. Eager kernels keep both
    norm inputs in FP32 instead of BF16 (2 x 2 T h more) and the SiLU output 2 T f."""
    s, h, a, kv, d, f, layers = 4096, 4096, 32, 8, 128, 14336, 2
    t_tok = s
    full_layer = 8 * t_tok * h + 4 * t_tok * a * d + 4 * t_tok * kv * d + 4 * t_tok * a + 6 * t_tok * f
    kept = (2 * t_tok * h + 2 * t_tok * a * d + 2 * t_tok * kv * d + 2 * t_tok * a * d + 4 * t_tok * a
            + 2 * t_tok * f + 2 * t_tok * h)
    head = 4 * t_tok * h
    llama = dict(layers=layers, hidden=h, ffn=f, heads=a, kv_heads=kv, head_dim=d, vocab=1000, seq_len=s,
                 gated_mlp=1, micro_batch=1, global_batch=1, dp=1)
    op_sac = memory(**llama, recompute="selective", selective_policy=1)
    head = 0   # the final-norm and head inputs 4 T h are released before the peak, the last layer's backward
    assert op_sac[M_ACTIVATIONS] == pytest.approx(layers * kept + full_layer + head, rel=1e-12)
    # Megatron's selective under flash attention keeps everything but the log-sum-exp
    megatron = memory(**llama, recompute="selective")
    assert megatron[M_ACTIVATIONS] == pytest.approx(layers * (full_layer - 4 * t_tok * a) + head, rel=1e-12)
    eager = memory(**llama, fused_kernels=0)
    eager_layer = full_layer + 2 * 2 * t_tok * h + 2 * t_tok * f
    assert eager[M_ACTIVATIONS] == pytest.approx(layers * eager_layer + head, rel=1e-12)
    # LayerNorm is one kernel even in eager mode: only the SiLU output is extra
    layernorm = memory(**llama, fused_kernels=0, rms_norm=0)
    assert layernorm[M_ACTIVATIONS] == pytest.approx(layers * (full_layer + 2 * t_tok * f) + head, rel=1e-12)


def test_activations_context_parallel_divides_tokens():
    one = small(flash_attention=1, dropout=0, seq_len=8192)[M_ACTIVATIONS]
    four = small(flash_attention=1, dropout=0, seq_len=8192, cp=4)[M_ACTIVATIONS]
    assert four == pytest.approx(one / 4, rel=1e-12)


def test_full_recompute_keeps_layer_inputs_plus_one_layer():
    """Full recompute: 2 s b h per layer (Korthikanti Sec. 4.3) + one layer's activations being recomputed
    (s b h (34 + 5 a s/h)) less its input 2 s b h, which is that layer's checkpoint (one storage), + final
    norm/head inputs 4 s b h (released by the head's backward before the peak, so not counted) + embedding mask
    s b h. An eager RMSNorm saves an FP32 copy of the input instead,
    so nothing is shared: the working layer is whole."""
    s, b, h, a, layers = 512, 2, 1024, 16, 4
    expected = layers * 2 * s * b * h + s * b * h * (34 + 5 * a * s / h - 2) + s * b * h
    out = small(dropout=1, flash_attention=0, recompute="full")
    assert out[M_ACTIVATIONS] == pytest.approx(expected, rel=1e-12)
    eager = dict(dropout=1, flash_attention=0, fused_kernels=0, rms_norm=1)
    edges = s * b * h
    eager_layer = (small(**eager, recompute="none")[M_ACTIVATIONS] - edges) / layers
    assert small(**eager, recompute="full")[M_ACTIVATIONS] == pytest.approx(
        layers * 2 * s * b * h + eager_layer + edges, rel=1e-12)


def test_partial_layer_recompute_and_offload():
    s, b, h, a, layers = 512, 2, 1024, 16, 4
    full_layer = s * b * h * (34 + 5 * a * s / h)
    edges = s * b * h    # the embedding mask; the head inputs 4 s b h are released before the backward's peak
    # half the layers checkpointed; the one recomputed shares its input with its checkpoint (2 s b h)
    expected = 2 * 2 * s * b * h + 2 * full_layer + full_layer - 2 * s * b * h + edges
    out = small(dropout=1, flash_attention=0, recompute="partial_layers", recompute_fraction=0.5)
    assert out[M_ACTIVATIONS] == pytest.approx(expected, rel=1e-12)
    offloaded = small(dropout=1, flash_attention=0, activation_offload=0.25)
    assert offloaded[M_ACTIVATIONS] == pytest.approx(0.75 * (layers * full_layer + edges), rel=1e-12)
