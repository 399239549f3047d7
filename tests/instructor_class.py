"""The instructor class of shared/fixtures (14 learners' real work on notebooks 03 and 07), copied for a test.

In CI a copy of `shared/` lies beside the clone; a worktree finds it further up. Tests that need the
class skip, saying where they looked, when it is absent.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = next(
    (p / "shared" / "fixtures" for p in ROOT.parents if (p / "shared" / "fixtures").is_dir()),
    ROOT.parent / "shared" / "fixtures",
)
CLASS = FIXTURES / "instructor-class"
needs_class = pytest.mark.skipif(
    not CLASS.is_dir(), reason=f"the instructor class is not here: no {CLASS} (shared/ beside the clone)"
)


def copy_class(into: Path, learners: tuple[str, ...] | None = None) -> Path:
    """Copy the class (or only `learners`) into `into/submissions`, with `mo`'s empty folder; its path."""
    subs = into / "submissions"
    subs.mkdir(parents=True)
    for folder in sorted(CLASS.iterdir()):
        if folder.is_dir() and (learners is None or folder.name in learners):
            shutil.copytree(folder, subs / folder.name)
    if learners is None or "mo" in learners:
        (subs / "mo").mkdir()  # mo handed in nothing: an empty folder
    return subs


def keep_cells(notebook: Path, keep: list[range]) -> None:
    """Keep only the cells of `notebook` in `keep`, in the order of `keep` (a shorter run, same code)."""
    nb = nbformat.read(notebook, as_version=4)
    nb.cells = [nb.cells[i] for r in keep for i in r]
    nbformat.write(nb, notebook)
