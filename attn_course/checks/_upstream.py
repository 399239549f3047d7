"""Whether a failing exercise fails only through an earlier exercise that the learner wrote.

A learner's `attention` may be right and still fail its check because it calls their own inverted
`causal_mask`. Blaming `attention` would send them to the wrong cell, and cost them a second point
for one mistake. So, before a failure is diagnosed, the earlier exercises that the learner's code
reaches through their own functions are swapped, in the learner's namespace and only for the
length of one quiet run, for the course's versions. Where the check then passes, the earlier
exercise is confirmed as the cause: the earliest one whose swap alone is enough is named.

>>> earlier_exercises("attention")[:3]
['dot_product_scores', 'softmax', 'dot_product_attention']
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from attn_course import reference


@functools.cache
def _course_order() -> tuple[tuple[str, str], ...]:
    """Every exercise as (notebook stem, name), in course order."""
    return tuple((stem, name) for stem, names in reference.EXERCISES.items() for name in names)


def earlier_exercises(name: str) -> list[str]:
    """The exercises that come before `name` in the course, first first (all of them for an unknown name)."""
    names = [n for _, n in _course_order()]
    return names[: names.index(name)] if name in names else []


def notebook_of(name: str) -> str:
    """The stem of the notebook that holds exercise `name` ("" for none)."""
    return next((stem for stem, n in _course_order() if n == name), "")


def _code_names(code: types.CodeType) -> set[str]:
    """Global names a code object and the code nested in it (inner functions, lambdas) may read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _functions(obj: Any) -> list[types.FunctionType]:
    """The Python functions `obj` runs: itself, or a class's methods and properties."""
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, functools.partial):
        return _functions(obj.func)
    if isinstance(obj, types.MethodType):
        return _functions(obj.__func__)
    if isinstance(obj, type):
        found: list[types.FunctionType] = []
        for value in vars(obj).values():
            if isinstance(value, staticmethod | classmethod):
                value = value.__func__
            if isinstance(value, property):
                found.extend(f for f in (value.fget, value.fset) if isinstance(f, types.FunctionType))
            elif isinstance(value, types.FunctionType):
                found.append(value)
        return found
    return []


def _is_learners(obj: Any, library_dirs: tuple[str, ...]) -> bool:
    """Whether `obj` is code the learner wrote (defined outside every installed package)."""
    functions = _functions(obj)
    if not functions:
        return False
    files = {f.__code__.co_filename for f in functions}
    return not any(
        str(Path(file).resolve()).startswith(library_dirs) for file in files if Path(file).exists()
    )


def learner_upstream(
    name: str, candidate: Any, library_dirs: tuple[str, ...]
) -> list[tuple[dict[str, Any], str]]:
    """(namespace, exercise name) for each earlier exercise the learner's `candidate` reaches.

    Followed through the learner's own functions (their `MultiHeadAttention` calls their `attention`,
    which calls their `causal_mask`); a name bound to the course's code is not followed.
    """
    earlier = set(earlier_exercises(name))
    found: list[tuple[dict[str, Any], str]] = []
    seen: set[int] = set()
    todo = [candidate]
    while todo and len(seen) < 200:
        obj = todo.pop()
        if id(obj) in seen or not _is_learners(obj, library_dirs):
            continue
        seen.add(id(obj))
        for function in _functions(obj):
            namespace = function.__globals__
            for used in sorted(_code_names(function.__code__)):
                value = namespace.get(used)
                if value is None or not _is_learners(value, library_dirs):
                    continue
                # The same namespace is the same object: `==` would compare two dicts' contents (equal
                # for a copy of the learner's globals, and ambiguous where they hold tensors).
                if used in earlier and not any(n is namespace and u == used for n, u in found):
                    found.append((namespace, used))
                todo.append(value)
    order = earlier_exercises(name)
    return sorted(found, key=lambda pair: order.index(pair[1]))


@contextlib.contextmanager
def course_versions(bindings: list[tuple[dict[str, Any], str]]) -> Iterator[None]:
    """The course's version of each exercise in its namespace, put back as it was afterwards."""
    saved = [(namespace, used, namespace[used]) for namespace, used in bindings]
    try:
        for namespace, used in bindings:
            namespace[used] = getattr(reference, used)
        yield
    finally:
        for namespace, used, value in saved:
            namespace[used] = value


def blamed_exercise(bindings: list[tuple[dict[str, Any], str]], passes: Callable[[], bool]) -> str | None:
    """The earliest earlier exercise whose course version alone makes `passes()` true, if any does.

    Tried one at a time first (the root of a chain: their `causal_mask` under their `attention`);
    then all together, naming the first.
    """
    if not bindings:
        return None
    for used in dict.fromkeys(u for _, u in bindings):
        with course_versions([(n, u) for n, u in bindings if u == used]):
            if passes():
                return used
    if len({u for _, u in bindings}) > 1:
        with course_versions(bindings):
            if passes():
                return bindings[0][1]
    return None


def upstream_message(name: str, blamed: str, blamed_passes_own_check: bool) -> str:
    """What the learner reads when `name` fails only through their earlier exercise `blamed`."""
    where = (
        "earlier in this notebook"
        if notebook_of(blamed) == notebook_of(name)
        else f"from notebook {notebook_of(blamed)}"
    )
    if blamed_passes_own_check:
        why = (
            f"your `{blamed}` ({where}) passes its own check, but gives something else than the "
            f"course's on the inputs this check uses: compare the two on them"
        )
    else:
        why = (
            f"your `{blamed}` ({where}) is wrong: check_{blamed}({blamed}) says what to fix, and "
            f"once it passes, run this check again"
        )
    return (
        f"Your `{name}` is right: with the course's `{blamed}` in place of yours it passes this "
        f"check. It fails because {why}."
    )
