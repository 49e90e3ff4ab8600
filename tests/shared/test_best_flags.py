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
    # the filters (where_mask): 'where: ...' from Python, '--where: ...' from the command line (the leftover of the
    # last stop: fastmodel best said 'where:', the Python argument, for the flag)
    (dict(by="throughput", where=["num_nodes=3"]), "where: num_nodes=3 is not in the data; values: 16, 32, 64, 128",
     ("--by", "throughput", "--where", "num_nodes=3"), "--where: num_nodes=3 is not in the data; values: 16, 32, 64, "
     "128"),
    (dict(by="throughput", where=["fits_memory=maybe"]), "where: fits_memory is true or false, cannot compare with "
     "'maybe'", ("--by", "throughput", "--where", "fits_memory=maybe"), "--where: fits_memory is true or false, "
     "cannot compare with 'maybe'"),
    (dict(by="throughput", where=["plan=tp"]), "where: plan='tp' is not in the data",
     ("--by", "throughput", "--where", "plan=tp"), "--where: plan='tp' is not in the data"),
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


def test_plot_pareto_names_its_where_flag(result, tmp_path):
    """plot pareto --where filters with the same where_mask as best: its refusals name the flag too."""
    one_line_error(cli("plot", "pareto", str(result), "--x", "step_time", "--y", "memory_per_device", "--where",
                       "num_nodes>x", "-o", str(tmp_path / "p.png")),
                   "error: --where: num_nodes is numeric, cannot compare with 'x'")
    assert not (tmp_path / "p.png").exists()
