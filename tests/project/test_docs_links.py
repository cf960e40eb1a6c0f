"""Every relative link of README.md, DEVELOPERS.md and docs/*.md names a file that exists, and every #anchor a
heading of that file (GitHub's slugs): a section moved between pages (docs/results.md, docs/benchmarks.md) must
take its links with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

DOCS = [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        s = slug(heading)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def links() -> list[tuple[str, str]]:
    return [(doc.relative_to(REPO).as_posix(), m.group(1)) for doc in DOCS
            for m in LINK.finditer(FENCE.sub("", doc.read_text(encoding="utf-8")))
            if not re.match(r"[a-z]+:", m.group(1))]


def test_the_slug_is_githubs():
    assert slug("Making R_evidence reachable: the levers side by side") == \
        "making-r_evidence-reachable-the-levers-side-by-side"
    assert slug("Quickstart: a fresh clone's `make quickstart`") == "quickstart-a-fresh-clones-make-quickstart"
    assert slug("Quick start (two commands)") == "quick-start-two-commands"


@pytest.mark.parametrize(("doc", "link"), links())
def test_the_link_resolves(doc, link):
    path, _, anchor = link.partition("#")
    target = (REPO / doc).parent / path if path else REPO / doc
    assert target.exists(), f"{doc}: {link} names no file"
    if anchor and target.suffix == ".md":
        assert anchor in anchors(target), f"{doc}: {link} names no heading of {target.relative_to(REPO)}"
