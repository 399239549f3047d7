"""Mistakes derived from the reference: one small change at a time, named by what it changes.

A table of known mistakes names only the mistakes someone listed. This layer names the others
that are one step away from the right answer: it takes the reference implementation's source,
applies generic mutation operators to it, one site at a time (drop a factor or a term, multiply
where it divides, take a square root away or add one, change a reduction's axis or drop its
keepdim, turn < into <=, shift a constant by one, swap two arguments, read one input where the
reference reads another, transpose an operand of @, skip a step), and runs each mutant on the
arguments the check gave the learner's function. When the learner's result matches a mutant's,
the message names that change and the step of the computation it is in.

`expect_close` calls `name_by_mutation` after the hand-written mistakes (which keep their
messages and go first) and before the check's property diagnosis. The reference is that of the
function the check last called (`note_call`), and the layer applies only where the unchanged
reference, run on those arguments, gives the expected result.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import copy
import difflib
import functools
import inspect
import itertools
import re
import sys
import textwrap
import time
import traceback
import types
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import torch

_LAST_CALL: contextvars.ContextVar[tuple[str, tuple[Any, ...], dict[str, Any]] | None] = (
    contextvars.ContextVar("last_call", default=None)
)

_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("quiet", default=False)
"""True while the repair layer (`_repairs.py`) runs a check on a changed copy of the learner's code."""

BUDGET = 150
"""Mutants the layer may run for one comparison (0 turns the layer off): counted in runs, not seconds,
so that the same code gets the same message on a quiet laptop and on a busy grading server."""

SAFETY_NET_S = 60.0
"""CPU seconds (this process's, whatever else the machine runs) after which a search stops whatever its
count: only for a pathological case, each run very slow."""

_AXIS_METHODS = {
    "sum", "mean", "amax", "amin", "max", "min", "softmax", "log_softmax", "logsumexp", "cumsum",
    "argmax", "argmin", "norm", "var", "std", "prod", "cat", "stack", "unsqueeze", "squeeze",
    "transpose", "flatten", "split", "chunk", "repeat_interleave", "topk", "sort", "flip", "roll",
    "gather", "narrow", "select", "movedim", "unflatten",
}  # fmt: skip
_REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "logsumexp", "argmax", "argmin", "var", "std"}
_SQRT = {"sqrt"}
_LAYOUT_METHODS = {
    "transpose",
    "permute",
    "t",
    "contiguous",
    "unsqueeze",
    "squeeze",
    "flatten",
    "reshape",
    "view",
}
_UNSAFE = ("triton", "[grid]", "as_strided", "data_ptr", "ctypes")
"""Words of a source that may touch raw memory: such functions get no mutants."""
_OPS = {ast.Mult: "*", ast.Div: "/", ast.Add: "+", ast.Sub: "-", ast.Pow: "**", ast.MatMult: "@"}
_COMPARE_SWAPS = {
    ast.Lt: (ast.LtE, ast.Gt),
    ast.LtE: (ast.Lt, ast.GtE),
    ast.Gt: (ast.GtE, ast.Lt),
    ast.GtE: (ast.Gt, ast.LtE),
}
_COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


@dataclass(frozen=True)
class Mutant:
    """The reference with one change, and that change in words."""

    message: str
    function: Callable[..., Any]
    line: int | None = None
    """The changed statement's line in the mutant's source (None: the statement was left out)."""
    names: frozenset[str] = frozenset()
    """What the changed code calls (or, calling nothing, the names it reads)."""
    before: str = ""
    """The changed statement's first line as written."""
    after: str = ""
    """That line with the change ("" where the statement was left out)."""
    index_shift: bool = False
    """Whether the change shifts a constant inside an index or slice (k[:1] -> k[:2])."""
    into_present: bool = False
    """Whether the change swaps a name for one the statement already reads (`t_k - t_q` -> `t_k - t_k`)."""
    changed: str = ""
    """The changed expression as the mutant writes it: for a name or a constant swapped, the expression
    around it (`apply_rope(q, mask, self.base)`), which a learner's line must hold to have made it."""


_LAST_CANDIDATE: contextvars.ContextVar[Any] = contextvars.ContextVar("last_candidate", default=None)
"""The learner's function or layer the check called last: for the twin, the repairs, the argument reader."""


def note_call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], candidate: Any = None) -> None:
    """Remember the check's last call of the learner's function (or layer), for the mutation layer."""
    args = tuple(_snapshot(a) for a in args)  # a cache the learner's call appends to, as it was before
    kwargs = {k: _snapshot(v) for k, v in kwargs.items()}
    _LAST_CALL.set((name, args, kwargs))
    _LAST_CANDIDATE.set(candidate)


def _stateful(value: Any) -> bool:
    """An argument a call may change (a cache object, a dict or list of them): runs get copies of it."""
    if isinstance(value, torch.Tensor | torch.nn.Module | int | float | str | bool | bytes | type(None)):
        return False
    if callable(value) or inspect.ismodule(value):
        return False
    return isinstance(value, dict | list) or hasattr(value, "__dict__")


def _snapshot(value: Any) -> Any:
    if not _stateful(value):
        return value
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - what cannot be copied is passed as it is
        return value


def last_candidate() -> Any:
    """The learner's function or layer the check called last (None before any call)."""
    return _LAST_CANDIDATE.get()


def last_module() -> torch.nn.Module | None:
    """The learner's layer the check called last, if the last call was a layer's."""
    candidate = _LAST_CANDIDATE.get()
    return candidate if isinstance(candidate, torch.nn.Module) else None


def call_arguments() -> dict[str, Any]:
    """The check's last call of the learner's function, its arguments by the reference's parameter names."""
    last = _LAST_CALL.get()
    if last is None:
        return {}
    name, args, kwargs = last
    function = _reference(name)
    try:
        bound = inspect.signature(function).bind_partial(*args, **kwargs) if function else None
    except (TypeError, ValueError):
        bound = None
    if bound is None:
        return {f"argument {i + 1}": a for i, a in enumerate(args)} | dict(kwargs)
    return dict(bound.arguments)


