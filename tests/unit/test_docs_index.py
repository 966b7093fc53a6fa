"""docs/index.md links every page of docs/, and every link of the docs and the README resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def links(page: Path) -> set[Path]:
    return {
        (page.parent / target).resolve()
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target
    }


def test_the_index_links_every_page() -> None:
    pages = {p.resolve() for p in DOCS.glob("*.md")} - {(DOCS / "index.md").resolve()}
    missing = sorted(p.name for p in pages - links(DOCS / "index.md"))
    assert missing == [], f"not linked from docs/index.md: {missing}"


def test_the_readme_links_the_index() -> None:
    assert (DOCS / "index.md").resolve() in links(ROOT / "README.md")


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name
)
def test_links_to_pages_resolve(page: Path) -> None:
    broken = sorted(str(target) for target in links(page) if not target.exists())
    assert broken == [], f"{page.name} links to missing pages"
