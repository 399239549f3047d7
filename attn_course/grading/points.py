"""Points per exercise: one point each unless listed in `OVERRIDES`, or in a points file (`--points`).

A points file is CSV the instructor edits (in a spreadsheet or by hand): one `exercise,points` line
per exercise worth other than one point; a header line `exercise,points`, blank lines and lines
starting with `#` are skipped:

    exercise,points
    attention,2
    sample_next,0.5
"""

from __future__ import annotations

import csv
from pathlib import Path

from attn_course.reference import EXERCISES

OVERRIDES: dict[str, int] = {}
"""Exercises worth other than one point, by exercise name (for example {"MultiHeadAttention": 2})."""

POINTS: dict[str, int] = {name: OVERRIDES.get(name, 1) for names in EXERCISES.values() for name in names}
"""What each exercise is worth, by exercise name, for every exercise of the course."""


class PointsError(ValueError):
    """A points file that cannot be used; the message names the file and the line."""


def notebook_points(stem: str, points: dict[str, float] | None = None) -> float:
    """The most a notebook can score, by notebook stem (for example "02_scaling")."""
    return sum((points or POINTS)[name] for name in EXERCISES[stem])


def read_points(path: Path) -> dict[str, float]:
    """Every exercise's points: those of the points file at `path`, the default (`POINTS`) for the rest.

    Raises PointsError naming the line of an unknown exercise, a value that is not a number ≥ 0,
    or an exercise listed twice.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise PointsError(f"cannot read the points file {path}: {error}") from error
    points: dict[str, float] = dict(POINTS)
    seen: set[str] = set()
    for number, row in enumerate(csv.reader(text.splitlines()), start=1):
        cells = [cell.strip() for cell in row]
        if not any(cells) or cells[0].startswith("#") or cells[:2] == ["exercise", "points"]:
            continue
        where = f"{path}, line {number}"
        if len(cells) < 2 or not cells[1]:
            raise PointsError(f"{where}: expected `exercise,points`, got {','.join(row)!r}")
        name, value = cells[0], cells[1]
        if name not in POINTS:
            raise PointsError(f"{where}: no exercise is named {name!r} (names as in check_NAME)")
        if name in seen:
            raise PointsError(f"{where}: {name} is listed twice")
        try:
            worth = float(value)
        except ValueError:
            raise PointsError(f"{where}: {value!r} is not a number of points") from None
        if not worth >= 0 or worth == float("inf"):
            raise PointsError(f"{where}: points must be a number ≥ 0, not {value!r}")
        seen.add(name)
        points[name] = int(worth) if worth.is_integer() else worth
    return points