def forget_calls() -> None:
    """Start a check with no call remembered."""
    _LAST_CALL.set(None)
    _LAST_CANDIDATE.set(None)


def name_by_mutation(
    actual: torch.Tensor, expected: torch.Tensor, close: Callable[[torch.Tensor, torch.Tensor], bool]
) -> str | None:
    """The message of the first mutant of the last-called reference whose result the learner's matches."""
    last = _LAST_CALL.get()
    if (
        BUDGET <= 0
        or _QUIET.get()
        or last is None
        or not isinstance(actual, torch.Tensor)
        or actual.shape != expected.shape
    ):
        return None
    name, args, kwargs = last
    subject = _subject(name)
    if subject is None:
        return None
    base, variants = subject
    pick = _picker(_run(base, args, kwargs), expected, close)
    if pick is None:  # these arguments are not what the compared result came from
        return None
    finite = torch.isfinite(expected) if expected.is_floating_point() else None
    deadline = time.process_time() + SAFETY_NET_S
    for tried, (mutant, runner) in enumerate(variants):
        if tried >= BUDGET or time.process_time() > deadline:
            return None
        wrong = pick(_run(runner, args, kwargs))
        if wrong is None or wrong.shape != expected.shape or wrong.dtype != expected.dtype:
            continue
        if finite is not None and not torch.isfinite(wrong[finite]).all():
            continue  # a mutant that breaks the numbers (NaN, inf) says nothing about the idea
        if (
            not close(wrong, expected)
            and close(actual, wrong)
            and _repeats(runner, args, kwargs, wrong, pick)
        ):
            return mutant.message
    return None


def _subject(name: str) -> tuple[Callable[..., Any], Iterator[tuple[Mutant, Callable[..., Any]]]] | None:
    """What the mutants change and run: the reference function, or a reference layer with the learner's state.

    A layer's mutants change one of its class's methods (forward, or a step forward calls) on a copy
    of that twin: the reference class, built with the learner's sizes and loaded with their state.
    """
    function = _reference(name)
    if function is not None:
        return function, ((m, m.function) for m in deep_mutants(function))
    twin = _twin(name)
    if twin is None:
        return None
    return twin, _layer_variants(twin)


def _twin(name: str) -> torch.nn.Module | None:
    """The reference layer of the learner's last-called layer, with its sizes and parameters, if one loads."""
    from attn_course import reference

    layer = last_module()
    cls = getattr(reference, re.split(r"\W", name)[0], None)  # "GroupedQueryAttention(16, 4, 2).forward"
    if layer is None or not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
        return None
    linears = [m for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    given: dict[str, Any] = {}
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        value = getattr(layer, parameter.name, None)
        if isinstance(value, int | float | bool) and not isinstance(value, torch.Tensor):
            given[parameter.name] = value
        elif parameter.name == "d_model" and linears:
            given["d_model"] = linears[0].in_features
        elif parameter.name == "bias" and linears:
            given["bias"] = linears[0].bias is not None
        elif parameter.default is inspect.Parameter.empty:
            return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            twin = cls(**given)
            first = next(layer.parameters(), None)
            if first is not None:  # the dtype first: loading float64 weights into float32 would round them
                twin = twin.to(first.dtype)
            twin.load_state_dict(layer.state_dict())
    except Exception:  # noqa: BLE001 - a layer the reference cannot mirror gets no mutants
        return None
    return twin.train(layer.training)


def _layer_variants(twin: torch.nn.Module) -> Iterator[tuple[Mutant, Callable[..., Any]]]:
    for cls in type(twin).__mro__:
        if not cls.__module__.startswith("attn_course"):
            continue
        for attribute, method in vars(cls).items():
            if not inspect.isfunction(method) or attribute.startswith("__"):
                continue
            for mutant in deep_mutants(method):
                changed = copy.copy(twin)
                changed.__dict__[attribute] = types.MethodType(mutant.function, changed)
                yield mutant, changed


def name_error_by_mutation(
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: BaseException,
    learner_line: str,
    learner_shapes: dict[str, tuple[int, ...]] | None = None,
) -> str | None:
    """The change to the reference that raises the very error the learner's line raised, if one does.

    The mutant must raise the same exception with the same words, in the statement it changed, and
    that change must touch something the learner's failing line names too (a function it calls, or
    a tensor it reads): the same sizes can clash for another reason elsewhere. Where
    `learner_shapes` gives the shapes of the tensors on the learner's failing line, the mutant's
    tensors of the same names must have them too: a mutant that passes k where q belongs raises
    the learner's error about q split into the wrong number of heads, from other tensors.
    """
    learner_names = set(re.findall(r"[A-Za-z_]\w*", learner_line))
    subject = _subject(name) if BUDGET > 0 and not _QUIET.get() else None
    if subject is None or _raised(subject[0], args, kwargs) is not None:
        return None
    wanted = _error_key(error)
    deadline = time.process_time() + SAFETY_NET_S
    for tried, (mutant, runner) in enumerate(subject[1]):
        if tried >= BUDGET or time.process_time() > deadline:
            return None
        raised = _raised(runner, args, kwargs)
        if raised is None or _error_key(raised) != wanted or not _raised_at(raised, mutant.line):
            continue
        if learner_shapes and not _same_shapes(raised, learner_shapes):
            continue
        if mutant.names & learner_names and not _written_as_right(learner_line, mutant):
            code = re.search(r"`(.*)`", learner_line)
            made = made_in(code[1], mutant.changed) if code is not None else None
            if made is None:  # the same error, but the learner's line does not make this change
                return _same_error_at(mutant, learner_names, code[1] if code is not None else "")
            own = f"the arguments of `{made}` swapped"  # a swap said of the learner's own call
            said, unquoted = (
                re.sub(
                    r"the arguments of `[^`]*` swapped",
                    own.replace("\\", "\\\\"),
                    text.replace("is what the right computation gives", "The right computation raises it", 1),
                )
                for text in (mutant.message, UNQUOTED.get(mutant.message, mutant.message))
            )
            UNQUOTED[said] = unquoted
            return said
    return None


def _same_error_at(mutant: Mutant, learner_names: set[str], code: str) -> str:
    """What a mutant that raises the learner's error shows where the learner's line is not that mutant: the
    call (or name) the two share, in the learner's words, and no change said to be theirs."""
    shared = sorted(mutant.names & learner_names)
    calls = [n for n in shared if re.search(rf"\b{re.escape(n)}\s*\(", code)]
    where = (
        f"to its call of {', '.join(f'`{n}`' for n in calls)}"
        if calls
        else f"where it reads {', '.join(f'`{n}`' for n in shared)}"
    )
    described = UNQUOTED.get(mutant.message, "")
    step = re.search(r", in the step that computes ((?:`\w+`(?:, )?)+)", described)
    if step is not None and all(n in learner_names for n in re.findall(r"`(\w+)`", step[1])):
        where += step[0]
    yours = "what yours is given" if calls else "what yours reads there"
    return f"The right computation raises the same error with one change {where}: look at {yours}."


def _written_as_right(learner_line: str, mutant: Mutant) -> bool:
    """Whether the learner's failing line is nearer the right step than the mutant's changed one.

    Then the change is not what the learner did there (their `attention(q, k, v, mask=mask)` is not
    `mask` passed where `v` belongs, though that change raises the same error): the mutant only
    happens to raise it, and saying it would state a cause the code does not have.
    """
    code = re.search(r"`(.*)`", learner_line)
    if code is None or not mutant.before or not mutant.after:
        return False
    tokens = re.findall(r"\w+|[^\w\s]", code[1])

    def nearness(text: str) -> float:
        return difflib.SequenceMatcher(None, tokens, re.findall(r"\w+|[^\w\s]", text)).ratio()

    return nearness(mutant.before) > nearness(mutant.after)


def _same_shapes(raised: BaseException, learner_shapes: dict[str, tuple[int, ...]]) -> bool:
    """Whether the tensors of the mutant's raising frame have the shapes of the learner's of the same name."""
    frames = [tb for tb in _tracebacks(raised) if tb.tb_frame.f_code.co_filename.startswith("<mutant of")]
    if not frames:
        return True
    scope = frames[-1].tb_frame.f_locals
    shared = [n for n in learner_shapes if isinstance(scope.get(n), torch.Tensor)]
    return all(tuple(scope[n].shape) == learner_shapes[n] for n in shared)


def _tracebacks(error: BaseException) -> list[Any]:
    entries, tb = [], error.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def _error_key(error: BaseException) -> tuple[type, str, tuple[int, ...]]:
    """An error's type, words and sizes, the sizes in any order (operands may come the other way round)."""
    text = str(error)
    sizes = tuple(sorted(int(n) for n in re.findall(r"-?\d+", text)))
    return type(error), re.sub(r"-?\d+", "#", text), sizes


def _site_names(node: ast.AST) -> frozenset[str]:
    calls = {_method(n) for n in ast.walk(node) if isinstance(n, ast.Call)} - {None}
    if calls:
        return frozenset(c for c in calls if c is not None)
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))


