"""kernels/madmax/costs.py against the spec classes' own counts (fastmodel/madmax/families/*.py): the two write the
MAD-Max formulas (docs/model.md §2.1, §5) independently, so each checks the other for every
family, including dlrm-transformer, which has no reference cases."""

import pytest

import fastmodel
from fastmodel.engines import load_model
from fastmodel.spec.loader import builtin_names

#: the MAD-Max built-ins (family "lm" models belong to the real-world model, tests/test_lm_*.py)
MODELS = sorted(name for name in builtin_names("model") if load_model(name).family != "lm")


@pytest.mark.parametrize("name", MODELS)
def test_weights_and_flops_match_the_spec_counts(name):
    model = load_model(name)
    three = model.family == "dlrm-transformer"
    plan = "ddp/mp/ddp" if three else "ddp/mp"
    devices = 16
    task = {"name": "t", "kind": "pretrain", "global_batch": 2 * devices}
    ds = fastmodel.evaluate(model, "dc-a", task, plan=plan, num_nodes=2)
    # ddp replicates the dense part (no shard); mp splits the embedding tables over all devices
    assert ds.weight_memory_dense.item() == pytest.approx(model.dense_params * model.bytes_per_dense_param, rel=1e-12)
    assert ds.weight_memory_emb.item() * devices == pytest.approx(model.emb_params * model.bytes_per_emb_param, rel=1e-12)
    # forward + backward (2x forward) GEMMs of 2 samples per device at the effective FLOP/s
    gemm_flops = ds.time_gemm.item() * ds.eff_flop_per_s.item()
    assert gemm_flops == pytest.approx(3 * model.flops_per_sample * 2, rel=1e-12)
    # lookups (forward and backward) of the 2 x 16 samples' lookup bytes split over 16 devices
    hbm = 1555e9 * 0.836
    assert ds.time_emb.item() * hbm == pytest.approx(2 * model.lookup_bytes_per_sample * 2 * devices / devices, rel=1e-12)
