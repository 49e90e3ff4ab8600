"""``best``'s own refusals name the Python argument from Python and the flag from ``fastmodel best``
(fastmodel/analysis/best.py raises with the argument's name, fastmodel/cli/best.py translates through
``cli/common.flag_names``, as calibrate and ``serve --search`` do)."""

import pytest
from plot_data import synthetic_file
from suite_fixtures import cli, one_line_error

from fastmodel.analysis.best import best
from fastmodel.errors import SweepError

#: (arguments of best, what Python says, what the command line says for the same refusal)
CASES = [
    (dict(by="throughput", top=0), "top=0: must be at least 1", ("--by", "throughput", "--top", "0"),
     "--top 0: must be at least 1"),
    (dict(by="plan"), "by='plan' is a dimension of the result (filter on it, e.g. where='plan=...'), not a "
     "variable to rank by", ("--by", "plan"), "--by plan is a dimension of the result (filter on it, e.g. "
     "--where plan=...), not a variable to rank by"),
    (dict(by="status"), "by='status': status is categorical, not a quantity to rank by; filter on it (e.g. "
     "where='status=ok')", ("--by", "status"), "--by status: status is categorical, not a quantity to rank by; "
     "filter on it (e.g. --where status=ok)"),
]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return synthetic_file(tmp_path_factory)


@pytest.mark.parametrize("arguments, python, flags, command", CASES)
def test_python_names_the_argument_and_the_command_its_flag(result, arguments, python, flags, command):
    with pytest.raises(SweepError) as error:
        best(str(result), **arguments)
    assert str(error.value).startswith(python) and "--" not in str(error.value)
    one_line_error(cli("best", str(result), *flags), f"error: {command}")
