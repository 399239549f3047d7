"""`make site` (tools/site.py): a notebook's page has its math rendered offline and no solution code."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tools.site import MATHJAX_DIR, build_site, is_check_cell

ROOT = Path(__file__).resolve().parent.parent
STEM = "02_scaling"
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


def solution_lines(stem: str) -> list[str]:
    """The lines of the solutions' marked regions that the student notebook does not hold anywhere."""
    solution = (ROOT / "solutions" / f"{stem}.ipynb").read_text(encoding="utf-8")
    student = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    shipped = "\n".join(cell.source for cell in student.cells)
    regions = [
        region
        for cell in nbformat.reads(solution, as_version=4).cells
        for region in SOLUTION.findall(cell.source)
    ]
    lines = {line.strip() for region in regions for line in region.splitlines()}
    return sorted(line for line in lines if len(line) > 20 and line not in shipped)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    build_site(out, [STEM])
    return out


def test_the_page_renders_its_math_with_the_sites_own_mathjax(site):
    page = (site / f"{STEM}.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script[^>]*\bsrc="([^"]+)"', page)
    assert scripts, "the page loads no script, so no MathJax"
    assert all(not re.match(r"[a-z]+://|//", src) for src in scripts), scripts
    mathjax = [src for src in scripts if "MathJax.js" in src]
    assert mathjax and mathjax[0].startswith(f"{MATHJAX_DIR}/MathJax.js?config=")
    assert (site / MATHJAX_DIR / "MathJax.js").is_file()
    config = mathjax[0].split("config=", 1)[1].split(",")
    assert all((site / MATHJAX_DIR / "config" / f"{name}.js").is_file() for name in config), config
    assert r"\sqrt{d_k}" in page  # the TeX is on the page for MathJax to typeset


def test_the_page_shows_the_exercises_as_the_learner_gets_them_and_no_solution(site):
    page = (site / f"{STEM}.html").read_text(encoding="utf-8")
    assert "NotImplementedError" in page
    assert "BEGIN SOLUTION" not in page
    hidden = solution_lines(STEM)
    assert hidden, "no solution line to look for"
    import html

    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    leaked = [line for line in hidden if line in text]
    assert not leaked, leaked


def test_the_page_links_to_colab_to_running_it_locally_and_to_the_index(site):
    page = (site / f"{STEM}.html").read_text(encoding="utf-8")
    assert (
        f"colab.research.google.com/github/attn-course/attn-course/blob/v0.1.0/notebooks/{STEM}.ipynb" in page
    )
    assert "docs/learners.md#set-up-and-open-the-course" in page
    assert 'href="index.html"' in page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert f'href="{STEM}.html"' in index and 'id="q"' in index
    search = (site / "search.js").read_text(encoding="utf-8")
    assert f'"file": "{STEM}.html"' in search and "score_variance" in search


def test_the_local_link_points_at_a_heading_of_the_learners_guide():
    from tests.test_docs_links import anchors

    assert "set-up-and-open-the-course" in anchors(ROOT / "docs" / "learners.md")


def test_only_a_check_call_is_a_check_cell():
    cell = nbformat.v4.new_code_cell
    assert is_check_cell(cell("check_softmax(softmax)"))
    assert not is_check_cell(cell("def softmax(x):\n    check_softmax(softmax)"))
    assert not is_check_cell(nbformat.v4.new_markdown_cell("check_softmax(softmax)"))
