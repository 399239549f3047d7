"""The machinery every check shares: calling the learner's code safely, comparing, diagnosing.

A check calls the learner's function on seeded inputs, compares the result with the reference,
and when they differ, compares it with known wrong variants (`Mistake`) to name the mistake.
Everything that goes wrong becomes a `CheckFailed` with a message in the learner's terms.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import itertools
import linecache
import math
import os
import re
import sysconfig
import textwrap
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attn_course.checks._calls import misplaced_arguments
from attn_course.checks._diagnosis import narrow_slips  # noqa: F401 - where the checks found it before
from attn_course.checks._mutants import (
    call_arguments,
    forget_calls,
    name_error_by_mutation,
    name_shape_by_mutation,
    note_call,
    reference_shapes,
)
from attn_course.checks._operands import (
    clashes,
    failing_operands,
    held_size,
    index_value,
    operand_names,
    without_comment,
)
from attn_course.checks._repairs import begin_check, name_by_repair, quiet_run, unconfirmed, unquoted
from attn_course.checks._shapes import explain_shape
from attn_course.checks._upstream import blamed_exercise, learner_upstream, upstream_message
from attn_course.progress import record_failure, record_pass

GREEN, RED, RESET = "\x1b[1;32m", "\x1b[1;31m", "\x1b[0m"
"""ANSI bold green and bold red, as Jupyter and terminals show them; the words carry the meaning alone."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def in_ipython() -> bool:
    """Whether this runs in IPython or a Jupyter kernel, where colour codes in the output show as colour."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def pass_line(name: str, detail: str, colour: bool = False) -> str:
    """The line check_NAME prints when it passes, its words in green when `colour`.

    >>> pass_line("softmax", "all 6 cases agree with the reference")
    'check_softmax passed: all 6 cases agree with the reference'
    """
    words = f"check_{name} passed"
    return f"{GREEN}{words}{RESET}: {detail}" if colour else f"{words}: {detail}"


def pass_detail(output: str, name: str) -> str | None:
    """The detail of the last pass line of check_NAME in `output` (colour ignored), or None without one.

    >>> pass_detail("\\x1b[1;32mcheck_softmax passed\\x1b[0m: all cases agree\\n", "softmax")
    'all cases agree'
    """
    prefix = pass_line(name, "").rstrip()
    found = [line for line in _ANSI.sub("", output).splitlines() if line.startswith(prefix)]
    return found[-1].removeprefix(prefix).strip() if found else None


class CheckFailed(AssertionError):
    """A learner's implementation is wrong; the message says how, in the learner's terms."""

    def __init__(
        self,
        message: str = "",
        upstream: str = "",
        slips: tuple[str, ...] = (),
        framing: tuple[str, str] = ("", ""),
        finding: str = "",
    ) -> None:
        super().__init__(message)
        self.finding = finding
        """The id of the diagnosis finding the message is about ("" where no pipeline ran)."""
        self.slips = slips
        """The known mistakes (`Mistake.message`) that give the learner's result on the failing inputs."""
        self.framing = framing
        """(what was compared, how it was called) around the slips, to say them again once narrowed."""
        self.upstream = upstream
        """The earlier exercise that alone makes this one fail ("" for none): with the course's version
        of it in place of the learner's, this exercise passes (`_upstream`). The grader gives the point."""


class CheckerError(Exception):
    """A check itself failed: a bug in the course's checker, never the learner's mistake.

    Not an AssertionError, so that nothing that catches a failed check mistakes it for one: the
    notebook shows it as the checker's fault and the grader records the exercise as not graded.
    """


REPORT_TO = "please report it to the course staff (or open an issue on the course's repository)"
"""Where a learner reports a CheckerError."""


@dataclass(frozen=True)
class Mistake:
    """A known wrong implementation and the message that names it."""

    message: str
    """What the learner did wrong and how to fix it."""
    implementation: Callable[..., Any]
    """Computes what a candidate making this mistake would return, from the same arguments."""


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance for comparing a result of one dtype."""

    atol: float
    rtol: float


TOLERANCES = {
    torch.float64: Tolerance(atol=1e-7, rtol=1e-6),
    torch.float32: Tolerance(atol=2e-5, rtol=1e-4),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=2e-2, rtol=2e-2),
}


CHECKS: dict[str, Callable[[Any], None]] = {}
"""Every check by exercise name, filled by `@check` (`check_softmax` is the check of "softmax")."""


def check(body: Callable[[Callable[..., Any]], str]) -> Callable[[Any], None]:
    """Turn `def check_NAME(candidate) -> pass detail` into the check of exercise NAME.

    The exercise's name is the function's name without `check_`. The wrapper rejects what is not
    callable, seeds torch without disturbing the learner's random state, silences warnings, prints
    one pass line, and turns any error of the checker itself into a `CheckerError` that says so,
    so that no traceback from inside the check is ever shown and no learner loses points for it.
    """
    if not body.__name__.startswith("check_"):
        raise ValueError(f"a check is named check_NAME, not {body.__name__}")
    name = body.__name__.removeprefix("check_")

    @functools.wraps(body)
    def run_check(candidate: Any) -> None:
        if not callable(candidate):
            raise CheckFailed(
                f"check_{name} expects your function `{name}` itself, "
                f"but got {_describe(candidate)}. Call it as check_{name}({name})."
            )
        failure: Exception | None = None
        upstream = learner_upstream(name, candidate, _LIBRARY_DIRS)
        if upstream:  # their earlier exercises first: one quiet run, and the point stays where it belongs
            passed, blamed = _run_upstream_aware(name, body, candidate, upstream)
            if blamed is not None:
                record_failure(name)
                raise blamed from None
            if passed is not None:
                record_pass(name, candidate)
                print(pass_line(name, passed, colour=in_ipython()))
                return
        forget_calls()
        begin_check(body, candidate)
        try:
            with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.manual_seed(0)
                detail = body(candidate)
        except CheckFailed as error:
            failure = CheckFailed(str(error), error.upstream, error.slips, error.framing, error.finding)
        except Exception as raised:
            inner = _unwrap_interpreter_error(raised)
            if is_learners(inner, body.__code__):  # the learner's code raised in a call made for them
                failure = _learner_failure(inner)
            else:  # a bug in the checker, never the learner's fault
                failure = CheckerError(
                    f"the checker for `{name}` itself failed ({type(inner).__name__}: {inner}). This is not "
                    f"your mistake and says nothing about your code: {REPORT_TO}, with this message."
                )
        if failure is not None:
            if isinstance(failure, CheckFailed):
                record_failure(name)  # the cells after it go back to the course's version
            raise failure from None
        record_pass(name, candidate)
        print(pass_line(name, detail, colour=in_ipython()))

    run_check.__doc__ = f"Check a learner's `{name}`; raise CheckFailed naming the mistake."
    CHECKS[name] = run_check
    return run_check


NOT_FROM_UPSTREAM = frozenset({"deadlock"})
"""Findings no earlier exercise can cause, for which the search with the course's versions is skipped:
ranks of notebook 11's ring all waiting on each other's messages (an earlier exercise is a function of
tensors; one that never returns leaves its rank computing, which is not this finding)."""


def _run_upstream_aware(
    name: str, body: Callable[[Any], str], candidate: Any, upstream: list[tuple[dict[str, Any], str]]
) -> tuple[str | None, CheckFailed | None]:
    """(pass detail, None) where the learner's code passes; (None, the failure that blames an earlier
    exercise) where it passes only with the course's version of that exercise; else (None, None)."""
    detail, raised = quiet_run(body, candidate)
    if raised is None:
        return detail, None
    if isinstance(raised, CheckerError) or (
        not isinstance(raised, CheckFailed)
        and not is_learners(_unwrap_interpreter_error(raised), body.__code__)
    ):
        return None, None  # the checker's own fault: the full run below reports it
    if isinstance(raised, CheckFailed) and raised.finding in NOT_FROM_UPSTREAM:
        return None, None  # no earlier exercise can cause it: the full run below says what failed
    blamed = blamed_exercise(upstream, lambda: quiet_run(body, candidate)[1] is None)
    if blamed is None:
        return None, None
    own_check = getattr(CHECKS.get(blamed), "__wrapped__", None)
    learners = next(namespace[used] for namespace, used in upstream if used == blamed)
    blamed_passes = own_check is not None and quiet_run(own_check, learners)[1] is None
    return None, CheckFailed(upstream_message(name, blamed, blamed_passes), upstream=blamed)


