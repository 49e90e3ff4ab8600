"""fastmodel/errors.py: the "did you mean" rule."""

from fastmodel.errors import nearest


def test_nearest_prefers_the_choice_sharing_the_longest_start():
    """A7: "disaggregated" is spelled closer to 'aggregated' but starts as 'disagg' does: the choice sharing the
    longest start (4 characters or more) wins, the closest spelling among equals; else the closest spelling."""
    modes = ["aggregated", "disagg"]
    assert nearest("disaggregated", modes) == " (did you mean 'disagg'?)"
    assert nearest("Disaggregated", modes) == " (did you mean 'disagg'?)"
    assert nearest("aggregate", modes) == " (did you mean 'aggregated'?)"
    assert nearest("fp8_blok", ["fp8", "fp8_block", "int4"]) == " (did you mean 'fp8_block'?)"
    assert nearest("dissagg", modes) == " (did you mean 'disagg'?)"
    assert nearest("aggregate", modes) == " (did you mean 'aggregated'?)"
    assert nearest("disag", modes) == " (did you mean 'disagg'?)"
    assert nearest("moe_tpp", ["moe_tp", "tp", "ep"]) == " (did you mean 'moe_tp'?)"
    assert nearest("xyz", modes) == ""


def test_nearest_prefers_a_choice_equal_but_for_case_and_separators():
    """Hurried-user pass: 'llama-3.1-8b' was answered with 'llama-30b' (the longer shared start)."""
    names = ["llama-30b", "llama3.1-8b", "deepseek-v3", "deepseek-v2"]
    assert nearest("llama-3.1-8b", names) == " (did you mean 'llama3.1-8b'?)"
    assert nearest("DeepSeekV3", names) == " (did you mean 'deepseek-v3'?)"
    assert nearest("llama-30", names) == " (did you mean 'llama-30b'?)"
