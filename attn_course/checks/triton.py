"""Checks for notebook 08's warm-up kernel and fused softmax: `triton_add` and `triton_softmax`.

Both run the learner's kernel through Triton's interpreter where it is interpreted, watching every
load and store (see `_triton_harness`); the FlashAttention check is in `triton_flash`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Contract,
    Returns,
    contiguous_strides,
    dtype_cases,
    dtype_name,
    make_arg,
    read_as,
    view_cases,
    view_words,
)
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    check,
    describe_args,
    describe_error,
    diagnose_softmax,
)
from attn_course.checks._simulate import STREAMING_SOFTMAX_MISTAKES
from attn_course.checks._triton_harness import (
    Mode,
    close,
    compare,
    expect_all_written,
    expect_in_bounds,
    expect_launched,
    expect_result,
    guarded,
    kernel_mode,
    traced_call,
)
from attn_course.checks._triton_trace import KernelTrace

# ---------------------------------------------------------------------------------------------
# triton_add

_ADD_BOUNDS_HINT = (
    "The last program's block runs past n when n is not a multiple of BLOCK: compute "
    "`mask = offsets < n` and pass it to both tl.load and tl.store."
)


@check
def check_triton_add(candidate: Callable[..., Any]) -> str:
    """x + y by the learner's add kernel, for lengths that are and are not multiples of any block."""
    mode = kernel_mode("triton_add", candidate)
    dtype = torch.float16 if mode.gpu else torch.float32
    lengths = (1000, 1, 4096, 37)
    shapes: list[tuple[tuple[int, ...], str]] = [((n,), "") for n in lengths] + [
        ((7, 33), ""),
        ((7, 33), "x"),
        ((7, 33), "y"),
    ]
    for shape, transposed in shapes:
        x = guarded(*shape, device=mode.device, dtype=dtype)
        y = guarded(*shape, device=mode.device, dtype=dtype)
        if transposed == "x":  # a (33, 7) tensor's transpose: the same shape as y, another memory order
            x = guarded(*shape[::-1], device=mode.device, dtype=dtype).t()
        if transposed == "y":  # either input may be a view: both must be made contiguous
            y = guarded(*shape[::-1], device=mode.device, dtype=dtype).t()
        result, trace = traced_call("triton_add", candidate, mode, x, y)
        expect_launched("triton_add", trace)
        expect_in_bounds("triton_add", trace, _ADD_BOUNDS_HINT)
        if isinstance(result, torch.Tensor) and len(shape) > 1 and tuple(result.shape) == (x.numel(),):
            raise CheckFailed(
                f"triton_add(x, y) of 2-D tensors of shape {shape} returned a flat tensor of shape "
                f"{tuple(result.shape)}: the output has the shape of x. Allocate it with "
                "torch.empty_like(x); the kernel still sees x.numel() elements in memory order."
            )
        out = expect_result("triton_add", result, x, "triton_add(x, y)")
        expect_all_written(trace, out, _add_coverage_hint(trace, out))
        mistakes = [Mistake(message, functools.partial(wrong, x, y)) for message, wrong in _ADD_MISTAKES]
        if transposed:
            mistakes.append(
                Mistake(
                    f"adds x and y in memory order, but {transposed} is a transposed view (its memory holds "
                    "it column by column): make both contiguous first, "
                    "x, y = x.contiguous(), y.contiguous().",
                    functools.partial(_in_memory_order, x, y),
                )
            )
        shown = describe_args((x, y), {}) + (f", {transposed} a transposed view" if transposed else "")
        compare("`triton_add`", out, x + y, mode, mistakes, shown)
    blocks = _block_shapes(trace)
    generated = _expect_add_contract_cases(candidate, mode, dtype)
    detail = f" (blocks of {blocks[0][0]})" if blocks else ""
    sizes = ", ".join(map(str, lengths))
    return (
        f"x + y for lengths {sizes}, a 7×33 matrix, x or y a transposed view{detail}, then {generated} "
        "more from the exercise's contract (x or y alone a slice or an expanded view), every element "
        "written, no access out of bounds."
    )