def _raised_at(error: BaseException, line: int | None) -> bool:
    """Whether the mutant raised in the statement it changed: the same error elsewhere has another cause."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<mutant of")]
    return line is not None and bool(frames) and frames[-1].lineno == line


def _raised(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> BaseException | None:
    """What function raises on fresh copies of the tensor arguments; None if it returns."""
    return _call(function, args, kwargs)[1]


def _repeats(
    runner: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    first: torch.Tensor,
    pick: Callable[[Any], Any],
) -> bool:
    """Whether the mutant gives the same result again: not memory that torch.empty left unwritten."""
    again = pick(_run(runner, args, kwargs))
    return isinstance(again, torch.Tensor) and torch.equal(again, first)


def name_shape_by_mutation(actual: Any, shape: tuple[int, ...]) -> str | None:
    """The message of the first mutant whose result has the learner's (wrong) shape and values."""
    last = _LAST_CALL.get()
    if _QUIET.get() or BUDGET <= 0 or last is None or not isinstance(actual, torch.Tensor):
        return None
    if tuple(actual.shape) == shape:
        return None
    name, args, kwargs = last
    function = _reference(name)
    if function is None:
        return None
    result = _run(function, args, kwargs)
    items = list(result) if isinstance(result, tuple | list) else [result]
    index = next(
        (i for i, x in enumerate(items) if isinstance(x, torch.Tensor) and tuple(x.shape) == shape), None
    )
    if index is None:
        return None
    pick = functools.partial(_item, index=index) if isinstance(result, tuple | list) else _whole
    deadline = time.process_time() + SAFETY_NET_S
    for tried, mutant in enumerate(mutants(function)):
        if tried >= BUDGET or time.process_time() > deadline:
            return None
        wrong = pick(_run(mutant.function, args, kwargs))
        if wrong is None or wrong.shape != actual.shape or wrong.dtype != actual.dtype:
            continue
        same = torch.allclose(actual.detach().cpu(), wrong.cpu(), atol=1e-5, rtol=1e-4)
        if torch.isfinite(wrong).all() and same and _repeats(mutant.function, args, kwargs, wrong, pick):
            return mutant.message
    return None


