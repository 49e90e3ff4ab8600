"""The serving API's ``evaluate`` takes one value per argument (``fastmodel/serve/one_value.py``): a list, tuple,
set, range or numpy array where a scalar belongs is one SpecError naming the argument and pointing at ``sweep``,
never a TypeError or a misleading nearest name; a 0-d numpy array or numpy scalar is its one value."""
import numpy as np
import pytest

from fastmodel.errors import SpecError
from fastmodel.serve import api
from fastmodel.serve.one_value import one_value_kwargs


@pytest.mark.parametrize("kwargs, field", [
    (dict(batch_size=8, tp=[1, 2]), "tp"),
    (dict(batch_size=8, input_len=(1024, 2048)), "input_len"),
    (dict(batch_size=np.array([8, 16])), "batch_size"),
    (dict(batch_size=8, precision=["bf16", "fp8"]), "precision"),          # was TypeError: unhashable type
    (dict(batch_size=8, kv_precision=("fp8",)), "kv_precision"),            # was TypeError: unhashable type
    (dict(batch_size=8, engine=["vllm"]), "engine"),                        # was "unknown engine \"['vllm']\""
    (dict(concurrency={8, 16}), "concurrency"),
])
def test_a_sequence_where_one_value_belongs_is_one_line(kwargs, field):
    with pytest.raises(SpecError) as err:
        api.evaluate("llama3-8b", "H100", **kwargs)
    assert err.value.field == field
    assert "one value" in err.value.reason and "sweep" in err.value.reason


@pytest.mark.parametrize("model, device, field", [
    (["llama3-8b"], "H100", "model"),         # was ValueError: dictionary update sequence element #0
    ("llama3-8b", ["H100"], "device"),        # was "unknown device ['H100'] (did you mean 'h100'?)"
    ("llama3-8b", ("H100", "A100"), "device"),
])
def test_a_list_of_models_or_devices_is_one_line(model, device, field):
    with pytest.raises(SpecError) as err:
        api.evaluate(model, device, batch_size=8)
    assert err.value.field == field and "sweep" in err.value.reason


def test_a_zero_d_array_is_its_value():
    got = one_value_kwargs(dict(tp=np.array(2), batch_size=np.int64(8), precision="bf16"))
    assert got == {"tp": 2, "batch_size": 8, "precision": "bf16"}
    assert type(got["tp"]) is int
    one = api.evaluate("llama3-8b", "H100", batch_size=np.array(8), tp=np.array(2))
    assert one["status"] == "ok"
    assert one["ttft"] == api.evaluate("llama3-8b", "H100", batch_size=8, tp=2)["ttft"]


def test_a_mapping_model_stays_a_model():
    cols = api.model_columns("llama3-8b")
    assert one_value_kwargs({"model": cols})["model"] == cols


def test_a_count_with_a_unit_suffix_says_which_number():
    """``input_len="8k"`` said "expected a number, got '8k'"; the CLI's ``--input-len 8k`` names 8000 or 8192."""
    with pytest.raises(SpecError) as err:
        api.evaluate("llama3-8b", "H100", batch_size=8, input_len="8k")
    assert str(err.value) == ("input_len: expected a number, got '8k'; a count takes no unit suffix; write the whole "
                              "number (8k tokens: 8000 or 8192)")
    with pytest.raises(SpecError) as err:
        api.evaluate("llama3-8b", "H100", batch_size=8, tp="4")
    assert str(err.value) == "tp: expected a number, got '4'"
