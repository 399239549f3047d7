"""An instructor's overrides (`--overrides FILE`): points and a note for one learner's exercise,
applied on every later run, so a regrade never undoes a decision.

The file is CSV with the header `learner,exercise,points,note`:

    learner,exercise,points,note
    lena,causal_mask,1,"Handed in late by e-mail; graded by hand"
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

from attn_course.grading.points import POINTS
from attn_course.grading.results import LearnerResult

COLUMNS = ["learner", "exercise", "points", "note"]


class OverridesError(ValueError):
    """An overrides file that cannot be used; the message names the file and the line."""


@dataclass(frozen=True)
class Override:
    """The points an instructor gives one learner for one exercise, and why."""

    learner: str
    """The learner's folder name."""
    exercise: str
    """The exercise NAME."""
    points: float
    """The points that replace the grader's."""
    note: str
    """Why, in the instructor's words; the learner's feedback shows it."""


def read_overrides(path: Path) -> tuple[Override, ...]:
    """The overrides of the file at `path`; OverridesError names a bad line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise OverridesError(f"cannot read the overrides file {path}: {error}") from error
    rows = list(enumerate(csv.reader(text.splitlines()), start=1))
    rows = [(n, [c.strip() for c in row]) for n, row in rows if any(c.strip() for c in row)]
    if not rows or [c.lower() for c in rows[0][1][:4]] != COLUMNS:
        raise OverridesError(f"{path}: the first line must be the header {','.join(COLUMNS)}")
    found: dict[tuple[str, str], Override] = {}
    for number, row in rows[1:]:
        where = f"{path}, line {number}"
        learner, exercise, value, note = (row + ["", "", "", ""])[:4]
        if not learner or exercise not in POINTS:
            raise OverridesError(f"{where}: expected a learner and an exercise NAME, got {','.join(row)!r}")
        try:
            points = float(value)
        except ValueError:
            raise OverridesError(f"{where}: {value!r} is not a number of points") from None
        if not 0 <= points < float("inf"):
            raise OverridesError(f"{where}: points must be a number ≥ 0, not {value!r}")
        if (learner, exercise) in found:
            raise OverridesError(f"{where}: {learner}'s {exercise} is overridden twice")
        worth = int(points) if points.is_integer() else points
        found[(learner, exercise)] = Override(learner, exercise, worth, note or "set by your instructor")
    return tuple(found.values())


def apply_overrides(learner: LearnerResult, overrides: tuple[Override, ...]) -> LearnerResult:
    """`learner` with the points and notes of their overrides."""
    mine = {o.exercise: o for o in overrides if o.learner == learner.learner}
    if not mine:
        return learner
    notebooks = tuple(
        replace(
            n,
            exercises=tuple(
                replace(e, points=mine[e.exercise].points, override=mine[e.exercise].note)
                if e.exercise in mine
                else e
                for e in n.exercises
            ),
        )
        for n in learner.notebooks
    )
    return replace(learner, notebooks=notebooks)


def unused(overrides: tuple[Override, ...], learners: tuple[LearnerResult, ...]) -> tuple[str, ...]:
    """Overrides that match no learner or no exercise of the gradebook, as problems to report."""
    graded = {(r.learner, e.exercise) for r in learners for n in r.notebooks for e in n.exercises}
    return tuple(
        f"overrides: {o.learner}'s {o.exercise} is not in this gradebook (no such learner or notebook)"
        for o in overrides
        if (o.learner, o.exercise) not in graded
    )