def _run(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """function on fresh copies of the tensor arguments; None where it raises."""
    return _call(function, args, kwargs)[0]


def _call(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, BaseException | None]:
    """(result, None), or (None, the error) where it raises: on fresh copies of the tensor arguments."""
    fresh = [a.detach().clone() if isinstance(a, torch.Tensor) else _snapshot(a) for a in args]
    fresh_kwargs = {
        k: v.detach().clone() if isinstance(v, torch.Tensor) else _snapshot(v) for k, v in kwargs.items()
    }
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return function(*fresh, **fresh_kwargs), None
    except Exception as error:  # noqa: BLE001 - a mutant that cannot run on these inputs is not this mistake
        return None, error


def _reference(name: str) -> Callable[..., Any] | None:
    """The reference implementation of exercise `name`, if it is a plain function (classes get no mutants)."""
    from attn_course import reference

    function = getattr(reference, name, None)
    return function if inspect.isfunction(function) else None


def _picker(
    result: Any, expected: torch.Tensor, close: Callable[[torch.Tensor, torch.Tensor], bool]
) -> Callable[[Any], torch.Tensor | None] | None:
    """Which part of the reference's result the check compared: the result, or one item of it."""

    def agrees(x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.shape == expected.shape and bool(close(x, expected))

    if agrees(result):
        return _whole
    if isinstance(result, tuple | list):
        for index, item in enumerate(result):
            if agrees(item):
                return functools.partial(_item, index=index)
    return None


def _whole(out: Any) -> torch.Tensor | None:
    return out if isinstance(out, torch.Tensor) else None


def _item(out: Any, index: int) -> torch.Tensor | None:
    if isinstance(out, tuple | list) and len(out) > index and isinstance(out[index], torch.Tensor):
        return out[index]
    return None


_CACHE: dict[Callable[..., Any], list[Mutant]] = {}
_DEEP_CACHE: dict[Callable[..., Any], list[Mutant]] = {}


def deep_mutants(function: Callable[..., Any]) -> list[Mutant]:
    """The function's own mutants, then those of each course function it calls by name, one level down.

    A mistake inside a step the reference delegates (`merge_heads(out)`, `attention(q, k, v)`) is
    one change of that helper: the caller runs with the changed helper in place of the real one,
    and the message says inside which helper the change is.
    """
    if function not in _DEEP_CACHE:
        found = list(mutants(function))
        for helper in _helpers(function):
            for mutant in mutants(helper):
                caller = types.FunctionType(
                    function.__code__,
                    {**function.__globals__, helper.__name__: mutant.function},
                    function.__name__,
                    function.__defaults__,
                    function.__closure__,
                )
                caller.__kwdefaults__ = function.__kwdefaults__
                message, unquoted = (
                    text.replace("with one change", f"with one change inside `{helper.__name__}`", 1)
                    for text in (mutant.message, UNQUOTED.get(mutant.message, mutant.message))
                )
                UNQUOTED[message] = unquoted  # the helper's step is never in the caller's code: described
                CHANGED.setdefault(message, mutant.changed)
                found.append(Mutant(message, caller, mutant.line, mutant.names))
        _DEEP_CACHE[function] = found
    return _DEEP_CACHE[function]


def _helpers(function: Callable[..., Any]) -> list[Callable[..., Any]]:
    """The course's plain functions that `function` calls by a global name (not the checks, not itself)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return []
    names = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    helpers: list[Callable[..., Any]] = []
    for name in sorted(names):
        value = function.__globals__.get(name)
        module = getattr(value, "__module__", "") or ""
        if (
            inspect.isfunction(value)
            and value is not function
            and module.startswith("attn_course")
            and not module.startswith("attn_course.checks")
        ):
            helpers.append(value)
    return helpers


def mutants(function: Callable[..., Any]) -> list[Mutant]:
    """Every one-site mutant of `function` that compiles, in the order of the operators and sites."""
    if function not in _CACHE:
        _CACHE[function] = list(_build(function))
    return _CACHE[function]


def _build(function: Callable[..., Any]) -> Iterator[Mutant]:
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return
    if any(word in source for word in _UNSAFE) or (function.__module__ or "").startswith(
        "attn_course.triton_flash"
    ):
        return  # a kernel launched with a changed grid or stride writes outside its tensors
    tree = ast.parse(source)
    definition = tree.body[0]
    if not isinstance(definition, ast.FunctionDef) or any(isinstance(n, ast.While) for n in ast.walk(tree)):
        return  # a changed loop condition could run forever
    definition.decorator_list = []
    parameters = [
        a.arg
        for a in (*definition.args.posonlyargs, *definition.args.args, *definition.args.kwonlyargs)
        if a.arg != "self"
    ]
    nodes = list(ast.walk(definition))
    parents = {child: node for node in nodes for child in ast.iter_child_nodes(node)}
    siblings = _siblings(definition)
    pairs = _pairs(definition)  # qs and qe, t_q and t_k: a block's two ends, two lengths
    targets = [t.id for n in nodes if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    updated = {name for name in targets if targets.count(name) > 1}  # a state a loop carries (m = m_new)
    seen: set[tuple[int, str]] = set()
    for node in nodes:
        if node is definition or _in_docstring_or_annotation(node, parents):
            continue
        statement = node if isinstance(node, ast.FunctionDef) else _statement(node, parents)  # a nested def
        before = ast.unparse(statement).splitlines()[0] if statement is not None else ""
        shift = isinstance(node, ast.Constant) and any(
            isinstance(p, ast.Subscript | ast.Slice) for p in _ancestors(node, parents)
        )
        for replacement, change in _changes(node, parameters, parents, siblings, updated, pairs):
            with _swapped(node, replacement, parents) as swapped:
                if not swapped:
                    continue
                shown = replacement if statement is node else statement  # a statement replaced whole
                after = ast.unparse(shown) if shown is not None and replacement is not None else ""
                changed = _changed_expression(node, replacement, parents)
                key = (id(statement), after) if replacement is not None else (id(node), "")
                if key in seen:
                    continue
                seen.add(key)
                compiled = _compile(definition, function)
            if compiled is not None:
                step = before if len(before) <= 100 else before[:97] + "..."
                where = f", in the step `{step}`" if step else ""
                line = statement.lineno if statement is not None and replacement is not None else None
                message = f"is what the right computation gives with one change{where}: {change}."
                described = _describe_step(statement)  # for a step the learner's code does not have
                UNQUOTED[message] = (
                    f"is what the right computation gives with one change{described}: {change}."
                )
                CHANGED.setdefault(message, changed)
                first_after = after.splitlines()[0] if after else ""
                into = _swaps_into_present(node, replacement, statement)
                yield Mutant(
                    message, compiled, line, _site_names(node), before, first_after, shift, into, changed
                )


def _changed_expression(node: ast.AST, replacement: ast.AST | None, parents: dict[ast.AST, ast.AST]) -> str:
    """The expression a change made, read while the tree holds it ("" for a statement left out)."""
    if replacement is None or not isinstance(replacement, ast.expr):
        return ""
    if isinstance(replacement, ast.Constant) and isinstance(replacement.value, str):
        return ast.unparse(replacement)  # a pattern ('b t (d h) -> b h t d') says it alone
    around = parents.get(node)
    if isinstance(replacement, ast.Name | ast.Constant) and isinstance(around, ast.expr):
        return ast.unparse(around)  # a bare name or number says nothing alone: the expression it is in
    return ast.unparse(replacement)


def made_in(code: str, changed: str) -> str | None:
    """The expression of `code` (a learner's line) that is the mutant's `changed` one, if it holds one.

    The same text, or a call of the same function with the same positional arguments in the same order
    (keywords left out on one side are not counted: `causal_mask(k.shape[-2], q.shape[-2])` is the change
    `causal_mask(k.shape[-2], q.shape[-2], device=q.device)`).
    """
    if not changed:
        return None
    try:
        tree = ast.parse(textwrap.dedent(code).strip().rstrip(":") or "None")
        wanted = ast.parse(changed, mode="eval").body
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr):
            continue
        if ast.unparse(node) == changed:
            return changed
        if (
            isinstance(node, ast.Call)
            and isinstance(wanted, ast.Call)
            and ast.unparse(node.func) == ast.unparse(wanted.func)
            and [ast.unparse(a) for a in node.args] == [ast.unparse(a) for a in wanted.args]
            and all(
                ast.unparse(a.value) == ast.unparse(b.value)
                for a in node.keywords
                for b in wanted.keywords
                if a.arg == b.arg
            )
        ):
            return ast.unparse(node)
    return None


CHANGED: dict[str, str] = {}
"""A mutant's message -> the expression its change made (`Mutant.changed`), for the message alone."""

UNQUOTED: dict[str, str] = {}
"""A mutant's message -> the same message with its step described instead of quoted: the reference's
line is never shown where the learner's code has no such line (it would hand them the solution)."""


def _describe_step(statement: ast.AST | None) -> str:
    """Where a change is, in words that quote none of the reference's code: the names a step sets."""
    if isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        return f", in the step that computes {', '.join(f'`{n}`' for n in names)}" if names else ""
    if isinstance(statement, ast.For):
        names = [n.id for n in ast.walk(statement.target) if isinstance(n, ast.Name)]
        return f", in the loop over {', '.join(f'`{n}`' for n in names)}" if names else ", in a loop"
    if isinstance(statement, ast.Return):
        return ", in what it returns"
    if isinstance(statement, ast.If):
        return ", in a condition"
    return ""


@contextlib.contextmanager
def _swapped(target: ast.AST, replacement: ast.AST | None, parents: dict[ast.AST, ast.AST]) -> Iterator[bool]:
    """The tree with `target` replaced (None: deleted) while the block runs, then as it was."""
    parent = parents.get(target)
    if parent is None:
        yield False
        return
    if replacement is not None:
        if not hasattr(replacement, "lineno"):
            ast.copy_location(replacement, target)
        ast.fix_missing_locations(replacement)
    for field, value in ast.iter_fields(parent):
        if value is target:
            if replacement is None:
                yield False
                return
            setattr(parent, field, replacement)
            try:
                yield True
            finally:
                setattr(parent, field, value)
            return
        if isinstance(value, list) and any(item is target for item in value):
            items = [item for item in value if item is not target] if replacement is None else [
                replacement if item is target else item for item in value
            ]  # fmt: skip
            if not items:
                yield False
                return
            setattr(parent, field, items)
            try:
                yield True
            finally:
                setattr(parent, field, value)
            return
    yield False


def _ancestors(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> Iterator[ast.AST]:
    parent = parents.get(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        yield parent
        parent = parents.get(parent)


def _in_docstring_or_annotation(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.arguments | ast.arg) or (
            isinstance(parent, ast.FunctionDef) and child is parent.returns
        ):
            return True
        if isinstance(parent, ast.AnnAssign) and child is parent.annotation:
            return True
        if isinstance(parent, ast.Expr) and isinstance(child, ast.Constant) and isinstance(child.value, str):
            return True
        child, parent = parent, parents.get(parent)
    return False


def _statement(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> ast.stmt | None:
    while node is not None and not isinstance(node, ast.stmt):
        node = parents.get(node)  # type: ignore[assignment]
    return node if not isinstance(node, ast.FunctionDef) else None


def _swaps_into_present(node: ast.AST, replacement: ast.AST | None, statement: ast.AST | None) -> bool:
    """Whether `replacement` swaps the name `node` for a name its statement already reads: a change that
    cancels a term (`t_k - t_q` -> `t_k - t_k`) rather than names a mix-up (the rule of the pairs' swaps)."""
    if not (isinstance(node, ast.Name) and isinstance(replacement, ast.Name)) or statement is None:
        return False
    return replacement.id in _read_names(statement)


def _read_names(statement: ast.AST) -> set[str]:
    """The names a statement reads: of a compound statement, its header's only (an `if`'s test)."""
    if isinstance(statement, ast.If | ast.While):
        parts: list[ast.AST] = [statement.test]
    elif isinstance(statement, ast.For):
        parts = [statement.target, statement.iter]
    elif isinstance(statement, ast.With):
        parts = list(statement.items)
    else:
        parts = [statement]
    return {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}


def _compile(definition: ast.FunctionDef, original: Callable[..., Any]) -> Callable[..., Any] | None:
    module = ast.Module(body=[definition], type_ignores=[])
    namespace: dict[str, Any] = {}
    try:
        exec(compile(module, f"<mutant of {original.__qualname__}>", "exec"), original.__globals__, namespace)
    except Exception:  # noqa: BLE001 - a change that does not compile is no mistake
        return None
    return namespace.get(definition.name)


def _code(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _siblings(definition: ast.FunctionDef) -> dict[str, list[str]]:
    """Names assigned together (`q, k, v = ...`, `dq, dk, dv = ...`): each with the others of its tuple."""
    found: dict[str, list[str]] = {}
    for node in ast.walk(definition):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.For)
            else []
        )
        for target in targets:
            if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
                names = [e.id for e in target.elts if isinstance(e, ast.Name) and e.id != "_"]
                for name in names:
                    found.setdefault(name, [])
                    found[name] += [n for n in names if n != name and n not in found[name]]
    return found


def _pairs(definition: ast.FunctionDef) -> dict[str, list[str]]:
    """Local names of two or more characters that differ in one place only (qs, qe; t_q, t_k)."""
    local = sorted(
        {n.id for n in ast.walk(definition) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    )
    pairs: dict[str, list[str]] = {}
    for a, b in itertools.combinations([n for n in local if len(n) >= 2], 2):
        if len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1:
            pairs.setdefault(a, []).append(b)
            pairs.setdefault(b, []).append(a)
    return pairs


def _changes(
    node: ast.AST,
    parameters: list[str],
    parents: dict[ast.AST, ast.AST],
    siblings: dict[str, list[str]],
    updated: Collection[str] = (),
    pairs: dict[str, list[str]] | None = None,
) -> Iterator[tuple[ast.AST | None, str]]:
    """(replacement, the change in words) for each generic mutation that applies at `node`."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and pairs and node.id in pairs:
        statement = _statement(node, parents)
        present = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)} if statement else set()
        for name in pairs[node.id]:
            if name not in present and name not in siblings.get(node.id, []):  # never x > x + c
                change = f"`{name}` used where the right computation uses `{node.id}`"
                yield ast.Name(name, ast.Load()), change
    if isinstance(node, ast.BinOp):
        yield from _binop_changes(node)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_SWAPS:
        op = type(node.ops[0])
        for other in _COMPARE_SWAPS[op]:
            yield (
                ast.Compare(node.left, [other()], node.comparators),
                f"`{_COMPARE_TEXT[other]}` where it compares with `{_COMPARE_TEXT[op]}` in `{_code(node)}`",
            )
    elif isinstance(node, ast.Call):
        yield from _call_changes(node)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield node.operand, f"the sign of `{_code(node)}` dropped"
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in parameters:
        parent = parents.get(node)
        if not (isinstance(parent, ast.Call) and parent.func is node):  # not a callable argument's call
            for name in parameters:
                if name != node.id:
                    yield (
                        ast.Name(name, ast.Load()),
                        f"`{name}` used where the right computation uses `{node.id}`",
                    )
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in siblings:
        parent = parents.get(node)
        packed = (
            {e.id for e in parent.elts if isinstance(e, ast.Name)} if isinstance(parent, ast.Tuple) else set()
        )
        for name in siblings[node.id]:
            if name not in packed:  # never (a, a): a tuple that repeats a name packs nothing new
                yield (
                    ast.Name(name, ast.Load()),
                    f"`{name}` used where the right computation uses `{node.id}`",
                )
    elif isinstance(node, ast.Constant) and type(node.value) is int and not _is_axis(node, parents):
        sign = -1 if isinstance(parents.get(node), ast.UnaryOp) else 1
        for delta in (1, -1):
            if _indexes_shape(node, parents):  # `.shape[-1]`: which axis's size, not a count off by one
                axis = sign * (node.value + delta)
                yield (
                    ast.Constant(node.value + delta),
                    f"the size of axis {axis} (`.shape[{axis}]`) where it should be that of axis "
                    f"{sign * node.value}",
                )
                continue
            yield (
                ast.Constant(node.value + delta),
                f"`{node.value + delta}` where it should be `{node.value}` (off by one)",
            )
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "->" in node.value:
        for pattern in _pattern_changes(node.value):
            yield ast.Constant(pattern), f"the pattern `{pattern}` where it should be `{node.value}`"
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield ast.Constant(not node.value), f"`{not node.value}` where it should be `{node.value}`"
    elif isinstance(node, ast.Assign | ast.AugAssign) and (
        _reassigns(node, parents) or _updates(node, updated)
    ):
        yield None, f"the step `{_code(node)}` left out"
    if (
        isinstance(node, ast.Tuple)
        and isinstance(node.ctx, ast.Store)
        and all(isinstance(e, ast.Name) for e in node.elts)
    ):
        for i, j in itertools.combinations(range(len(node.elts)), 2):
            elts = list(node.elts)
            elts[i], elts[j] = elts[j], elts[i]
            a, b = _code(node.elts[i]), _code(node.elts[j])
            yield ast.Tuple(elts, ast.Store()), f"`{a}` and `{b}` unpacked in each other's place"
    if isinstance(node, ast.FunctionDef) and parents.get(node) is not None:  # a mod or helper defined inside
        names = [a.arg for a in node.args.args]
        for i in range(len(names) - 1):
            order = [*names[:i], names[i + 1], names[i], *names[i + 2 :]]
            arguments = copy.copy(node.args)
            arguments.args = [ast.arg(name) for name in order]
            changed = ast.copy_location(copy.copy(node), node)
            changed.args = arguments
            yield (
                changed,
                (
                    f"the parameters of `{node.name}` in the order ({', '.join(order)}), where it takes them "
                    f"as ({', '.join(names)}): its caller passes them by position"
                ),
            )
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and _in_loop(node, parents):
        assign = ast.copy_location(ast.Assign([node.target], node.value), node)
        yield assign, f"`{_code(assign)}` overwrites what the loop adds up, where it accumulates with `+=`"
    if _overwrites_in_loop(node, parents, updated):
        assert isinstance(node, ast.Assign)  # as _overwrites_in_loop found
        target = node.targets[0]
        assert isinstance(target, ast.Name | ast.Subscript)  # as _overwrites_in_loop found
        added = ast.copy_location(ast.AugAssign(target, ast.Add(), node.value), node)
        yield added, f"`{_code(added)}` adds up over the loop, where it overwrites with `=`"


def _indexes_shape(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether a constant is the index of `x.shape[i]` (or `x.shape[-i]`)."""
    parent = parents.get(node)
    if isinstance(parent, ast.UnaryOp):
        node, parent = parent, parents.get(parent)
    return (
        isinstance(parent, ast.Subscript)
        and parent.slice is node
        and isinstance(parent.value, ast.Attribute)
        and parent.value.attr == "shape"
    )


def _is_axis(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether an int constant is an axis argument (mutated as an axis, not shifted by one)."""
    parent = parents.get(node)
    if isinstance(parent, ast.UnaryOp):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.keyword):
        return parent.arg in {"dim", "axis", "dims", "dim0", "dim1"}
    return isinstance(parent, ast.Call) and _method(parent) in _AXIS_METHODS and node in parent.args


def _method(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def _in_loop(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether the statement sits inside a for or while loop of its function."""
    parent = parents.get(node)
    while parent is not None and not isinstance(parent, ast.FunctionDef):
        if isinstance(parent, ast.For | ast.While):
            return True
        parent = parents.get(parent)
    return False


def _overwrites_in_loop(node: ast.AST, parents: dict[ast.AST, ast.AST], updated: Collection[str]) -> bool:
    """`acc = f(...)` inside a loop, for a name also set elsewhere, whose value does not read it."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return False
    target = node.targets[0]
    if not isinstance(target, ast.Name | ast.Subscript):
        return False
    name = target.id if isinstance(target, ast.Name) else _code(target.value)
    kinds = ast.Name | ast.Subscript | ast.Attribute
    reads = {_code(n) for n in ast.walk(node.value) if isinstance(n, kinds)}
    return (
        _in_loop(node, parents)
        and (name in updated or isinstance(target, ast.Subscript))
        and name not in reads
        and not isinstance(node.value, ast.Name)
    )


def _reassigns(node: ast.Assign | ast.AugAssign, parents: dict[ast.AST, ast.AST]) -> bool:
    """An update of a name that holds a value (x = f(x), x += ...): leaving it out skips a step."""
    if isinstance(node, ast.AugAssign):
        return isinstance(node.target, ast.Name)
    targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
    used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return len(targets) == 1 and targets[0] in used


def _updates(node: ast.Assign | ast.AugAssign, updated: Collection[str]) -> bool:
    """`m = m_new` where m is assigned elsewhere too (a loop's state): leaving it out skips an update."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return False
    target = node.targets[0]
    return isinstance(target, ast.Name) and target.id in updated and isinstance(node.value, ast.Name)


def _binop_changes(node: ast.BinOp) -> Iterator[tuple[ast.AST, str]]:
    left, right, op = node.left, node.right, type(node.op)
    if op is ast.Mult:
        yield left, f"the factor `{_code(right)}` left out of `{_code(node)}`"
        yield right, f"the factor `{_code(left)}` left out of `{_code(node)}`"
        yield ast.BinOp(left, ast.Div(), right), f"a division by `{_code(right)}` where it multiplies by it"
        yield ast.BinOp(node, ast.Mult(), right), f"the factor `{_code(right)}` applied twice"
    elif op is ast.Div:
        yield left, f"no division by `{_code(right)}` in `{_code(node)}`"
        yield (
            ast.BinOp(left, ast.Mult(), right),
            f"a multiplication by `{_code(right)}` where it divides by it",
        )
        yield ast.BinOp(node, ast.Div(), right), f"the division by `{_code(right)}` applied twice"
        if not _is_sqrt(right):
            root = ast.BinOp(right, ast.Pow(), ast.Constant(0.5))
            yield (
                ast.BinOp(left, ast.Div(), root),
                f"a division by √(`{_code(right)}`) where it divides by `{_code(right)}`",
            )
    elif op is ast.FloorDiv:
        yield left, f"no division by `{_code(right)}` in `{_code(node)}`"
        yield right, f"`{_code(right)}` alone where it should be `{_code(node)}`"
        yield ast.BinOp(right, ast.FloorDiv(), left), f"`{_code(node)}` the other way round"
    elif op in (ast.Add, ast.Sub):
        yield left, f"the term `{_code(right)}` left out of `{_code(node)}`"
        if op is ast.Add:
            yield right, f"the term `{_code(left)}` left out of `{_code(node)}`"
        flipped = ast.Sub() if op is ast.Add else ast.Add()
        sign = "subtracted" if op is ast.Add else "added"
        yield ast.BinOp(left, flipped, right), f"`{_code(right)}` {sign} in `{_code(node)}`"
        if op is ast.Sub:
            turned = ast.BinOp(right, ast.Sub(), left)
            yield turned, f"`{_code(turned)}` where it is `{_code(node)}` (the difference turned round)"
    elif op is ast.Pow:
        yield left, f"the power `{_code(right)}` left out of `{_code(node)}`"
        yield (
            ast.BinOp(left, ast.Pow(), ast.UnaryOp(ast.USub(), right)),
            f"the power's sign flipped in `{_code(node)}`",
        )
    elif op is ast.MatMult:
        transpose: list[ast.expr] = [ast.Constant(-2), ast.Constant(-1)]

        def t(x: ast.expr) -> ast.expr:
            return ast.Call(ast.Attribute(x, "transpose", ast.Load()), transpose, [])

        yield ast.BinOp(t(left), ast.MatMult(), right), f"`{_code(left)}` transposed in `{_code(node)}`"
        yield ast.BinOp(left, ast.MatMult(), t(right)), f"`{_code(right)}` transposed in `{_code(node)}`"
        yield ast.BinOp(right, ast.MatMult(), left), f"the operands of `{_code(node)}` in the other order"
        yield t(node), f"the product `{_code(node)}` transposed (its last two axes swapped)"


def _is_sqrt(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and _method(node) in _SQRT:
        return True
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and ast.unparse(node.right) == "0.5"


def _call_changes(node: ast.Call) -> Iterator[tuple[ast.AST, str]]:
    method = _method(node)
    if len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
        yield node.args[0], f"`{_code(node.func)}` not applied in `{_code(node)}`"
    elif isinstance(node.func, ast.Attribute) and (
        (not node.args and not node.keywords) or node.func.attr in _LAYOUT_METHODS
    ):
        yield node.func.value, f"`.{node.func.attr}(...)` left out of `{_code(node)}`"
    instead = {"sum": "mean", "mean": "sum"}.get(method or "")
    if instead is not None and isinstance(node.func, ast.Attribute):  # a total where an average belongs
        turned = ast.Call(ast.Attribute(node.func.value, instead, ast.Load()), node.args, node.keywords)
        yield turned, f"`{instead}` where it takes the `{method}` in `{_code(node)}`"
    if (
        method in _AXIS_METHODS
        and not node.args
        and not node.keywords
        and isinstance(node.func, ast.Attribute)
    ):
        one_axis = ast.Call(node.func, [ast.UnaryOp(ast.USub(), ast.Constant(1))], [])
        yield one_axis, f"`{method}` over every axis where it should take dim -1 only"
    if (
        method in _REDUCTIONS
        and not any(kw.arg == "keepdim" for kw in node.keywords)
        and (node.args or any(kw.arg == "dim" for kw in node.keywords))
    ):
        keywords = [*node.keywords, ast.keyword("keepdim", ast.Constant(True))]
        yield ast.Call(node.func, node.args, keywords), f"`{method}` with keepdim=True"
    if method in _SQRT and node.args:
        yield node.args[0], f"no square root in `{_code(node)}`"
    if method in _AXIS_METHODS:
        for position, arg in enumerate(node.args):
            value = _int_value(arg)
            if value is not None:
                for other in _other_axes(value):
                    args = [*node.args[:position], ast.Constant(other), *node.args[position + 1 :]]
                    yield (
                        ast.Call(node.func, args, node.keywords),
                        f"`{method}` over dim {other} instead of {value}",
                    )
        for position, kw in enumerate(node.keywords):
            value = _int_value(kw.value)
            if kw.arg in {"dim", "axis"} and value is not None:
                for other in _other_axes(value):
                    keywords = [
                        *node.keywords[:position],
                        ast.keyword(kw.arg, ast.Constant(other)),
                        *node.keywords[position + 1 :],
                    ]
                    yield (
                        ast.Call(node.func, node.args, keywords),
                        f"`{method}` over dim={other} instead of dim={value}",
                    )
    if method in _REDUCTIONS and (node.args or any(kw.arg == "dim" for kw in node.keywords)):
        keywords = [kw for kw in node.keywords if kw.arg not in {"dim", "keepdim"}]
        yield (
            ast.Call(node.func, [], keywords),
            f"`{method}` of the whole tensor where it reduces one axis, in `{_code(node)}`",
        )
    for kw in node.keywords:
        if kw.arg == "keepdim" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
            keywords = [k for k in node.keywords if k is not kw]
            yield ast.Call(node.func, node.args, keywords), f"`{method}` without keepdim=True"
    if len(node.args) >= 2:
        for i in range(len(node.args)):
            for j in range(i + 1, min(len(node.args), 3)):
                args = list(node.args)
                args[i], args[j] = args[j], args[i]
                if ast.unparse(args[i]) != ast.unparse(args[j]):
                    yield (
                        ast.Call(node.func, args, node.keywords),
                        f"the arguments of `{_code(node)}` swapped",
                    )


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        return -value if type(value) is int else None
    return None


def _other_axes(value: int) -> list[int]:
    return [axis for axis in (-1, -2, -3, 0, 1, 2) if axis != value]


def _pattern_changes(pattern: str) -> Iterator[str]:
    """An einops or einsum pattern with two axes swapped, on one side of the arrow or in one group."""
    left, _, right = pattern.partition("->")
    if " " in pattern.strip() or "(" in pattern:  # einops: axes are words, groups in parentheses
        for side in (right, left):
            tokens = re.findall(r"\(|\)|[^\s()]+", side)
            words = [i for i, t in enumerate(tokens) if t not in "()"]
            for a, b in itertools.combinations(words, 2):
                swapped = list(tokens)
                swapped[a], swapped[b] = swapped[b], swapped[a]
                text = _join(swapped)
                yield f"{left.rstrip()} -> {text}" if side is right else f"{text} -> {right.lstrip()}"
            for start, token in enumerate(tokens):  # a group taken apart: (h d) -> h d
                if token == "(":
                    end = tokens.index(")", start)
                    ungrouped = tokens[:start] + tokens[start + 1 : end] + tokens[end + 1 :]
                    text = _join(ungrouped)
                    yield f"{left.rstrip()} -> {text}" if side is right else f"{text} -> {right.lstrip()}"
    else:  # einsum: one letter per axis, operands separated by commas
        operands = left.split(",")
        for position, operand in enumerate([*operands, right]):
            letters = [i for i, c in enumerate(operand) if c.isalpha()]
            for a, b in itertools.combinations(letters, 2):
                chars = list(operand)
                chars[a], chars[b] = chars[b], chars[a]
                changed = [*operands, right]
                changed[position] = "".join(chars)
                yield ",".join(changed[:-1]) + "->" + changed[-1]


def _join(tokens: list[str]) -> str:
    return " ".join(tokens).replace("( ", "(").replace(" )", ")").strip()


def reference_shapes() -> dict[str, set[tuple[int, ...]]]:
    """The shapes each local tensor of the last-called reference takes on the check's arguments, by name.

    Learners name their tensors as the notebook does (`scores`, `D`, `lse`), so a tensor of theirs
    whose shape no tensor of that name ever has in the right computation is where their code departs.
    """
    last = _LAST_CALL.get()
    function = None if last is None or _QUIET.get() else _reference(last[0])
    if last is None or function is None or any(word in _source(function) for word in _UNSAFE):
        return {}
    _, args, kwargs = last
    code = function.__code__
    seen: dict[str, set[tuple[int, ...]]] = {}

    def record(frame: Any) -> None:
        for name, value in frame.f_locals.items():
            if isinstance(value, torch.Tensor):
                seen.setdefault(name, set()).add(tuple(value.shape))

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not code:
            return None
        if event in ("line", "return"):
            record(frame)
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        _call(function, args, kwargs)
    finally:
        sys.settrace(previous)
    return seen


def _source(function: Callable[..., Any]) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""
