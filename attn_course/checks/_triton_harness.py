"""What the Triton checks of notebook 08 share: where kernels run, tracing a call, inputs, comparing.

Where the learner's kernels are interpreted (`TRITON_INTERPRET=1`, any CPU), a check calls the
learner's wrapper inside a `KernelTrace`, which sees every program's loads and stores. Inputs sit
in front of a guard zone of NaN, so an unmasked read past their end shows on a GPU too, where the
check runs compiled kernels in float16 and judges from the numbers alone.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attn_course.checks._harness import CheckFailed, Mistake, call, expect_close, expect_tensor
from attn_course.checks._triton_trace import KernelTrace, trace_available
from attn_course.device import FMA, gpu_paths
from attn_course.triton_flash.runtime import gpu_problem, interpreter_problem, is_interpreted, triton_status

GUARD = 4096
"""Elements of NaN placed after each input, so that unmasked reads past the end show."""


@dataclass(frozen=True)
class Mode:
    """Where a check runs the learner's kernels, and whether it can trace them."""

    device: torch.device
    traced: bool
    capability: tuple[int, int] | None = None
    """The GPU's compute capability, when the kernels are compiled for one."""

    @property
    def gpu(self) -> bool:
        """Whether the kernels are compiled for a GPU (float16 inputs, looser tolerances)."""
        return self.device.type == "cuda"

    @property
    def gpu_where(self) -> str:
        """Where a compiled check ran, for its pass detail, and what the GPU lacks (a T4: tensor cores).

        >>> Mode(torch.device("cuda"), False, (9, 0)).gpu_where
        'on cuda in float16'
        >>> Mode(torch.device("cuda"), False, (7, 5)).gpu_where
        'on cuda in float16, compiled without tensor cores (compute capability 7.5: multiply-adds)'
        """
        where = f"on {self.device.type} in float16"
        if self.capability is not None and gpu_paths(self.capability)[0].how == FMA:
            cc = "{}.{}".format(*self.capability)
            where += f", compiled without tensor cores (compute capability {cc}: multiply-adds)"
        return where


def kernels_used(candidate: Callable[..., Any]) -> list[Any]:
    """The Triton kernels (jit, interpreted, autotuned) the wrapper's code names, found in its globals.

    A candidate that is itself a kernel (notebook 09's Exercises 5a and 5b) is its only kernel.
    """
    from triton.runtime.jit import KernelInterface

    if isinstance(candidate, KernelInterface):
        return [candidate]
    code = getattr(candidate, "__code__", None)
    if code is None:
        return []
    names = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:  # names used in nested functions and comprehensions
        if isinstance(const, types.CodeType):
            names |= set(const.co_names)
    scope = dict(getattr(candidate, "__globals__", {}))
    for name, cell in zip(code.co_freevars, getattr(candidate, "__closure__", None) or (), strict=False):
        try:
            scope[name] = cell.cell_contents
        except ValueError:
            continue
    return [scope[n] for n in sorted(names) if isinstance(scope.get(n), KernelInterface)]


def kernel_mode(name: str, candidate: Callable[..., Any]) -> Mode:
    """Run interpreted on the CPU (traced) unless the learner's kernels are compiled for a usable GPU."""
    status = triton_status()
    if not status.installed:
        raise CheckFailed(f"`{name}` needs Triton, and {status}")
    kernels = kernels_used(candidate)
    compiled = [kernel for kernel in kernels if not is_interpreted(kernel)]
    if not compiled and (kernels or status.interpreted):
        problem = interpreter_problem()
        if problem is not None:
            raise CheckFailed(problem)
        return Mode(torch.device("cpu"), trace_available())
    problem = gpu_problem()
    if problem is not None:
        what = f"your kernel `{getattr(compiled[0], '__name__', 'kernel')}`" if compiled else "Triton"
        raise CheckFailed(
            f"{what} was compiled for a GPU, but "
            f"{problem}. Triton decides that when it is imported: restart the kernel and run the notebook "
            "from the top; its first cell turns on Triton's interpreter (TRITON_INTERPRET=1) before "
            "triton is imported."
        )
    return Mode(torch.device("cuda"), False, torch.cuda.get_device_capability())


def traced_call(
    name: str, candidate: Callable[..., Any], mode: Mode, *args: Any, hint: str = "", **kwargs: Any
) -> tuple[Any, KernelTrace | None]:
    """Call the learner's wrapper, under a KernelTrace when its kernels are interpreted."""
    if not mode.traced:
        return call(name, candidate, *args, hint=hint, **kwargs), None
    with KernelTrace() as trace:
        result = call(name, candidate, *args, hint=hint, **kwargs)
    return result, trace


