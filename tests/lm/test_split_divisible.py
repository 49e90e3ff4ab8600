"""Megatron-Core's layer divisibility with the embedding and the loss in the pipeline split
(kernels/lm/rules.py ``plan_status_row``, rule ``layers_not_divisible``; docs/model.md §11.9).

With ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split`` (our
``embedding_loss_in_split``) Megatron-Core divides ``L + 2`` slots, not ``L`` layers:
``TransformerConfig.__post_init__`` raises unless ``(L + 2) % pp == 0`` and, with vp, ``((L + 2) / pp) % vp == 0``
(megatron/core/transformer/transformer_config.py, NVIDIA/Megatron-LM@d98e8a6 lines 2370-2415), and
megatron/training/arguments.py (same commit, lines 985-998) asserts ``(L + 2) % pp == 0``.
"""

from fastmodel.kernels.lm.rules import plan_status_row
from fastmodel.lm.table import row
from fastmodel.registry.lm import STATUS_CODES

BAD = STATUS_CODES["layers_not_divisible"]
# Llama 3 405B's shape (Dubey et al. 2024 sec. 3.3.2): 126 layers, the embedding and the loss in the split
LLAMA = dict(layers=126, hidden=1024, ffn=4096, heads=16, kv_heads=16, head_dim=64, vocab=4096, seq_len=2048,
             n_gpus=32, tp=1, pp=16, dp=2, micro_batch=1, global_batch=64, recompute="none")


def _status(**values):
    return plan_status_row(row(**{**LLAMA, **values}))


def test_megatron_core_divides_the_layers_and_the_two_slots_by_hand():
    # (126 + 2) / 16 = 8: Megatron-Core runs it, though 126 / 16 is not whole
    assert _status(embedding_loss_in_split=1) == 0
    # without the two slots 126 / 16 is refused, as before
    assert _status(embedding_loss_in_split=0) == BAD
    # (128 + 2) / 16 is not whole: Megatron-Core refuses it, though 128 / 16 = 8
    assert _status(layers=128, embedding_loss_in_split=1) == BAD
    assert _status(layers=128, embedding_loss_in_split=0) == 0
    # vp: (126 + 2) / 16 = 8 slots a rank, which vp = 2 divides (4 a chunk) and vp = 3 does not
    assert _status(embedding_loss_in_split=1, vp=2) == 0
    assert _status(embedding_loss_in_split=1, vp=3) == BAD
    # 382 layers: (382 + 2) / 16 = 24 = 3 x 8 runs at vp = 3; 382 / (16 x 3) without the slots is refused
    assert _status(layers=382, embedding_loss_in_split=1, vp=3) == 0
    assert _status(layers=382, embedding_loss_in_split=0, vp=3) == BAD
    # uneven stages lift the rule, the two slots or not
    assert _status(layers=128, embedding_loss_in_split=1, uneven_stages=1) == 0


def test_the_refusal_names_the_two_slots():
    import numpy as np

    from fastmodel.lm.rules import status_reason
    reason = status_reason(BAD, np.asarray(row(**{**LLAMA, "layers": 128}, embedding_loss_in_split=1)))
    assert reason.startswith("model.layers + 2 = 130 (the embedding and the loss take a slot each, "
                             "embedding_loss_in_split) is not divisible by pp x vp = 16 x 1 = 16 "
                             "(pp x vp dividing them: 1, 2, 5, 10, 13, 26, 65)")
    assert status_reason(BAD, np.asarray(row(**LLAMA))).startswith("model.layers = 126 is not divisible")
