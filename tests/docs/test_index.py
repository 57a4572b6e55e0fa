"""docs/README.md indexes every page of docs/."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_docs_page_is_in_the_index():
    linked = set(re.findall(r"\]\(([\w./-]+\.md)\)", (DOCS / "README.md").read_text()))
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert pages <= linked, f"docs/README.md does not link {sorted(pages - linked)}"
