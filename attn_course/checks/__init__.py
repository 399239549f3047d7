"""Autograder checks: `check_NAME(candidate)` for every exercise NAME.

A check prints one pass line when the learner's function is right, and otherwise raises
`CheckFailed` (an AssertionError) whose message names the mistake. A fault in a check itself
raises `CheckerError` instead, which says that it is not the learner's mistake. In IPython and
Jupyter, importing this package shows both as their message alone, without a traceback.

Every public module of this package is a checks module: importing the package imports them all,
and each `@check def check_NAME` registers itself (`CHECKS`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from attn_course.checks._harness import CHECKS, CheckerError, CheckFailed
from attn_course.checks._notebook import show_failures_without_traceback
from attn_course.reference import EXERCISES

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

globals().update({f"check_{name}": check for name, check in CHECKS.items()})

__all__ = [
    "CheckFailed",
    "CheckerError",
    *(f"check_{name}" for names in EXERCISES.values() for name in names),
]


def __getattr__(name: str) -> Callable[[Any], None]:
    """`check_NAME` for any registered exercise (also those registered after this import)."""
    if name.startswith("check_") and name.removeprefix("check_") in CHECKS:
        return CHECKS[name.removeprefix("check_")]
    raise AttributeError(f"module 'attn_course.checks' has no attribute {name!r}")


show_failures_without_traceback()
