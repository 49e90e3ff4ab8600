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


def test_nearest_by_the_words_where_the_spelling_misses():
    """Hurried-user walk: ``-t train-llm`` had no suggestion (difflib's ratio to 'llm-pretrain' is below 0.5);
    the choice holding every word ('train' inside 'pretrain', 'llm') is it. The same words in another order win
    over a closer spelling ('70b-llama2' was answered 'llama2-7b')."""
    tasks = ["llm-finetune", "llm-moe-pretrain", "llm-pretrain", "llm-pretrain-fsdp", "vit-pretrain"]
    assert nearest("train-llm", tasks) == " (did you mean 'llm-pretrain'?)"
    assert nearest("moe-llm-pretrain", tasks) == " (did you mean 'llm-moe-pretrain'?)"
    assert nearest("fsdp-pretrain-llm", tasks) == " (did you mean 'llm-pretrain-fsdp'?)"
    assert nearest("70b-llama2", ["llama2-7b", "llama2-70b"]) == " (did you mean 'llama2-70b'?)"
    assert nearest("xx-llm", tasks) == ""                # a word no choice holds: no suggestion
    assert nearest("tr-llm", tasks) == ""                # 2-letter words are not looked for inside others


def test_nearest_by_initials_last():
    """`--sel mb=1` named no dimension; the initials of a choice's words are looked at when nothing else is near."""
    dims = ["num_nodes", "plan", "micro_batch", "recompute"]
    assert nearest("mb", dims) == " (did you mean 'micro_batch'?)"
    assert nearest("nn", dims) == " (did you mean 'num_nodes'?)"
    assert nearest("p", dims) == ""          # one letter: no choice's initials (each has 2 words or more)
    assert nearest("dh", ["dgx-h100", "dgx-h200", "dgx-a100"]) == ""    # two choices' initials: name neither
