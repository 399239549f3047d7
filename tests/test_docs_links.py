"""Every relative link of the documentation resolves: README.md, CONTRIBUTING.md and docs/*.md (issue 49).

A link `[text](path#anchor)` outside code must name a file or folder that exists, relative to the page
that holds it, and its anchor a heading of that file, spelt as GitHub spells heading anchors. Links to
other sites (`https://…`) are not fetched: the tests run offline.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$", re.M)


def prose(markdown: str) -> str:
    """The text outside fenced code blocks and code spans, where a link is a link."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen.

    >>> slug("Notebook 09 and `attn-course bench --backward`")
    'notebook-09-and-attn-course-bench---backward'
    >>> slug("What a check's message means")
    'what-a-checks-message-means'
    """
    text = re.sub(r"<[^>]+>", "", title).replace("`", "").lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page, with GitHub's -1, -2 … for repeated titles."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(match["title"])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    targets = [m["target"] for m in LINK.finditer(prose(page.read_text(encoding="utf-8")))]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.name}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


def test_the_guides_and_the_measurements_exist_and_the_readme_links_each():
    readme = set(relative_links(ROOT / "README.md"))
    for guide in ("learners", "instructors", "contributors", "measurements", "gpu-support"):
        assert (ROOT / "docs" / f"{guide}.md").is_file(), guide
        linked = any(t.partition("#")[0] == f"docs/{guide}.md" for t in readme)
        assert linked, f"README links no docs/{guide}.md"


def test_a_broken_link_and_a_broken_anchor_are_found(tmp_path):
    (tmp_path / "there.md").write_text("# A title\n\n## What `x` means\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#what-x-means) [no file](missing.md) [no anchor](there.md#nope) "
        "[web](https://example.org) `[in code](missing.md)`\n```\n[fenced](missing.md)\n```\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["there.md#what-x-means", "missing.md", "there.md#nope"]
    assert anchors(tmp_path / "there.md") == {"a-title", "what-x-means"}


@pytest.mark.parametrize(
    ("title", "anchor"),
    [
        ("Notebook 09 and `attn-course bench --backward`", "notebook-09-and-attn-course-bench---backward"),
        ("What a check's message means", "what-a-checks-message-means"),
        ("nbgrader (JupyterHub)", "nbgrader-jupyterhub"),
        ("Grading: hand out, collect", "grading-hand-out-collect"),
    ],
)
def test_anchors_are_spelt_as_github_spells_them(title, anchor):
    assert slug(title) == anchor
