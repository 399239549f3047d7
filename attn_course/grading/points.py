"""Points per exercise, declared once: one point each unless listed in `OVERRIDES`."""

from __future__ import annotations

from attn_course.reference import EXERCISES

OVERRIDES: dict[str, int] = {}
"""Exercises worth other than one point, by exercise name (for example {"MultiHeadAttention": 2})."""

POINTS: dict[str, int] = {name: OVERRIDES.get(name, 1) for names in EXERCISES.values() for name in names}
"""What each exercise is worth, by exercise name, for every exercise of the course."""


def notebook_points(stem: str) -> int:
    """The most a notebook can score, by notebook stem (for example "02_scaling")."""
    return sum(POINTS[name] for name in EXERCISES[stem])
