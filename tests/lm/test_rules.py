"""fastmodel/lm/rules.py: a refused plan names the rule it breaks, its fields and their values (A10)."""

import pytest

from fastmodel.errors import PlanError
from fastmodel.lm.rules import check_plan, plan_status
from fastmodel.lm.table import row
from fastmodel.registry.lm import STATUS_CODES

MOE = dict(layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=32000, seq_len=4096, moe_experts=64,
           moe_topk=2, moe_ffn=14336, n_gpus=32, tp=2, dp=16, global_batch=64)


@pytest.mark.parametrize("plan, said", [
    (dict(ep=32, etp=2), "plan etp = 2 x ep = 32 = 64 does not divide tp x cp x dp = 2 x 1 x 16 = 32"),
    (dict(ep=64, etp=0), "etp = tp = 2 (plan etp unset) x ep = 64 = 128 does not divide tp x cp x dp"),
    (dict(ep=32, etp=1, moe_experts=48), "model.moe_experts = 48 is not divisible by plan ep = 32"),
])
def test_experts_not_divisible_names_the_rule_its_fields_and_values(plan, said):
    """The status keeps its one code (kernels and sweeps unchanged); the one-configuration message says which of
    its two rules broke: the experts over ep, or the expert mesh etp x ep against tp x cp x dp."""
    column = row(**{**MOE, **plan})
    assert plan_status(column[:, None])[0] == STATUS_CODES["experts_not_divisible"]
    with pytest.raises(PlanError, match="experts_not_divisible") as info:
        check_plan(column)
    assert said in str(info.value)
    assert ("moe_experts" in said) != ("does not divide" in str(info.value))


def test_devices_not_divisible_names_n_gpus():
    """A10: -s gb300-nvl72 --nodes 1 -p tp8.pp4 said no n_gpus; now n_gpus and tp x pp x cp with values."""
    with pytest.raises(PlanError, match=r"n_gpus = 4 is not a multiple of tp x pp x cp = 8 x 4 x 1 = 32"):
        check_plan(row(**{**MOE, "moe_experts": 0, "n_gpus": 4, "tp": 8, "pp": 4, "dp": 1}))
