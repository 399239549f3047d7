"""Which functions and classes are exercises: `@exercise(NOTEBOOK, POSITION)` on the reference.

The topic module that holds an exercise's reference implementation marks it where it is defined:

>>> @exercise("99_example", 1)
... def double(x):
...     return 2 * x
>>> notebooks()["99_example"], implementations()["double"](3)
(('double',), 6)
>>> forget("99_example")

`attn_course.reference` collects the marks into `EXERCISES` (notebook -> exercise names, in the
notebook's order) and exposes each reference by name; `attn_course.checks` holds a `check_NAME`
for each. The decorator returns the object unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

Marked = TypeVar("Marked", bound=Callable[..., Any])

_MARKED: dict[str, dict[int, tuple[str, Any]]] = {}
"""Notebook stem -> position -> (exercise name, reference implementation)."""


def exercise(notebook: str, position: int) -> Callable[[Marked], Marked]:
    """Mark a reference implementation as exercise number `position` (from 1) of `notebook`."""

    def mark(obj: Marked) -> Marked:
        name = obj.__name__
        taken = _MARKED.setdefault(notebook, {}).get(position)
        if taken is not None and taken[0] != name:
            raise ValueError(f"{notebook} already has exercise {position}: {taken[0]} (not {name})")
        _MARKED[notebook][position] = (name, obj)
        return obj

    return mark


def notebooks() -> dict[str, tuple[str, ...]]:
    """Notebook stem -> its exercises' names in order, notebooks sorted by stem."""
    return {
        stem: tuple(_MARKED[stem][position][0] for position in sorted(_MARKED[stem]))
        for stem in sorted(_MARKED)
    }


def implementations() -> dict[str, Any]:
    """Exercise name -> reference implementation."""
    return {name: obj for marked in _MARKED.values() for name, obj in marked.values()}


def forget(notebook: str) -> None:
    """Drop the marks of one notebook (for tests and doctests)."""
    _MARKED.pop(notebook, None)
