"""The serving refusal ``ep_not_dividing`` names the field and the values that break it (fastmodel/serve/report.py
``status_message``; the rule: kernels/serve/evaluate.py ``check``): one line, exit 2."""

import pytest
from click.testing import CliRunner

from fastmodel.cli import main


def _refusal(*args):
    result = CliRunner().invoke(main, ["serve", "-d", "H100", "--concurrency", "24", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and result.output.count("\n") == 1, result.output
    assert "ep_not_dividing" in result.output
    return result.output


@pytest.mark.parametrize("args, text", [
    # Qwen3-30B-A3B: 128 routed experts; 6 GPUs of attention DP, ep 6
    (("-m", "qwen3-30b-a3b", "--tp", "1", "--attention-dp", "6", "--ep", "6"),
     "serve.ep = 6 does not divide the model's 128 routed experts (model.moe_experts)"),
    (("-m", "qwen3-30b-a3b", "--tp", "2", "--ep", "4"),
     "serve.ep = 4 does not divide the instance's tp x attention_dp = 2 x 1 = 2 GPUs (serve.tp, serve.attention_dp)"),
    (("-m", "qwen3-30b-a3b", "--tp", "1", "--attention-dp", "4", "--ep", "4", "--moe-tp", "2"),
     "serve.moe_tp x serve.ep = 2 x 4 = 8 must equal tp x attention_dp = 1 x 4 = 4"),
    (("-m", "llama3.1-8b", "--ep", "2"),
     "serve.ep = 2 on a dense model (model.moe_experts = 0): a dense model has none to split; set ep 1"),
])
def test_ep_not_dividing_names_its_values(args, text):
    assert text in _refusal(*args)


def test_without_columns_the_registry_text_stays():
    from fastmodel.registry.serve import SERVE_STATUS, SERVE_STATUSES
    from fastmodel.serve.report import status_message
    assert status_message("ep_not_dividing") == SERVE_STATUSES[SERVE_STATUS["ep_not_dividing"]].message
    assert status_message("no_fp8", object()) == SERVE_STATUSES[SERVE_STATUS["no_fp8"]].message
