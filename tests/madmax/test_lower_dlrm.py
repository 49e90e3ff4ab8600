"""DLRM-family, MoE and ViT lowering: dependency structure (docs/model.md §4.3) and the
dlrm-transformer choices documented in fastmodel/madmax/lowering/graph.py."""

import pytest

import fastmodel
from fastmodel.errors import PlanError
from fastmodel.madmax.lowering.graph import StructureKey, lower


def key(**kw):
    base = dict(family="dlrm", kind="pretrain", dense=("fsdp",), emb=("mp",), num_layers=0,
                num_bottom_layers=4, num_top_layers=4)
    base.update(kw)
    return StructureKey(**base)


def deps(program, name):
    i = program.op_names.index(name)
    return sorted(program.op_names[j] for j in program.dep_idx[program.dep_ptr[i]:program.dep_ptr[i + 1]])


def test_dlrm_fsdp_prefetches_two_layers_ahead_in_the_forward_pass():
    p = lower(key())
    assert deps(p, "bot3.f.ag") == ["bot1.f"]
    assert deps(p, "top0.f.ag") == ["bot2.f"] and deps(p, "top1.f.ag") == ["bot3.f"]
    assert deps(p, "top0.f") == ["bot3.f", "emb.f.a2a0", "top0.f.ag"]


def test_tp_allreduce_once_per_layer_pair():
    p = lower(key(dense=("tp",)))
    forward = [n for n in p.op_names if n.endswith(".f.tp_ar")]
    backward = [n for n in p.op_names if n.endswith(".b.tp_ar")]
    assert forward == ["bot1.f.tp_ar", "bot3.f.tp_ar", "top1.f.tp_ar", "top3.f.tp_ar"]
    assert backward == ["top2.b.tp_ar", "top0.b.tp_ar", "bot2.b.tp_ar", "bot0.b.tp_ar"]


def test_bottom_mlp_backward_overlaps_embedding_backward_all2all():
    p = lower(key(dense=("ddp",)))
    names = list(p.op_names)
    assert names.index("emb.b.a2a0") < names.index("bot3.b") < names.index("emb.b")
    assert deps(p, "emb.b.a2a0") == ["top0.b"]          # not the bottom MLP
    assert deps(p, "bot3.b") == ["top0.b"]
    assert deps(p, "emb.b") == ["emb.b.a2a0"]


@pytest.mark.parametrize("prefetch, expected", [("reference", ([], [])), ("two_ahead", (["top1.b"], ["top0.b"]))])
def test_bottom_backward_allgather_dependencies(prefetch, expected):
    """docs/model.md §10.5: the reference drops the deps of the first two bottom allgathers."""
    p = lower(key(dlrm_bottom_prefetch=prefetch))
    assert (deps(p, "bot3.b.ag"), deps(p, "bot2.b.ag")) == expected
    assert deps(p, "bot1.b.ag") == ["bot3.b"]


def test_bottom_prefetch_fix_can_only_delay_and_keeps_collective_sizes():
    kw = dict(plan="fsdp/mp", num_nodes=16)
    ref = fastmodel.evaluate("dlrm-a", "dc-a", "dlrm-pretrain", semantics={"base": "madmax"}, **kw)
    fixed = fastmodel.evaluate("dlrm-a", "dc-a", "dlrm-pretrain",
                               semantics={"base": "madmax", "dlrm_bottom_fsdp_prefetch": "two_ahead"}, **kw)
    # waiting for the top MLP's compute can only delay the comm stream, never speed it up
    assert fixed.iteration_time.item() >= ref.iteration_time.item()
    assert fixed.time_allgather.item() == ref.time_allgather.item()  # same ops, same sizes


def test_freeze_flags():
    p = lower(key(kind="finetune", dense=("ddp",), freeze_top_mlp=True))
    assert not any(n.startswith("top") and n.endswith("grad_ar") for n in p.op_names)
    assert "top0.b" in p.op_names  # top backward still computed
    p = lower(key(kind="finetune", dense=("ddp",), freeze_bottom_mlp=True))
    assert not any(n.startswith("bot") and ".b" in n for n in p.op_names)
    p = lower(key(kind="finetune", freeze_emb=True))
    assert "emb.b" not in p.op_names and "emb.b.a2a0" not in p.op_names


