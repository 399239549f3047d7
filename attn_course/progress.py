"""Which exercises have passed their checks in this kernel, and what a later cell should run.

A look or measure cell after an exercise runs the learner's function once its check has passed,
and the course's reference until then, saying which in one line:

>>> forget_passes()  # as in a fresh kernel
>>> yours_if_passed("softmax")(torch.zeros(2)).shape
Using the course's `softmax`: yours has not passed check_softmax yet.
torch.Size([2])

so that a student notebook runs on, with no traceback, past an exercise that is not done yet, and
past an exercise cell that was never run: the notebooks name the exercise, `yours_if_passed("softmax")`,
rather than pass the learner's function, which does not exist before its cell has run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch  # noqa: F401  (used by the doctest above)

Candidate = TypeVar("Candidate", bound=Callable[..., Any])

_passed: dict[str, Any] = {}
"""Exercise name -> the very object whose check passed last."""
_announced: set[tuple[object, str, str]] = set()
"""(cell, exercise, choice) already announced, so a loop in one cell prints one line."""


def record_pass(name: str, candidate: Any) -> None:
    """Remember that `candidate` passed the check of exercise `name` (called by every check)."""
    _passed[name] = candidate


def record_failure(name: str) -> None:
    """Forget an earlier pass of exercise `name`: its latest check failed (called by every check)."""
    _passed.pop(name, None)


def forget_passes() -> None:
    """Forget every recorded pass (for tests)."""
    _passed.clear()
    _announced.clear()


def has_passed(name: str, candidate: Any) -> bool:
    """Whether this very `candidate` (not an older or newer definition) passed check_`name`."""
    return name in _passed and _passed[name] is candidate


def reference_of(name: str) -> Any:
    """The course's reference implementation of exercise `name`."""
    reference = importlib.import_module("attn_course.reference")
    return getattr(reference, name)


def _current_cell() -> object:
    """Something that changes from one executed cell to the next (None outside IPython).

    The request's message id where a kernel runs the cell: a client that does not store history
    (nbval) leaves the execution count at 1 for every cell.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return None
    shell = get_ipython()
    if shell is None:
        return None
    kernel = getattr(shell, "kernel", None)
    try:
        return kernel.get_parent()["header"]["msg_id"]  # type: ignore[union-attr]
    except (AttributeError, KeyError, TypeError):
        return shell.execution_count


def _announce(name: str, choice: str, line: str) -> None:
    key = (_current_cell(), name, choice)
    if key not in _announced:
        _announced.add(key)
        print(line)


def yours_if_passed(candidate: Candidate | str, name: str | None = None) -> Candidate:
    """The learner's version of an exercise if it passed its check, else the course's; says which.

    `candidate` is the exercise's name (`yours_if_passed("softmax")`, what the notebooks write): the
    learner's object whose check passed last in this kernel, unless a later check of the exercise
    failed. Or it is the learner's function itself, `name` by default its `__name__`: then only
    this very definition counts, not an older one that passed. One line per exercise and cell
    says which version runs.
    """
    if isinstance(candidate, str):
        name = candidate
        if name in _passed:
            _announce(name, "yours", f"Using your `{name}` (the version that passed check_{name}).")
            return cast(Candidate, _passed[name])
        _announce(name, "reference", f"Using the course's `{name}`: yours has not passed check_{name} yet.")
        return cast(Candidate, reference_of(name))
    name = name or str(getattr(candidate, "__name__", ""))
    if has_passed(name, candidate):
        _announce(name, "yours", f"Using your `{name}` (check_{name} passed).")
        return candidate
    if name in _passed:
        why = f"this definition of `{name}` has not been checked yet: run check_{name}({name})"
    else:
        why = f"yours has not passed check_{name} yet"
    _announce(name, "reference", f"Using the course's `{name}`: {why}.")
    return cast(Candidate, reference_of(name))


def whose(name: str) -> str:
    """ "your" once exercise `name` has passed its check in this kernel, else "the course's": for a
    printed line that names what `yours_if_passed(name)` ran.

    >>> forget_passes()
    >>> f"{whose('softmax')} softmax"
    "the course's softmax"

    Introduced in 10_modern_attention.
    """
    return "your" if name in _passed else "the course's"