def guarded(*shape: int, device: torch.device, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """Seeded normal values of `shape`, contiguous, followed in memory by a guard zone of NaN."""
    numel = math.prod(shape)
    buffer = torch.full((numel + GUARD,), math.nan, dtype=dtype, device=device)
    buffer[:numel] = (torch.randn(numel, dtype=torch.float64) * scale).to(dtype)
    return buffer[:numel].view(shape)


def expect_launched(name: str, trace: KernelTrace | None) -> None:
    """Require the wrapper to have launched a kernel (when traced)."""
    if trace is None:
        return
    if not trace.launches:
        raise CheckFailed(
            f"`{name}` launched no Triton kernel: it should launch your kernel with "
            "`your_kernel[grid](...)` and return the tensor the kernel wrote."
        )


def expect_in_bounds(name: str, trace: KernelTrace | None, hint: str) -> None:
    """Require no load or store outside the kernel's tensors; `hint` says how to mask."""
    if trace is None or not trace.out_of_bounds:
        return
    bad = trace.out_of_bounds[0]
    verb = "wrote to" if bad.store else "read from"
    where = (
        f"{bad.elements_past_end} element(s) past the end of `{bad.nearest}`"
        if bad.nearest is not None
        else "an address in none of its tensors"
    )
    grid = trace.launches[bad.launch].grid
    axes = 3 if grid[2] > 1 else 2 if grid[1] > 1 else 1
    program = ", ".join(map(str, bad.program[:axes]))
    raise CheckFailed(
        f"your kernel {verb} memory outside its tensors: program ({program}) {verb} {where} "
        f"({bad.lanes} lanes of one {'tl.store' if bad.store else 'tl.load'}). {hint}\n"
        "(The interpreter stopped that access; on a GPU it would read garbage or crash.)"
    )


def expect_result(name: str, result: Any, like: torch.Tensor, what: str = "the result") -> torch.Tensor:
    """Require one tensor shaped, placed and typed like `like`; name the usual slips."""
    if isinstance(result, tuple | list):
        raise CheckFailed(
            f"`{name}` returned a {type(result).__name__} of {len(result)} items: return {what} only."
        )
    if result is None:
        raise CheckFailed(f"`{name}` returned None: end it with `return out` (the tensor the kernel wrote).")
    expect_tensor(result, like.shape, what, device=like.device, finite=False)
    if result.dtype != like.dtype:
        raise CheckFailed(
            f"{what} has dtype {result.dtype} but the inputs are {like.dtype}: allocate it with "
            "torch.empty_like(...) of an input, and accumulate in float32 inside the kernel only."
        )
    return result


def expect_all_written(
    trace: KernelTrace | None, out: torch.Tensor, hint: str, name_overlap: bool = True
) -> None:
    """Require every element of `out` to have been stored to by some program.

    With `name_overlap`, programs whose stores overlap are named first (offsets without `* BLOCK`);
    without it, `hint` alone says what to look at (the lse, whose own hint names its row offsets).
    """
    if trace is None or not out.is_contiguous():
        return
    written = np.zeros(out.numel(), dtype=bool)
    written[trace.touched(out, store=True)] = True
    if written.all():
        return
    missing = np.flatnonzero(~written)
    index = [int(i) for i in np.unravel_index(missing[0], tuple(out.shape))]
    overlap = _overlapping_programs(trace, out) if name_overlap else None
    if overlap is not None:
        element, first, second = overlap
        where = [int(i) for i in np.unravel_index(element, tuple(out.shape))]
        raise CheckFailed(
            f"the programs' blocks overlap: programs {_ids(first)} and {_ids(second)} both wrote the output "
            f"element at index {where}, and no program wrote {missing.size} of the {out.numel()} output "
            f"elements (the first at index {index}). Each program must cover its own block, starting "
            "at its id times the block size "
            "(pid * BLOCK + tl.arange(0, BLOCK), not pid + tl.arange(0, BLOCK)), "
            "so that consecutive programs follow each other."
            + (f" {hint}" if hint.startswith("Every program wrote the same") else "")
        )
    raise CheckFailed(
        f"no program wrote {missing.size} of the {out.numel()} output elements (the first at index "
        f"{index}); torch.empty leaves them as whatever was in memory. {hint}"
    )


def _overlapping_programs(
    trace: KernelTrace, out: torch.Tensor
) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """(element, program, other program) of an output element two programs of one launch stored to."""
    owner: dict[tuple[int, int], tuple[int, ...]] = {}
    for access in trace.accesses_to(out, store=True):
        if access.atomic:  # programs that add atomically into one element are meant to overlap
            continue
        program = access.program[: 3 if access.program[2] else 2 if access.program[1] else 1]
        for element in access.elements.tolist():
            other = owner.setdefault((access.launch, element), program)
            if other != program:
                return element, other, program
    return None


def _ids(program: tuple[int, ...]) -> str:
    return f"({', '.join(map(str, program))})"


def close(actual: torch.Tensor, expected: torch.Tensor, gpu: bool) -> bool:
    """Whether actual ≈ expected with NaN in the same places, at CPU or GPU tolerance."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    finite = ~torch.isnan(e)
    atol, rtol = (1e-2, 1e-2) if gpu else (2e-5, 1e-4)
    return bool(torch.allclose(a[finite], e[finite], atol=atol, rtol=rtol))


def compare(
    what: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    mode: Mode,
    mistakes: Sequence[Mistake],
    called_as: str,
    explain: Callable[[], None] = lambda: None,
    nan_means_unknown: bool = False,
    diagnose: Callable[[torch.Tensor, torch.Tensor], str | None] | None = None,
) -> None:
    """`expect_close` at the tolerance of where the kernel ran, for mistakes simulated on these inputs.

    Each mistake's implementation takes no arguments (it closes over the inputs). With
    `nan_means_unknown`, a simulated mistake that gives NaN where the reference has none is
    skipped: its NaN comes from the simulation's own arithmetic. When no known mistake matches,
    `explain` may raise a more specific CheckFailed from the trace, then `diagnose` may name the
    property that fails.
    """

    def diagnosis(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        explain()
        return diagnose(actual, expected) if diagnose is not None else None

    expect_close(
        actual,
        expected,
        what,
        mistakes=mistakes,
        close=functools.partial(close, gpu=mode.gpu),
        nan_means_unknown=nan_means_unknown,
        diagnose=diagnosis,
        called_as=called_as,
        nonfinite_hint="Typical causes: exp(-inf - (-inf)) for a row whose maximum is still -inf, a "
        "division by a running sum of 0, or a load past the end of a tensor without a mask (the check "
        "puts NaN after each input).",
    )
