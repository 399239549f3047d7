"""A learner's working copy: their own copies of the student notebooks, never overwritten.

`notebooks/` holds the student notebooks exactly as the release writes them; a learner works in
a copy (`my-work/`, ignored by git), made once per notebook. Updating the course (`git pull`)
changes `notebooks/` and never the copy; a fresh copy of one notebook keeps the old one beside it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import nbformat

from attn_course.tooling.release import language_info

WORK = Path("my-work")
"""Where `make lab` puts the working copy, relative to the repository's root."""


class WorkspaceError(ValueError):
    """A working copy that cannot be made as asked; the message says why."""


@dataclass(frozen=True)
class Copied:
    """One notebook copied into the working copy."""

    source: Path
    """The student notebook it was copied from."""
    target: Path
    """The learner's copy."""
    kept: Path | None = None
    """Where the learner's previous copy was moved (a fresh copy only), or None."""


def working_copy(student: nbformat.NotebookNode, source: Path) -> nbformat.NotebookNode:
    """The learner's copy of a student notebook: the same cells, saying where it came from.

    Its language info names this Python, the one `make lab`'s kernels run, so that JupyterLab
    finds nothing to change when the kernel connects and an untouched copy never asks to be saved.
    """
    copy = nbformat.from_dict(student)
    copy.metadata["language_info"] = language_info(sys.version.split()[0])
    copy.metadata["attn_course"] = {
        "working_copy_of": f"{source.parent.name}/{source.name}",
        "note": "Your working copy: `make lab` and `git pull` never overwrite it.",
    }
    return copy


def _copy(source: Path, target: Path) -> None:
    student = nbformat.read(source, as_version=4)
    text = nbformat.writes(working_copy(student, source)) + "\n"
    with target.open("x", encoding="utf-8") as file:  # "x": never overwrite, even in a race
        file.write(text)


def _student_notebooks(notebooks: Path) -> list[Path]:
    sources = sorted(notebooks.glob("*.ipynb"))
    if not sources:
        raise WorkspaceError(f"no student notebooks in {notebooks}/ to copy")
    return sources


def set_up(notebooks: Path, work: Path) -> list[Copied]:
    """Copy into `work` each student notebook it does not have yet; never touch one it has."""
    sources = _student_notebooks(notebooks)
    work.mkdir(parents=True, exist_ok=True)
    copied = []
    for source in sources:
        target = work / source.name
        if not target.exists():
            _copy(source, target)
            copied.append(Copied(source, target))
    return copied


def find_notebook(name: str, notebooks: Path) -> Path:
    """The student notebook `name` names: its file name, its stem or its number ("03")."""
    sources = _student_notebooks(notebooks)
    stem = Path(name).name.removesuffix(".ipynb")
    matches = [s for s in sources if s.stem == stem] or [s for s in sources if s.stem.split("_")[0] == stem]
    if len(matches) != 1:
        known = ", ".join(s.stem for s in sources)
        raise WorkspaceError(f"no course notebook called {name!r}; the notebooks are: {known}")
    return matches[0]


def fresh_copy(name: str, notebooks: Path, work: Path, now: datetime | None = None) -> Copied:
    """A fresh copy of one notebook in `work`; the learner's copy, if any, is kept beside it."""
    source = find_notebook(name, notebooks)
    work.mkdir(parents=True, exist_ok=True)
    target = work / source.name
    kept = None
    if target.exists():
        stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
        kept = target.with_name(f"{source.stem}.old-{stamp}.ipynb")
        if kept.exists():
            raise WorkspaceError(f"{kept} exists already: try again in a second")
        target.rename(kept)
    _copy(source, target)
    return Copied(source, target, kept)
