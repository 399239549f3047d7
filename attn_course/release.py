"""Student release: write notebooks/ from solutions/, replacing marked solutions with stubs.

In a code cell, the lines from `### BEGIN SOLUTION` to `### END SOLUTION` become a
`raise NotImplementedError` at the marker's indentation; in a Markdown cell, an answer prompt.
Everything else is kept. Outputs and execution counts are cleared in both folders.

Every notebook, solution and student version alike, starts with a managed header of two cells,
marked `{"attn_course": {"managed": "header"}}` in their metadata: an "Open in Colab" badge for
the notebook's own path and a setup cell that, on Colab only, installs the course package at the
notebook's revision, then reports the device. Both are written from `attn_course.course`; an old
header is replaced, wherever it stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attn_course.course import INSTALL_SPEC_VARIABLE, PACKAGE, REVISION, colab_url, install_requirement

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
CODE_STUB = (
    "{indent}# YOUR CODE HERE\n"
    '{indent}raise NotImplementedError("Exercise: replace this line with your code.")'
)
MARKDOWN_STUB = "*Your answer here.*"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
"""The language_info the python3 kernel (ipykernel) reports, less its Python's version."""
_MARKER = re.compile(r"^(?P<indent>\s*)(?P<marker>### (BEGIN|END) SOLUTION)\s*$")


class ReleaseError(ValueError):
    """A solution notebook the release cannot turn into a student notebook; the message names it."""


class MarkerError(ReleaseError):
    """Solution markers that are unbalanced or nested; the message names notebook and cell."""


@dataclass(frozen=True)
class ReleasedNotebook:
    """One student notebook written (or checked) by the release."""

    source: Path
    """The solution notebook it comes from."""
    target: Path
    """The student notebook."""
    exercises: int
    """How many solution regions were replaced by stubs."""
    changed: bool
    """Whether the student notebook on disk differed from the release."""
    source_changed: bool = False
    """Whether the solution notebook on disk differed from its released form (header, outputs)."""


def strip_solutions(source: str, cell_type: str, where: str) -> tuple[str, int]:
    """Replace each marked solution region of one cell's source; returns (source, regions)."""
    lines = source.split("\n")
    out: list[str] = []
    inside_since: int | None = None
    regions = 0
    for number, line in enumerate(lines, start=1):
        match = _MARKER.match(line)
        stray = (BEGIN in line or END in line) and match is None
        if stray:
            raise MarkerError(
                f"{where}, line {number}: a solution marker must stand alone on its line: {line.strip()!r}"
            )
        if match and match["marker"] == BEGIN:
            if inside_since is not None:
                raise MarkerError(
                    f"{where}, line {number}: {BEGIN} inside the region opened on line {inside_since}"
                )
            inside_since = number
            regions += 1
            out.append(CODE_STUB.format(indent=match["indent"]) if cell_type == "code" else MARKDOWN_STUB)
        elif match and match["marker"] == END:
            if inside_since is None:
                raise MarkerError(f"{where}, line {number}: {END} without a {BEGIN} before it")
            inside_since = None
        elif inside_since is None:
            out.append(line)
    if inside_since is not None:
        raise MarkerError(f"{where}, line {inside_since}: {BEGIN} is never closed by {END}")
    return "\n".join(out), regions


HEADER_METADATA = {"managed": "header"}
"""What a header cell holds under its metadata's "attn_course" key."""
BADGE_ID, SETUP_ID = "attn-course-badge", "attn-course-setup"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
SETUP_SOURCE = """\
# @title Setup: on Colab, install the course package; everywhere, report the device
# Written by `attn-course release` from attn_course/course.py: edit that file, not this cell.
# On Colab this installs attn-course {version} (this notebook's revision); elsewhere it installs nothing.
import importlib.metadata
import os
import shlex
import subprocess
import sys

try:
    import google.colab  # noqa: F401  (only Colab has it)

    ON_COLAB = True
except ImportError:
    ON_COLAB = False

if ON_COLAB:
    try:
        installed = importlib.metadata.version("{package}")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != "{version}":
        pip_args = shlex.split(os.environ.get("{variable}", "")) or ["{requirement}"]
        print("Installing", *pip_args)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *pip_args], check=True)
        importlib.invalidate_caches()
    from google.colab import output

    output.enable_custom_widget_manager()  # let Colab render the explorers (ipywidgets)

from attn_course.device import describe_device

describe_device()"""


def is_header(cell: nbformat.NotebookNode) -> bool:
    """Whether `cell` is one of the header cells the release manages."""
    return cell.get("metadata", {}).get("attn_course") == HEADER_METADATA


