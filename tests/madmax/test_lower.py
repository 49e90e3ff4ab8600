"""LLM lowering: op counts and the dependency structure of docs/model.md §4.2."""

from fastmodel.madmax.lowering.graph import StructureKey, lower


def key(**kw):
    base = dict(family="llm", kind="pretrain", dense=("fsdp",), emb=("ddp",), num_layers=3, min_frozen_layer=3)
    base.update(kw)
    return StructureKey(**base)


def test_fsdp_pretrain_op_counts():
    p = lower(key())
    # forward: emb + 2 GEMMs/layer; backward: 2 GEMMs/layer + emb
    assert p.num_compute_ops == 1 + 2 * 3 + 2 * 3 + 1
    # forward 2 AG/layer; backward 2 AG + 2 RS per layer + emb grad AR
    assert p.num_comm_ops == 2 * 3 + 4 * 3 + 1


def test_inference_has_no_barrier_and_no_backward():
    p = lower(key(kind="inference"))
    assert not p.op_barrier.any()
    assert all(".b" not in name for name in p.op_names)


def test_pre_optimized_allgather_waits_on_previous_backward_gemm():
    p = lower(key())
    i = p.op_names.index("fc1.b.ag")
    deps = [p.op_names[j] for j in p.dep_idx[p.dep_ptr[i]:p.dep_ptr[i + 1]]]
    assert deps == ["fc2.b"]


def test_post_optimized_allgathers_have_no_deps_and_run_one_block_ahead():
    p = lower(key(fsdp_backward="post_optimized"))
    names = list(p.op_names)
    assert names.index("fc1.b.ag") < names.index("attn2.b")
    i = names.index("fc1.b.ag")
    assert p.dep_ptr[i] == p.dep_ptr[i + 1]


def test_frozen_layers_drop_gradient_comms_only():
    full = lower(key(dense=("ddp",)))
    frozen = lower(key(kind="finetune", dense=("ddp",), min_frozen_layer=1, freeze_emb=True))
    grad = [n for n in full.op_names if n.endswith("grad_ar") and not n.startswith("emb")]
    grad_frozen = [n for n in frozen.op_names if n.endswith("grad_ar")]
    assert len(grad) == 6 and grad_frozen == ["fc0.b.grad_ar", "attn0.b.grad_ar"]
    assert frozen.num_compute_ops == full.num_compute_ops - 1  # only the embedding backward goes


def test_programs_are_cached_by_structure():
    assert lower(key()) is lower(key())
