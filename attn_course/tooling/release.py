"""Student release: write notebooks/ from solutions/, replacing marked solutions with stubs.

In a code cell, the lines from `### BEGIN SOLUTION` to `### END SOLUTION` become a
`raise NotImplementedError` at the marker's indentation; in a Markdown cell, an answer prompt.
Everything else is kept. Outputs and execution counts are cleared in both folders.

Every notebook, solution and student version alike, starts with a managed header of two cells,
marked `{"attn_course": {"managed": "header"}}` in their metadata: an "Open in Colab" badge for
the notebook's own path and a setup cell that, on Colab only, installs the course package at the
notebook's revision, then reports the device. Both are written from `attn_course.tooling.repository`; an old
header is replaced, wherever it stands.

The release never destroys what it did not write. Each student notebook records a fingerprint of
every cell it wrote (`released_cells` in its metadata); a cell of a student notebook on disk that
is neither what this release writes nor what an earlier one wrote is someone's work, and the
release refuses (`WorkInTheWay`), writing nothing, unless forced. A student notebook without a
solution is left alone (removed only when forced, and only if a release wrote it).

Question and answer cells (`attn_course.questions`) hold no solution markers and are released as
they stand; a learner's text in an answer cell is someone's work like any other, named as the
written answer to its question.

Run All goes on past an unfinished exercise. Every exercise cell and every check cell of a student
notebook gets the `raises-exception` cell tag (`RUN_ON_TAG`): JupyterLab, Jupyter Notebook and VS
Code then send it with `stop_on_error` off, so a failed check shows its red CheckFailed and the
cells below still run (on the course's version of that exercise) instead of being left without
their outputs. A solution notebook carries no such tag: nbval lets a tagged cell fail, and every
check of a solution must pass.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from attn_course.questions import answer_label
from attn_course.tooling.repository import (
    INSTALL_SPEC_VARIABLE,
    PACKAGE,
    REVISION,
    colab_url,
    install_requirement,
)

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB_MARK = "# YOUR CODE HERE"
CODE_STUB = (
    "{indent}" + STUB_MARK + "\n"
    '{indent}raise NotImplementedError("Exercise: replace this line with your code.")'
)
OPTIONAL = " (optional)"
"""After BEGIN: a region the learner may leave empty (helpers their design may not need), so its stub is
a comment only: a `raise` there would stop a Run All in a cell no check follows."""
OPTIONAL_STUB = "{indent}" + STUB_MARK + " (if your design needs any; none? leave this cell as it is)"
MARKDOWN_STUB = "*Your answer here.*"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
LANGUAGE_INFO: dict[str, Any] = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
"""The language_info the python3 kernel (ipykernel) reports, less its Python's version."""
_MARKER = re.compile(r"^(?P<indent>\s*)(?P<marker>### (BEGIN|END) SOLUTION)(?P<optional> \(optional\))?\s*$")
RUN_ON_TAG = "raises-exception"
"""The cell tag that lets Run All go on past an error in the cell (JupyterLab, Jupyter Notebook, VS
Code, nbclient); nbval lets such a cell fail."""
_CHECK_CALL = re.compile(r"^check_\w+\(", re.M)
"""A check cell's call, `check_NAME(NAME)`, at the start of a line (more arguments allowed)."""


class ReleaseError(ValueError):
    """A solution notebook the release cannot turn into a student notebook; the message names it."""


