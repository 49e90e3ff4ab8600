"""The docs the code cites exist: every ``docs/model.md §x.y`` names a section of docs/model.md; every
relative link of README.md and docs/ points at a file of the repository (and at a heading of it, with
``#``); docs/architecture.md's package tables name every module, and only modules that exist."""

import os
import re
import sys
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


DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
#: a relative link: its file (empty for a link within the page) and its anchor (without '#'), if any
LINK = re.compile(r"\]\(([^()#:\s]*)(?:#([^()\s]*))?\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but '-' and '_' removed, spaces
    to '-' (``## 10. Semantics`` -> ``10-semantics``; `` ### `fastmodel/lm/` `` -> ``fastmodellm``)."""
    text = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (outside code blocks), a repeated one as GitHub numbers it."""
    found: set[str] = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.+)", line)
        if match:
            base = slug(match.group(1))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def test_slug_is_githubs():
    assert slug("10. Semantics") == "10-semantics"
    assert slug("4. Lowering: one Program per structure") == "4-lowering-one-program-per-structure"
    assert slug("`fastmodel/lm/`") == "fastmodellm"
    assert slug("Where the code diverges from ARCHITECTURE.md") == "where-the-code-diverges-from-architecturemd"


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    """Every relative link of README.md and docs/ names a file of the repository and, with '#', a heading of
    that Markdown file (or of the page itself)."""
    path = ROOT / doc
    for target, anchor in LINK.findall(path.read_text()):
        linked = path.parent / target if target else path
        assert linked.exists(), f"{doc} links to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{doc} links to {target}#{anchor}: {target or doc} has no such heading"


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def documented_modules() -> list[str]:
    """The modules docs/architecture.md's package tables name: a row `` | `name.py` | job | `` under a heading
    `` ### `folder/` ``, as ``folder/name.py``."""
    named, folder = [], None
    for line in ARCHITECTURE.read_text().splitlines():
        if line.startswith("#"):
            match = re.match(r"### `([\w/]+/)`$", line)
            folder = match.group(1) if match else None
        elif folder:
            row = re.match(r"\| `([\w/]+\.py)` \|", line)
            if row:
                named.append(folder + row.group(1))
    return named


def source_modules() -> set[str]:
    """Every module of fastmodel/, kernels/, specs/ and bench/ (not through a symlink, as a worktree's
    fastmodel/kernels)."""
    found = set()
    for folder in ("fastmodel", "kernels", "specs", "bench"):
        for where, _, files in os.walk(ROOT / folder):
            found.update(str((Path(where) / f).relative_to(ROOT).as_posix()) for f in files if f.endswith(".py"))
    return found


def test_architecture_names_every_module_once():
    named = documented_modules()
    assert len(named) > 200
    twice = sorted({m for m in named if named.count(m) > 1})
    assert not twice, f"docs/architecture.md lists these modules twice: {twice}"
    missing = sorted(source_modules() - set(named))
    assert not missing, f"add a row per module to docs/architecture.md's package tables: {missing}"
    stale = sorted(set(named) - source_modules())
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def test_module_finder_reads_a_table(tmp_path, monkeypatch):
    page = tmp_path / "architecture.md"
    page.write_text("### `fastmodel/x/`\n\n| module | job |\n|---|---|\n| `a.py` | A |\n\n## Other\n\n| `b.py` | B |\n")
    monkeypatch.setattr(sys.modules[__name__], "ARCHITECTURE", page)
    assert documented_modules() == ["fastmodel/x/a.py"]


def test_architecture_names_every_test_folder():
    """A test lives in a folder docs/architecture.md's `tests/` section names (`tests/<wing>`, `shared`, `behaviour`,
    `meta`, `data`): a new folder (a tests/cli/ beside tests/behaviour/, say) fails until the page follows."""
    text = ARCHITECTURE.read_text().split("### `tests/`", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`tests/(\w+)", text))
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert folders - named == set(), f"docs/architecture.md's tests/ section names no {sorted(folders - named)}"


#: test files a doc names that are not this repository's: DeepEP's benchmark (docs/model_serving.md §S39), and the
#: tests of an unmerged branch (docs/calibration.md, the MoE calibration column tried on h-calmoe)
OTHER_REPOSITORIES_TESTS = {"tests/test_low_latency.py", "tests/lm/test_calibrate_moe.py"}


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_every_test_file_a_doc_names_exists(doc):
    """Tests moved into tests/<wing>/ leave no `tests/test_x.py` behind in the docs that cite them."""
    path = ROOT / doc if doc == "README.md" else ROOT / "docs" / doc
    named = set(re.findall(r"(?<![\w/])tests/[\w/]+\.py", path.read_text())) - OTHER_REPOSITORIES_TESTS
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing, f"{doc} names test files that do not exist: {missing}"


def test_the_index_of_section_11_lists_every_subsection_once():
    """docs/model.md's "Index of §11" table names each `### 11.x` heading once, in order, and nothing else."""
    text = MODEL_DOC.read_text()
    headings = re.findall(r"^### (11\.\d+) ", text, flags=re.MULTILINE)
    start = text.index("### Index of §11")
    table = text[start:text.index("### 11.1 ", start)]
    listed = re.findall(r"^\| §(11\.\d+) \|", table, flags=re.MULTILINE)
    assert listed == headings, f"the index lists {listed}; the headings are {headings}"
