"""Time of Megatron-Core ``recompute_modules`` (kernels/lm/recompute.py, docs/model.md §11.6), derived by hand.

Module semantics from ``TransformerConfig.recompute_modules`` (megatron/core/transformer/transformer_config.py,
NVIDIA/Megatron-LM@d98e8a6): the listed modules' forwards run again in the backward; ``core_attn`` is the
default; ``mlp`` applies to dense layers only; ``moe`` re-runs the whole MoE layer, its all-to-alls included.
Setting: T = 4096 tokens, h = 4096, HBM 8 TB/s at efficiency 0.8 (6.4 TB/s), fused kernels (norm 2 + 2 B,
SwiGLU 2 + 2 + 2 B per element), an MoE layer of 16 experts of 1024 (SwiGLU), top-2, EP 4, dropless balanced.
"""

import pytest

from fastmodel.kernels.lm.layer import N_WORK, layer_costs
from fastmodel.kernels.lm.passes import A_RECOMPUTE, layer_passes
from fastmodel.kernels.lm.passes import N_WORK as N_PASS_WORK
from fastmodel.kernels.lm.recompute import core_attention_recomputed, module_recompute_costs
from fastmodel.kernels.roofline import gemm_time
from fastmodel.lm.table import row
from fastmodel.registry.lm import RECOMPUTE_MODULES

T, H, E, K, FE = 4096, 4096, 16, 2, 1024
HBM = 8e12 * 0.8
BASE = dict(layers=2, hidden=H, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=32000, seq_len=T, micro_batch=1,
            global_batch=8, dp=4, hbm_bw=8e12, hbm_eff=0.8, fused_kernels=1, gated_mlp=1, recompute="selective")
MOE = dict(BASE, moe_experts=E, moe_topk=K, moe_ffn=FE, ep=4, moe_shared_experts=1, moe_layer_freq=1)


def bits(*names):
    return sum(RECOMPUTE_MODULES[n] for n in names)


def costs(r, moe):
    """module_recompute_costs as layer_costs calls it (one device, TP 1: norm_tokens = tokens)."""
    local = E / 4
    rows = T * K
    # every argument a float64, as the kernel passes them: other types would compile a second specialisation
    return module_recompute_costs(r, 1.0 if moe else 0.0, float(T), float(T), 0.0, 2.0, local, rows / local, 1.0,
                                  float(rows * FE), 0.0, 1.0e-3)


def test_layernorm_reruns_the_two_norms_by_hand():
    """2 norms x (2 B read + 2 B write) x T h / 6.4 TB/s = 2 x 4 x 4096 x 4096 / 6.4e12 = 20.97 us."""
    again, gemm, ep = costs(row(**BASE, recompute_modules=bits("layernorm")), False)
    assert again == pytest.approx(2 * 4 * T * H / HBM, rel=1e-12) and gemm == 0.0 and ep == 0.0


def test_moe_act_reruns_the_routed_activation_by_hand():
    """SwiGLU over the routed rows: 6 B x (T k) x f_e / 6.4 TB/s = 6 x 8192 x 1024 / 6.4e12 = 7.86 us."""
    again, gemm, _ = costs(row(**MOE, recompute_modules=bits("moe_act")), True)
    assert again == pytest.approx(6 * T * K * FE / HBM, rel=1e-12) and gemm == 0.0


def test_mlp_is_the_dense_mlp_forward_and_skips_moe_layers():
    """``mlp``: the dense MLP's two GEMMs (gate/up 2 f wide, down) and its SwiGLU again; nothing on an MoE layer."""
    r = row(**BASE, recompute_modules=bits("mlp"))
    again, gemm, _ = costs(r, False)
    assert gemm == pytest.approx(gemm_time(r, T, 2 * 14336, H, False) + gemm_time(r, T, H, 14336, False), rel=1e-12)
    assert again - gemm == pytest.approx(6 * T * 14336 / HBM, rel=1e-12)
    assert costs(row(**MOE, recompute_modules=bits("mlp")), True) == (0.0, 0.0, 0.0)


def test_moe_reruns_its_dispatch_and_contains_its_parts():
    """``moe`` re-runs the dispatch and combine; listing moe_act or shared_experts beside it adds nothing."""
    whole = costs(row(**MOE, recompute_modules=bits("moe")), True)
    assert whole[2] == 1.0e-3
    both = costs(row(**MOE, recompute_modules=bits("moe", "moe_act", "shared_experts")), True)
    assert both == whole
    parts = costs(row(**MOE, recompute_modules=bits("moe_act", "shared_experts")), True)
    assert parts[2] == 0.0 and parts[0] < whole[0]


def test_modules_act_only_under_megatron_selective_recompute():
    assert costs(row(**{**BASE, "recompute": "none"}, recompute_modules=bits("mlp", "layernorm")), False) == \
        (0.0, 0.0, 0.0)
    assert costs(row(**BASE, selective_policy=1, recompute_modules=bits("mlp")), False) == (0.0, 0.0, 0.0)


def test_the_attention_core_is_recomputed_only_when_listed():
    assert core_attention_recomputed(row(**BASE)) == 1.0                                   # default list
    assert core_attention_recomputed(row(**BASE, recompute_modules=bits("core_attn", "mlp"))) == 1.0
    assert core_attention_recomputed(row(**BASE, recompute_modules=bits("mlp"))) == 0.0


def _recompute(**values):
    import numpy as np

    work = np.zeros(N_PASS_WORK)
    layer_passes(row(**values), work)
    return work[A_RECOMPUTE]


def test_the_passes_charge_the_listed_modules_in_place_of_the_default_core():
    """A dense 2-layer model: ``[layernorm]`` alone recomputes the two norms and not the attention core;
    ``[core_attn, layernorm]`` both; the default the core alone."""
    import numpy as np

    work = np.zeros(N_WORK)
    layer_costs(row(**BASE), False, False, work)
    from fastmodel.kernels.lm.layer import W_ATTN

    core = work[W_ATTN]
    norms = 2 * 4 * T * H / HBM
    assert _recompute(**BASE) == pytest.approx(core, rel=1e-12)
    assert _recompute(**BASE, recompute_modules=bits("layernorm")) == pytest.approx(norms, rel=1e-12)
    assert _recompute(**BASE, recompute_modules=bits("layernorm", "core_attn")) == pytest.approx(core + norms,
                                                                                                 rel=1e-12)
    assert np.isfinite(core) and core > 0
