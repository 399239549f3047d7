"""The class list (`--roster FILE`): who should have handed in, and the columns an LMS matches them by.

A roster is CSV. With a header that has a `learner` column, that column holds each learner's folder
name in SUBMISSIONS and the other columns (Canvas's `Student`, `ID`, `SIS User ID`, `SIS Login ID`,
`Section`; Moodle's `email` or `username`) are copied, in their order, into the LMS export
(`report.write_lms`). Without one, each line's first cell is a folder name.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path


class RosterError(ValueError):
    """A roster that cannot be used; the message names the file and the line."""


@dataclass(frozen=True)
class Roster:
    """The learners of a class, in the roster's order, with the LMS's own columns for each."""

    learners: tuple[str, ...]
    """Each learner's folder name in SUBMISSIONS, in the roster's order."""
    columns: tuple[str, ...] = ()
    """The roster's other columns, in its order (empty for a list of names)."""
    rows: tuple[tuple[str, ...], ...] = ()
    """Per learner (in `learners`' order), their values of `columns`."""

    def identity(self, learner: str) -> tuple[str, ...]:
        """The LMS columns of `learner` (blank cells for one not on the roster)."""
        if learner in self.learners and self.rows:
            return self.rows[self.learners.index(learner)]
        return ("",) * len(self.columns)


def read_roster(path: Path) -> Roster:
    """Read a roster file (see the module's docstring); RosterError names what is wrong."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's UTF-8 starts with a BOM
    except (OSError, UnicodeDecodeError) as error:
        raise RosterError(f"cannot read the roster {path}: {error}") from error
    rows = [[cell.strip() for cell in row] for row in csv.reader(text.splitlines())]
    numbered = [(n, row) for n, row in enumerate(rows, start=1) if any(row)]
    if not numbered:
        raise RosterError(f"the roster {path} lists nobody")
    header = [cell.lower() for cell in numbered[0][1]]
    if "learner" in header:
        at = header.index("learner")
        columns = tuple(c for i, c in enumerate(numbered[0][1]) if i != at)
        body = numbered[1:]
    else:
        at, columns, body = 0, (), numbered
    learners: list[str] = []
    values: list[tuple[str, ...]] = []
    for number, row in body:
        name = row[at] if at < len(row) else ""
        if not name:
            raise RosterError(f"{path}, line {number}: no learner folder name")
        if name in learners:
            raise RosterError(f"{path}, line {number}: {name} is listed twice")
        learners.append(name)
        cells = [c for i, c in enumerate(row) if i != at] if columns else []
        values.append(tuple((cells + [""] * len(columns))[: len(columns)]))
    return Roster(tuple(learners), columns, tuple(values))