def test_dlrm_moe_all2alls_only_under_tp():
    with_tp = lower(key(family="dlrm-moe", dense=("tp", "ddp")))
    a2a = [n for n in with_tp.op_names if ".a2a" in n and n.startswith("top")]
    assert len(a2a) == 4 * 4  # two per top layer per pass
    without = lower(key(family="dlrm-moe", dense=("ddp",)))
    assert not any(n.startswith("top") and ".a2a" in n for n in without.op_names)


def test_llm_moe_all2alls_around_the_fc_block():
    p = lower(StructureKey(family="llm-moe", kind="pretrain", dense=("tp", "ddp"), emb=("ddp",), num_layers=3,
                           min_frozen_layer=3))
    assert deps(p, "attn1.f") == ["fc0.f", "fc0.f.a2a2", "fc0.f.tp_ar"]
    assert deps(p, "fc1.f") == ["attn1.f", "attn1.f.tp_ar", "fc1.f.a2a1"]
    assert sum(".a2a" in n for n in p.op_names) == 4 * 3


def test_vit_bogus_allgather_madmax_only():
    """docs/model.md §10.6: the post-optimized backward gathers the last FC layer even without FSDP."""
    kw = dict(plan="ddp/ddp", num_nodes=16)
    madmax = fastmodel.evaluate("vit-10b", "dc-a", "vit-pretrain", semantics="madmax", **kw)
    default = fastmodel.evaluate("vit-10b", "dc-a", "vit-pretrain", semantics="default", **kw)
    assert default.time_allgather.item() == 0.0
    # by hand: FC layer 2·d·f = 2·5120·20480 params, shard 1, x degree[0] = 128 devices, 2 bytes,
    # over the AG bandwidth 2 x allreduce = 2 x (0.2746·200.01 + 0.7254·7.0) GB/s
    ar_bw = 0.2746 * 12 * 25e9 * 0.6667 + 0.7254 * 8 * 12.5e9 * 0.56 / 8
    expected = 2 * 5120 * 20480 * 128 * 2 / (2 * ar_bw)
    assert madmax.time_allgather.item() == pytest.approx(expected, rel=1e-9)


def tr_key(**kw):
    base = dict(family="dlrm-transformer", kind="pretrain", dense=("ddp",), emb=("mp",), transformer=("fsdp",),
                num_layers=2, num_bottom_layers=2, num_top_layers=2, min_frozen_layer=2)
    base.update(kw)
    return StructureKey(**base)


def test_dlrm_transformer_order_and_documented_choices():
    p = lower(tr_key())
    names = list(p.op_names)
    assert names.index("bot1.f") < names.index("attn0.f") < names.index("fc1.f") < names.index("top0.f")
    assert deps(p, "attn0.f") == ["attn0.f.ag", "bot1.f", "emb.f.a2a0"]
    assert deps(p, "attn0.f.ag") == ["bot0.f"]               # second-to-last bottom layer, as written
    assert deps(p, "top0.f") == ["fc1.f"]
    # backward: top MLP, transformer, embedding comm, bottom MLP (after the first attention block)
    assert names.index("top0.b") < names.index("fc1.b") < names.index("attn0.b") < names.index("emb.b.a2a0")
    assert deps(p, "fc1.b") == ["fc1.b.ag", "top0.b"]
    assert deps(p, "bot1.b") == ["attn0.b"]
    fixed = lower(tr_key(dense=("fsdp",), dlrm_bottom_prefetch="two_ahead"))
    assert (deps(fixed, "bot1.b.ag"), deps(fixed, "bot0.b.ag")) == (["fc0.b"], ["attn0.b"])


def test_dlrm_transformer_skips_transformer_backward_when_nothing_below_trains():
    p = lower(tr_key(kind="finetune", freeze_bottom_mlp=True, freeze_emb=True, freeze_dense=True))
    assert not any(n.startswith(("attn", "fc")) and ".b" in n for n in p.op_names)
    p = lower(tr_key(kind="finetune", freeze_bottom_mlp=True, freeze_emb=True))
    assert "attn0.b" in p.op_names


