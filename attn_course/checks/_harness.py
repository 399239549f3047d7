"""The machinery every check shares: calling the learner's code safely, comparing, diagnosing.

A check calls the learner's function on seeded inputs, compares the result with the reference,
and when they differ, compares it with known wrong variants (`Mistake`) to name the mistake.
Everything that goes wrong becomes a `CheckFailed` with a message in the learner's terms.
"""

from __future__ import annotations

import functools
import importlib.util
import linecache
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attn_course.progress import record_pass


class CheckFailed(AssertionError):
    """A learner's implementation is wrong; the message says how, in the learner's terms."""


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
        try:
            with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.manual_seed(0)
                detail = body(candidate)
        except CheckFailed as error:
            failure = CheckFailed(str(error))
        except Exception as error:  # a bug in the checker, never the learner's fault
            failure = CheckerError(
                f"the checker for `{name}` itself failed ({type(error).__name__}: {error}). This is not "
                f"your mistake and says nothing about your code: {REPORT_TO}, with this message."
            )
        if failure is not None:
            raise failure from None
        record_pass(name, candidate)
        print(f"✅ {name} passed: {detail}")

    run_check.__doc__ = f"Check a learner's `{name}`; raise CheckFailed naming the mistake."
    CHECKS[name] = run_check
    return run_check


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"{type(value).__name__} {value!r}"[:120]


_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def _library_dirs() -> tuple[str, ...]:
    """Folders whose frames are never the learner's: this package, torch, Triton and numpy."""
    dirs = [_PACKAGE_DIR, _TORCH_DIR]
    for name in ("triton", "numpy"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(str(Path(p).resolve()) for p in spec.submodule_search_locations)
    return tuple(dirs)


_LIBRARY_DIRS = _library_dirs()


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
    code = (last.line or linecache.getline(last.filename, last.lineno)).strip()
    return f" at line {last.lineno} of your code: `{code}`" if code else ""


def call(name: str, candidate: Callable[..., Any], *args: Any, hint: str = "", **kwargs: Any) -> Any:
    """Call the learner's function; turn anything it raises into a CheckFailed naming the call.

    `hint` is added to the message when the call raises. A call that changes one of its tensor
    arguments in place is rejected too: the caller's tensors must come back as they went in.
    """
    before = [(a, a.detach().clone()) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    try:
        result = candidate(*args, **kwargs)
    except NotImplementedError:
        raise CheckFailed(
            f"`{name}` is not implemented yet: replace `raise NotImplementedError` "
            "with your code, run that cell, then run this check again."
        ) from None
    except Exception as raised:
        error = _unwrap_interpreter_error(raised)
        raise CheckFailed(
            f"`{name}` raised {type(error).__name__}: {error}{_learner_location(error)}\n"
            f"It was called as {name}({describe_args(args, kwargs)})." + (f"\n{hint}" if hint else "")
        ) from None
    for tensor, copy in before:
        if tensor.device.type != "meta" and not torch.equal(tensor.detach(), copy):
            raise CheckFailed(
                f"`{name}` changed one of its input tensors in place (for example `q /= ...` or "
                "`x.sub_(...)`): compute new tensors instead and leave the inputs as they were."
            )
    return result


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
        return repr(value)

    parts = [show(a) for a in args] + [f"{key}={show(value)}" for key, value in kwargs.items()]
    return ", ".join(parts)


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
        hint = (hints or {}).get(tuple(value.shape), "")
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
    nonfinite_hint: str = "",
) -> None:
    """Require `actual` to match `expected`; if not, name the first known mistake it matches.

    Each mistake's implementation is called with `args` and `kwargs`; a mistake that gives the
    right answer on these inputs, or cannot run on them, is skipped.
    """
    if is_close(actual, expected):
        return
    kwargs = kwargs or {}
    where = f"\n(Called as {describe_args(args, kwargs)}.)"
    for mistake in mistakes:
        try:
            with torch.no_grad():
                wrong = mistake.implementation(*args, **kwargs)
        except Exception:  # a mistake that cannot even run on these inputs is not this one
            continue
        if isinstance(wrong, torch.Tensor) and not is_close(wrong, expected) and is_close(actual, wrong):
            raise CheckFailed(f"{what} {mistake.message}{where}")
    if actual.is_floating_point() and not torch.isfinite(actual).all() and torch.isfinite(expected).all():
        expect_finite(actual, what, nonfinite_hint)
    raise CheckFailed(f"{what} is wrong: {difference(actual, expected)}{where}")


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
        expect_close(got, want, f"The gradient of your `{name}` with respect to {label}")


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
