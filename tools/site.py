"""`make site`: the course as a static website, built offline from registry packages (issue 49).

Every student notebook of `notebooks/` becomes one HTML page: its prose, its math (MathJax 2 from the
`jupyter-server-mathjax` package, copied beside the pages; nothing from a CDN), its code, and each
exercise as the learner gets it (the release's stub, never the solution: the pages are made from
`notebooks/`, not `solutions/`). Each page links back to the index, to the notebook on Colab and to
the learners' guide's set-up (running it locally). The index lists the notebooks and has a search box:
`search.js` holds each page's text, searched in the browser.

With `--execute` (`make site EXECUTE=1`) each notebook is first run in a fresh kernel at its quick
budgets (`ATTN_COURSE_QUICK=1`), its check cells left out, so that every look and measure cell runs
the course's version of the unfinished exercises (`yours_if_passed` says so in one line) and the pages
show their figures. Without it the pages have no outputs.

    python -m tools.site --out site                     # every notebook, no outputs
    python -m tools.site --out site --execute           # with the figures
    python -m tools.site --out /tmp/s --notebooks 02_scaling
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from attn_course.reference import EXERCISES
from attn_course.tooling.repository import REPOSITORY, REVISION, colab_url

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
TEMPLATES = Path(__file__).resolve().parent / "site_templates"
MATHJAX_DIR = "mathjax"
MATHJAX_URL = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
"""Relative to each page: the MathJax the package ships, with the configuration it ships."""
CHECK_CALL = re.compile(r"^\s*check_\w+\(\w+\)\s*$")
LOCAL_URL = f"{REPOSITORY}/blob/{REVISION}/docs/learners.md#set-up-and-open-the-course"


@dataclass(frozen=True)
class Page:
    """One notebook's page: its stem, title and file, and its text for the search."""

    stem: str  # the notebook's name without .ipynb, "02_scaling"
    title: str  # its first heading, "02 · Why divide by √d_k"
    file: str  # the page's file name in the site, "02_scaling.html"
    text: str  # its Markdown and code, for the search box


def mathjax_static() -> Path:
    """The folder of MathJax files the `jupyter-server-mathjax` package ships."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).resolve().parent / "static"


def is_check_cell(cell: nbformat.NotebookNode) -> bool:
    return (
        cell.cell_type == "code" and bool(cell.source.strip()) and CHECK_CALL.match(cell.source) is not None
    )


def is_colab_header(cell: nbformat.NotebookNode) -> bool:
    """The release's badge and setup cell: the page has its own Colab link and runs nothing."""
    managed = cell.metadata.get("attn_course", {}).get("managed") == "header"
    return managed and (cell.cell_type == "code" or "colab-badge" in cell.source)


def title_of(notebook: nbformat.NotebookNode, stem: str) -> str:
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            found = re.search(r"^#\s+(.+)$", cell.source, re.M)
            if found:
                return found[1].strip()
    return stem


def execute(notebook: nbformat.NotebookNode, folder: Path, timeout: int) -> None:
    """Run the notebook in place, its check cells left out, at quick budgets, without a GPU.

    The check cells stay in the page with no output; every other cell keeps what it printed and drew.
    """
    sources = {index: cell.source for index, cell in enumerate(notebook.cells) if is_check_cell(cell)}
    for index in sources:
        notebook.cells[index].source = "pass"
    saved = dict(os.environ)
    os.environ.update(
        ATTN_COURSE_QUICK="1", TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1"
    )
    try:
        NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(folder)}},
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    for index, source in sources.items():
        notebook.cells[index].source = source
        notebook.cells[index].outputs = []
        notebook.cells[index].execution_count = None


def page_text(notebook: nbformat.NotebookNode) -> str:
    """What the search box searches: the Markdown and the code, as one line of words."""
    text = " ".join(cell.source for cell in notebook.cells if cell.cell_type in ("markdown", "code"))
    return re.sub(r"\s+", " ", text)


def render(notebook: nbformat.NotebookNode, stem: str, title: str) -> str:
    """One notebook as a page of the site (tools/site_templates/attn_site)."""
    exporter = HTMLExporter(template_name="attn_site", extra_template_basedirs=[str(TEMPLATES)])
    exporter.mathjax_url = MATHJAX_URL
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    resources = {
        "metadata": {"name": title},
        "site": {
            "index": "index.html",
            "colab": colab_url("notebooks", f"{stem}.ipynb"),
            "local": LOCAL_URL,
            "stem": stem,
        },
    }
    body, _ = exporter.from_notebook_node(notebook, resources=resources)
    return body


def build_page(stem: str, out: Path, *, run: bool, timeout: int = 300) -> Page:
    path = NOTEBOOKS / f"{stem}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = [cell for cell in notebook.cells if not is_colab_header(cell)]
    if run:
        execute(notebook, path.parent, timeout)
    title = title_of(notebook, stem)
    page = Page(stem=stem, title=title, file=f"{stem}.html", text=page_text(notebook))
    (out / page.file).write_text(render(notebook, stem, title), encoding="utf-8")
    return page


def index_html(pages: list[Page]) -> str:
    rows = "\n".join(
        f'<li><a href="{html.escape(p.file)}">{html.escape(p.title)}</a>'
        f'<span class="exercises">{html.escape(", ".join(EXERCISES.get(p.stem, [])))}</span></li>'
        for p in pages
    )
    return (TEMPLATES / "index.html").read_text(encoding="utf-8").replace("{{ pages }}", rows)


def search_js(pages: list[Page]) -> str:
    entries = [{"file": p.file, "title": p.title, "text": p.text} for p in pages]
    script = (TEMPLATES / "search.js").read_text(encoding="utf-8")
    header = "// Generated by tools/site.py from notebooks/: do not edit."
    return f"{header}\nconst PAGES = {json.dumps(entries)};\n{script}"


def build_site(
    out: Path, stems: list[str] | None = None, *, run: bool = False, timeout: int = 300
) -> list[Page]:
    """Write the site into `out`: one page per student notebook, the index, the search and MathJax."""
    stems = stems or sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    out.mkdir(parents=True, exist_ok=True)
    mathjax = out / MATHJAX_DIR
    if not (mathjax / "MathJax.js").exists():
        shutil.copytree(mathjax_static(), mathjax, dirs_exist_ok=True)
    shutil.copy(TEMPLATES / "site.css", out / "site.css")
    pages = [build_page(stem, out, run=run, timeout=timeout) for stem in stems]
    (out / "index.html").write_text(index_html(pages), encoding="utf-8")
    (out / "search.js").write_text(search_js(pages), encoding="utf-8")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "site", help="the site's folder (default: site)")
    parser.add_argument("--notebooks", nargs="+", metavar="STEM", help="e.g. 02_scaling (default: all)")
    parser.add_argument("--execute", action="store_true", help="run each notebook first, for its figures")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell when executing")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    pages = build_site(args.out, args.notebooks, run=args.execute, timeout=args.timeout)
    seconds = time.perf_counter() - start
    how = "executed" if args.execute else "not executed"
    print(f"site: {len(pages)} pages ({how}) in {args.out} in {seconds:.1f} s; open {args.out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
