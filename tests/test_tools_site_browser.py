"""`make site`'s pages in a real browser (issue 49): a notebook page with its figures and its math.

The page is built with the notebook executed (`tools.site --execute`, at quick budgets, the course's
versions standing in for the unfinished exercises) and opened from disk in Debian's chromium, as the
browser test does (tests/test_browser.py: skipped without chromium, failed in CI). Screenshots of the
page and of the index's search go to test-output/browser/ beside the browser test's.
"""

from __future__ import annotations

import pytest

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, MISSING, OUTPUT
from tools.site import build_site

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
STEM = "05_rope"  # math on every screen, seven figures, about ten seconds at quick budgets
MATH_TYPESET = """() => window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0
    && document.querySelectorAll('.MathJax, .MathJax_Display').length > 0"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    build_site(out, [STEM], run=True)
    return out


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1200, "height": 1000})
    yield page
    page.close()


def test_a_notebook_page_shows_its_figures_and_its_math_fetching_nothing(site, page):
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto((site / f"{STEM}.html").as_uri())
    page.wait_for_function(MATH_TYPESET, timeout=60_000)
    assert page.locator(".MathJax, .MathJax_Display").count() > 20
    assert page.locator(".MathJax_Error, .merror").count() == 0  # no TeX MathJax could not read
    figures = page.eval_on_selector_all(
        "img", "imgs => imgs.filter(i => i.complete && i.naturalWidth > 100).length"
    )
    assert figures >= 5, figures
    assert page.locator("text=Using the course's").count() > 0  # the look cells say whose code ran
    assert page.locator("text=NotImplementedError").count() > 0  # the exercises as the learner gets them
    assert page.locator("a", has_text="Open in Colab").count() == 1
    # Only the site's own files (MathJax probes fonts with about:blank, which is not the network).
    assert [url for url in fetched if not url.startswith(("file:", "data:", "about:"))] == []
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=OUTPUT / f"site_{STEM}.png", full_page=True)


def test_the_index_search_finds_the_notebook(site, page):
    page.goto((site / "index.html").as_uri())
    page.fill("#q", "relative position")
    results = page.locator("#results li a")
    results.first.wait_for()
    assert STEM in (results.first.get_attribute("href") or "")
    page.fill("#q", "no notebook says zyzzyva")
    assert page.locator("#results li", has_text="No notebook mentions that").count() == 1
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page.fill("#q", "rotation")
    page.screenshot(path=OUTPUT / "site_index_search.png", full_page=True)
