"""Every constant the real-world model reads has a row in docs/model.md "Appendix B. Constants and their sources":
each device-file key (with its values per device as the files write them), each registry device or network
column, each field a stack profile sets (naming every profile that sets it), each module-level constant; each row of
B.1, B.2, B.4 and B.5 gives a bracket tag of the appendix's legend ([D], [P], [M], [F], [A]; a bare "§" or "docs/"
reference is no source) and, for [A], its sensitivity; and the B.3 and B.6 rows name keys and constants that exist.
``tests/constants_inventory.py`` enumerates."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import constants_inventory as inventory  # noqa: E402

from fastmodel.registry.lm import COLUMNS, DEVICE_COLUMNS, NETWORK_COLUMNS  # noqa: E402

#: the tags of Appendix B's legend ("[D] datasheet ..., [P] paper, [M] public measurement, [F] framework source ...,
#: [A] an assumption"), brackets included
TAG = re.compile(r"\[(?:D|P|M|F|A)\]")
SENSITIVITY = re.compile(r"[Ss]ensitivity")


def unsourced(part: int, rows: dict) -> list[str]:
    """The rows of table B.``part`` whose description and assumption cells (the fourth on) give no bracket tag, or
    mark an assumption [A] without its sensitivity."""
    bad = []
    for name, cells in rows.items():
        text = " | ".join(cells[3:])
        if not TAG.search(text):
            bad.append(f"B.{part} row `{name}` gives no source tag ([D], [P], [M], [F] or [A])")
        elif "[A]" in text and not SENSITIVITY.search(text):
            bad.append(f"B.{part} row `{name}` is an assumption [A] without its sensitivity")
    return bad


def undocumented(names, rows: dict) -> list[str]:
    """The names that have no row."""
    return [name for name in names if name not in rows]


@pytest.fixture(scope="module")
def tables():
    return {part: inventory.doc_table(f"### B.{part}") for part in range(1, 7)}


def test_the_appendix_has_its_tables(tables):
    assert all(tables[part] for part in range(1, 7)), "docs/model.md Appendix B lacks one of B.1-B.6"


def test_every_device_file_key_has_a_row_with_the_files_values(tables):
    keys = inventory.device_keys()
    assert len(keys) >= 30
    missing = undocumented(keys, tables[1])
    assert not missing, f"device-file keys without a row in docs/model.md B.1: {missing}"
    for key in keys:
        assert tables[1][key][2] == inventory.values_cell(key), (
            f"B.1 row `{key}`: values differ from the device files; write: {inventory.values_cell(key)}"
        )


def test_every_registry_device_and_network_column_is_documented(tables):
    for column in DEVICE_COLUMNS + NETWORK_COLUMNS:
        if column.name in tables[1]:
            continue
        assert column.name in tables[2], f"registry column {column.name} has no row in docs/model.md B.1 or B.2"
        assert tables[2][column.name][2] == inventory.number(column.default), (
            f"B.2 row `{column.name}`: default differs from the registry's {inventory.number(column.default)}"
        )


def test_every_datasheet_field_of_the_cluster_system_files_has_a_row(tables):
    keys = inventory.cluster_keys()
    assert "peak_flops_bf16" in keys
    missing = undocumented(keys, tables[3])
    assert not missing, f"cluster system-file keys without a row in docs/model.md B.3: {missing}"


def test_every_field_a_stack_profile_sets_has_a_row_naming_its_profiles(tables):
    fields = inventory.stack_fields()
    assert len(fields) >= 30
    missing = undocumented(fields, tables[4])
    assert not missing, f"stack-profile fields without a row in docs/model.md B.4: {missing}"
    for field, profiles in fields.items():
        for profile in profiles:
            assert profile in tables[4][field][3], f"B.4 row `{field}` does not name {profile}, which sets it"


def test_every_module_constant_is_listed_with_its_file(tables):
    listed = {**tables[6], **tables[5]}
    constants = inventory.module_constants()
    assert len(constants) >= 150
    missing = [f"{where}: {name}" for where, name, _ in constants if name not in listed or where not in listed[name][1]]
    assert not missing, f"module constants without a row in docs/model.md B.5 or B.6: {missing}"


@pytest.mark.parametrize("part", [1, 2, 4, 5])
def test_each_row_has_a_source_or_an_assumption_with_its_sensitivity(tables, part):
    bad = unsourced(part, tables[part])
    assert not bad, "; ".join(bad)


def test_the_cluster_and_index_rows_name_what_exists(tables):
    """B.3: each row's fields are cluster system-file keys and its column cell names registry columns, with a value
    for every file; B.6 (and B.5): each constant named exists, in every file its row names, and B.6 says its kind."""
    keys, columns = inventory.cluster_keys(), {column.name for column in COLUMNS}
    for name, cells in tables[3].items():
        assert name in keys, f"B.3 row `{name}`: no cluster system file has this key"
        named = re.findall(r"`([^`]+)`", cells[1])
        assert named and set(named) <= columns, f"B.3 row `{name}`: column cell {cells[1]!r} names no registry column"
        assert all(cells[2:]), f"B.3 row `{name}` has an empty cell"
    files: dict[str, set[str]] = {}
    for where, name, _ in inventory.module_constants():
        files.setdefault(name, set()).add(where)
    for part in (5, 6):
        for name, cells in tables[part].items():
            stated = {place.strip() for place in cells[1].split(",")}
            assert name in files, f"B.{part} row `{name}`: no module constant of that name (inventory)"
            assert stated <= files[name], f"B.{part} row `{name}`: not a constant of {sorted(stated - files[name])}"
        assert all(len(cells) >= 3 and cells[2] for cells in tables[6].values()), "a B.6 row gives no kind"


def test_the_checks_fail_on_an_undocumented_key_or_a_changed_value(tables):
    """A key added to a device file, or a field to a stack profile, is reported; so is a changed value."""
    keys = [*inventory.device_keys(), "made_up_key"]
    assert undocumented(keys, tables[1]) == ["made_up_key"]
    fields = [*inventory.stack_fields(), "made_up_field"]
    assert undocumented(fields, tables[4]) == ["made_up_field"]
    text = inventory.MODEL_DOC.read_text().replace(
        "| `kernel_overhead_s` | s | all: 4e-6 |", "| `kernel_overhead_s` | s | all: 5e-6 |"
    )
    assert inventory.doc_table("### B.1", text)["kernel_overhead_s"][2] != inventory.values_cell("kernel_overhead_s")
    assert "kernel_overhead_s" not in inventory.doc_table("### B.1", text.replace("`kernel_overhead_s` | s", "x | s"))


def test_the_tag_check_fails_on_a_row_without_a_bracket_tag():
    """A row whose only reference is a bare section or docs/ path, or whose tag is lost, is reported; [A] without
    its sensitivity too."""
    text = inventory.MODEL_DOC.read_text()
    row = "| `PROTO_BASE_LATENCY` | kernels/nccl.py |"
    assert row in text
    start = text.index(row)
    line = text[start : text.index("\n", start)]
    bare = "| `PROTO_BASE_LATENCY` | kernels/nccl.py | 1 | s | see §11.5 and docs/model.md | — |"
    assert unsourced(5, inventory.doc_table("### B.5", text.replace(line, bare))) == [
        "B.5 row `PROTO_BASE_LATENCY` gives no source tag ([D], [P], [M], [F] or [A])"
    ]
    untagged = line.replace("[F]", "F")
    assert len(unsourced(5, inventory.doc_table("### B.5", text.replace(line, untagged)))) == 1
    assumed = "| `PROTO_BASE_LATENCY` | kernels/nccl.py | 1 | s | NCCL | [A] no source |"
    assert unsourced(5, inventory.doc_table("### B.5", text.replace(line, assumed))) == [
        "B.5 row `PROTO_BASE_LATENCY` is an assumption [A] without its sensitivity"
    ]
    assert not unsourced(5, inventory.doc_table("### B.5", text))
