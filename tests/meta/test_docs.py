"""The docs the code cites exist: every ``docs/model.md §x.y`` names a section of docs/model.md,
and every relative link of README.md and docs/*.md points at a file of the repository."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL_DOC = ROOT / "docs" / "model.md"
CITATION = re.compile(r"docs/model\.md ((?:§[A-Z0-9.]*[A-Z0-9](?:,? )?)+)")
SECTION = re.compile(r"§([A-Z0-9.]*[A-Z0-9])")


def sections() -> set[str]:
    """Section numbers of docs/model.md headings: '## 5. Costs' -> '5', '### 5.4 ...' -> '5.4', 'Appendix A.' -> 'A'."""
    found = set()
    for line in MODEL_DOC.read_text().splitlines():
        match = re.match(r"#{2,4} (?:Appendix )?([A-Z0-9]+(?:\.[0-9]+)*)\.? ", line)
        if match:
            found.add(match.group(1))
    return found


def citations() -> list[tuple[str, str]]:
    """(file, section) of every docs/model.md citation in the code, tests and benches."""
    cited = []
    for folder in ("fastmodel", "kernels", "tests", "bench", "docs"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for match in CITATION.finditer(path.read_text()):
                cited += [(str(path.relative_to(ROOT)), number) for number in SECTION.findall(match.group(1))]
    return cited


def test_model_doc_has_numbered_sections():
    found = sections()
    assert {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "A"} <= found
    assert {"5.3", "5.4", "6.2", "10.1", "10.6", "A.2"} <= found


def test_code_cites_the_model_doc_often():
    assert len(citations()) >= 25


@pytest.mark.parametrize("where, number", citations())
def test_every_citation_resolves(where, number):
    assert number in sections(), f"{where} cites docs/model.md §{number}, which has no such section"


def test_model_doc_cross_references_resolve():
    text = MODEL_DOC.read_text()
    missing = sorted({n for n in SECTION.findall(text) if n not in sections()})
    assert not missing, f"docs/model.md refers to missing sections {missing}"


@pytest.mark.parametrize("doc", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])
def test_relative_links_resolve(doc):
    path = ROOT / doc
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
        assert (path.parent / target).exists(), f"{doc} links to {target}, which does not exist"
