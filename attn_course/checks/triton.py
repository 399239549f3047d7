"""Checks for notebook 08: a warm-up add, a streaming row softmax and FlashAttention, in Triton.

Each check calls the learner's wrapper (which launches the learner's kernel). Where the kernels are
interpreted (`TRITON_INTERPRET=1`, any CPU), the call runs inside a `KernelTrace`, which sees every
program's loads and stores: a load or store past the end of a tensor, output elements no program
wrote, a softmax that reads a whole row at once, or a causal loop that still visits key blocks
above the diagonal is named even when the numbers happen to come out right. Inputs sit in front
of a guard zone of NaN, so an unmasked read past their end cannot go unnoticed on a GPU either.
Where the kernels are compiled for a GPU, the check runs them there in float16 and names mistakes
from the numbers alone.
"""

from __future__ import annotations

import functools
import itertools
import math
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attn_course.checks._harness import CheckFailed, call, check, describe_args, difference
from attn_course.checks._triton_trace import KernelTrace, trace_available
from attn_course.checks.flash import _softmax_wrong
from attn_course.triton_support import gpu_problem, is_interpreted, triton_status

_GUARD = 4096
"""Elements of NaN placed after each input, so that unmasked reads past the end show."""


# ---------------------------------------------------------------------------------------------
# Where the learner's kernels run, and calling them under a trace


@dataclass(frozen=True)
class _Mode:
    device: torch.device
    traced: bool

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"


def _kernels_used(candidate: Callable[..., Any]) -> list[Any]:
    """The Triton kernels (jit, interpreted, autotuned) the wrapper's code names, found in its globals."""
    from triton.runtime.jit import KernelInterface

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


def _mode(name: str, candidate: Callable[..., Any]) -> _Mode:
    """Run interpreted on the CPU (traced) unless the learner's kernels are compiled for a usable GPU."""
    status = triton_status()
    if not status.installed:
        raise CheckFailed(f"`{name}` needs Triton, and {status}")
    kernels = _kernels_used(candidate)
    compiled = [kernel for kernel in kernels if not is_interpreted(kernel)]
    if not compiled and (kernels or status.interpreted):
        return _Mode(torch.device("cpu"), trace_available())
    problem = gpu_problem()
    if problem is not None:
        what = f"your kernel `{getattr(compiled[0], '__name__', 'kernel')}`" if compiled else "Triton"
        raise CheckFailed(
            f"{what} was compiled for a GPU, but "
            f"{problem}. Triton decides that when it is imported: restart the kernel and run the notebook "
            "from the top; its first cell turns on Triton's interpreter (TRITON_INTERPRET=1) before "
            "triton is imported."
        )
    return _Mode(torch.device("cuda"), False)


def _traced_call(
    name: str, candidate: Callable[..., Any], mode: _Mode, *args: Any, hint: str = "", **kwargs: Any
) -> tuple[Any, KernelTrace | None]:
    """Call the learner's wrapper, under a KernelTrace when its kernels are interpreted."""
    if not mode.traced:
        return call(name, candidate, *args, hint=hint, **kwargs), None
    with KernelTrace() as trace:
        result = call(name, candidate, *args, hint=hint, **kwargs)
    return result, trace


