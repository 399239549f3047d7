"""One change to the learner's own code that makes it pass: their mistake, shown in their own lines.

The reference's mutants name a mistake in the reference's words, and a learner's code is seldom
written as the reference is (other names, the notebook's skeleton, another loop). This layer turns
the search round: it applies the same generic one-site changes to the learner's function (or to
each method of their layer), keeps those whose result on the failing call is the right one, and
runs the whole check on each of them; a change after which the learner's code passes the check is
shown as the line they wrote and the line that passes ("Line 57 of your code, `if ks >= qe:`,
passes this check written `if ks > qe:`"). It runs only after a check has failed, with every other
layer silent inside it, so it can never refuse a right answer, and what it says has been run.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import inspect
import io
import re
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from attn_course.checks import _mutants

BUDGET = 300
"""Runs of a changed copy of the learner's code on the failing call, for one failing check (0 turns the
layer off); half as many for an error, where the lines that feed the failing one come first. Counted in
runs, not seconds, so that the message is the same on every machine (300 is what 4 s covered on a quiet
2-core machine for notebook 09's flash_attention_backward, the largest learner function)."""

RUNS_PER_EXERCISE = {"FlashAttentionFunction": 60, "rotary_window_attention": 40}
"""Exercises whose every run is costly (a whole autograd pass; a block mask built): fewer runs, so that
a learner waits about as long as for any other exercise. Still a count: the same on every machine."""

SAFETY_NET_S = 60.0
"""CPU seconds (this process's, whatever else the machine runs) after which the search stops whatever
its count: only for a pathological case, each run very slow."""

_CHECK: contextvars.ContextVar[tuple[Callable[[Any], str], Any] | None] = contextvars.ContextVar(
    "check", default=None
)


def begin_check(body: Callable[[Any], str], candidate: Any) -> None:
    """Remember the check now running (its body) and what the learner handed it."""
    _CHECK.set((body, candidate))


def name_by_repair(
    expected: torch.Tensor | None = None,
    close: Callable[[torch.Tensor, torch.Tensor], bool] | None = None,
    line: int | None = None,
) -> str | None:
    """The learner's line and the same line changed once so that their code passes this check, if one does.

    With `expected` and `close`, a change is first run on the check's last call and kept only where
    its result is `expected`. With `line` (where an error was raised), the changes on that line are
    tried first, then those on the lines before it, nearest first: what feeds the failing line. The
    shorter of two changed lines is tried first (a transpose left out before one added), and a
    reduction of the whole tensor last: it passes where a shift by any constant does, but it is
    rarely what the learner meant.
    """
    current = _CHECK.get()
    if current is None or _mutants._QUIET.get() or BUDGET <= 0:
        return None
    try:
        return _search(*current, expected, close, line)
    except Exception:  # noqa: BLE001 - a layer that only adds to a message must never fail the check
        return None


def unquoted(derived: str) -> str:
    """A mutant's message as the learner may read it: a step their code lacks described, not quoted, and
    by the names it sets only where the learner's code has them (the reference's `offset` is not theirs)."""
    if not foreign_step(derived):
        return derived
    described = _mutants.UNQUOTED.get(derived, derived)
    source = _candidate_source()
    if source is None:
        return described
    own = set(re.findall(r"\w+", source))
    names = re.search(r", in the step that computes ((?:`\w+`(?:, )?)+)", described)
    if names is not None and not all(name in own for name in re.findall(r"`(\w+)`", names[1])):
        described = described.replace(names[0], "")
    left_out = re.search(r"the step `([^`]*)` left out", described)
    if left_out is not None and not set(re.findall(r"[A-Za-z_]\w*", left_out[1])) <= own | _WORDS:
        described = described.replace(left_out[0], "that step left out")  # names the learner never wrote
    return described


_WORDS = {"float", "inf", "torch", "math", "dim", "keepdim", "True", "False", "None"}
"""Words a left-out step may hold that are no learner's names."""


def _candidate_source() -> str | None:
    """The source of the learner's function or class last called, or None."""
    candidate = _mutants.last_candidate()
    if candidate is None:
        return None
    target = candidate if inspect.isfunction(candidate) or inspect.isclass(candidate) else type(candidate)
    try:
        return inspect.getsource(target)
    except (OSError, TypeError):
        pass
    if not inspect.isclass(target):
        return None
    # a class of a notebook cell or of a module not in sys.modules: its own methods, each found by its code
    methods = []
    for value in vars(target).values():
        function = getattr(value, "__func__", value)
        if inspect.isfunction(function):
            try:
                methods.append(inspect.getsource(function))
            except (OSError, TypeError):
                return None  # a part unread: the class's source is not known
    return "\n".join(methods) or None


def foreign_step(derived: str | None) -> bool:
    """Whether a mutant's message names a step the learner's own code is not known to contain.

    Then the learner's own line, changed once, says more than the reference's: the caller tries the
    repairs first and keeps the mutant's message only where no repair passes. A learner's code whose
    source cannot be read is not known to contain the step: the reference's line is not quoted.
    """
    step = re.search(r"in the step `([^`]*)`", derived or "")
    if step is None:
        return False
    source = _candidate_source()
    if source is None:
        return True
    text = step[1].removesuffix("...")  # a long step is shown cut short
    return "".join(text.split()) not in "".join(source.split())


def confirmed(derived: str) -> bool:
    """Whether the learner's code holds the expression a mutant's change makes (`_mutants.made_in`): the
    change is then theirs, whatever step of the reference the message places it in."""
    changed = _mutants.CHANGED.get(derived, "")
    source = _candidate_source() if changed else None
    return source is not None and _mutants.made_in(source, changed) is not None


def unconfirmed(derived: str) -> bool:
    """Whether a mutant's message quotes a step of the learner's own code (the reference's line, written
    as they wrote it) while their code holds nowhere the expression its change makes: the change is then
    not theirs, however equal the results (another name whose value happens to agree, a slip elsewhere)."""
    if not _mutants.CHANGED.get(derived) or foreign_step(derived):
        return False
    return not confirmed(derived)


def _search(
    body: Callable[[Any], str],
    top: Any,
    expected: torch.Tensor | None,
    close: Callable[[torch.Tensor, torch.Tensor], bool] | None,
    line: int | None,
) -> str | None:
    deadline = time.process_time() + SAFETY_NET_S
    runs = RUNS_PER_EXERCISE.get(body.__name__.removeprefix("check_"), BUDGET) if BUDGET > 0 else 0
    budget = runs if line is None else runs // 2  # an error: what feeds its line

    def order(variant: tuple[Any, Any, _mutants.Mutant, int]) -> tuple[int, bool, int]:
        mutant, start = variant[2], variant[3]
        at = None if mutant.line is None else mutant.line + start - 1
        distance = 0 if line is None or at is None else line - at if at <= line else 10_000 + at
        whole = "of the whole tensor" in mutant.message
        return distance, whole, len(mutant.after) - len(mutant.before)

    tried = 0  # runs of a changed copy on the failing call: the work the budget counts
    for repaired, runner, mutant, start in sorted(_variants(top), key=order):
        if tried >= budget or time.process_time() > deadline:
            return None
        if mutant.index_shift:
            continue  # k[:1] -> k[:2] passes where the batch is 2: a fix fitted to the check's sizes
        if _whole_shift(mutant):
            continue  # a row's max made the whole tensor's: any shared shift passes, it is no fix
        if mutant.into_present:
            continue  # `t_k - t_q` -> `t_k - t_k`: a term cancelled, passing by accident; no mix-up
        lineno = None if mutant.line is None else mutant.line + start - 1
        tried += 1
        if expected is not None and close is not None and not _gives(runner, expected, close):
            continue
        if expected is None and not _returns(runner):
            continue  # still raises on the failing call: no need to run the whole check
        if _passes(body, repaired):
            if not mutant.after:
                where = f"its line {lineno}," if lineno is not None else "the line"
                return f"Your code passes this check without {where} `{mutant.before}`."
            return (
                f"Line {lineno} of your code, `{_short(mutant.before)}`, passes this check written "
                f"`{_short(mutant.after)}`."
            )
    return None


def _whole_shift(mutant: _mutants.Mutant) -> bool:
    """Whether the change turns a per-axis max or min (a softmax's shift) into the whole tensor's."""
    return "of the whole tensor" in mutant.message and any(
        f"`{method}`" in mutant.message for method in ("max", "amax", "min", "amin")
    )


def _short(text: str) -> str:
    return text if len(text) <= 100 else text[:97] + "..."


def _variants(top: Any) -> Iterator[tuple[Any, Callable[..., Any] | None, _mutants.Mutant, int]]:
    """(repaired candidate, what runs the failing call on it, the mutant, its source's first line)."""
    last_module = _mutants.last_module()
    if inspect.isfunction(top):
        start = _first_line(top)
        if start is None:
            return
        for mutant in _mutants.mutants(top):
            yield mutant.function, mutant.function, mutant, start
    elif inspect.isclass(top) and not issubclass(top, torch.nn.Module):  # an autograd.Function
        for attribute, value in vars(top).items():
            method = value.__func__ if isinstance(value, staticmethod) else None
            start = _first_line(method) if method is not None else None
            if method is None or start is None:
                continue
            for mutant in _mutants.mutants(method):
                repaired = type(top.__name__, (top,), {attribute: staticmethod(mutant.function)})
                yield repaired, None, mutant, start
    elif inspect.isclass(top) and issubclass(top, torch.nn.Module):
        for attribute, method in vars(top).items():
            start = _first_line(method) if inspect.isfunction(method) else None
            if start is None or attribute == "__init__":
                continue
            for mutant in _mutants.mutants(method):
                repaired = type(top.__name__, (top,), {attribute: mutant.function})
                runner = None
                if isinstance(last_module, top):
                    runner = copy.copy(last_module)
                    runner.__dict__[attribute] = types.MethodType(mutant.function, runner)
                yield repaired, runner, mutant, start


def _first_line(function: Callable[..., Any]) -> int | None:
    try:
        return inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        return None


def _gives(
    runner: Callable[..., Any] | None,
    expected: torch.Tensor,
    close: Callable[[torch.Tensor, torch.Tensor], bool],
) -> bool:
    """Whether the changed code, on the check's last call, gives `expected` (as the result or one item)."""
    last = _mutants._LAST_CALL.get()
    if runner is None or last is None:
        return True  # nothing to try it on first: the whole check decides
    _, args, kwargs = last
    result = _mutants._run(runner, args, kwargs)
    items = list(result) if isinstance(result, tuple | list) else [result]
    return any(
        isinstance(x, torch.Tensor) and x.shape == expected.shape and bool(close(x, expected)) for x in items
    )


def _returns(runner: Callable[..., Any] | None) -> bool:
    """Whether the changed code returns (raises nothing) on the check's last call."""
    last = _mutants._LAST_CALL.get()
    if runner is None or last is None:
        return True
    _, args, kwargs = last
    return _mutants._call(runner, args, kwargs)[1] is None


def quiet_run(body: Callable[[Any], str], candidate: Any) -> tuple[str | None, Exception | None]:
    """(pass detail, None) or (None, what the check raised): one run of a check's body without the naming
    layers, printing nothing, seeded as a check is, in a context of its own."""

    def run() -> tuple[str | None, Exception | None]:
        _mutants._QUIET.set(True)
        _mutants.forget_calls()
        begin_check(body, candidate)
        try:
            with (
                torch.random.fork_rng(devices=[]),
                warnings.catch_warnings(),
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                warnings.simplefilter("ignore")
                torch.manual_seed(0)
                return body(candidate), None
        except Exception as raised:  # noqa: BLE001 - the caller decides what a failure means
            return None, raised

    return contextvars.copy_context().run(run)


def _passes(body: Callable[[Any], str], candidate: Any) -> bool:
    """Whether the check's body accepts `candidate` (a repair that fails it in any way is no repair)."""
    return quiet_run(body, candidate)[1] is None
