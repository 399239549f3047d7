"""Find the learners and the course notebooks in a SUBMISSIONS folder, and what is wrong with it.

Each learner is a folder `SUBMISSIONS/<learner>/`; a course notebook is recognised by its file name
(`02_scaling.ipynb`). Notebooks are read into memory here, once, so that nothing a running notebook
does to the folders later changes what is graded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import nbformat

from attn_course.reference import EXERCISES

IGNORED = (".ipynb_checkpoints", "__pycache__", ".DS_Store")
"""Names in a learner folder that are neither reported nor looked at."""


class SubmissionsError(Exception):
    """SUBMISSIONS cannot be graded at all (missing, not a folder, unreadable)."""


@dataclass(frozen=True)
class Submission:
    """One course notebook handed in by one learner."""

    stem: str
    """The course notebook, by stem."""
    path: Path
    """The file in the learner's folder."""
    data: bytes
    """Its bytes, as read at discovery."""
    problem: str
    """Empty when `data` is a valid notebook; else why it is not."""


@dataclass(frozen=True)
class Learner:
    """One learner's folder."""

    name: str
    """The folder's name."""
    folder: Path
    """The folder."""
    submissions: tuple[Submission, ...]
    """The course notebooks found, in course order."""
    problems: tuple[str, ...]
    """What else is wrong with the folder: empty, notebooks with unknown names."""


def notebook_problem(data: bytes) -> str:
    """Why `data` is not a valid notebook, or "" when it is one."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"the file is not UTF-8 text (byte {error.start}), so it is not a notebook"
    if not text.strip():
        return "the file is empty"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        return f"the file is not a notebook (not valid JSON: line {error.lineno}, column {error.colno})"
    if not isinstance(raw, dict) or "cells" not in raw:
        return "the file is JSON but not a notebook (no cells)"
    try:
        notebook = nbformat.reads(text, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # nbformat raises several kinds for malformed notebooks
        return f"the file is not a valid notebook ({type(error).__name__}: {str(error)[:160]})"
    return ""


def find_learner(folder: Path) -> Learner:
    """The course notebooks and the problems of one learner folder."""
    known = {f"{stem}.ipynb": stem for stem in EXERCISES}
    submissions: dict[str, Submission] = {}
    problems: list[str] = []
    entries = sorted(p for p in folder.iterdir() if p.name not in IGNORED)
    for path in entries:
        if path.name.endswith(".ipynb") and path.name not in known:
            expected = ", ".join(sorted(known))
            problems.append(f"`{path.name}` is not a course notebook name (expected one of: {expected})")
        elif path.name in known and (path.is_symlink() or not path.is_file()):
            problems.append(f"`{path.name}` is not a regular file")
        elif path.name in known:
            data = path.read_bytes()
            stem = known[path.name]
            submissions[stem] = Submission(stem, path, data, notebook_problem(data))
    if not entries:
        problems.append("the folder is empty: no notebook was handed in")
    elif not submissions and not problems:
        problems.append("the folder holds no course notebook")
    ordered = tuple(submissions[stem] for stem in EXERCISES if stem in submissions)
    return Learner(folder.name, folder, ordered, tuple(problems))


def discover(submissions: Path) -> tuple[list[Learner], list[str]]:
    """The learners of SUBMISSIONS, sorted by name, and problems with SUBMISSIONS itself.

    Raises SubmissionsError when SUBMISSIONS is not a readable folder.
    """
    if not submissions.exists():
        raise SubmissionsError(f"{submissions} does not exist")
    if not submissions.is_dir():
        raise SubmissionsError(f"{submissions} is not a folder (it should hold one folder per learner)")
    try:
        entries = sorted(p for p in submissions.iterdir() if p.name not in IGNORED)
    except OSError as error:
        raise SubmissionsError(f"cannot read {submissions}: {error}") from error
    learners = [find_learner(p) for p in entries if p.is_dir() and not p.is_symlink()]
    problems = [
        f"`{p.name}` at the top of {submissions.name} is not a learner folder and was skipped"
        for p in entries
        if not p.is_dir() or p.is_symlink()
    ]
    return learners, problems


def course_notebooks(names: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The course notebook stems named by `names` (stem, file name or number), in course order.

    None or empty means every course notebook. Raises SubmissionsError naming an unknown name.

    >>> course_notebooks(["02_scaling.ipynb", "01"])
    ('01_dot_product_attention', '02_scaling')
    """
    if not names:
        return tuple(EXERCISES)
    chosen = set()
    for name in names:
        stem = Path(name).name.removesuffix(".ipynb")
        found = [s for s in EXERCISES if stem in (s, s.split("_")[0])]
        if not found:
            raise SubmissionsError(
                f"{name!r} is not a course notebook (expected one of: {', '.join(EXERCISES)})"
            )
        chosen.add(found[0])
    return tuple(s for s in EXERCISES if s in chosen)