class WorkInTheWay(ReleaseError):
    """Student notebooks hold work the release did not write; nothing was written."""

    def __init__(self, notebooks: dict[Path, list[str]]) -> None:
        self.notebooks = notebooks
        """Each notebook holding work, with a description of each cell that holds it."""
        lines = [f"{path}: {', '.join(cells)}" for path, cells in notebooks.items()]
        super().__init__(
            "these notebooks hold work the release did not write, so nothing was written:\n  "
            + "\n  ".join(lines)
        )


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
    orphan: str = ""
    """For a student notebook without a solution: "generated" (a release wrote it, its solution
    is gone) or "own" (someone's own notebook); empty otherwise."""


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
            stub = OPTIONAL_STUB if match["optional"] else CODE_STUB
            out.append(stub.format(indent=match["indent"]) if cell_type == "code" else MARKDOWN_STUB)
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
BADGE_ID, SETUP_ID, HOW_TO_ID = "attn-course-badge", "attn-course-setup", "attn-course-how-to"
HOW_TO_SOURCE = """\
**How this notebook works.** Each exercise is a function whose body is
`raise NotImplementedError(...)`: replace that line with your code and run the cell, then run the
check cell after it (`check_NAME(NAME)`). A right answer prints one line that ends in *passed*; a
wrong one stops with a red **CheckFailed** that says what is wrong and how to fix it.

**Run All goes on past an exercise that is not done yet.** Its check shows a red *CheckFailed*
that says why, and the cells after it still run: they use your function once its check has passed,
and the course's own version until then, each saying which in one line. After a Run All, scroll up
to the first red *CheckFailed*: that is the exercise to do next. (Colab does not know the cell tag
that does this: there Run All may stop at the first *CheckFailed*; click the cell after it and use
*Runtime → Run after*.)

Work in your own copy: `make lab` opens `my-work/`, which nothing the course runs overwrites
(`attn-course workspace --fresh NN` gives you a fresh copy of notebook NN and keeps yours beside it);
on Colab, *File → Save a copy in Drive*."""
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"
SETUP_SOURCE = """\
# @title Setup: on Colab, install the course package; everywhere, report the device
# Written by `attn-course release` from attn_course/tooling/repository.py: edit that file, not this cell.
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


def header_cells(folder: str, name: str, student: bool = False) -> list[nbformat.NotebookNode]:
    """The managed header of the notebook `folder/name`: its Colab badge and its setup cell, and in a
    student notebook, how the notebook works."""
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
    how_to = nbformat.v4.new_markdown_cell(
        HOW_TO_SOURCE, id=HOW_TO_ID, metadata={"attn_course": dict(HEADER_METADATA)}
    )
    return [badge, setup, how_to] if student else [badge, setup]


def with_header(
    notebook: nbformat.NotebookNode, folder: str, name: str, student: bool = False
) -> nbformat.NotebookNode:
    """`notebook` with its header cells (if any) replaced by the current header: badge and setup at
    the top, and in a student notebook, how it works under the title."""
    body = [cell for cell in notebook.cells if not is_header(cell)]
    taken = {cell.get("id") for cell in body} & {BADGE_ID, SETUP_ID, HOW_TO_ID}
    if taken:
        raise ReleaseError(f"{name}: cell id {sorted(taken)[0]!r} is reserved for the release's header")
    badge, setup, *how_to = header_cells(folder, name, student)
    title = body[:1] if body and body[0].cell_type == "markdown" else []
    notebook.cells = [badge, setup, *title, *how_to, *body[len(title) :]]  # how it works: under the title
    return notebook


def language_info(python_version: str | None = None) -> dict[str, Any]:
    """The notebook's language_info as the python3 kernel reports it, with `python_version` if given.

    JupyterLab writes the kernel's language_info and kernelspec into a notebook as its kernel
    connects, and marks the notebook modified unless they equal what the file holds, the kernel's
    Python version included. The release, run anywhere, cannot know that version and leaves it
    out; a copy made on the machine whose Python runs the kernel can add it
    (`python_version=sys.version.split()[0]`, as ipykernel states it) and then opens unmodified.

    >>> language_info("3.12.4")["version"], language_info()["pygments_lexer"]
    ('3.12.4', 'ipython3')
    """
    info = copy.deepcopy(LANGUAGE_INFO)
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
        if RUN_ON_TAG in cell.metadata.get("tags", []):
            raise ReleaseError(
                f"{where}: a solution cell must not carry the {RUN_ON_TAG!r} tag (nbval would let it "
                "fail); the release gives it to the student notebook's exercise and check cells"
            )
        cell.source, found = strip_solutions(cell.source, cell.cell_type, where)
        regions += found
        if cell.cell_type == "code" and (found or _CHECK_CALL.search(cell.source)):
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), RUN_ON_TAG]
    with_header(student, folder, name, student=True)
    student.metadata["attn_course"] = {
        "generated_from": f"solutions/{name}",
        "note": "Generated by `attn-course release`: edit the solution notebook, not this one.",
        "released_cells": {cell.id: fingerprint(cell.source) for cell in student.cells},
    }
    return student, regions


def fingerprint(source: str) -> str:
    """A short, stable fingerprint of one cell's source."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def released_fingerprints(notebook: nbformat.NotebookNode) -> set[str]:
    """Fingerprints of the cells a release wrote into this student notebook (empty if none)."""
    record = notebook.metadata.get("attn_course", {}).get("released_cells", {})
    return set(record.values()) if isinstance(record, dict) else set()


