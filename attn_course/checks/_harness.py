"""The machinery every check shares: calling the learner's code safely, comparing, diagnosing.

A check calls the learner's function on seeded inputs, compares the result with the reference,
and when they differ, compares it with known wrong variants (`Mistake`) to name the mistake.
Everything that goes wrong becomes a `CheckFailed` with a message in the learner's terms.
"""

from __future__ import annotations

import functools
import importlib.util
import linecache
import re
import sysconfig
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

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
            if isinstance(failure, CheckFailed):
                record_failure(name)  # the cells after it go back to the course's version
            raise failure from None
        record_pass(name, candidate)
        print(pass_line(name, detail, colour=in_ipython()))

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
    close: Callable[[torch.Tensor, torch.Tensor], bool] = is_close,
    nan_means_unknown: bool = False,
    diagnose: Callable[[torch.Tensor, torch.Tensor], str | None] | None = None,
    called_as: str | None = None,
) -> None:
    """Require `actual` to match `expected`; if not, name the mistake, or at least what property fails.

    In order: the first known `mistakes` whose implementation, called with `args` and `kwargs`, gives
    what the learner gave (a mistake that is right on these inputs, or cannot run on them, is
    skipped; with `nan_means_unknown` so is one whose simulation gives NaN where the reference has
    none); then `diagnose(actual, expected)`, the check's own description of what property fails
    (None when it sees none); then NaN or inf where the reference is finite (`nonfinite_hint` says
    why learners get them); then where the error lies (`describe_error`). `close` decides agreement.
    The message ends with how the function was called: `called_as`, else `args` and `kwargs`
    (`called_as=""` when `what` says it already).
    """
    if close(actual, expected):
        return
    kwargs = kwargs or {}
    shown = called_as if called_as is not None else describe_args(args, kwargs)
    where = f"\n(Called as {shown}.)" if shown else ""
    reference_finite = ~torch.isnan(expected.detach().cpu()) if expected.is_floating_point() else None
    for mistake in mistakes:
        try:
            with torch.no_grad():
                wrong = mistake.implementation(*args, **kwargs)
        except Exception:  # a mistake that cannot even run on these inputs is not this one
            continue
        if not isinstance(wrong, torch.Tensor) or wrong.shape != expected.shape:
            continue
        if nan_means_unknown and reference_finite is not None:
            if (torch.isnan(wrong.detach().cpu()) & reference_finite).any():
                continue
        if not close(wrong, expected) and close(actual, wrong):
            raise CheckFailed(f"{what} {mistake.message}{where}")
    if diagnose is not None:
        found = diagnose(actual, expected)
        if found:
            raise CheckFailed(f"{what} {found}{where}")
    if actual.is_floating_point() and not torch.isfinite(actual).all() and torch.isfinite(expected).all():
        bad = "NaN" if torch.isnan(actual).any() else "inf"
        raise CheckFailed(
            f"{what} contains {bad} values where the right answer is finite (the inputs are finite): "
            f"{_where_nonfinite(actual)}." + (f" {nonfinite_hint}" if nonfinite_hint else "") + where
        )
    raise CheckFailed(f"{what} is wrong: {describe_error(actual, expected)}{where}")


def _where_nonfinite(actual: torch.Tensor) -> str:
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
    """What the error looks like when no known mistake matches: a scale, which slices, then the worst entry.

    A constant factor, an error confined to some indices of one axis (some batch entries or heads,
    the rows from some row on, some columns), or to a transposition, says more than one number.
    """
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    notes = []
    if a.shape == e.shape and a.numel() > 1 and torch.isfinite(a).all() and torch.isfinite(e).all():
        wrong = _wrong_entries(a, e)
        scale = float((a * e).sum() / (e * e).sum()) if float((e * e).sum()) > 0 else 0.0
        if scale != 0.0 and abs(scale - 1) > 1e-3 and torch.allclose(a, scale * e, rtol=1e-4, atol=1e-6):
            notes.append(f"every entry is {scale:.4g} times the right one (a missing or extra factor)")
        elif a.dim() >= 2 and a.shape[-1] == a.shape[-2] and torch.allclose(a, e.transpose(-1, -2)):
            notes.append("it is the right answer transposed (its last two axes swapped)")
        elif bool((a.sign() != e.sign()).any()) and torch.allclose(a, -e):
            notes.append("it is the right answer with the opposite sign")
        else:
            for axis in range(a.dim()):
                size = a.shape[axis]
                if size < 2:
                    continue
                other = [d for d in range(a.dim()) if d != axis]
                bad = wrong.amax(dim=other) if other else wrong  # (size,)
                bad_indices = bad.nonzero().flatten().tolist()
                if 0 < len(bad_indices) < size:
                    name = _axis_name(axis, a.dim())
                    notes.append(
                        f"only {name} {_ranges(bad_indices)} of {size} are wrong (the others are right)"
                    )
    notes.append(difference(a, e))
    return "; ".join(notes)


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
    ratio = a / e
    per_row = ratio.amax(dim=d, keepdim=True) - ratio.amin(dim=d, keepdim=True)
    spread = 1e-3 * ratio.abs().amax(dim=d, keepdim=True)
    if bool(torch.isfinite(ratio).all()) and bool((per_row <= spread).all()):
        return (
            f"{has} the right proportions within each row but {does} not sum to 1 along dim={dim}: divide "
            f"the exponentials by their sum along dim={dim} (keepdim=True), the sum of the very "
            "exponentials you return (after subtracting the max)."
        )
    totals = a.sum(dim=d)
    return (
        f"{does} not sum to 1 along dim={dim} (the sums along that axis range from {float(totals.min()):.4g} "
        f"to {float(totals.max()):.4g}) nor along any other axis: exp(x - max) / sum along dim={dim}, "
        "with max and sum both taken along that axis, keepdim=True."
    )