ADD_CONTRACT = Contract(
    "triton_add",
    args=(
        Arg("x", ("R", "N"), views=VIEW_KINDS, swap=(0, 1), slice_axis=-1),
        Arg("y", ("R", "N"), views=VIEW_KINDS, swap=(0, 1), slice_axis=-1),
    ),
    axes=(Axis("R", (7,)), Axis("N", (33,))),
    returns=(Returns("out", ("R", "N")),),
    notes=("inputs of any shape and layout: the kernel sees their numel() elements in memory order",),
)
"""What `triton_add` must accept; the hand-picked cases try the transposed views, the generated ones the
others (a slice keeps stride(-1) == 1, so a wrapper that copies only when stride(-1) != 1 shows)."""


def _expect_add_contract_cases(candidate: Callable[..., Any], mode: Mode, dtype: torch.dtype) -> int:
    """x or y alone a slice of a wider tensor or an expanded row; return how many cases ran."""
    alloc = functools.partial(guarded, device=mode.device, dtype=dtype)
    cases = [case for case in view_cases(ADD_CONTRACT) if case.view and case.view[1] != "transposed"]
    for case in cases:
        assert case.view is not None
        x, y = (make_arg(arg, case, alloc) for arg in ADD_CONTRACT.args)
        index = 0 if case.view[0] == "x" else 1
        viewed = view_words((x, y)[index], ADD_CONTRACT.args[index], case.view[1])
        hint = (
            f"Here {viewed}: the kernel sees x.numel() elements in memory order, so make both inputs "
            "contiguous first, x, y = x.contiguous(), y.contiguous() (a slice or an expanded view is not "
            "contiguous although its last stride is 1)."
        )
        result, trace = traced_call("triton_add", candidate, mode, x, y)
        expect_in_bounds("triton_add", trace, hint)
        out = expect_result("triton_add", result, x, "triton_add(x, y)")

        def in_memory_order(x: torch.Tensor = x, y: torch.Tensor = y, index: int = index) -> torch.Tensor:
            read = [x, y]
            read[index] = read_as(read[index], contiguous_strides(tuple(read[index].shape)))
            return read[0] + read[1]

        mistakes = [
            Mistake(
                f"adds {case.view[0]} in memory order as if it were contiguous: with {viewed} the sum is "
                "wrong. Make both inputs contiguous first, x, y = x.contiguous(), y.contiguous(): a slice "
                "or an expanded view has stride(-1) == 1 and is still not contiguous.",
                in_memory_order,
            )
        ]
        compare("`triton_add`", out, x + y, mode, mistakes, f"triton_add(x, y) with {case.describe()}")
    return len(cases)