def header_cells(folder: str, name: str) -> list[nbformat.NotebookNode]:
    """The managed header of the notebook `folder/name`: its Colab badge and its setup cell."""
    badge = nbformat.v4.new_markdown_cell(
        f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(folder, name)})",
        id=BADGE_ID,
        metadata={"attn_course": dict(HEADER_METADATA)},
    )
    setup = nbformat.v4.new_code_cell(
        SETUP_SOURCE.format(
            package=PACKAGE,
            version=REVISION.removeprefix("v"),
            variable=INSTALL_SPEC_VARIABLE,
            requirement=install_requirement(),
        ),
        id=SETUP_ID,
        # Collapsed: Jupyter hides the source, Colab shows the "@title" line as a form.
        metadata={
            "attn_course": dict(HEADER_METADATA),
            "jupyter": {"source_hidden": True},
            "cellView": "form",
        },
    )
    return [badge, setup]


def with_header(notebook: nbformat.NotebookNode, folder: str, name: str) -> nbformat.NotebookNode:
    """`notebook` with its header cells (if any) replaced by the current header, at the top."""
    body = [cell for cell in notebook.cells if not is_header(cell)]
    taken = {cell.get("id") for cell in body} & {BADGE_ID, SETUP_ID}
    if taken:
        raise ReleaseError(f"{name}: cell id {sorted(taken)[0]!r} is reserved for the release's header")
    notebook.cells = header_cells(folder, name) + body
    return notebook


def language_info(python_version: str | None = None) -> dict:
    """The notebook's language_info as the python3 kernel reports it, with `python_version` if given.

    JupyterLab writes the kernel's language_info and kernelspec into a notebook as its kernel
    connects, and marks the notebook modified unless they equal what the file holds, the kernel's
    Python version included. The release, run anywhere, cannot know that version and leaves it
    out; a copy made on the machine whose Python runs the kernel can add it
    (`python_version=sys.version.split()[0]`, as ipykernel states it) and then opens unmodified.

    >>> language_info("3.12.4")["version"], language_info()["pygments_lexer"]
    ('3.12.4', 'ipython3')
    """
    info = {**LANGUAGE_INFO, "codemirror_mode": dict(LANGUAGE_INFO["codemirror_mode"])}
    return info if python_version is None else {**info, "version": python_version}


def clean(notebook: nbformat.NotebookNode, python_version: str | None = None) -> nbformat.NotebookNode:
    """Clear outputs and execution counts; name the python3 kernel and its language as JupyterLab does.

    `python_version` (the kernel's Python, `sys.version.split()[0]`) completes the language
    info, so that JupyterLab finds nothing to change on connecting (see `language_info`).
    """
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    notebook.metadata["language_info"] = language_info(python_version)
    return notebook


def student_version(
    solution: nbformat.NotebookNode, name: str, folder: str = "notebooks"
) -> tuple[nbformat.NotebookNode, int]:
    """The student notebook of one solution notebook (to be written to `folder/name`), and the
    number of stubbed regions."""
    student = nbformat.from_dict(clean(nbformat.from_dict(solution)))
    regions = 0
    for index, cell in enumerate(student.cells):  # numbered as in the solution notebook
        where = f"{name}, cell {index} ({cell.cell_type})"
        cell.source, found = strip_solutions(cell.source, cell.cell_type, where)
        regions += found
    with_header(student, folder, name)
    student.metadata["attn_course"] = {
        "generated_from": f"solutions/{name}",
        "note": "Generated by `attn-course release`: edit the solution notebook, not this one.",
    }
    return student, regions


def _text(notebook: nbformat.NotebookNode) -> str:
    return nbformat.writes(notebook) + "\n"


def release(solutions: Path, notebooks: Path, *, check: bool = False) -> list[ReleasedNotebook]:
    """Write (or with `check`, only compare) the student version of every solution notebook.

    Also writes the header and clears the outputs of the solution notebooks in place unless
    `check`. Student notebooks without a solution counterpart are removed (reported as changed).
    """
    results = []
    sources = sorted(solutions.glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no notebooks in {solutions}")
    if not check:
        notebooks.mkdir(parents=True, exist_ok=True)
    for source in sources:
        solution = nbformat.read(source, as_version=4)
        student, regions = student_version(solution, source.name, notebooks.resolve().name)
        target = notebooks / source.name
        text = _text(student)
        changed = not target.exists() or target.read_text(encoding="utf-8") != text
        cleaned = _text(clean(with_header(solution, solutions.resolve().name, source.name)))
        source_changed = source.read_text(encoding="utf-8") != cleaned
        if not check:
            if source_changed:
                source.write_text(cleaned, encoding="utf-8")
            if changed:
                target.write_text(text, encoding="utf-8")
        results.append(ReleasedNotebook(source, target, regions, changed, source_changed))
    for orphan in sorted(set(notebooks.glob("*.ipynb")) - {r.target for r in results}):
        if not check:
            orphan.unlink()
        results.append(ReleasedNotebook(solutions / orphan.name, orphan, 0, True))
    return results