_DEFINES = re.compile(r"^\s*(?:def|class)\s+(\w+)", re.M)


def work_in(existing: nbformat.NotebookNode, student: nbformat.NotebookNode) -> list[str]:
    """Cells of the student notebook on disk that no release wrote, described for a person.

    A cell counts as written by a release when its source is what `student` (this release) has
    under the same id, or what an earlier release recorded having written.
    """
    released = released_fingerprints(existing)
    new = {cell.get("id"): cell for cell in student.cells}
    found = []
    for index, cell in enumerate(existing.cells):
        ours = new.get(cell.get("id"))
        if (ours is not None and ours.source == cell.source) or fingerprint(cell.source) in released:
            continue
        if ours is None:
            what = "not written by the release"
        elif answer_label(ours):
            what = f"a written answer to question {answer_label(ours)}"
        elif MARKDOWN_STUB in ours.source:
            what = "a written answer"
        elif STUB_MARK in ours.source:
            names = _DEFINES.findall(ours.source)
            what = f"exercise `{names[0]}`" if names else "an exercise"
        else:
            first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
            what = f"edited: {first[:40]!r}" if first else "edited"
        found.append(f"cell {index} ({what})")
    return found


def _text(notebook: nbformat.NotebookNode) -> str:
    return nbformat.writes(notebook) + "\n"


def is_generated(notebook: nbformat.NotebookNode) -> bool:
    """Whether a release wrote this student notebook (it says so in its metadata)."""
    return "generated_from" in notebook.metadata.get("attn_course", {})


def _read(path: Path) -> nbformat.NotebookNode | None:
    try:
        return nbformat.read(path, as_version=4)
    except Exception:  # not a notebook nbformat can read: treat it as someone's file
        return None


def release(
    solutions: Path, notebooks: Path, *, check: bool = False, force: bool = False
) -> list[ReleasedNotebook]:
    """Write (or with `check`, only compare) the student version of every solution notebook.

    Also writes the header and clears the outputs of the solution notebooks in place unless
    `check`. Refuses with `WorkInTheWay`, before writing anything, when a student notebook holds
    work no release wrote, unless `force`. Student notebooks without a solution are left alone;
    with `force`, those a release wrote are removed.
    """
    sources = sorted(solutions.glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no notebooks in {solutions}")
    planned: list[tuple[ReleasedNotebook, str, str]] = []
    work: dict[Path, list[str]] = {}
    for source in sources:
        solution = nbformat.read(source, as_version=4)
        student, regions = student_version(solution, source.name, notebooks.resolve().name)
        target = notebooks / source.name
        text = _text(student)
        changed = not target.exists() or target.read_text(encoding="utf-8") != text
        cleaned = _text(clean(with_header(solution, solutions.resolve().name, source.name)))
        source_changed = source.read_text(encoding="utf-8") != cleaned
        if changed and target.exists():
            existing = _read(target)
            found = work_in(existing, student) if existing is not None else ["not a readable notebook"]
            if found:
                work[target] = found
        planned.append((ReleasedNotebook(source, target, regions, changed, source_changed), text, cleaned))
    if work and not check and not force:
        raise WorkInTheWay(work)
    results = []
    for result, text, cleaned in planned:
        if not check:
            if result.source_changed:
                result.source.write_text(cleaned, encoding="utf-8")
            if result.changed:
                result.target.parent.mkdir(parents=True, exist_ok=True)
                result.target.write_text(text, encoding="utf-8")
        results.append(result)
    for orphan in sorted(set(notebooks.glob("*.ipynb")) - {r.target for r in results}):
        notebook = _read(orphan)
        kind = "generated" if notebook is not None and is_generated(notebook) else "own"
        if kind == "generated" and force and not check:
            orphan.unlink()
        results.append(ReleasedNotebook(solutions / orphan.name, orphan, 0, kind == "generated", orphan=kind))
    return results