def _learner_failure(error: BaseException) -> CheckFailed:
    """The CheckFailed for an exception the learner's code raised inside a call the check made for them."""
    if _is_stub(error):
        return CheckFailed(
            "part of your code is not implemented yet (it raised NotImplementedError"
            f"{_learner_location(error)}): replace `raise NotImplementedError` with your code, run that "
            "cell, then run this check again."
        )
    files = [tb.tb_frame.f_code.co_filename for tb in _walk(error.__traceback__)]
    by_autograd = any(f"torch{os.sep}autograd" in f for f in files)
    return learner_raised("Your backward (autograd called it)" if by_autograd else "Your code", error)


def _walk(tb: Any) -> list[Any]:
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return entries


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"{type(value).__name__} {value!r}"[:120]


_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _library_dirs() -> tuple[str, ...]:
    """Folders whose frames are never the learner's: this package, torch, Triton, numpy, einops, the
    standard library and every installed package."""
    dirs = [_PACKAGE_DIR, _TORCH_DIR]
    paths = sysconfig.get_paths()
    dirs.extend(str(Path(paths[key]).resolve()) for key in ("stdlib", "purelib", "platlib") if key in paths)
    for name in ("triton", "numpy", "einops"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(str(Path(p).resolve()) for p in spec.submodule_search_locations)
    return tuple(dirs)


_LIBRARY_DIRS = _library_dirs()


def library_dirs() -> tuple[str, ...]:
    """The folders whose frames are never the learner's (see `_library_dirs`)."""
    return _LIBRARY_DIRS


def _learner_location(error: BaseException) -> str:
    """The last line of the learner's own code in a traceback, as ' at line N of your code: `code`'."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not str(Path(frame.filename).resolve()).startswith(_LIBRARY_DIRS)
    ]
    if not frames:
        return ""
    last = frames[-1]
    code = (last.line or linecache.getline(last.filename, last.lineno or 0)).strip()
    return f" at line {last.lineno} of your code: `{code}`" if code else ""


def call(name: str, candidate: Callable[..., Any], *args: Any, hint: str = "", **kwargs: Any) -> Any:
    """Call the learner's function; turn anything it raises into a CheckFailed naming the call.

    `hint` is added to the message when the call raises. A call that changes one of its tensor
    arguments in place is rejected too: the caller's tensors must come back as they went in.
    """
    before = [(a, a.detach().clone()) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    note_call(name.strip("`"), args, kwargs, candidate)
    try:
        result = candidate(*args, **kwargs)
    except Exception as raised:
        error = _unwrap_interpreter_error(raised)
        if _is_stub(error):
            raise CheckFailed(
                f"`{name}` is not implemented yet: replace `raise NotImplementedError` "
                "with your code, run that cell, then run this check again."
            ) from None
        missing = getattr(error, "name", None) if isinstance(error, NameError) else None
        if isinstance(missing, str) and missing in CHECKS:  # an earlier exercise whose cell never ran
            first = f"Run the cell that defines `{missing}` first: your `{name}` calls it."
            hint = f"{first}\n{hint}" if hint else first
        called = f"It was called as {name}({describe_args(args, kwargs)})."
        shapes = {n: tuple(t.shape) for n, t in _line_tensors(_learner_traceback(error)) if "." not in n}
        derived = name_error_by_mutation(
            name.strip("`"), args, kwargs, error, _learner_location(error), shapes
        )
        if derived:
            derived = unquoted(derived)
            hint = f"{derived}\n{hint}" if hint else derived
        raise learner_raised(f"`{name}`", error, called + (f"\n{hint}" if hint else "")) from None
    for tensor, copy in before:
        if tensor.device.type != "meta" and not torch.equal(tensor.detach(), copy):
            raise CheckFailed(
                f"`{name}` changed one of its input tensors in place (for example `q /= ...` or "
                "`x.sub_(...)`): compute new tensors instead and leave the inputs as they were."
            )
    return result


def _is_stub(error: BaseException) -> bool:
    """Whether `error` comes from an exercise's `raise NotImplementedError` stub, also inside a kernel.

    Interpreted, a stub in a Triton kernel raises NotImplementedError (which `_unwrap_interpreter_error`
    unwraps); compiled for a GPU, Triton refuses the `raise` statement before the kernel runs.
    """
    if isinstance(error, NotImplementedError):
        return True
    return type(error).__name__ == "UnsupportedLanguageConstruct" and "NotImplementedError" in str(error)


def _unwrap_interpreter_error(error: Exception) -> BaseException:
    """The error inside a Triton kernel, for one that Triton's interpreter wrapped in InterpreterError."""
    if type(error).__name__ == "InterpreterError" and error.__cause__ is not None:
        return error.__cause__
    return error


def describe_args(args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """Arguments of a call, tensors shown by shape, for messages."""

    def show(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            if value.numel() <= 8 and value.dtype in (torch.long, torch.int32, torch.bool):
                return f"tensor({value.tolist()})"
            device = "" if value.device.type == "cpu" else f", {value.device.type}"
            dtype = str(value.dtype).removeprefix("torch.")
            return f"<{dtype} tensor of shape {tuple(value.shape)}{device}>"
        if inspect.isfunction(value) or inspect.ismethod(value):
            return f"<function {value.__name__}>"
        if isinstance(value, torch.nn.Module) and "\n" in repr(value):  # a layer of layers: one line
            sizes = {
                key: size
                for key, size in vars(value).items()
                if not key.startswith("_") and isinstance(size, int) and not isinstance(size, bool)
            }
            return f"{type(value).__name__}({', '.join(f'{key}={size}' for key, size in sizes.items())})"
        text = repr(value)
        if " object at 0x" in text:  # no repr of its own: its class, not an address
            return f"<{type(value).__name__}>"
        return text

    parts = [show(a) for a in args] + [f"{key}={show(value)}" for key, value in kwargs.items()]
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# The learner's own exceptions, explained


def _learner_traceback(error: BaseException, checker: Any = None) -> Any:
    """The innermost traceback entry in the learner's own code (not a library's nor `checker`), or None."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code is not checker and not str(Path(code.co_filename).resolve()).startswith(_LIBRARY_DIRS):
            found = tb
        tb = tb.tb_next
    return found


def is_learners(error: BaseException, checker: Any = None) -> bool:
    """Whether `error` was raised in (or under) a line of the learner's own code; `checker` is the
    code object of a check's body, which is the checker's even where it is not in this package."""
    return _learner_traceback(_unwrap_interpreter_error(error), checker) is not None  # type: ignore[arg-type]


def _line_tensors(tb: Any, kind: type = torch.Tensor) -> list[tuple[str, Any]]:
    """The tensors (or objects of `kind`) the learner's failing line names (`x`, `self.mask`), by name."""
    if tb is None:
        return []
    code = without_comment(linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno))
    scope = tb.tb_frame.f_locals
    found: list[tuple[str, Any]] = []
    for dotted in dict.fromkeys(re.findall(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", code)):
        parts = dotted.split(".")
        value, name, tensor = scope.get(parts[0]), "", None
        for depth, attribute in enumerate(parts[1:] + [""]):
            if isinstance(value, kind):
                name, tensor = ".".join(parts[: depth + 1]), value
            if not attribute or isinstance(value, kind):  # k.transpose(...) names k
                break
            try:
                if isinstance(value, torch.nn.Module):  # its tensors live in _parameters and _buffers
                    value = getattr(value, attribute, None)
                else:  # no property of the learner's objects is run
                    value = inspect.getattr_static(value, attribute, None)
            except Exception:
                break
        if tensor is not None and all(v is not tensor for _, v in found):
            found.append((name, tensor))
    if kind is torch.Tensor:  # `lse[..., qs:qe]` is what the operation got, not all of `lse`
        sliced = _line_subscripts(code, scope)
        bases = {text.split("[", 1)[0] for text in sliced}
        unsliced = {n for n in bases if re.search(rf"(?<![\w.]){re.escape(n)}(?!\s*\[|\w)", code)}
        found = [*sliced.values(), *((n, v) for n, v in found if n not in bases - unsliced)]
    return found[:4]


def _line_subscripts(code: str, scope: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """`name[index]` subscripts of a tensor on the line, by the text of each, with what they give: only
    where the index is made of names, numbers, slices and arithmetic (nothing of the learner's is run)."""

    try:
        tree = ast.parse(code.strip().removesuffix(":"), mode="exec")
    except SyntaxError:
        return {}
    found: dict[str, tuple[str, Any]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            continue
        tensor = scope.get(node.value.id)
        if not isinstance(tensor, torch.Tensor):
            continue
        try:
            found[ast.unparse(node)] = (node.value.id, tensor[index_value(node.slice, scope)])
        except Exception:  # noqa: BLE001 - an index this cannot follow: the name alone is shown
            continue
    return {text: (text, part) for text, (_, part) in found.items()}


def _shape(x: torch.Tensor | Sequence[int]) -> str:
    dims = tuple(x.shape) if isinstance(x, torch.Tensor) else tuple(x)
    return str(dims) if len(dims) != 1 else f"({dims[0]},)"


def _broadcasts(a: Sequence[int], b: Sequence[int]) -> bool:
    try:
        torch.broadcast_shapes(tuple(a), tuple(b))
    except RuntimeError:
        return False
    return True


_REDUCTION = re.compile(r"([A-Za-z_][\w.]*)\.(sum|amax|max|amin|min|mean|logsumexp|norm|std|var)\(([^()]*)\)")


def _reduction_without_keepdim(tb: Any, tensors: list[tuple[str, torch.Tensor]]) -> str:
    """A reduction on the failing line taken without keepdim=True (`p.sum(dim=-1)`), explained, or ""."""
    if tb is None:
        return ""
    code = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    named = dict(tensors)
    for m in _REDUCTION.finditer(code):
        if "keepdim" in m[3] or m[1] not in named:
            continue
        x = named[m[1]]
        dim = re.fullmatch(r"\s*(?:dim\s*=\s*)?(-?\d+)\s*", m[3])
        change = ""
        if dim and -x.dim() <= int(dim[1]) < x.dim():
            kept = [n for i, n in enumerate(x.shape) if i != int(dim[1]) % x.dim()]
            change = f" ({_shape(x)} becomes {_shape(kept)})"
        return (
            f"`{m[0]}` drops the axis it reduces{change}, so the result lines up against the wrong axes: "
            "add keepdim=True."
        )
    return ""


def _root(name: str) -> str:
    """The name a tensor of the line is reached from: `self` for `self.mask`, `k` for `k[..., :d]`."""
    return re.split(r"[.\[]", name, maxsplit=1)[0]


def _explain_broadcast(
    sizes: tuple[int, int, int], tensors: list[tuple[str, torch.Tensor]], tb: Any = None
) -> str:
    """Why two tensors of the learner's line do not broadcast, from their shapes and the frame's."""
    a, b, axis = sizes
    if reduced := _reduction_without_keepdim(tb, tensors):
        return reduced
    scope = {} if tb is None else tb.tb_frame.f_locals
    arguments = {} if tb is None else _arguments(tb)
    for name, m in tensors:
        wide = [t for _, t in tensors if t.dim() == 4 and t.dtype != torch.bool]
        if (
            m.dtype == torch.bool
            and m.dim() == 3
            and wide
            and m.shape[0] == wide[0].shape[0] != wide[0].shape[1]
        ):
            shape = _shape((m.shape[0], 1, *m.shape[1:]))
            return (
                f"`{name}` {_shape(m)} has no head axis: against the (b, h, t_q, t_k) scores its batch "
                f"axis meets the heads. Give it one, {name}.unsqueeze(-3) → {shape}."
            )
    if earlier := _earlier_reduction(tb, tensors):
        return earlier
    line = "" if tb is None else linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    operands = failing_operands(line, scope, a, b, axis)  # the operands of the line's operations
    combined = operand_names(line, scope)
    pairs = [  # only two tensors whose sizes are the two torch reports can be the two that met, and
        (name_x, x, name_y, y)  # where the line itself combines tensors, only two that it combines
        for (name_x, x), (name_y, y) in itertools.permutations(tensors, 2)
        if clashes(tuple(x.shape), tuple(y.shape), a, b, axis)
        and (not combined or frozenset((_root(name_x), _root(name_y))) in combined)
    ]
    if operands is not None and operands[3] is None:  # one operand made on the line, by a call
        known_name, known, other, _ = operands
        held = held_size(tuple(known.shape), a, b, axis) or a
        met = b if held == a else a
        sources = _sizes_in_frame(arguments, held, met, lengths_only=True)
        named = _named_sizes(scope, held, met)
        return (
            f"`{known_name}` {_shape(known)} and `{other}` do not line up from the right ({held} meets {met})"
            + (f": {sources}." if sources else named if named.endswith(".") else f"{named}.")
        )
    if operands is not None:
        name_x, x, name_y, y = operands
        pairs = [(name_x, x, name_y, y), (name_y, y, name_x, x)]  # type: ignore[list-item]
    for name_x, x, name_y, y in pairs:
        big, small = tuple(x.shape), tuple(y.shape)
        if _broadcasts(big, small) or len(small) > len(big):
            continue
        sources = _sizes_in_frame(arguments, a, b, lengths_only=len(small) != len(big))
        product = rf"(?<![\w.]){re.escape(name_x)}\s*\*\s*{re.escape(name_y)}(?![\w(])"
        reverse = rf"(?<![\w.]){re.escape(name_y)}\s*\*\s*{re.escape(name_x)}(?![\w(])"
        paired = re.search(product, line) or re.search(reverse, line)
        given = name_x in arguments and name_y in arguments  # two inputs, as q and k are
        if sources and paired and given and small[-1] == big[-1]:
            return (
                f"`{name_y}` {_shape(small)} and `{name_x}` {_shape(big)} are multiplied entry by entry, "
                f"which pairs row i of one with row i of the other only ({a} meets {b}): scores pair every "
                "query with every key, a matrix product, q @ k.transpose(-2, -1) (or an einsum over the last "
                "axis)."
            )
        if sources:
            return (
                f"`{name_y}` {_shape(small)} and `{name_x}` {_shape(big)} do not line up from the right "
                f"({a} meets {b}): {sources}."
            )
        if len(small) == len(big) == 4 and [i for i in range(4) if big[i] != small[i]] == [1]:
            return (
                f"`{name_y}` {_shape(small)} has {small[1]} heads where `{name_x}` {_shape(big)} has "
                f"{big[1]}: every head of one needs its partner in the other (repeat the shared heads, or "
                "split both with the same number of heads)."
            )
        if len(small) < len(big):
            for places in itertools.combinations(range(len(big)), len(small)):
                if all(big[p] == s for p, s in zip(places, small, strict=True)):
                    index = ", ".join(":" if p in places else "None" for p in range(len(big)))
                    return (
                        f"`{name_y}` {_shape(small)} lacks axes that `{name_x}` {_shape(big)} has: shapes "
                        f"line up from the right, so give it size-1 axes where they are missing, "
                        f"`{name_y}[{index}]` (unsqueeze, or rearrange with 1 for the new axes)."
                    )
        matrices = 2 <= len(small) < len(big) and big[-1] == small[-2]  # (.., m, n) @ (.., n, p)
        if matrices and re.search(r"@|matmul|bmm", line):
            for places in itertools.combinations(range(len(big) - 2), len(small) - 2):
                if all(big[p] == s for p, s in zip(places, small[:-2], strict=True)):
                    index = ", ".join(":" if p in places else "None" for p in range(len(big) - 2))
                    return (
                        f"`{name_y}` {_shape(small)} lacks axes that `{name_x}` {_shape(big)} has: a matrix "
                        f"product lines up the axes before the last two from the right ({a} meets {b}), so "
                        f"give it size-1 axes where they are missing, `{name_y}[{index}]` (unsqueeze, or "
                        "rearrange with 1 for the new axes)."
                    )
        if len(small) == len(big) and sorted(small) == sorted(big):
            return (
                f"`{name_y}` {_shape(small)} holds the axes of `{name_x}` {_shape(big)} in another order: "
                "one of them is transposed (or its axes were split or merged in the wrong order)."
            )
        return (
            f"`{name_x}` {_shape(big)} and `{name_y}` {_shape(small)} cannot broadcast: shapes line up "
            f"from the right and each pair of sizes must be equal or 1 ({a} meets {b})."
            + _named_sizes(scope, a, b)
        )
    return (
        f"Two tensors combined entry by entry (+, *, /, masked_fill, torch.where) have {a} and {b} entries "
        f"along axis {axis} of the result: shapes line up from the right. Usual causes: a mask or bias "
        "without its head axis (unsqueeze it), a max or sum without keepdim=True, a length taken from "
        "the other tensor (T_k for T_q)." + _named_sizes(scope, a, b)
    )


def _heads_differ(tensors: list[tuple[str, torch.Tensor]], scope: dict[str, Any] | None = None) -> str:
    """Two (b, h, t, d) tensors of the line split into different numbers of heads, explained, or ""."""
    wide = [(n, t) for n, t in tensors if t.dim() == 4 and t.dtype != torch.bool]
    for (name_x, x), (name_y, y) in itertools.combinations(wide, 2):
        if x.shape[1] != y.shape[1] and x.shape[0] == y.shape[0] and x.shape[-1] == y.shape[-1]:
            (name_q, q), (name_kv, kv) = sorted([(name_x, x), (name_y, y)], key=lambda p: p[0] != "q")
            factor = kv.shape[1] / q.shape[1]
            named = _named_ints(scope or {}, round(factor)) if factor == round(factor) else ""
            return (
                f"`{name_kv}` {_shape(kv)} has {kv.shape[1]} heads and `{name_q}` {_shape(q)} has "
                f"{q.shape[1]}, both of width {q.shape[-1]}: the widths agree, but the shared heads "
                f"were repeated {'too often' if factor > 1 else 'too rarely'}. Each query head reads one "
                f"key/value head, so after the repeat there are as many as query heads: repeat each "
                f"n_heads // n_kv_heads times (the group size), not n_kv_heads or n_heads times."
                + (f" Yours are {kv.shape[1]} = {q.shape[1]} × {round(factor)} ({named})." if named else "")
            )
        if x.shape[1] != y.shape[1] and x.shape[0] == y.shape[0]:
            held_y, held_x = _heads_held(name_y, y), _heads_held(name_x, x)
            if "holds" not in held_y + held_x:
                held_x = held_x.replace(" is split into ", " into ")  # `k` … is split into 8 …, `q` … into 2
            return (
                f"{held_y}, {held_x}: each query head needs a key and a "
                "value head of its width (split each with the number of heads it projects to, then repeat "
                "the shared ones)."
            )
    return ""


def _heads_held(name: str, x: torch.Tensor) -> str:
    """'`q` (2, 4, 5, 4) is split into 4 heads of 4', or, where some heads are copies of others (the
    shared heads repeated), '`k` (2, 8, 5, 2) holds 8 heads of width 2 (4 of them distinct)'."""
    heads = x.detach().transpose(0, 1).reshape(x.shape[1], -1)
    distinct = len(torch.unique(heads, dim=0)) if heads.numel() and not heads.isnan().any() else x.shape[1]
    if distinct == x.shape[1]:
        return f"`{name}` {_shape(x)} is split into {x.shape[1]} heads of {x.shape[-1]}"
    return (
        f"`{name}` {_shape(x)} holds {x.shape[1]} heads of width {x.shape[-1]} ({distinct} of them distinct)"
    )


def _arguments(tb: Any) -> dict[str, Any]:
    """The arguments of the learner's function at that frame (the tensors it was given), by name."""
    code = tb.tb_frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return {n: tb.tb_frame.f_locals[n] for n in names if n in tb.tb_frame.f_locals}


def _sizes_in_frame(scope: dict[str, Any], a: int, b: int, lengths_only: bool = False) -> str:
    """Where sizes a and b come from among the function's input tensors: two lengths, or two axes of one.

    Two lengths are said to be swapped only where no integer the function was given has either size.
    """
    found: dict[int, list[tuple[str, int]]] = {a: [], b: []}
    for name, value in scope.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.dtype != torch.bool:
            for axis in (-2, -1):
                if value.shape[axis] in found:
                    found[value.shape[axis]].append((name, axis))
    for name_a, axis_a in found[a]:
        for name_b, axis_b in found[b]:
            if name_a != name_b and axis_a == axis_b == -2:
                also = [f"{n} is also `{k}`" for n in (a, b) for k in _ints_equal(scope, n)]
                if also:  # the size may come from that number, not from a length
                    return (
                        f"{a} is the length of `{name_a}` and {b} that of `{name_b}`, but {', '.join(also)}: "
                        "see which of the two axes has a size it should not, and where that size comes from"
                    )
                return (
                    f"{a} is the length of `{name_a}` and {b} that of `{name_b}`, so one of the two was "
                    "built with the other's length (T_q for T_k, or the reverse): take each from its own "
                    "tensor"
                )
            if name_a == name_b and axis_a != axis_b and not lengths_only:
                shape = tuple(scope[name_a].shape)
                return (
                    f"{a} and {b} are two axes of `{name_a}` {_shape(shape)}, so a size was read from the "
                    f"wrong axis: count from the end, {name_a}.shape[-2] for the length, {name_a}.shape[-1] "
                    "for the width"
                )
    return ""


def _ints_equal(scope: dict[str, Any], value: int) -> list[str]:
    """The names of the frame's integers equal to value (not the private ones)."""
    return [k for k, v in scope.items() if type(v) is int and v == value and not k.startswith("_")]


def _named_ints(scope: dict[str, Any], value: int) -> str:
    """'4 is `n_rep`, `self.n_kv_heads`': the integers of the frame (and of its `self`) equal to value."""
    owner = scope.get("self")
    owned = {} if owner is None else {f"self.{k}": v for k, v in vars(owner).items() if not k.startswith("_")}
    names = [f"`{k}`" for k in _ints_equal({**scope, **owned}, value)][:3]
    return f"{value} is {', '.join(names)}" if names and value > 1 else ""


def _named_sizes(scope: dict[str, Any], a: int, b: int) -> str:
    """' (8 is `block_size`)' for sizes that equal an integer of the frame."""
    named = [f"{n} is `{k}`" for n in (a, b) if n > 1 for k in _ints_equal(scope, n)][:2]
    return (f" ({', '.join(named)})" if named else "") + _ragged(scope, a, b)


def _ragged(scope: dict[str, Any], a: int, b: int) -> str:
    """' 5 is the length of the last, ragged block: 37 = 4 × 8 + 5 …' where one size is the block's."""
    blocks = {v for k, v in scope.items() if type(v) is int and "block" in k.lower() and v > 1}
    lengths = {
        int(s) for v in scope.values() if isinstance(v, torch.Tensor) and v.dim() >= 2 for s in v.shape[-2:]
    }
    for full, short in ((a, b), (b, a)):
        for length in sorted(lengths):
            if full in blocks and 0 < short == length % full and length > full:
                return (
                    f". {short} is the length of the last, ragged block ({length} = {length // full} × "
                    f"{full} + {short}): size what a block holds from its slice (q_blk.shape[-2]), not from "
                    "the block size."
                )
    return ""


def _earlier_reduction(tb: Any, tensors: list[tuple[str, torch.Tensor]]) -> str:
    """A reduction without keepdim=True on an earlier line of the function that made a tensor of this line."""
    if tb is None:
        return ""
    code = tb.tb_frame.f_code
    names = {name for name, _ in tensors}
    for lineno in range(tb.tb_lineno - 1, code.co_firstlineno, -1):
        line = linecache.getline(code.co_filename, lineno)
        target = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", line)
        if target is None or target[1] not in names:
            continue
        for m in _REDUCTION.finditer(line):
            if "keepdim" not in m[3]:
                return (
                    f"`{m[0]}` at line {lineno} drops the axis it reduces, so `{target[1]}` lines up against "
                    "the wrong axes here: add keepdim=True there."
                )
    return ""


def _einsum_letter(tb: Any, letter: str) -> str:
    """' The letter d stands on axis -2 of `q` (3) and of `k` (5); the axis they share is -1 (6).'"""
    if tb is None:
        return ""
    code = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
    call = re.search(r"einsum\(\s*[\"']([^\"']+)[\"']\s*,\s*([^)]*)\)", code)
    if call is None or "->" not in call[1]:
        return ""
    inputs = call[1].split("->")[0].replace(" ", "").split(",")
    names = [n.strip() for n in call[2].split(",")]
    scope = tb.tb_frame.f_locals
    tensors = [scope.get(n) for n in names]
    if len(inputs) != len(tensors) or not all(isinstance(t, torch.Tensor) for t in tensors):
        return ""
    places = []
    for sub, name, tensor in zip(inputs, names, tensors, strict=True):
        letters = sub.replace("...", "")
        if letter in letters:
            axis = letters.index(letter) - len(letters)  # from the right, as '...' leaves the front
            places.append((name, axis, int(tensor.shape[axis])))
    if len(places) < 2:
        return ""
    where = " and ".join(f"axis {axis} of `{name}` ({size})" for name, axis, size in places)
    shared = [
        axis
        for axis in range(-min(t.dim() for t in tensors), 0)
        if len({int(t.shape[axis]) for t in tensors}) == 1
    ]
    return f" The letter {letter} stands on {where}" + (
        f"; the axis the operands share is {shared[-1]} ({int(tensors[0].shape[shared[-1]])}): is that the "
        "one to sum over?"
        if shared and all(axis != shared[-1] for _, axis, _ in places)
        else "."
    )


def _set_only_in_a_loop(error: UnboundLocalError) -> str:
    """'`p` is set only inside the loop at line N, which ran zero times', for the learner's function."""
    tb, named = _learner_traceback(error), re.search(r"local variable '(\w+)'", str(error))
    if tb is None or named is None:
        return ""
    name = named[1]
    try:
        lines, first = inspect.getsourcelines(tb.tb_frame.f_code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return ""
    loops = [node for node in ast.walk(tree) if isinstance(node, ast.For | ast.While)]
    stores = [
        n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
    ]
    if not stores or not loops:
        return ""
    holding = [
        loop for loop in loops if {id(s) for s in stores} <= {id(n) for b in loop.body for n in ast.walk(b)}
    ]
    for loop in sorted(holding, key=lambda loop: -loop.lineno)[:1]:  # the innermost
        return (
            f"`{name}` is set only inside the loop at line {loop.lineno + first - 1}, and that loop ran "
            "zero times on this call (an empty range: in a tiled loop, a query block with no key to visit, "
            "as causal attention with T_q > T_k has): give it a value before the loop, or use only what "
            "exists whether the loop ran or not (the running state set before it)."
        )
    return ""


_BROADCAST = re.compile(
    r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)"
)
_AXIS_RANGE = re.compile(
    r"Dimension out of range \(expected to be in range of \[(-?\d+), (\d+)\], but got (-?\d+)\)"
)


def explain_error(error: BaseException) -> str:
    """What a torch or einops size, shape, dtype or device error means, in the learner's terms ("" if none).

    Names the tensors of the learner's line with their shapes where it can, and the usual cause.
    """
    text = str(error)
    if isinstance(error, UnboundLocalError) and (unbound := _set_only_in_a_loop(error)):
        return unbound
    tensors = _line_tensors(_learner_traceback(error))
    shapes = ", ".join(f"`{n}` {_shape(t)}" for n, t in tensors)
    if m := _BROADCAST.search(text):
        return _explain_broadcast((int(m[1]), int(m[2]), int(m[3])), tensors, _learner_traceback(error))
    if m := re.search(r"shape '\[([-\d, ]*)\]' is invalid for input of size (\d+)", text):
        wanted = [int(s) for s in m[1].split(",") if s.strip()]
        size = int(m[2])
        source = next((f"`{n}` {_shape(t)}" for n, t in tensors if t.numel() == size), f"a tensor of {size}")
        asked = f"{math.prod(wanted)} entries" if -1 not in wanted else f"a multiple of {-math.prod(wanted)}"
        return (
            f"{source} has {size} entries, but the shape {wanted} needs {asked}: one size is taken from "
            "the wrong axis or tensor (T_k for T_q, d_model for the head size, n_heads left out). Name the "
            "axes with einops.rearrange, or leave one size to -1."
        )
    if m := re.search(r"returned an invalid gradient at index (\d+) - got \[([\d, ]*)\] but expected shape "
                      r"compatible with \[([\d, ]*)\]", text):  # fmt: skip
        return (
            f"backward's gradient number {int(m[1]) + 1} has shape ({m[2]}), but a gradient has the shape of "
            f"its input, forward's argument number {int(m[1]) + 1} after ctx: ({m[3]})."
        )
    if "view size is not compatible with input tensor's size and stride" in text:
        return (
            "view needs a contiguous tensor, and a transposed or permuted one is not: use .reshape(...) "
            "(or .contiguous().view(...)), or einops.rearrange."
        )
    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", text)
    n = re.search(
        r"Expected size for first two dimensions of batch2 tensor to be: \[(\d+), (\d+)\] but got: "
        r"\[(\d+), (\d+)\]",
        text,
    )
    if m or n:
        left, right = (int(m[2]), int(m[3])) if m else (int(n[2]), int(n[4]))  # type: ignore[index]
        layers = _line_tensors(_learner_traceback(error), torch.nn.Linear)
        if m and layers:
            name, layer = layers[0]
            return (
                f"`{name}` is a Linear layer with in_features={layer.in_features}, and its input's last axis "
                f"has {left}: is it given the right tensor (heads merged back to d_model, the right width)?"
                + (f" On that line: {shapes}." if shapes else "")
            )
        tb = _learner_traceback(error)
        code = "" if tb is None else linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        turned = [
            f"`{m[0]}` is {_shape((*t.shape[:-2], t.shape[-1], t.shape[-2]))}"
            for n, t in tensors
            if t.dim() >= 2
            for m in [re.search(rf"(?<![\w.]){re.escape(n)}\.(?:transpose\([^()]*\)|mT|T\b|t\(\))", code)]
            if m
        ]
        sources = "" if tb is None else _sizes_in_frame(_arguments(tb), left, right, lengths_only=True)
        if turned:
            cause = f" ({'; '.join(turned)}): is that transpose needed, and on that operand?"
        elif sources:
            cause = f": {sources}."
        else:
            cause = (
                ". Usual causes: k not transposed (k.transpose(-2, -1)), or an operand with its axes in "
                "another order."
            )
        return (
            f"A matrix product A @ B needs A's last axis to equal B's second-to-last; here {left} meets "
            f"{right}." + (f" On that line: {shapes}" if shapes else "") + cause
        )
    if m := re.search(r"einsum\(\): subscript (\w) has size (\d+) for operand (\d+) which does not broadcast "
                      r"with previously seen size (\d+)", text):  # fmt: skip
        return (
            f"In your einsum the letter {m[1]} names an axis of size {m[4]} in one operand and {m[2]} in "
            f"operand {m[3]}: a letter must name axes of one size. Check each operand's letters against its "
            "shape, in order."
            + (f" On that line: {shapes}." if shapes else "")
            + _einsum_letter(_learner_traceback(error), m[1])
        )
    if m := re.search(r"can't divide axis of length (\d+) in chunks of (\d+)", text):
        return (
            f"The pattern splits an axis of length {m[1]} into groups of {m[2]}, which does not divide it: "
            "is the named size (h=...) the one that axis holds, and is the axis the one you mean?"
        )
    if m := re.search(r"Wrong shape: expected (\d+) dims\. Received (\d+)-dim tensor", text):
        return (
            f"The pattern names {m[1]} axes, but the tensor has {m[2]}: write the pattern for the tensor's "
            "real shape (are its batch or head axes there, or already merged?)."
        )
    if m := _AXIS_RANGE.search(text):
        return (
            f"That tensor has {int(m[2]) + 1} axes and your code asks for axis {m[3]}: count axes from the "
            "end (dim=-1, transpose(-2, -1)), so the code works with and without batch and head axes."
            + (f" On that line: {shapes}." if shapes else "")
        )
    if m := re.search(r"Sizes of tensors must match except in dimension (-?\d+)", text):
        return f"torch.cat joins tensors along dim={m[1]}; every other axis must agree." + (
            f" On that line: {shapes}." if shapes else ""
        )
    if re.search(r"expected m1 and m2 to have the same dtype|expected scalar type|Found dtype|"
                 r"expected both vectors to have same dtype|must have the same dtype", text):  # fmt: skip
        return (
            "Tensors of two dtypes meet: create new tensors with the inputs' dtype (dtype=q.dtype, "
            "torch.zeros_like, q.new_zeros), never the float32 default."
        )
    if "data-dependent control flow" in text or "vmap: It looks like you're attempting to use" in text:
        return (
            "A mask_mod or score_mod runs under torch.vmap, on tensors standing for every index at once, so "
            "a Python `if`, `and`, `or`, `not` or `.item()` on them cannot be decided: write the condition "
            "with tensor operations, (q_idx >= kv_idx) & (q_idx - kv_idx < window), or torch.where."
        )
    if "view_as_complex is only supported for" in text and "BFloat16" in text:
        return (
            "torch's complex numbers have no bfloat16, the dtype models run in: turn x into float32 (or "
            "float64) before view_as_complex, x.float(), and cast the rotated result back, .to(x.dtype)."
        )
    if "Expected all tensors to be on the same device" in text:
        return "Tensors on two devices meet: create new tensors on the inputs' device (device=q.device)."
    if m := re.search(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)", text):
        return (
            f"Index {m[1]} is past the end of an axis of {m[3]}: a position counted in the other length (T_k "
            "for T_q) or a range that ends one too late." + (f" On that line: {shapes}." if shapes else "")
        )
    frame = _learner_traceback(error)
    if heads := _heads_differ(tensors, {} if frame is None else dict(frame.tb_frame.f_locals)):
        return heads
    if shapes and re.search(r"size|shape|dimension|dims", text, re.IGNORECASE):
        return f"On that line: {shapes}."
    return ""


def learner_raised(what: str, error: BaseException, hint: str = "") -> CheckFailed:
    """The CheckFailed for an exception of the learner's code: what raised it, their line, what it means."""
    explanation = explain_error(error)
    misplaced = _misplaced_on_failing_lines(error) or _unlike_reference(error)
    if misplaced:
        explanation = f"{misplaced}\n{explanation}" if explanation else misplaced
    tb = _learner_traceback(error)
    repair = name_by_repair(line=tb.tb_lineno) if tb is not None else None
    if repair:
        explanation = f"{repair}\n{explanation}" if explanation else repair
    first = " ".join(str(error).split())[:400]
    return CheckFailed(
        f"{what} raised {type(error).__name__}: {first}{_learner_location(error)}"
        + (f"\n{explanation}" if explanation else "")
        + (f"\n{hint}" if hint else "")
    )


def _unlike_reference(error: BaseException) -> str:
    """A tensor of the failing line whose shape its namesake in the right computation never has."""
    if not re.search(r"size|shape|dimension|dims", str(error), re.IGNORECASE):
        return ""
    tensors = [(n, t) for n, t in _line_tensors(_learner_traceback(error)) if "." not in n]
    if not tensors:
        return ""
    seen = reference_shapes()
    for name, tensor in tensors:
        shape = tuple(tensor.shape)
        if name not in seen or shape in seen[name]:
            continue
        right = sorted(seen[name], key=len)
        with_axis = [
            s for s in right if len(s) == len(shape) + 1 and 1 in s and _drop_ones(s) == _drop_ones(shape)
        ]
        if with_axis:
            return (
                f"Your `{name}` is {_shape(shape)}; in the right computation it is "
                f"{_shape(with_axis[0])}: it "
                "keeps the axis it was reduced over, as size 1 (keepdim=True), so that it broadcasts."
            )
        others = sorted(n for n, shapes in seen.items() if n != name and shape in shapes)
        if len(others) == 1:
            return (
                f"Your `{name}` is {_shape(shape)}, the shape of `{others[0]}` in the right computation, "
                f"where its `{name}` is {_shape(right[0])}: are `{name}` and `{others[0]}` swapped "
                "(unpacked in another order, or one computed from the other's input)?"
            )
        return f"Your `{name}` is {_shape(shape)}; in the right computation it is {_shape(right[0])}."
    return ""


def _drop_ones(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(s for s in shape if s != 1)


def _misplaced_on_failing_lines(error: BaseException) -> str:
    """Arguments out of order in a call on one of the learner's lines that the error passed through."""
    learner = [
        tb
        for tb in _walk(error.__traceback__)
        if not str(Path(tb.tb_frame.f_code.co_filename).resolve()).startswith(_LIBRARY_DIRS)
    ]
    for tb in reversed(learner):  # the failing lines first, then the whole of each function they are in
        line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
        namespace = {**tb.tb_frame.f_globals, **tb.tb_frame.f_locals}
        found = misplaced_arguments(line, namespace)  # "" where the line is part of a longer statement
        if found:
            return found.replace("Line 1 passes", f"Line {tb.tb_lineno} passes", 1)
    for tb in reversed(learner):
        code = tb.tb_frame.f_code
        try:
            lines, start = inspect.getsourcelines(code)
        except (OSError, TypeError):
            continue
        found = misplaced_arguments(
            "".join(lines), {**tb.tb_frame.f_globals, **tb.tb_frame.f_locals}, start - 1
        )
        if found:
            return found
    return ""


def expect_tensor(
    value: Any,
    shape: Sequence[int],
    what: str,
    *,
    device: torch.device | str | None = None,
    finite: bool = True,
    hints: dict[tuple[int, ...], str] | None = None,
) -> torch.Tensor:
    """Require a tensor of the given shape (on `device`), free of NaN and inf when `finite`.

    `hints` maps a wrong shape to a message that explains how learners typically get it.
    """
    if not isinstance(value, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, but it is {_describe(value)}.")
    if tuple(value.shape) != tuple(shape):
        hint = (hints or {}).get(tuple(value.shape), "") or _derived_shape_hint(value, tuple(shape))
        raise CheckFailed(
            f"{what} should have shape {tuple(shape)}, but has {tuple(value.shape)}."
            + (f" {hint}" if hint else "")
        )
    if device is not None and value.device.type != torch.device(device).type:
        raise CheckFailed(
            f"{what} is on {value.device.type} but the inputs are on {torch.device(device).type}: "
            "create new tensors on the inputs' device (device=x.device)."
        )
    if finite:
        expect_finite(value, what)
    return value


def _derived_shape_hint(value: torch.Tensor, shape: tuple[int, ...]) -> str:
    """A one-change mutant of the reference that gives this shape; else how it departs from the right one."""
    derived = name_shape_by_mutation(value, shape)
    if derived and not unconfirmed(derived):  # a change the learner's own line did not make: not said
        return f"It {unquoted(derived)}"
    reading = explain_shape(tuple(value.shape), shape, call_arguments())
    # the learner's own line changed once, after which this call has the right shape and the check passes
    repair = name_by_repair(torch.empty(shape), lambda got, want: True)
    return reading + (f"\n{repair}" if repair else "")


def expect_finite(value: torch.Tensor, what: str, hint: str = "") -> None:
    """Require a tensor free of NaN and inf; `hint` says why learners typically get them."""
    if value.is_floating_point() and not torch.isfinite(value).all():
        bad = "NaN" if torch.isnan(value).any() else "inf"
        raise CheckFailed(f"{what} contains {bad} values." + (f" {hint}" if hint else ""))


def is_close(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two tensors of one shape agree within the tolerance of the coarser dtype."""
    if actual.shape != expected.shape:
        return False
    if not (actual.is_floating_point() or expected.is_floating_point()):
        return bool(torch.equal(actual.cpu(), expected.to(actual.dtype).cpu()))
    coarse = max(
        (actual.dtype, expected.dtype),
        key=lambda d: TOLERANCES.get(d, TOLERANCES[torch.float32]).atol,
    )
    tol = TOLERANCES.get(coarse, TOLERANCES[torch.float32])
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    finite = torch.isfinite(e)
    if not torch.equal(finite, torch.isfinite(a)):
        return False
    if not torch.equal(a[~finite].nan_to_num(nan=0.5), e[~finite].nan_to_num(nan=0.5)):
        return False
    return bool(torch.allclose(a[finite], e[finite], atol=tol.atol, rtol=tol.rtol))


def expect_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    *,
    mistakes: Sequence[Mistake] = (),
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    nonfinite_hint: str | Mapping[str, str] = "",
    close: Callable[[torch.Tensor, torch.Tensor], bool] = is_close,
    nan_means_unknown: bool = False,
    diagnose: Callable[[torch.Tensor, torch.Tensor], str | None] | None = None,
    called_as: str | None = None,
    only: Sequence[str] | None = None,
    own_line_with_property: bool = False,
) -> None:
    """Require `actual` to match `expected`; if not, name the mistake, or at least what property fails.

    The diagnosis is the one pipeline of `_diagnosis.py` (`only` narrows its layers, by id); the
    failure carries the id of the finding its message is about (`CheckFailed.finding`).

    In order: the first known `mistakes` whose implementation, called with `args` and `kwargs`, gives
    what the learner gave (a mistake that is right on these inputs, or cannot run on them, is
    skipped; with `nan_means_unknown` so is one whose simulation gives NaN where the reference has
    none); then `diagnose(actual, expected)`, the check's own description of what property fails
    (None when it sees none); then NaN or inf where the reference is finite (`nonfinite_hint` says
    why learners get them, or keyed by the operation that made the first NaN); then where the error
    lies (`describe_error`). `close` decides agreement.
    The message ends with how the function was called: `called_as`, else `args` and `kwargs`
    (`called_as=""` when `what` says it already).
    """
    if close(actual, expected):
        return
    from attn_course.checks._diagnosis import Failure, fail

    kwargs = kwargs or {}
    shown = called_as if called_as is not None else describe_args(args, kwargs)
    failure = Failure(
        actual,
        expected,
        what,
        f"\n(Called as {shown}.)" if shown else "",
        close,
        mistakes,
        args,
        kwargs,
        nan_means_unknown,
        diagnose,
        nonfinite_hint,
        own_line_with_property,
    )
    fail(failure, only)


def slips_message(what: str, slips: Sequence[str], where: str = "") -> str:
    """The message for known mistakes that each give the learner's result: one named, several offered."""
    if len(slips) == 1:
        return f"{what} {slips[0]}{where}"
    subject = what.split("(", 1)[0].rstrip()  # "Your flash_attention", the call said once above
    either = "\n".join(f"- {subject} {message}" for message in slips)  # say each, assert none
    whose = what[0].lower() + what[1:] if what.startswith("Your ") else what
    return (
        f"Each of these {len(slips)} slips would give {whose} exactly, so this check cannot tell which "
        f"one is yours:\n{either}{where}"
    )


def equal_argument(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """Which argument of the last call the result is, unchanged or transposed ("" if none)."""
    a = actual.detach().cpu().double()
    for name, value in call_arguments().items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() == 0:
            continue
        v = value.detach().cpu().double()
        if _close(a, v):
            return f"is the argument `{name}` itself, unchanged: what was computed never reached the result."
        if v.dim() >= 2 and _close(a, v.transpose(-2, -1)):
            return f"is the argument `{name}` transposed: what was computed never reached the result."
    return ""


def where_nonfinite(actual: torch.Tensor) -> str:
    bad = ~torch.isfinite(actual.detach().cpu())
    index = [int(i) for i in torch.unravel_index(bad.flatten().nonzero()[0, 0], bad.shape)]
    return f"{int(bad.sum())} of {bad.numel()} entries, the first at index {index}"


def difference(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """Describe where two same-shaped tensors differ most, for a failure message."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    gap = (a - e).abs().nan_to_num(nan=float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
    return (
        f"the largest difference is at index {list(index)}: "
        f"you have {a[index].item():.6g}, expected {e[index].item():.6g}."
    )


def _wrong_entries(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Boolean tensor: where `actual` disagrees with `expected` (float32 tolerance, NaN disagrees)."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    tol = TOLERANCES.get(actual.dtype, TOLERANCES[torch.float32])
    same = (a - e).abs() <= tol.atol + tol.rtol * e.abs()
    same |= (a == e) | (torch.isnan(a) & torch.isnan(e))
    return ~same


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] as '0–2, 5, 7–8'."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)
    return text if len(text) < 60 else text[:57] + "…"


def describe_error(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """What the error looks like when no known mistake matches: a property, which slices, the worst entry.

    First a property of the whole error (`_error_property`: a constant factor, a transposition, a
    shift by one position, a softmax along another axis, entries left at 0, a factor or offset per
    row, an error confined to one side of the causal diagonal); then an error confined to some
    indices of one axis (some batch entries or heads, the last rows); then the largest difference.
    """
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    notes = []
    if a.shape == e.shape and a.numel() > 1 and torch.isfinite(a).all() and torch.isfinite(e).all():
        wrong = _wrong_entries(a, e)
        found = _error_property(a, e, wrong)
        if found:
            notes.append(found)
        if not found or not found.startswith(_WHOLE):
            notes.extend(_wrong_slices(a, wrong))
    notes.append(difference(a, e))
    return "; ".join(notes)


_WHOLE = ("every entry", "it is the right answer")
"""Properties that describe the whole tensor, after which the wrong slices say nothing more."""


def _close(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.shape == y.shape and bool(torch.allclose(x, y, rtol=1e-4, atol=1e-6))


def _error_property(a: torch.Tensor, e: torch.Tensor, wrong: torch.Tensor) -> str:
    """The first property that describes how `a` differs from `e` as a whole, or ""."""
    scale = float((a * e).sum() / (e * e).sum()) if float((e * e).sum()) > 0 else 0.0
    if abs(scale + 1) < 1e-3 and _close(a, -e):
        return "every entry has the opposite sign of the right one (-1 times it): a - b written b - a"
    if scale != 0.0 and abs(scale - 1) > 1e-3 and _close(a, scale * e):
        return f"every entry is {scale:.4g} times the right one (a missing or extra factor)"
    if a.dim() >= 2 and a.shape[-1] == a.shape[-2] and _close(a, e.transpose(-1, -2)):
        return "it is the right answer transposed (its last two axes swapped)"
    if bool((a.sign() != e.sign()).any()) and _close(a, -e):
        return "it is the right answer with the opposite sign"
    offset = (a - e).mean()
    if float(offset.abs()) > 1e-6 and _close(a, e + offset):
        return f"every entry is off by the same {float(offset):.4g} (a constant added or left out)"
    for axis in range(a.dim()):
        n = a.shape[axis]
        if n < 3 or _close(e.narrow(axis, 1, n - 1), e.narrow(axis, 0, n - 1)):
            continue
        name = _axis_name(axis, a.dim())
        if _close(a.narrow(axis, 1, n - 1), e.narrow(axis, 0, n - 1)):
            return (
                f"it is the right answer shifted by one position along {name}: entry i holds what belongs "
                "at i - 1 (an index, offset or range off by one)"
            )
        if _close(a.narrow(axis, 0, n - 1), e.narrow(axis, 1, n - 1)):
            return (
                f"it is the right answer shifted by one position along {name}: entry i holds what belongs "
                "at i + 1 (an index, offset or range off by one)"
            )
        if _close(a, e.flip(axis)):
            return f"it is the right answer reversed along {name} (an order or index flipped)"
    if (e >= 0).all() and (a >= 0).all() and a.dim() >= 2 and e.shape[-1] > 1 and _all_near(e.sum(-1), 1.0):
        if not _all_near(a.sum(-1), 1.0):
            for other in range(a.dim() - 1):
                if a.shape[other] > 1 and _all_near(a.sum(other), 1.0):
                    return (
                        f"each slice sums to 1 along {_axis_name(other, a.dim())} instead of along the last "
                        "axis: the softmax (or the normalising sum) is taken along the wrong axis"
                    )
    if bool(wrong.any()) and bool((a[wrong] == 0).all()) and bool((e[wrong] != 0).all()):
        count = int(wrong.sum())
        return (
            f"{count} of {a.numel()} entries are exactly 0 where the right answer is not: they were never "
            "computed or written (a loop that stops early, a block or a case skipped)"
        )
    if a.dim() >= 1 and a.shape[-1] > 1 and a.numel() > a.shape[-1]:
        nonzero = e.abs() > 1e-12
        if bool(nonzero.all()):
            ratio = a / e
            per_row = ratio.amax(-1) - ratio.amin(-1)
            if bool((per_row <= 1e-4 * ratio.abs().amax(-1)).all()):
                return (
                    "each row (last axis) is the right row times a factor of its own "
                    f"({float(ratio.min()):.4g} to {float(ratio.max()):.4g}): a normalisation or scale taken "
                    "per row from the wrong numbers"
                )
        shift = a - e
        if bool(((shift.amax(-1) - shift.amin(-1)) <= 1e-6 + 1e-4 * e.abs().amax(-1)).all()):
            return (
                "each row (last axis) is off by a constant of its own: a max or log-sum-exp subtracted, "
                "added, or taken over the wrong entries"
            )
    if a.dim() >= 2 and bool(wrong.any()):
        t_q, t_k = a.shape[-2:]
        rows = torch.arange(t_q)[:, None] + (t_k - t_q)
        cols = torch.arange(t_k)[None, :]
        where = wrong.reshape(-1, t_q, t_k).any(0)  # (T_q, T_k)
        if min(t_q, t_k) > 1 and bool((cols > rows).any()) and bool((cols <= rows).any()):
            if not bool((where & (cols <= rows)).any()):
                return (
                    "only the entries above the causal diagonal (keys after their query, aligned "
                    "bottom-right) are wrong: the causal mask is missing there, or masked keys are mishandled"
                )
            if not bool((where & (cols != rows)).any()):
                return "only the entries on the causal diagonal (key = query) are wrong"
    return ""


def _wrong_slices(a: torch.Tensor, wrong: torch.Tensor) -> list[str]:
    """For each axis where only some indices are wrong: which, and the usual cause of that pattern."""
    notes = []
    for axis in range(a.dim()):
        size = a.shape[axis]
        if size < 2:
            continue
        other = [d for d in range(a.dim()) if d != axis]
        bad = wrong.amax(dim=other) if other else wrong  # (size,)
        bad_indices = bad.nonzero().flatten().tolist()
        if 0 < len(bad_indices) < size:
            name = _axis_name(axis, a.dim())
            note = f"only {name} {_ranges(bad_indices)} of {size} are wrong (the others are right)"
            if bad_indices == list(range(1, size)) and axis < a.dim() - 2:  # a batch or head axis
                note += (
                    ": all but the first, so something is taken from index 0 only, or a size-1 axis "
                    "broadcast where each index needs its own"
                )
            elif (  # a short tail only: rows 1 … T - 1 wrong says nothing of a last block
                bad_indices == list(range(bad_indices[0], size))
                and axis >= a.dim() - 2
                and 2 * len(bad_indices) <= size
            ):
                note += ": the last ones (a last, partial block, or a range that stops early?)"
            notes.append(note)
    return notes


def _axis_name(axis: int, dims: int) -> str:
    if axis == dims - 1:
        return "the columns (last axis)"
    if axis == dims - 2:
        return "the rows (axis -2)"
    return f"the indices of axis {axis}"


def expect_gradients(
    name: str,
    candidate: Callable[..., Any],
    reference: Callable[..., Any],
    inputs: Sequence[torch.Tensor],
    labels: Sequence[str],
    *,
    kwargs: dict[str, Any] | None = None,
    first_output: bool = False,
) -> None:
    """Require gradients through the candidate, with respect to each input, to match the reference's.

    With `first_output`, the function returns (out, ...) and gradients flow from `out`.
    """
    kwargs = kwargs or {}
    grads = []
    upstream = None
    for fn in (candidate, reference):
        leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
        result = call(name, fn, *leaves, **kwargs)
        out = result[0] if first_output and isinstance(result, tuple | list) else result
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            raise CheckFailed(
                f"No gradient flows through `{name}`: its output is detached from {', '.join(labels)}. "
                "Avoid .detach(), .numpy(), .item(), torch.tensor(...) of results and torch.no_grad()."
            )
        if upstream is None:
            upstream = randn(*out.shape, dtype=out.dtype)
        (out * upstream).sum().backward()
        grads.append([leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves])
    for label, got, want in zip(labels, grads[0], grads[1], strict=True):

        def diagnose(got: torch.Tensor, want: torch.Tensor, label: str = label) -> str:
            bad = ~torch.isfinite(got.detach()) & torch.isfinite(want.detach())
            if bool(bad.any()):
                return (
                    f"holds NaN or inf in {int(bad.sum())} of {bad.numel()} entries, though the values of "
                    "your function are right: a NaN made on the way (a softmax of a row of only -inf, "
                    "0 · inf, a log or a division by 0) is hidden in the values by nan_to_num, where or "
                    "masked_fill, but backward still multiplies through it. Keep every intermediate "
                    "finite: fill masked scores so that no row is all -inf, or compute such rows apart."
                )
            return (
                "is wrong, though the values of your function are right: part of the computation is cut "
                "off from autograd or changed behind its back (.detach(), .data, torch.no_grad(), an "
                f"in-place change of a tensor autograd saved, or a constant where {label} should enter)."
            )

        expect_close(
            got,
            want,
            f"The gradient of your `{name}` with respect to {label}",
            called_as="",
            diagnose=diagnose,
        )


def unpack_out_and_weights(
    name: str, result: Any, expected_out: torch.Tensor, expected_weights: torch.Tensor
) -> tuple[Any, Any]:
    """Require `(out, weights)`; recognise a single tensor and the swapped pair."""
    if isinstance(result, torch.Tensor):
        raise CheckFailed(
            f"`{name}` should return a tuple (out, weights), but returned one tensor of shape "
            f"{tuple(result.shape)}. End with `return out, weights`."
        )
    if not isinstance(result, tuple | list) or len(result) != 2:
        kind = type(result).__name__
        raise CheckFailed(
            f"`{name}` should return a tuple (out, weights), but returned {kind} {result!r:.80}."
        )
    out, weights = result
    if (
        isinstance(out, torch.Tensor)
        and isinstance(weights, torch.Tensor)
        and expected_out.shape != expected_weights.shape
        and out.shape == expected_weights.shape
        and weights.shape == expected_out.shape
    ):
        raise CheckFailed(f"`{name}` returned (weights, out): return them in the order (out, weights).")
    return out, weights


def as_view(x: torch.Tensor) -> torch.Tensor:
    """x with the same values as a non-contiguous view whose last axis stays contiguous, as a tensor
    is after split_heads (axes -3 and -2 swapped in memory) or a slice of a wider one (2 axes)."""
    if x.dim() >= 3:
        return x.transpose(-2, -3).contiguous().transpose(-2, -3)
    if x.dim() == 2:
        wider = torch.zeros(x.shape[0], 2 * x.shape[1], dtype=x.dtype, device=x.device)
        return wider[:, : x.shape[1]].copy_(x)
    return x


def diagnose_views(
    candidate: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any] | None = None,
    pick: Callable[[Any], Any] = lambda result: result,
) -> Callable[[torch.Tensor, torch.Tensor], str | None]:
    """A `diagnose`: when some tensor argument is a non-contiguous view and the candidate is right on
    contiguous copies of the same values, say that it reads memory instead of the tensor."""

    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        if not any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args):
            return None
        copies = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        try:
            with torch.no_grad():
                again = pick(candidate(*copies, **(kwargs or {})))
        except Exception:
            return None
        if isinstance(again, torch.Tensor) and is_close(again, expected):
            return (
                "is right for contiguous tensors but wrong for non-contiguous views of the same values "
                "(a .transpose, as split_heads makes): something reads the memory, not the tensor (a "
                "stride or layout assumed, as_strided, .storage, .data_ptr). Index by shape and axis only."
            )
        return None

    return diagnose


def randn(*shape: int, dtype: torch.dtype = torch.float64, scale: float = 1.0) -> torch.Tensor:
    """Seeded normal inputs (the check wrapper seeds torch before each check)."""
    return torch.randn(*shape, dtype=dtype) * scale


def cuda_device() -> torch.device | None:
    """The CUDA device when one is usable here, else None (checks then stay on the CPU)."""
    try:
        if torch.cuda.is_available():
            return torch.device("cuda")
    except Exception:
        return None
    return None


def _all_near(values: torch.Tensor, target: float, tol: float = 1e-3) -> bool:
    return bool(torch.isfinite(values).all()) and bool(((values - target).abs() <= tol).all())


def diagnose_softmax(
    actual: torch.Tensor, expected: torch.Tensor, *, dim: int, x: Any = None, plural: bool = False
) -> str | None:
    """Which property of a softmax along `dim` fails: sign, the axis it sums to 1 along, proportions.

    `plural`: the message follows a plural subject ("Your weights have ...").
    """
    has, sums, does = ("have", "sum", "do") if plural else ("has", "sums", "does")
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.shape != e.shape or not torch.isfinite(a).all() or not torch.isfinite(e).all():
        return None
    d = dim % a.dim()
    if (a < 0).any():
        return (
            f"{has} negative entries, so it is not a softmax: probabilities are exp(x - max) / sum, "
            "never negative (did you return x - max, a log-probability or skip the exp?)."
        )
    ratio = a / e
    per_row = ratio.amax(dim=d, keepdim=True) - ratio.amin(dim=d, keepdim=True)
    spread = 1e-6 * ratio.abs().amax(dim=d, keepdim=True)
    if bool(torch.isfinite(ratio).all()) and bool((per_row <= spread).all()):
        totals = a.sum(dim=d)
        return (
            f"{has} the right proportions within each row but {does} not sum to 1 along dim={dim} (the sums "
            f"run from {float(totals.min()):.6g} to {float(totals.max()):.6g}): divide the exponentials by "
            f"their sum along dim={dim} (keepdim=True), nothing added to it, the sum of the very "
            "exponentials you return (after subtracting the max)."
        )
    if _all_near(a.sum(dim=d), 1.0):
        return (
            f"{sums} to 1 along dim={dim} as it should, but its entries are not proportional to exp(x): "
            "the ratio of two probabilities in a row must be exp(x_i - x_j). Subtract the same number "
            "from the whole row (its max) and take exp of x itself, not of a rescaled or reordered x."
        )
    for other in range(a.dim()):
        if other != d and a.shape[other] > 1 and _all_near(a.sum(dim=other), 1.0):
            return (
                f"{sums} to 1 along dim={other} instead of along the dim={dim} you were given: use "
                "`dim` in every reduction, the max and the sum (with keepdim=True)."
            )
    totals = a.sum(dim=d)
    return (
        f"{does} not sum to 1 along dim={dim} (the sums along that axis range from {float(totals.min()):.4g} "
        f"to {float(totals.max()):.4g}) nor along any other axis: exp(x - max) / sum along dim={dim}, "
        "with max and sum both taken along that axis, keepdim=True."
    )
