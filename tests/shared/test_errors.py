"""fastmodel/errors.py: the "did you mean" rule."""

from fastmodel.errors import nearest


def test_nearest_prefers_the_choice_the_word_abbreviates_or_extends():
    """A7: "disaggregated" is spelled closer to 'aggregated' but abbreviates to 'disagg' (the longest choice it
    starts with wins); a word a choice extends ('agg' -> 'aggregated') too; else the closest spelling."""
    modes = ["aggregated", "disagg"]
    assert nearest("disaggregated", modes) == " (did you mean 'disagg'?)"
    assert nearest("Disaggregated", modes) == " (did you mean 'disagg'?)"
    assert nearest("agg", modes) == " (did you mean 'aggregated'?)"
    assert nearest("aggregate", modes) == " (did you mean 'aggregated'?)"
    assert nearest("disag", modes) == " (did you mean 'disagg'?)"
    assert nearest("moe_tpp", ["moe_tp", "tp", "ep"]) == " (did you mean 'moe_tp'?)"
    assert nearest("xyz", modes) == ""
