"""Training-only columns in serving (review12 #4): ``moe_grouped_gemm`` is Megatron-Core's choice between
TEGroupedMLP and SequentialMLP (docs/model.md §11.57); no serving engine runs SequentialMLP, and serving never
charges its loop, so ``evaluate(..., moe_grouped_gemm=0)`` changed TPOT silently. It is refused in one line naming
the field, by the API and by a serving sweep file's axes (exit 2)."""

import pytest
from click.testing import CliRunner

from fastmodel.cli import main
from fastmodel.errors import SpecError
from fastmodel.serve.api import columns, evaluate
from fastmodel.serve.spec import TRAINING_COLUMNS

SWEEP = """
model = "mixtral-8x7b"
system = "H100"
[task]
name = "t"
kind = "serve"
input_len = 512
output_len = 64
batch_size = 8
[axes]
moe_grouped_gemm = [0, 1]
"""


@pytest.mark.parametrize("call", [evaluate, columns])
def test_the_api_refuses_moe_grouped_gemm_naming_it(call):
    with pytest.raises(SpecError) as error:
        call("mixtral-8x7b", "H100", batch_size=8, moe_grouped_gemm=0)
    assert error.value.field == "moe_grouped_gemm"
    assert "SequentialMLP" in str(error.value) and "\n" not in str(error.value)
    assert set(TRAINING_COLUMNS) == {"moe_grouped_gemm"}


def test_a_serving_sweep_axis_of_moe_grouped_gemm_is_refused_with_exit_2(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(SWEEP)
    run = CliRunner().invoke(main, ["sweep", str(path), "-o", str(tmp_path / "s.nc")])
    assert run.exit_code == 2, run.output
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "axes.moe_grouped_gemm" in lines[0] and "serving" in lines[0], run.stderr
    assert not (tmp_path / "s.nc").exists()
