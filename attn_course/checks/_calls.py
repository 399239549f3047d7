"""Arguments passed in another order than the function called takes them.

`flash_attention_backward(q, k, v, out, lse, grad_out, ctx.block_size, ctx.is_causal)` runs, or
fails far from its cause, when the function takes `is_causal` before `block_size`. The names the
learner passes usually say what they mean (`ctx.block_size`, `t_k`, `is_causal`), so a call whose
positional arguments carry the names of *other* parameters of the function called is read as
arguments out of order, and said so with the function's signature.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
from collections.abc import Callable, Iterator, Mapping
from typing import Any


def misplaced_arguments(source: str, namespace: Mapping[str, Any], line_offset: int = 0) -> str:
    """What the first call in `source` with an argument in another parameter's place gets wrong ("" if none).

    `namespace` resolves the names of the functions called (the learner's globals and locals);
    `line_offset` turns the source's line numbers into the learner's cell's.
    """
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = _resolve(node.func, namespace)
        parameters = _positional_parameters(function)
        if not parameters:
            continue
        found = _misplaced(node, parameters)
        if found:
            name = ast.unparse(node.func)
            line = node.lineno + line_offset
            passed = " and ".join(
                f"`{argument}` as its parameter `{parameter}`" for argument, parameter in found
            )
            if len(found) == 1:  # one argument slid into an earlier slot: a positional one left out
                argument, slot = found[0]
                meant = _word(ast.parse(argument, mode="eval").body)
                advice = f"Pass it by name, {meant}={argument}, and give `{slot}` its own value."
            else:
                by_name = ", ".join(f"{parameter}=..." for _, parameter in found)
                advice = f"Pass the arguments in that order, or by name ({by_name})."
            takes = ", ".join(parameters)
            return f"Line {line} passes {passed}: `{name}` takes ({takes}), in that order. {advice}"
    return ""


def misplaced_in(candidate: Any) -> str:
    """`misplaced_arguments` over the learner's function, or every method of their class or module."""
    for function in _functions(candidate):
        try:
            lines, start = inspect.getsourcelines(function)
        except (OSError, TypeError):
            continue
        namespace = dict(getattr(function, "__globals__", {}))
        found = misplaced_arguments("".join(lines), namespace, start - 1)
        if found:
            return found
    return ""


def _functions(candidate: Any) -> Iterator[Callable[..., Any]]:
    if inspect.ismethod(candidate):  # a bound method; Function.apply is bound to the learner's class
        owner = candidate.__self__
        candidate = owner if inspect.isclass(owner) else candidate.__func__
    if inspect.isfunction(candidate):
        yield candidate
        return
    cls = candidate if inspect.isclass(candidate) else type(candidate)
    for value in vars(cls).values():
        value = value.__func__ if isinstance(value, staticmethod | classmethod) else value
        if inspect.isfunction(value):
            yield value


def _resolve(func: ast.expr, namespace: Mapping[str, Any]) -> Any:
    """The object a call's function expression names (`f`, `module.f`), if the namespace has it."""
    if isinstance(func, ast.Name):
        return namespace.get(func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = namespace.get(func.value.id)
        if owner is not None and inspect.ismodule(owner):
            return getattr(owner, func.attr, None)
    return None


def _positional_parameters(function: Any) -> list[str]:
    if not inspect.isfunction(function):  # the learner's own or the course's Python functions only
        return []
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


def _word(argument: ast.expr) -> str | None:
    """The name an argument carries: `block_size`, `ctx.block_size`, `self.n_heads` -> its last part."""
    if isinstance(argument, ast.Name):
        return argument.id
    if isinstance(argument, ast.Attribute):
        return argument.attr
    return None


def _misplaced(call: ast.Call, parameters: list[str]) -> list[tuple[str, str]]:
    """(argument, parameter) pairs where two arguments each carry the name of the other's parameter, or
    one argument sits in an earlier slot than the parameter it is named for (a positional argument left
    out before it)."""
    given = {kw.arg for kw in call.keywords}
    words = [_word(argument) for argument in call.args[: len(parameters)]]
    for i, j in itertools.combinations(range(len(words)), 2):
        if words[i] == parameters[j] and words[j] == parameters[i] and words[i] not in given:
            return [(ast.unparse(call.args[i]), parameters[i]), (ast.unparse(call.args[j]), parameters[j])]
    for i, word in enumerate(words):  # one argument in the slot of a parameter it is not named for
        if (
            word in parameters
            and parameters.index(word) > i
            and word not in given
            and words[i] != parameters[i]
        ):
            return [(ast.unparse(call.args[i]), parameters[i])]
    return []
