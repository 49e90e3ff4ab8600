"""JSONL readers of run and serving records (fastmodel/spec/records.py ``read_jsonl``)."""

import pytest

from fastmodel.errors import SpecError
from fastmodel.spec.records import Refused, read_jsonl


def _lower(data, where):
    if not isinstance(data, dict) or "id" not in data:
        raise SpecError(where, "id", "required field missing")
    return data["id"]


def test_refusals_are_collected_and_good_lines_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a"}\n{"x": 1}\n{"id": "b"}\n')
    refused = []
    assert read_jsonl(path, _lower, "records", refused=refused) == ["a", "b"]
    assert [r.where for r in refused] == [f"{path}:2"]


def test_an_empty_file_is_an_error_even_beside_another_files_refusals(tmp_path):
    """A caller's list may already hold another file's refusals: an empty file is still "no records", one line (it
    raised IndexError reading the earlier file's entry as this one's)."""
    earlier = [Refused("other.jsonl:1", {}, "bad")]
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(SpecError, match="no records in the file"):
        read_jsonl(path, _lower, "records", refused=earlier)
    path.write_text("not json\n")
    with pytest.raises(SpecError, match="not one line of the file is JSON"):
        read_jsonl(path, _lower, "records", refused=earlier)
