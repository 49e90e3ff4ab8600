"""A request longer than the model's context (``context_len``: the built-in serving models' config.json
``max_position_embeddings``) is refused: one line naming the option and the bound on the command line (exit 2),
the status ``context_exceeded`` in a serving sweep (kernels/serve/evaluate.py ``check``; docs/model_serving.md S40)."""

from __future__ import annotations

import numpy as np

from fastmodel.registry.lm import COLUMN_INDEX
from fastmodel.registry.serve import SERVE_STATUS
from fastmodel.serve.api import columns, sweep
from fastmodel.serve.models import SERVE_MODELS
from tests.suite_fixtures import cli, one_line_error


def test_the_built_in_models_state_their_config_context():
    """config.json max_position_embeddings: Llama 3.1 (8B, 70B, 405B) 131072 = 128 x 1024; Mistral-7B-v0.3 and
    Mixtral-8x7B-v0.1 32768 = 32 x 1024."""
    assert {name: values["context_len"] for name, values in SERVE_MODELS.items()} == {
        "llama3.1-8b": 128 * 1024, "llama3.1-70b": 128 * 1024, "llama3.1-405b": 128 * 1024,
        "mistral-7b": 32 * 1024, "mixtral-8x7b": 32 * 1024}


def test_the_kernel_check_bounds_prompt_plus_output_by_the_context():
    """input_len + output_len <= context_len is legal (the bound itself included), one token more is
    context_exceeded; context_len 0 (a spec that states none) bounds nothing."""
    from fastmodel.kernels.serve.evaluate import check

    row = columns("llama3.1-8b", "H100", batch_size=1, input_len=1024, output_len=128)
    assert row[COLUMN_INDEX["context_len"]] == 131072
    for input_len, output_len, context, status in ((90, 10, 100, "ok"), (91, 10, 100, "context_exceeded"),
                                                   (10, 91, 100, "context_exceeded"), (10 ** 6, 10, 0, "ok")):
        row[[COLUMN_INDEX["input_len"], COLUMN_INDEX["output_len"], COLUMN_INDEX["context_len"]]] = \
            (input_len, output_len, context)
        assert check(row) == SERVE_STATUS[status], (input_len, output_len, context)


def test_serve_refuses_a_prompt_longer_than_the_context_in_one_line():
    """131072 - 128 = 130944 prompt tokens fit beside 128 output tokens; 130945 do not."""
    one_line_error(cli("serve", "-m", "llama3.1-8b", "--input-len", 130945, "--output-len", 128),
                   "--input-len 130945", "131073 tokens", "llama3.1-8b's context of 131072 tokens",
                   "at most 131072")
    one_line_error(cli("serve", "-m", "mistral-7b", "--input-len", 1024, "--output-len", 32000, "--search",
                       "--ttft", "2s", "--tpot", "50ms"), "--input-len 1024", "context of 32768 tokens")
    assert cli("serve", "-m", "llama3.1-8b", "--input-len", 130944, "--output-len", 128, "--json").exit_code == 0


def test_a_serving_sweep_marks_a_longer_request_context_exceeded():
    data = sweep("mistral-7b", "H100", input_len=[1024, 32768 - 128, 32768 - 127], output_len=128)
    status = np.asarray(data["status"]).ravel().tolist()
    assert status == [SERVE_STATUS["ok"], SERVE_STATUS["ok"], SERVE_STATUS["context_exceeded"]]


def test_serve_reads_its_model_once(monkeypatch):
    """``fastmodel serve -m`` reads the model (``serving_model``) once itself: the context check and the MoE check
    and notes take the same (columns, notes); a dense model's --moe-tp is still refused by it."""
    import sys

    from fastmodel.serve import models

    calls = []
    real = models.serving_model

    def counted(*args, **kwargs):
        calls.append(sys._getframe(1).f_code.co_filename.endswith("cli/serve.py"))
        return real(*args, **kwargs)

    monkeypatch.setattr(models, "serving_model", counted)
    assert cli("serve", "-m", "llama3.1-8b", "--concurrency", 4, "--json").exit_code == 0
    assert calls.count(True) == 1, calls          # (serve.api.columns reads the model by name on its own)
    one_line_error(cli("serve", "-m", "llama3.1-8b", "--moe-tp", 2), "--moe-tp: llama3.1-8b is a dense model")
    assert calls.count(True) == 2, calls
