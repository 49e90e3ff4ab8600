"""The README's images are made by the command lines the README shows beside them (docs/make_gallery.py
README_COMMANDS), and every gallery image README.md or docs/usage.md shows is one make_gallery.py writes."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _gallery():
    spec = importlib.util.spec_from_file_location("make_gallery", ROOT / "docs" / "make_gallery.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shown_commands(text: str) -> list[str]:
    """Every indented command line of ``text``, continuation lines joined, spaces collapsed, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [" ".join(line.split("#")[0].split()) for line in joined.splitlines() if line.startswith("    fastmodel ")]


def test_each_readme_image_is_made_by_the_commands_shown_before_it():
    text = README.read_text()
    for name, lines in _gallery().README_COMMANDS.items():
        image = text.find(f"(docs/gallery/{name})")
        assert image > 0, f"README.md shows no docs/gallery/{name}"
        before = text[:text.rfind("![", 0, image)]           # from the image before this one to this one
        shown = _shown_commands(before[before.rfind("\n\n![") + 1:])
        for line in lines:
            assert " ".join(line.split()) in shown, f"{name}: README shows no `{line}` before the image"


def test_every_gallery_image_the_docs_show_is_written_by_make_gallery():
    source = (ROOT / "docs" / "make_gallery.py").read_text()
    for doc in (README, ROOT / "docs" / "usage.md"):
        for name in re.findall(r"gallery/([\w.-]+\.png)\)", doc.read_text()):
            assert f'"{name}"' in source, f"{doc.name} shows gallery/{name}; docs/make_gallery.py does not write it"
            assert (ROOT / "docs" / "gallery" / name).is_file(), name
