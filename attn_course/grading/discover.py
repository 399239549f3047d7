"""Find the learners and the course notebooks in a SUBMISSIONS folder, and what is wrong with it.

Each learner is a folder `SUBMISSIONS/<learner>/`; a course notebook is recognised by its file name
(`02_scaling.ipynb`). Notebooks are read into memory here, once, so that nothing a running notebook
does to the folders later changes what is graded.
"""

from __future__ import annotations

import json
import re
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
    accepted: str = ""
    """"misnamed" or "subfolder" when graded although not handed in under the course's name at the
    top of the folder (`accept_misplaced`, `--accept-misnamed`); "" otherwise."""


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
    misplaced: tuple[tuple[str, str, str], ...] = ()
    """Course notebooks not handed in as such but found elsewhere: (stem, the file's path relative to
    the folder, "misnamed" or "subfolder"). They are not graded: the learner is told where they are."""


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


def looks_like(name: str) -> str:
    """The course notebook that a file named `name` seems to be ("" for none).

    >>> looks_like("Copy of 02_scaling (1).ipynb"), looks_like("scaling.ipynb"), looks_like("notes.ipynb")
    ('02_scaling', '02_scaling', '')
    """
    plain = re.sub(r"[^a-z0-9]+", "_", name.lower().removesuffix(".ipynb"))
    for stem in EXERCISES:
        words = stem.split("_", 1)[1]
        if stem in plain or re.search(rf"(^|_){re.escape(words)}(_|$)", plain):
            return stem
    return ""


def _in_subfolders(folder: Path, depth: int = 3) -> list[Path]:
    """Notebooks in the subfolders of `folder`, at most `depth` folders down (links not followed)."""
    found: list[Path] = []
    todo = [(p, 1) for p in sorted(folder.iterdir()) if p.is_dir() and not p.is_symlink()]
    while todo:
        current, level = todo.pop(0)
        if current.name in IGNORED:
            continue
        try:
            entries = sorted(current.iterdir())
        except OSError:
            continue
        found += [p for p in entries if p.name.endswith(".ipynb") and p.is_file() and not p.is_symlink()]
        if level < depth:
            todo += [(p, level + 1) for p in entries if p.is_dir() and not p.is_symlink()]
    return found


def find_learner(folder: Path) -> Learner:
    """The course notebooks and the problems of one learner folder.

    A course notebook that is absent but found misnamed at the top of the folder, or in a subfolder,
    is reported in `Learner.misplaced`.
    """
    known = {f"{stem}.ipynb": stem for stem in EXERCISES}
    submissions: dict[str, Submission] = {}
    problems: list[str] = []
    misnamed: dict[str, str] = {}
    entries = sorted(p for p in folder.iterdir() if p.name not in IGNORED)
    for path in entries:
        if path.name.endswith(".ipynb") and path.name not in known:
            if looks_like(path.name) and path.is_file():
                misnamed.setdefault(looks_like(path.name), path.name)
                continue
            expected = ", ".join(sorted(known))
            problems.append(f"`{path.name}` is not a course notebook name (expected one of: {expected})")
        elif path.name in known and (path.is_symlink() or not path.is_file()):
            problems.append(f"`{path.name}` is not a regular file")
        elif path.name in known:
            data = path.read_bytes()
            stem = known[path.name]
            submissions[stem] = Submission(stem, path, data, notebook_problem(data))
    misplaced = {stem: (stem, name, "misnamed") for stem, name in misnamed.items() if stem not in submissions}
    problems += [
        f"`{name}` is not a course notebook name: {stem}.ipynb was handed in too, and only it is graded"
        for stem, name in misnamed.items()
        if stem in submissions
    ]
    for path in _in_subfolders(folder):
        stem = known.get(path.name) or looks_like(path.name)
        if stem and stem not in submissions and stem not in misplaced:
            misplaced[stem] = (stem, path.relative_to(folder).as_posix(), "subfolder")
    if not entries:
        problems.append("the folder is empty: no notebook was handed in")
    elif not submissions and not problems and not misplaced:
        problems.append("the folder holds no course notebook")
    ordered = tuple(submissions[stem] for stem in EXERCISES if stem in submissions)
    placed = tuple(misplaced[stem] for stem in EXERCISES if stem in misplaced)
    return Learner(folder.name, folder, ordered, tuple(problems), placed)


def misplaced_problem(stem: str, path: str, how: str) -> str:
    """What the learner is told of a course notebook found misnamed or in a subfolder."""
    if how == "misnamed":
        return (
            f"{stem}.ipynb was not handed in: `{path}` looks like it but is misnamed, so it was not "
            f"graded; rename it {stem}.ipynb"
        )
    return (
        f"{stem}.ipynb was not handed in at the top of your folder: it is in a subfolder, as `{path}`, "
        "so it was not graded; move it to the top of your folder"
    )


def accept_misplaced(learner: Learner) -> Learner:
    """`learner` with each course notebook found misnamed or in a subfolder taken as handed in
    (`Submission.accepted` says how it was found), for an instructor who accepts it."""
    if not learner.misplaced:
        return learner
    found = {s.stem: s for s in learner.submissions}
    for stem, path, how in learner.misplaced:
        try:
            data = (learner.folder / path).read_bytes()
        except OSError as error:  # gone or unreadable since discovery: graded as not a notebook
            data, problem = b"", f"the file cannot be read ({error.strerror or error})"
        else:
            problem = notebook_problem(data)
        found[stem] = Submission(stem, learner.folder / path, data, problem, accepted=how)
    ordered = tuple(found[stem] for stem in EXERCISES if stem in found)
    return Learner(learner.name, learner.folder, ordered, learner.problems, ())


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