DLRM_T = {"family": "dlrm-transformer", "name": "t", "num_bottom_layers": 2, "num_top_layers": 2, "mlp_dim": 256,
          "num_tables": 8, "rows_per_table": 1000, "emb_dim": 64, "pooling": 10, "bytes_per_dense_param": 2,
          "bytes_per_emb_param": 2, "num_layers": 2, "hidden": 128, "ffn_hidden": 512, "num_heads": 4, "seq_len": 16}


def test_dlrm_transformer_end_to_end_needs_three_components():
    task = {"name": "t", "kind": "pretrain", "global_batch": 1024}
    ds = fastmodel.evaluate(DLRM_T, "dc-a", task, plan="ddp/mp/tp,ddp", num_nodes=2, semantics="madmax")
    assert ds.iteration_time.item() > 0
    # by hand, 16 devices: MLPs ddp16 -> 64 samples per device; transformer tp8 x ddp2 -> 512 samples
    # per replica, GEMMs split 8 ways; 2 layers x (attention + FC), x3 with the backward (2x forward)
    d, f, s = 128, 512, 16
    transformer_flops = 2 * (4 * d * d + 2 * d * f) * s * 2 * 3 * 512 / 8
    mlp_flops = 2 * 256 * 256 * 4 * 3 * 64
    assert ds.time_gemm.item() == pytest.approx((transformer_flops + mlp_flops) / (312e12 * 0.705), rel=1e-9)
    with pytest.raises(PlanError, match="three components"):
        fastmodel.evaluate(DLRM_T, "dc-a", task, plan="ddp/mp", num_nodes=2)
    with pytest.raises(PlanError, match="two components"):
        fastmodel.evaluate("dlrm-a", "dc-a", task, plan="ddp/mp/ddp", num_nodes=2)


def test_dlrm_tp_needs_even_layer_counts():
    model = {**DLRM_T, "family": "dlrm", "num_bottom_layers": 3}
    for k in ("num_layers", "hidden", "ffn_hidden", "num_heads", "seq_len"):
        model.pop(k)
    task = {"name": "t", "kind": "pretrain", "global_batch": 1024}
    with pytest.raises(PlanError, match="tp_odd_layers"):
        fastmodel.evaluate(model, "dc-a", task, plan="tp/mp", num_nodes=2)
    assert fastmodel.evaluate(model, "dc-a", task, plan="ddp/mp", num_nodes=2).iteration_time.item() > 0


def test_dlrm_tp_ddp_gradient_allreduce_running_shard_vs_sharded():
    """docs/model.md §10.1: DLRM-A (tp8, ddp16) allreduces 21.27 ms of full-layer gradients
    plus 6.54 ms of activations under madmax; with the fix the gradients are the tp8 shard."""
    kw = dict(plan="tp,ddp/mp", num_nodes=16)
    madmax = fastmodel.evaluate("dlrm-a", "dc-a", "dlrm-pretrain", semantics="madmax", **kw)
    fixed = fastmodel.evaluate("dlrm-a", "dc-a", "dlrm-pretrain",
                               semantics={"base": "madmax", "ddp_grad_sharded_layer": True}, **kw)
    assert madmax.time_allreduce.item() == pytest.approx(27.81e-3, abs=0.01e-3)
    # by hand: 20 layers x 3994^2 x 4 bytes over the 60.0 GB/s allreduce bandwidth; 10 TP ARs per pass
    ar_bw = 0.2746 * 12 * 25e9 * 0.6667 + 0.7254 * 8 * 12.5e9 * 0.56 / 8
    gradients = 20 * 3994**2 * 4 / ar_bw
    activations = 2 * 10 * 4096 * 3994 * 4 / (12 * 25e9 * 0.6667)    # tp level 0: intra-node bandwidth
    assert madmax.time_allreduce.item() == pytest.approx(gradients + activations, rel=1e-9)
    assert fixed.time_allreduce.item() == pytest.approx(gradients / 8 + activations, rel=1e-9)
