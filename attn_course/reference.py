"""Reference implementations of every exercise, by exercise name (the autograder contract).

For each exercise NAME, `attn_course.reference.NAME` is the reference and
`attn_course.checks.check_NAME` checks a learner's implementation against it. An exercise is
marked where its reference is defined, `@exercise(NOTEBOOK, POSITION)` (`attn_course.exercise`);
`EXERCISES` and `__all__` are collected from the marks of the topic modules imported here.
"""

from __future__ import annotations

import importlib
from typing import Any

from attn_course import exercise as _exercise

TOPICS = (
    "attention",
    "scaling",
    "masking",
    "heads",
    "rope",
    "flash",
    "kv_cache",
    "decoder",
    "ablation",
    "generation",
    "triton_flash.launchers",
    "backward",
    "gqa",
    "window",
    "flex",
    "rotary_window",
    "merging",
    "ring",
    "paged_cache",
    "latent",
)
"""The topic modules that hold exercises (a new notebook's topic module is added here)."""

for _topic in TOPICS:
    importlib.import_module(f"attn_course.{_topic}")

EXERCISES: dict[str, tuple[str, ...]] = _exercise.notebooks()
"""The exercises of each notebook, in the order they appear."""

_IMPLEMENTATIONS: dict[str, Any] = _exercise.implementations()
globals().update(_IMPLEMENTATIONS)

__all__ = ["EXERCISES", *(name for names in EXERCISES.values() for name in names)]


def __getattr__(name: str) -> Any:
    """Any marked exercise by name (also those marked after this module was first imported)."""
    found = _exercise.implementations().get(name)
    if found is None:
        raise AttributeError(f"module 'attn_course.reference' has no attribute {name!r}")
    return found