def _in_memory_order(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What adding the memory of x and y element by element gives, in the layout of empty_like(x)."""

    def memory(t: torch.Tensor) -> torch.Tensor:  # (numel,): the elements in the order memory holds them
        return t.flatten() if t.is_contiguous() else t.t().contiguous().flatten()

    flat = memory(x) + memory(y)  # (numel,)
    return torch.as_strided(flat, x.shape, torch.empty_like(x).stride())


_ADD_MISTAKES: list[tuple[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = [
    ("computes x - y: the kernel should store x + y.", torch.sub),
    ("computes x * y: the kernel should store x + y.", torch.mul),
    ("returns x: store x + y into the output, and return the output.", lambda x, y: x),
    ("returns y: store x + y into the output, and return the output.", lambda x, y: y),
    ("computes 2·x: load y from y_ptr, not from x_ptr.", lambda x, y: x + x),
]


def _add_coverage_hint(trace: KernelTrace | None, out: torch.Tensor) -> str:
    if trace is None:
        return ""
    by_program: dict[tuple[int, int, int], set[int]] = {}
    for access in trace.accesses_to(out, store=True):
        by_program.setdefault(access.program, set()).update(access.elements.tolist())
    if len(by_program) > 1 and all(written == by_program[(0, 0, 0)] for written in by_program.values()):
        return (
            "Every program wrote the same elements: the offsets of program pid start at "
            "pid * BLOCK, i.e. `offsets = pid * BLOCK + tl.arange(0, BLOCK)`."
        )
    stores = trace.accesses_to(out, store=True)
    written = len(set().union(*by_program.values())) if by_program else 0
    sizes = [f"out.shape[{i}]" for i, size in enumerate(out.shape) if size == written]
    count = (  # a known wrong n: then neither the mask's form nor the grid's rounding is blamed
        f"It stored {written} elements, which is {sizes[0]}: n counts every element, x.numel(), not one axis."
        if sizes and written < out.numel()
        else ""
    )
    if trace.launches and stores:
        programs, block = trace.launches[0].grid[0], math.prod(stores[0].block_shape)
        if programs * block >= out.numel():
            covers = (
                f"The grid covers all {out.numel()} elements ({programs} program{'s' * (programs != 1)} "
                f"of {block}), so it is the mask that leaves some out"
            )
            return (
                f"{covers}. {count}"
                if count
                else f"{covers}: every offset below n must be stored, mask=offsets < n (not "
                "offsets < n - 1), the same mask for the loads and the store."
            )
        if count and programs * block > written:  # the programs launched could have stored more
            return f"{count} The grid too needs enough programs for all of them: triton.cdiv(n, BLOCK)."
    return (
        "The grid needs enough programs to cover all n elements: triton.cdiv(n, BLOCK), "
        "which rounds up (n // BLOCK rounds down and leaves the tail out)." + (f" {count}" if count else "")
    )


def _block_shapes(trace: KernelTrace | None) -> list[tuple[int, ...]]:
    return [] if trace is None else sorted({a.block_shape for a in trace.accesses if not a.store})


# ---------------------------------------------------------------------------------------------
# triton_softmax


@dataclass(frozen=True)
class _SoftmaxCase:
    """One input of the softmax check."""

    rows: int
    cols: int
    block_size: int
    scale: float = 3.0
    shift: float = 0.0
    stride: int | None = None
    """Row stride when the rows are a view of a wider tensor."""
    masked_first_block: bool = False
    """Whether each row's first block is -inf, as a causal mask makes it."""
    transposed: bool = False
    """Whether x is a transposed view: its columns, not its rows, lie next to each other in memory."""


_SOFTMAX_CASES = (
    _SoftmaxCase(5, 50, 16),
    _SoftmaxCase(4, 64, 16, scale=100.0, shift=1000.0),
    _SoftmaxCase(3, 7, 16),
    _SoftmaxCase(3, 45, 8, masked_first_block=True),
    _SoftmaxCase(4, 40, 16, stride=64),
    _SoftmaxCase(3, 40, 16, shift=-1000.0),
    _SoftmaxCase(4, 24, 8, transposed=True),
)


def _expect_output_row_stride(trace: Any, case: _SoftmaxCase) -> None:
    """With a strided x, a store past the end of the output whose row 1 starts x.stride(0) in: out's rows
    were addressed with x's row stride."""
    if trace is None or not case.stride or not trace.out_of_bounds or not trace.out_of_bounds[0].store:
        return
    tensor = trace.out_of_bounds[0].nearest
    starts = [
        int(a.elements.min())
        for a in trace.accesses
        if a.store and a.tensor == tensor and a.program[0] == 1 and a.elements.size
    ]
    if starts and min(starts) == case.stride != case.cols:
        raise CheckFailed(
            f"`triton_softmax` writes the output's rows {case.stride} elements apart, the row stride of x "
            f"(a view whose rows are {case.stride} apart in memory), but the output is a new contiguous "
            f"tensor whose rows are {case.cols} apart: address the output with its own row stride, "
            "out.stride(0), and the input with x.stride(0). (Row 2 and later were written past the end "
            "of the output.)"
        )


def _softmax_input(case: _SoftmaxCase, mode: Mode) -> torch.Tensor:
    if case.transposed:  # (R, N) with strides (1, R): x.t() of a contiguous (N, R) tensor
        stored = guarded(case.cols, case.rows, device=mode.device, dtype=torch.float32, scale=case.scale)
        return stored.t()
    width = case.stride or case.cols
    full = guarded(case.rows, width, device=mode.device, dtype=torch.float32, scale=case.scale)
    x = full[:, : case.cols]  # (R, N), a view with row stride `width`
    x += case.shift
    if case.masked_first_block:
        x[:, : case.block_size] = -math.inf
    return x


@check
def check_triton_softmax(candidate: Callable[..., Any]) -> str:
    """Row softmax by the learner's kernel: one program per row streaming it in blocks of block_size."""
    mode = kernel_mode("triton_softmax", candidate)
    for case in _SOFTMAX_CASES:
        x = _softmax_input(case, mode)
        kwargs: dict[str, Any] = {"block_size": case.block_size}
        called_as = describe_args((x,), kwargs) + (
            f" (rows {case.stride} apart in memory: a view)"
            if case.stride
            else " (x.t() of a contiguous tensor: its columns lie next to each other)"
            if case.transposed
            else ""
        )
        result, trace = traced_call("triton_softmax", candidate, mode, x, **kwargs)
        expect_launched("triton_softmax", trace)
        _expect_output_row_stride(trace, case)
        expect_in_bounds(
            "triton_softmax",
            trace,
            "The last block of a row runs past its end when the row length is not a multiple of "
            "BLOCK: load and store with mask=cols < n_cols.",
        )
        out = expect_result("triton_softmax", result, x, "triton_softmax(x)")
        _expect_softmax_structure(trace, x, case, out)
        if case.shift < 0 and not torch.isfinite(out).all():
            raise CheckFailed(
                f"`triton_softmax` gives inf or NaN for rows of large negative scores (here around "
                f"{case.shift:g}): exp(x - m) underflows to 0 for every entry when the running maximum m "
                "does not follow the row (start it at float('-inf'), not 0), and 0 / 0 is NaN."
                f"\n(Called as {called_as}.)"
            )
        if case.shift > 0 and not torch.isfinite(out).all():
            raise CheckFailed(
                f"`triton_softmax` gives inf or NaN for large scores (here around {case.shift:g}): "
                "exp(x) overflows float32 beyond x ≈ 88. Subtract the running maximum, exp(x - m), "
                f"as in notebook 06.\n(Called as {called_as}.)"
            )
        expected = torch.softmax(x.double(), dim=-1)
        mistakes = [
            Mistake(m.message, functools.partial(m.implementation, x.double(), case.block_size))
            for m in STREAMING_SOFTMAX_MISTAKES
        ]
        if case.stride:
            wrong_rows = torch.as_strided(x, x.shape, (case.cols, 1)).double()  # rows read n_cols apart
            mistakes.append(
                Mistake(
                    "reads the rows as if they were n_cols apart in memory, but x is a view whose rows "
                    "are x.stride(0) apart: pass x.stride(0) to the kernel (or call x.contiguous()).",
                    functools.partial(torch.softmax, wrong_rows, dim=-1),
                )
            )
        if case.transposed and not close(out, expected, mode.gpu):  # the cases before passed: the layout
            raise CheckFailed(
                "`triton_softmax` is right for rows stored one after another but wrong for x.t(), whose "
                f"entries of a row lie {x.stride(1)} apart (x.stride(1) = {x.stride(1)}): the kernel steps "
                "through a row one element at a time, and torch.empty_like(x) copies x's strides. Make x "
                "contiguous first when x.stride(1) != 1 (x.contiguous()), or pass and use its column "
                f"stride.\n(Called as {called_as}.)"
            )
        compare(
            "`triton_softmax`", out, expected, mode, mistakes, called_as, nan_means_unknown=True,
            diagnose=functools.partial(diagnose_softmax, dim=-1, x=x),
        )  # fmt: skip
    generated = _expect_softmax_contract_cases(candidate, mode)
    traced = " and streams each row in blocks of block_size" if mode.traced else ""
    inputs = f"{len(_SOFTMAX_CASES)} inputs (ragged rows, huge and very negative scores, -inf blocks, views)"
    more = "float16 inputs, " if not mode.gpu else ""
    return (
        f"matches torch.softmax on {inputs}{traced}, then on {generated} more from the exercise's contract "
        f"({more}x an expanded view, rows 0 apart)."
    )


SOFTMAX_CONTRACT = Contract(
    "triton_softmax",
    args=(Arg("x", ("R", "N"), views=VIEW_KINDS, swap=(0, 1), slice_axis=-1, expand_axis=0),),
    axes=(Axis("R", (3,)), Axis("N", (40,), "two and a half blocks of 16")),
    returns=(Returns("out", ("R", "N")),),
    dtypes=(torch.float32, torch.float16),
    notes=("block_size=16; rows of x any stride(0) (0 too), stride(1) == 1 or made so",),
)
"""What `triton_softmax` must accept: the hand-picked cases try the transposed and sliced views, the
generated ones float16 (the output in the inputs' dtype) and an expanded x, each row the same memory."""


def _expect_softmax_contract_cases(candidate: Callable[..., Any], mode: Mode) -> int:
    """float16 inputs and an expanded x, once the hand-picked cases passed; return how many ran."""
    cases = [
        *([] if mode.gpu else dtype_cases(SOFTMAX_CONTRACT)),
        *(c for c in view_cases(SOFTMAX_CONTRACT) if c.view is not None and c.view[1] == "expanded"),
    ]
    for case in cases:
        dtype = torch.float16 if mode.gpu else case.dtype
        alloc = functools.partial(guarded, device=mode.device, dtype=dtype, scale=3.0)
        (x,) = (make_arg(arg, case, alloc) for arg in SOFTMAX_CONTRACT.args)
        change = (
            view_words(x, SOFTMAX_CONTRACT.args[0], "expanded") + ", every row the same memory"
            if case.view is not None
            else f"{dtype_name(dtype)} inputs"
        )
        called_as = f"triton_softmax(x, block_size=16) on a {tuple(x.shape)} x, {change}"
        hint = (
            f"Here x is {change}. Pass x.stride(0) for x's rows and out.stride(0) for the output's."
            if case.view is not None
            else "Here x is float16: load with .to(tl.float32), compute in float32, and store in the "
            "output's dtype (.to(out_ptr.dtype.element_ty)) into an output like x (torch.empty_like(x))."
        )
        result, trace = traced_call("triton_softmax", candidate, mode, x, block_size=16, hint=hint)
        expect_launched("triton_softmax", trace)
        expect_in_bounds("triton_softmax", trace, hint)
        what = f"triton_softmax(x) with {change}"
        try:
            out = expect_result("triton_softmax", result, x, what)
        except CheckFailed as failure:
            raise CheckFailed(f"{failure} (The cases before, float32, passed.)") from None
        expect_all_written(trace, out, "Each program should write every entry of its row: " + hint)
        expected = torch.softmax(x.double(), dim=-1)  # (R, N)
        gpu = mode.gpu or dtype == torch.float16  # float16's tolerance
        if not close(out, expected, gpu):
            raise CheckFailed(
                f"`triton_softmax` is wrong on a case that differs from those that passed only in that it "
                f"has {change}: {describe_error(out, expected)}. {hint}\n(Called as {called_as}.)"
            )
    return len(cases)


def _expect_softmax_structure(
    trace: KernelTrace | None, x: torch.Tensor, case: _SoftmaxCase, out: Any
) -> None:
    if trace is None:
        return
    widest = max((a.elements.size for a in trace.accesses_to(x, store=False)), default=0)
    if widest > case.block_size:
        raise CheckFailed(
            f"your kernel loaded {widest} entries of x at once with block_size={case.block_size}: the "
            "point of this kernel is to stream a row of any length in blocks of block_size with a "
            "running max and sum. Use BLOCK=block_size and loop over the row."
        )
    grids = {launch.grid for launch in trace.launches}
    if any(grid[0] * grid[1] * grid[2] != case.rows for grid in grids):
        raise CheckFailed(
            f"launch one program per row: the grid should be (n_rows,) = ({case.rows},), but was "
            f"{sorted(grids)[0][: 1 + (sorted(grids)[0][1] > 1)]}."
        )
    expect_all_written(trace, out, "Each program should write every entry of its row.")