def _guarded(*shape: int, device: torch.device, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """Seeded normal values of `shape`, contiguous, followed in memory by a guard zone of NaN."""
    numel = math.prod(shape)
    buffer = torch.full((numel + _GUARD,), math.nan, dtype=dtype, device=device)
    buffer[:numel] = (torch.randn(numel, dtype=torch.float64) * scale).to(dtype)
    return buffer[:numel].view(shape)


def _expect_launched_own_kernel(name: str, trace: KernelTrace | None) -> None:
    if trace is None:
        return
    if not trace.launches:
        raise CheckFailed(
            f"`{name}` launched no Triton kernel: it should launch your kernel with "
            "`your_kernel[grid](...)` and return the tensor the kernel wrote."
        )


def _expect_in_bounds(name: str, trace: KernelTrace | None, hint: str) -> None:
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


def _expect_tensor(name: str, result: Any, like: torch.Tensor, what: str = "the result") -> torch.Tensor:
    if isinstance(result, tuple | list):
        raise CheckFailed(
            f"`{name}` returned a {type(result).__name__} of {len(result)} items: return {what} only."
        )
    if result is None:
        raise CheckFailed(f"`{name}` returned None: end it with `return out` (the tensor the kernel wrote).")
    if not isinstance(result, torch.Tensor):
        raise CheckFailed(f"`{name}` should return a torch.Tensor, but returned {type(result).__name__}.")
    if tuple(result.shape) != tuple(like.shape):
        raise CheckFailed(f"{what} should have shape {tuple(like.shape)}, but has {tuple(result.shape)}.")
    if result.device.type != like.device.type:
        raise CheckFailed(f"{what} is on {result.device.type} but the inputs are on {like.device.type}.")
    if result.dtype != like.dtype:
        raise CheckFailed(
            f"{what} has dtype {result.dtype} but the inputs are {like.dtype}: allocate it with "
            "torch.empty_like(...) of an input, and accumulate in float32 inside the kernel only."
        )
    return result


def _expect_all_written(trace: KernelTrace | None, out: torch.Tensor, hint: str) -> None:
    """Require every element of `out` to have been stored to by some program."""
    if trace is None or not out.is_contiguous():
        return
    written = np.zeros(out.numel(), dtype=bool)
    written[trace.touched(out, store=True)] = True
    if written.all():
        return
    missing = np.flatnonzero(~written)
    index = [int(i) for i in np.unravel_index(missing[0], tuple(out.shape))]
    raise CheckFailed(
        f"no program wrote {missing.size} of the {out.numel()} output elements (the first at index "
        f"{index}); torch.empty leaves them as whatever was in memory. {hint}"
    )


def _close(actual: torch.Tensor, expected: torch.Tensor, gpu: bool) -> bool:
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    finite = ~torch.isnan(e)
    tol = dict(atol=1e-2, rtol=1e-2) if gpu else dict(atol=2e-5, rtol=1e-4)
    return bool(torch.allclose(a[finite], e[finite], **tol))


def _compare(
    what: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    mode: _Mode,
    mistakes: Iterator[tuple[str, torch.Tensor]],
    called_as: str,
    explain: Callable[[], None] = lambda: None,
    nan_means_unknown: bool = False,
) -> None:
    """Require actual ≈ expected; otherwise name the first (message, wrong result) that actual matches.

    With `nan_means_unknown`, a simulated mistake that gives NaN where the reference has none is
    skipped: its NaN comes from the simulation's own arithmetic, not from the mistake. When no
    known mistake matches, `explain` may raise a more specific CheckFailed than the numbers give.
    """
    if _close(actual, expected, mode.gpu):
        return
    where = f"\n(Called as {called_as}.)"
    introduces_nan = torch.isnan(expected.detach().cpu()).logical_not()
    for message, wrong in mistakes:
        if nan_means_unknown and (torch.isnan(wrong.detach().cpu()) & introduces_nan).any():
            continue
        if not _close(wrong, expected, mode.gpu) and _close(actual, wrong, mode.gpu):
            raise CheckFailed(f"{what} {message}{where}")
    explain()
    a = actual.detach().to("cpu", torch.float64)
    if torch.isnan(a).any() and not torch.isnan(expected).any():
        raise CheckFailed(
            f"{what} gives NaN where the reference has none. Typical causes: exp(-inf - (-inf)) "
            "for a row whose maximum is still -inf, a division by a running sum of 0, or a load past "
            f"the end of a tensor without a mask (the check puts NaN after each input).{where}"
        )
    raise CheckFailed(f"{what} is wrong: {difference(actual, expected)}{where}")


# ---------------------------------------------------------------------------------------------
# triton_add

_ADD_BOUNDS_HINT = (
    "The last program's block runs past n when n is not a multiple of BLOCK: compute "
    "`mask = offsets < n` and pass it to both tl.load and tl.store."
)


@check("triton_add")
def check_triton_add(candidate: Callable[..., Any]) -> str:
    """x + y by the learner's add kernel, for lengths that are and are not multiples of any block."""
    mode = _mode("triton_add", candidate)
    dtype = torch.float16 if mode.gpu else torch.float32
    lengths = (1000, 1, 4096, 37)
    for n in lengths:
        x = _guarded(n, device=mode.device, dtype=dtype)
        y = _guarded(n, device=mode.device, dtype=dtype)
        result, trace = _traced_call("triton_add", candidate, mode, x, y)
        _expect_launched_own_kernel("triton_add", trace)
        _expect_in_bounds("triton_add", trace, _ADD_BOUNDS_HINT)
        out = _expect_tensor("triton_add", result, x, "triton_add(x, y)")
        _expect_all_written(trace, out, _add_coverage_hint(trace, out))
        mistakes = (
            (m, f(x, y))
            for m, f in (
                ("computes x - y: the kernel should store x + y.", torch.sub),
                ("computes x * y: the kernel should store x + y.", torch.mul),
                ("returns x: store x + y into the output, and return the output.", lambda x, y: x),
                ("returns y: store x + y into the output, and return the output.", lambda x, y: y),
                ("computes 2·x: load y from y_ptr, not from x_ptr.", lambda x, y: x + x),
            )
        )
        _compare("`triton_add`", out, x + y, mode, mistakes, describe_args((x, y), {}))
    blocks = _block_shapes(trace)
    detail = f" (blocks of {blocks[0][0]})" if blocks else ""
    sizes = ", ".join(map(str, lengths))
    return f"x + y for lengths {sizes}{detail}, every element written, no access out of bounds."


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
    return (
        "The grid needs enough programs to cover all n elements: triton.cdiv(n, BLOCK), "
        "which rounds up (n // BLOCK rounds down and leaves the tail out)."
    )


def _block_shapes(trace: KernelTrace | None) -> list[tuple[int, ...]]:
    return [] if trace is None else sorted({a.block_shape for a in trace.accesses if not a.store})


# ---------------------------------------------------------------------------------------------
# triton_softmax


def _softmax_other_zero(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """The softmax a kernel gives when its masked lanes load as 0: they count in the max and sum."""
    n = x.shape[-1]
    padded = torch.nn.functional.pad(x, (0, -n % block_size))  # (R, N rounded up)
    return torch.softmax(padded, dim=-1)[..., :n]  # (R, N)


def _softmax_no_max(x: torch.Tensor, block_size: int) -> torch.Tensor:
    return torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)


_SOFTMAX_MISTAKES: list[tuple[str, Callable[[torch.Tensor, int], torch.Tensor]]] = [
    (
        "does not rescale the running sum when the maximum grows: multiply it by exp(m_old - m_new) "
        "before adding the new block's exp(x - m_new).",
        _softmax_wrong(rescale="none"),
    ),
    (
        "rescales the running sum the wrong way round: when the maximum grows from m_old to m_new the "
        "old terms shrink by exp(m_old - m_new), a factor below 1; you multiplied by exp(m_new - m_old).",
        _softmax_wrong(rescale="inverted"),
    ),
    (
        "uses each block's own maximum and never brings the blocks to a common one: keep one running "
        "maximum, rescale the running sum when it grows, and write exp(x - m) / sum with the final m.",
        _softmax_wrong(block_max=True),
    ),
    (
        "counts the masked lanes of the last block as 0: they enter the maximum and add exp(0 - m) to "
        "the sum. Load them as -inf, tl.load(..., mask=cols < n_cols, other=float('-inf')), so that "
        "they add exp(-inf) = 0.",
        _softmax_other_zero,
    ),
    (
        "drops the ragged last block: when the row length is not a multiple of block_size the last "
        "block is shorter, and it counts too. Loop over range(0, n_cols, BLOCK) and mask that block.",
        _softmax_wrong(tail=False),
    ),
    (
        "does not subtract the maximum: exp overflows for large scores. Keep a running maximum m and "
        "sum exp(x - m) (notebook 06).",
        _softmax_no_max,
    ),
]


@dataclass(frozen=True)
class _SoftmaxCase:
    rows: int
    cols: int
    block_size: int
    scale: float = 3.0
    shift: float = 0.0
    stride: int | None = None
    """Row stride when the rows are a view of a wider tensor."""
    masked_first_block: bool = False
    """Whether each row's first block is -inf, as a causal mask makes it."""


_SOFTMAX_CASES = (
    _SoftmaxCase(5, 50, 16),
    _SoftmaxCase(4, 64, 16, scale=100.0, shift=1000.0),
    _SoftmaxCase(3, 7, 16),
    _SoftmaxCase(3, 45, 8, masked_first_block=True),
    _SoftmaxCase(4, 40, 16, stride=64),
)


def _softmax_input(case: _SoftmaxCase, mode: _Mode) -> torch.Tensor:
    width = case.stride or case.cols
    full = _guarded(case.rows, width, device=mode.device, dtype=torch.float32, scale=case.scale)
    x = full[:, : case.cols]  # (R, N), a view with row stride `width`
    x += case.shift
    if case.masked_first_block:
        x[:, : case.block_size] = -math.inf
    return x


@check("triton_softmax")
def check_triton_softmax(candidate: Callable[..., Any]) -> str:
    """Row softmax by the learner's kernel: one program per row streaming it in blocks of block_size."""
    mode = _mode("triton_softmax", candidate)
    for case in _SOFTMAX_CASES:
        x = _softmax_input(case, mode)
        kwargs = {"block_size": case.block_size}
        called_as = describe_args((x,), kwargs) + (
            f" (rows {case.stride} apart in memory: a view)" if case.stride else ""
        )
        result, trace = _traced_call("triton_softmax", candidate, mode, x, **kwargs)
        _expect_launched_own_kernel("triton_softmax", trace)
        _expect_in_bounds(
            "triton_softmax",
            trace,
            "The last block of a row runs past its end when the row length is not a multiple of "
            "BLOCK: load and store with mask=cols < n_cols.",
        )
        out = _expect_tensor("triton_softmax", result, x, "triton_softmax(x)")
        _expect_softmax_structure(trace, x, case, out)
        if case.shift and not torch.isfinite(out).all():
            raise CheckFailed(
                f"`triton_softmax` gives inf or NaN for large scores (here around {case.shift:g}): "
                "exp(x) overflows float32 beyond x ≈ 88. Subtract the running maximum, exp(x - m), "
                f"as in notebook 06.\n(Called as {called_as}.)"
            )
        expected = torch.softmax(x.double(), dim=-1)
        mistakes = ((m, f(x.double(), case.block_size)) for m, f in _SOFTMAX_MISTAKES)
        if case.stride:
            wrong_rows = torch.as_strided(x, x.shape, (case.cols, 1)).double()  # rows read n_cols apart
            mistakes = itertools.chain(
                mistakes,
                [
                    (
                        "reads the rows as if they were n_cols apart in memory, but x is a view whose rows "
                        "are x.stride(0) apart: pass x.stride(0) to the kernel (or call x.contiguous()).",
                        torch.softmax(wrong_rows, dim=-1),
                    )
                ],
            )
        _compare("`triton_softmax`", out, expected, mode, mistakes, called_as, nan_means_unknown=True)
    traced = " and streams each row in blocks of block_size" if mode.traced else ""
    inputs = f"{len(_SOFTMAX_CASES)} inputs (ragged rows, huge scores, -inf blocks, a view)"
    return f"matches torch.softmax on {inputs}{traced}."


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
    _expect_all_written(trace, out, "Each program should write every entry of its row.")


# ---------------------------------------------------------------------------------------------
# triton_flash_attention

_BLOCK_SIZES = (16, 32, 64, 128)


def _blockwise(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    block_m: int,
    block_n: int,
    scale: float | None = None,
    rescale_acc: bool = True,
    rescale_sum: bool = True,
    padded_score_zero: bool = False,
    bound_short: bool = False,
    strict: bool = False,
    top_left: bool = False,
) -> torch.Tensor:
    """What a FlashAttention kernel with blocks (block_m, block_n) and the given mistakes computes."""
    q, k, v = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    t_q, d = q.shape[-2:]
    t_k = k.shape[-2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    offset = 0 if top_left else t_k - t_q
    out = torch.empty_like(q)  # (B, H, T_q, d)
    for r0 in range(0, t_q, block_m):
        rows = torch.arange(r0, min(r0 + block_m, t_q))  # (Bm,)
        q_blk = q[..., rows, :]  # (B, H, Bm, d)
        m = torch.full((*q_blk.shape[:-1], 1), -math.inf, dtype=torch.float64)  # (B, H, Bm, 1)
        total = torch.zeros_like(m)  # (B, H, Bm, 1)
        acc = torch.zeros_like(q_blk)  # (B, H, Bm, d)
        stop = t_k
        if causal:
            stop = min(t_k, r0 + offset + (0 if bound_short else block_m))
        for c0 in range(0, max(stop, 0), block_n):
            width = block_n if padded_score_zero else min(block_n, t_k - c0)
            keys = torch.arange(c0, c0 + width)  # (Bn,)
            inside = keys < t_k  # (Bn,)
            k_blk = torch.zeros(*k.shape[:-2], width, d, dtype=torch.float64)  # (B, H, Bn, d)
            v_blk = torch.zeros_like(k_blk)  # (B, H, Bn, d)
            k_blk[..., inside, :] = k[..., keys[inside], :]
            v_blk[..., inside, :] = v[..., keys[inside], :]
            s = q_blk @ k_blk.transpose(-1, -2) * scale  # (B, H, Bm, Bn)
            if not padded_score_zero:
                s = s.masked_fill(~inside, -math.inf)
            if causal:
                limit = rows[:, None] + offset  # (Bm, 1)
                allowed = keys[None, :] < limit if strict else keys[None, :] <= limit  # (Bm, Bn)
                s = s.masked_fill(~allowed, -math.inf)
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (B, H, Bm, 1)
            m_safe = torch.where(m_new == -math.inf, 0.0, m_new)  # (B, H, Bm, 1)
            alpha = torch.exp(m - m_safe)  # (B, H, Bm, 1)
            p = torch.exp(s - m_safe)  # (B, H, Bm, Bn)
            total = (total * alpha if rescale_sum else total) + p.sum(dim=-1, keepdim=True)
            acc = (acc * alpha if rescale_acc else acc) + p @ v_blk  # (B, H, Bm, d)
            m = m_new
        out[..., rows, :] = acc / total
    return out


def _sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(QKᵀ/√d)V in float64 with the bottom-right causal mask; NaN for rows that see no key."""
    from attn_course.attention import attention
    from attn_course.masking import causal_mask

    q, k, v = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    mask = causal_mask(q.shape[-2], k.shape[-2]) if causal else None
    return attention(q, k, v, mask=mask)[0]


def _flash_mistakes(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, blocks: Sequence[tuple[int, int]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """(message, what the kernel with that mistake returns), block-size-free mistakes first."""
    d = q.shape[-1]
    plain = dict(causal=causal, block_m=q.shape[-2], block_n=k.shape[-2])
    scales = (
        (1.0, "does not scale the scores: multiply q·k by 1/√d (sm_scale = 1 / math.sqrt(d))."),
        (1 / d, "scales the scores by 1/d: the scale is 1/√d (math.sqrt(d), not d)."),
        (math.sqrt(d), "multiplies the scores by √d: the scale is 1/√d."),
        (
            math.log(2) / math.sqrt(d),
            "uses tl.exp2 without converting the scores to base 2: exp(x) = exp2(x · log2(e)), so "
            "multiply the scale by log2(e) = 1.4427 (or use tl.exp).",
        ),
        (
            math.log2(math.e) / math.sqrt(d),
            "folds log2(e) into the scale but then uses tl.exp: with the base-2 scale use tl.exp2, "
            "or drop the log2(e) factor.",
        ),
    )
    for scale, message in scales:
        yield message, _blockwise(q, k, v, scale=scale, **plain)
    if causal:
        yield (
            "ignores is_causal: with IS_CAUSAL, set the scores of keys j > i + T_k - T_q to -inf.",
            _blockwise(q, k, v, causal=False, block_m=q.shape[-2], block_n=k.shape[-2]),
        )
        yield (
            "masks with < instead of <=: a query may attend to its own position, key j = i + T_k - T_q.",
            _blockwise(q, k, v, strict=True, **plain),
        )
        yield (
            "aligns the causal mask top-left: with T_q ≠ T_k (here T_q < T_k, queries that come after "
            "cached keys) query i sits at position i + T_k - T_q, so it may see keys j <= i + T_k - T_q, "
            "and the loop bound moves by T_k - T_q too.",
            _blockwise(q, k, v, top_left=True, **plain),
        )
    for block_m, block_n in blocks:
        blocked = dict(causal=causal, block_m=block_m, block_n=block_n)
        yield (
            "does not rescale the accumulator when the running maximum grows: before adding this "
            "block's p @ v, multiply acc by alpha = exp(m_old - m_new), as you do the running sum.",
            _blockwise(q, k, v, rescale_acc=False, **blocked),
        )
        yield (
            "does not rescale the running sum when the running maximum grows: l = l * alpha + "
            "tl.sum(p, 1), with alpha = exp(m_old - m_new), as for the accumulator.",
            _blockwise(q, k, v, rescale_sum=False, **blocked),
        )
        yield (
            "rescales neither the accumulator nor the running sum when the running maximum grows: "
            "multiply both by alpha = exp(m_old - m_new) before adding the new block.",
            _blockwise(q, k, v, rescale_acc=False, rescale_sum=False, **blocked),
        )
        if not causal:
            yield (
                "gives the keys past T_k in the last, ragged key block a score of 0, so they count in "
                "the softmax: masking their loads is not enough, also set their scores to -inf "
                "(tl.where(offs_n[None, :] < T_k, s, float('-inf'))).",
                _blockwise(q, k, v, padded_score_zero=True, **blocked),
            )
        if causal:
            yield (
                "stops the causal loop one block early: the key block that holds the diagonal is "
                "never visited. Query block pid_m ends at row (pid_m + 1) * BLOCK_M - 1, so the loop "
                "must run to hi = min(T_k, (pid_m + 1) * BLOCK_M + T_k - T_q).",
                _blockwise(q, k, v, bound_short=True, **blocked),
            )


@dataclass(frozen=True)
class _FlashCase:
    b: int
    h: int
    t_q: int
    t_k: int
    d: int
    causal: bool
    strided: bool = False
    """q, k and v as transposes of (B, T, H, d) tensors: not contiguous."""

    def describe(self) -> str:
        layout = ", (B, T, H, d).transpose(1, 2) views" if self.strided else ""
        sizes = f"B={self.b}, H={self.h}, T_q={self.t_q}, T_k={self.t_k}, d={self.d}"
        return f"{sizes}, is_causal={self.causal}{layout}"


_FLASH_CASES = (
    _FlashCase(1, 2, 64, 64, 32, False),
    _FlashCase(1, 2, 50, 50, 32, False),
    _FlashCase(2, 1, 64, 64, 16, True),
    _FlashCase(1, 2, 50, 50, 32, True),
    _FlashCase(1, 1, 20, 50, 32, True),
    _FlashCase(1, 1, 300, 300, 32, False),
    _FlashCase(1, 1, 260, 260, 16, True),
    _FlashCase(2, 2, 40, 40, 32, True, strided=True),
)


def _flash_inputs(case: _FlashCase, mode: _Mode) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dtype = torch.float16 if mode.gpu else torch.float32

    def make(t: int) -> torch.Tensor:
        if case.strided:
            return _guarded(case.b, t, case.h, case.d, device=mode.device, dtype=dtype).transpose(1, 2)
        return _guarded(case.b, case.h, t, case.d, device=mode.device, dtype=dtype)

    return make(case.t_q), make(case.t_k), make(case.t_k)


@check("triton_flash_attention")
def check_triton_flash_attention(candidate: Callable[..., Any]) -> str:
    """The learner's FlashAttention kernel against SDPA: ragged, causal, T_q ≠ T_k and strided inputs."""
    mode = _mode("triton_flash_attention", candidate)
    blocks_seen: set[tuple[int, int]] = set()
    for case in _FLASH_CASES:
        q, k, v = _flash_inputs(case, mode)
        kwargs = {"is_causal": case.causal}
        result, trace = _traced_call("triton_flash_attention", candidate, mode, q, k, v, **kwargs)
        _expect_launched_own_kernel("triton_flash_attention", trace)
        _expect_in_bounds(
            "triton_flash_attention",
            trace,
            "When T is not a multiple of the block size the last query or key block runs past the "
            "end: load with mask=offs[:, None] < T (other=0.0) and store with the query mask.",
        )
        out = _expect_tensor("triton_flash_attention", result, q, "the attention output")
        _expect_all_written(
            trace,
            out,
            "The grid needs (triton.cdiv(T_q, BLOCK_M), B * H) programs, and each stores its whole "
            "(BLOCK_M, d) block of the output (masked for the ragged last block).",
        )
        blocks = _flash_blocks(trace, q, k) if not case.strided else None
        if blocks:
            blocks_seen.add(blocks)
        expected = _sdpa_reference(q, k, v, case.causal)
        tried = [blocks] if blocks else list(itertools.product(_BLOCK_SIZES, repeat=2))
        mistakes = _flash_mistakes(q, k, v, case.causal, tried)
        if case.strided:
            mistakes = itertools.chain(mistakes, [(_STRIDE_MESSAGE, _as_if_contiguous(q, k, v, case))])
        called_as = f"triton_flash_attention(q, k, v, is_causal={case.causal}) with {case.describe()}"
        _compare(
            "`triton_flash_attention`", out, expected, mode, mistakes, called_as,
            explain=functools.partial(_expect_keys_visited, trace, q, k, case, blocks),
        )  # fmt: skip
        _expect_no_blocks_above_diagonal(trace, q, k, case)
    detail = (
        f" in blocks of {' and '.join(f'{m}×{n}' for m, n in sorted(blocks_seen))}" if blocks_seen else ""
    )
    where = (
        "interpreted on the CPU, every load traced" if mode.traced else f"on {mode.device.type} in float16"
    )
    return (
        f"matches attention on {len(_FLASH_CASES)} shapes (ragged, causal, T_q < T_k, strided){detail}; "
        f"{where}."
    )


_STRIDE_MESSAGE = (
    "is wrong for inputs that are views: q.transpose(1, 2) of a (B, T, H, d) tensor keeps its data in "
    "(B, T, H, d) order, so row t of head h is not at (b·H + h)·T·d + t·d. Pass q.stride(0), "
    "q.stride(1), q.stride(2) (and k's, v's, out's) to the kernel, or call .contiguous() first."
)


def _as_if_contiguous(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: _FlashCase) -> torch.Tensor:
    """What a kernel that assumes contiguous (B, H, T, d) inputs reads from these views."""

    def misread(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x, x.shape, torch.empty(x.shape).stride())

    return _sdpa_reference(misread(q), misread(k), misread(v), case.causal)


def _rows_by_program(
    trace: KernelTrace, x: torch.Tensor
) -> dict[tuple[int, int, int], dict[int, np.ndarray]]:
    """For each program, the rows of x (B, H, T, d) it loaded, per batch·head index."""
    t, d = x.shape[-2:]
    found: dict[tuple[int, int, int], dict[int, list[np.ndarray]]] = {}
    for access in trace.accesses_to(x, store=False):
        flat = access.elements // d  # (n,): row index over all (batch, head)
        per_head = found.setdefault(access.program, {})
        for bh in np.unique(flat // t):
            per_head.setdefault(int(bh), []).append(flat[flat // t == bh] % t)
    return {p: {bh: np.unique(np.concatenate(r)) for bh, r in heads.items()} for p, heads in found.items()}


def _flash_blocks(trace: KernelTrace | None, q: torch.Tensor, k: torch.Tensor) -> tuple[int, int] | None:
    """(BLOCK_M, BLOCK_N) read off the shapes of the first query and key loads."""
    if trace is None:
        return None
    d = q.shape[-1]

    def rows(x: torch.Tensor) -> int | None:
        for access in trace.accesses_to(x, store=False):
            shape = [s for s in access.block_shape if s != 1]
            if len(shape) == 2:
                return shape[0] if shape[1] >= d else shape[1]
        return None

    block_m, block_n = rows(q), rows(k)
    return (block_m, block_n) if block_m and block_n else None


def _expect_keys_visited(
    trace: KernelTrace | None, q: torch.Tensor, k: torch.Tensor, case: _FlashCase, blocks: Any
) -> None:
    """Every program reads every key its queries may see."""
    if trace is None or case.strided:
        return
    offset = case.t_k - case.t_q
    query_rows = _rows_by_program(trace, q)
    key_rows = _rows_by_program(trace, k)
    for program, heads in query_rows.items():
        for bh, rows in heads.items():
            last_visible = min(case.t_k - 1, int(rows.max()) + offset) if case.causal else case.t_k - 1
            loaded = key_rows.get(program, {}).get(bh, np.zeros(0, dtype=np.int64))
            missing = np.setdiff1d(np.arange(last_visible + 1), loaded)
            if missing.size:
                raise CheckFailed(_missing_keys_message(program, rows, missing, last_visible, case, blocks))


def _expect_no_blocks_above_diagonal(
    trace: KernelTrace | None, q: torch.Tensor, k: torch.Tensor, case: _FlashCase
) -> None:
    """For causal attention, no program loads a key block none of whose keys its queries may see."""
    if trace is None or case.strided or not case.causal:
        return
    offset = case.t_k - case.t_q
    query_rows = _rows_by_program(trace, q)
    for access in trace.accesses_to(k, store=False):
        heads = query_rows.get(access.program, {})
        if not access.elements.size or not heads:
            continue
        first_key = int((access.elements // k.shape[-1] % case.t_k).min())
        last_visible = max(int(rows.max()) for rows in heads.values()) + offset
        if first_key > last_visible:
            rows = next(iter(heads.values()))
            raise CheckFailed(
                "your causal kernel still loads key blocks that lie wholly above the diagonal: the "
                f"program for queries {rows.min()}–{rows.max()} loaded keys from {first_key} on, and none "
                f"of its queries may see a key after {last_visible}. The result is right, but half of "
                "the work is wasted: stop the key loop at hi = min(T_k, (pid_m + 1) * BLOCK_M + T_k - T_q)."
                f"\n(Called with {case.describe()}.)"
            )


def _missing_keys_message(
    program: tuple[int, int, int], rows: np.ndarray, missing: np.ndarray, last_visible: int, case: _FlashCase,
    blocks: Any,
) -> str:  # fmt: skip
    who = f"the program for queries {rows.min()}–{rows.max()}"
    called = f"\n(Called with {case.describe()}.)"
    block_n = blocks[1] if blocks else None
    if block_n and missing.min() >= case.t_k // block_n * block_n:
        return (
            f"{who} never reads keys {missing.min()}–{missing.max()}, the last, ragged key block: "
            "loop over range(0, T_k, BLOCK_N) (or to the causal bound) and mask the block's keys "
            f"past T_k instead of leaving the block out.{called}"
        )
    if case.causal:
        return (
            f"{who} never reads keys {missing.min()}–{missing.max()}, though its last query may see keys "
            f"up to {last_visible}: the causal loop stops too early. Query block pid_m ends at row "
            "(pid_m + 1) * BLOCK_M - 1, which sees keys up to (pid_m + 1) * BLOCK_M - 1 + T_k - T_q, so "
            f"loop to hi = min(T_k, (pid_m + 1) * BLOCK_M + T_k - T_q).{called}"
        )
    return (
        f"{who} never reads keys {missing.min()}–{missing.max()}: every query must see all T_k keys, so "
        f"the key loop runs over range(0, T_k, BLOCK_N).{called}"
    )
