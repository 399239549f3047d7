"""The checks of notebook 09's Triton backward: its two kernels alone, then the wrapper, against autograd.

Exercise 5a's check launches the learner's `flash_attention_backward_dkdv_kernel` as the course's
wrapper does (`launchers.launch_backward`, at block sizes the check picks) and compares dK and dV;
Exercise 5b's does the same with `flash_attention_backward_dq_kernel` and dQ; Exercise 5c's calls
the learner's wrapper `triton_flash_attention_backward`, which launches both of their kernels.
Like notebook 08's checks, they run the kernels through Triton's interpreter where no GPU compiles
them, tracing every load and store: reads and writes outside the tensors and gradient elements no
program wrote are named first. Then the gradients are compared with autograd through the course's
attention in float64; a difference is named by simulating the known mistakes with
`checks.backward._tiled_backward` (at the kernel's block sizes where the check chose them, else at
every pair a kernel might use), and otherwise located (which gradient, which rows).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from attn_course import flash
from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Case,
    Contract,
    Returns,
    contiguous_strides,
    dtype_cases,
    make_arg,
    read_as,
    size_cases,
    view_cases,
    view_words,
)
from attn_course.checks._diagnosis import Failure, fail
from attn_course.checks._harness import CheckFailed, Mistake, check
from attn_course.checks._triton_harness import (
    Mode,
    expect_all_written,
    expect_in_bounds,
    expect_launched,
    guarded,
    kernel_mode,
    kernels_used,
    traced_call,
)
from attn_course.checks.backward import (
    _COMMON_SLIPS,
    _TILED_SLIPS,
    NAMES,
    BackwardVariant,
    Grads,
    Inputs,
    Slip,
    _autograd_grads,
    _AutogradCalls,
    _locate,
    _refuse_autograd,
    _tiled_backward,
)
from attn_course.progress import has_passed

_BLOCK_SIZES = (16, 32, 64)

DKDV = "flash_attention_backward_dkdv_kernel"
DQ = "flash_attention_backward_dq_kernel"

_CASES = (  # (B, H, T_q, T_k, d, is_causal, strided)
    (1, 2, 64, 64, 32, False, False),
    (1, 2, 64, 64, 16, True, False),
    (1, 2, 50, 50, 32, True, False),
    (1, 1, 20, 50, 32, True, False),
    (1, 1, 50, 37, 16, False, False),
    (1, 1, 130, 130, 16, True, False),
    (2, 2, 40, 40, 32, True, True),
    (1, 1, 100, 30, 16, False, False),
)
"""Square and ragged lengths, causal with T_q < T_k, T_q > T_k, several blocks, (B, T, H, d) views, and
T_q more than a block above T_k (a grid sized by the other length leaves rows unwritten)."""

_KERNEL_CASES = (  # (B, H, T_q, T_k, d, is_causal, strided), (BLOCK_M, BLOCK_N)
    ((1, 1, 64, 64, 32, False, False), (32, 32)),
    ((1, 2, 50, 50, 32, True, False), (32, 32)),
    ((1, 1, 20, 50, 16, True, False), (16, 32)),
    ((1, 1, 50, 37, 16, False, False), (32, 16)),
    ((1, 2, 40, 40, 16, True, True), (16, 16)),
)
"""Fewer shapes than the wrapper's check, each with the blocks the check launches the kernel with:
ragged, causal with T_q < T_k, BLOCK_M ≠ BLOCK_N both ways round, several blocks, and last (its
message says that the contiguous cases passed) strided views."""


def close(actual: torch.Tensor, expected: torch.Tensor, gpu: bool) -> bool:
    """Whether a gradient matches: float32 tolerances, or on a GPU float16's, relative to its size.

    In float16 the kernels round P and dS to float16 before their products, so the error grows
    with the gradient's size; 3% of its largest entry is far below what any named mistake changes.
    """
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return False
    finite = ~torch.isnan(e)
    if gpu:
        size = max(1.0, e[finite].abs().max().item()) if finite.any() else 1.0
        return bool(torch.allclose(a[finite], e[finite], atol=3e-2 * size, rtol=3e-2))
    return bool(torch.allclose(a[finite], e[finite], atol=2e-5, rtol=1e-4))


def _inputs(case: tuple, mode: Mode) -> tuple[torch.Tensor, ...]:
    b, h, t_q, t_k, d, causal, strided = case
    dtype = torch.float16 if mode.gpu else torch.float32

    def make(t: int) -> torch.Tensor:
        if strided:
            return guarded(b, t, h, d, device=mode.device, dtype=dtype).transpose(1, 2)
        return guarded(b, h, t, d, device=mode.device, dtype=dtype)

    q, k, v, grad_out = make(t_q), make(t_k), make(t_k), make(t_q)
    out, lse = flash.flash_attention_forward(q.float(), k.float(), v.float(), is_causal=causal)
    return q, k, v, out.to(dtype), lse, grad_out


@check
def check_flash_attention_backward_dkdv_kernel(candidate: Any) -> str:
    """The learner's dK/dV kernel, launched as the course's wrapper launches it, against autograd."""
    return _check_kernel(DKDV, candidate)


@check
def check_flash_attention_backward_dq_kernel(candidate: Any) -> str:
    """The learner's dQ kernel, launched as the course's wrapper launches it, against autograd."""
    return _check_kernel(DQ, candidate)


def _check_kernel(name: str, candidate: Any) -> str:
    from attn_course.triton_flash import launchers

    kernel = candidate.kernel if isinstance(candidate, launchers.CourseKernel) else candidate
    _expect_kernel(name, kernel)
    mode = kernel_mode(name, kernel)
    owned = (1, 2) if name == DKDV else (0,)
    axis, length = ("key", "T_k") if name == DKDV else ("query", "T_q")
    passed_plain = False  # whether a case without the causal mask passed (a failing one raises)
    for case, (block_m, block_n) in _KERNEL_CASES:
        q, k, v, out, lse, grad_out = _inputs(case, mode)
        causal = case[5]
        config = launchers.KernelConfig(block_m, block_n)
        kernels = (kernel, None) if name == DKDV else (None, kernel)

        def launched(q, k, v, out, lse, grad_out, is_causal, config=config, kernels=kernels):
            return launchers.launch_backward(q, k, v, out, lse, grad_out, is_causal, config, *kernels)

        grid = f"(triton.cdiv({length}, {'BLOCK_N' if name == DKDV else 'BLOCK_M'}), B * H)"
        how = (
            f"The check launched your kernel as the wrapper of Exercise 5c will: on the grid {grid}, "
            f"with BLOCK_M={block_m}, BLOCK_N={block_n}, IS_CAUSAL={causal}."
        )
        result, trace = traced_call(name, launched, mode, q, k, v, out, lse, grad_out, causal, hint=how)
        expect_in_bounds(
            name,
            trace,
            (
                "When T is not a multiple of the block size the last block runs past the end: load k and v "
                "with the key mask, q, dO, lse and D with the query mask (other=0.0), and store dK and dV "
                "with kv_mask."
                if name == DKDV
                else "When T is not a multiple of the block size the last block runs past the end: load q, "
                "dO, lse and D with the query mask, k and v with the key mask (other=0.0), and store dQ "
                "with the query mask."
            ),
        )
        for index in owned:
            expect_all_written(
                trace,
                result[index],
                f"That is {NAMES[index]}: program (i, bh) owns the {axis} rows i * "
                f"{'BLOCK_N' if name == DKDV else 'BLOCK_M'} + tl.arange(...) of batch·head bh and stores "
                "all of them (masked only past the end).",
            )
        expected = _autograd_grads(q, k, v, grad_out, causal)
        if all(close(result[i], expected[i], mode.gpu) for i in owned):
            passed_plain = passed_plain or not causal
            continue
        b, h, t_q, t_k, d, _, strided = case
        called = (
            f"{name} launched with BLOCK_M={block_m}, BLOCK_N={block_n}, IS_CAUSAL={causal} for "
            f"B={b}, H={h}, T_q={t_q}, T_k={t_k}, d={d}"
            + (", on (B, T, H, d).transpose(1, 2) views" if strided else "")
        )
        inputs = (q, k, v, grad_out)
        hint = ""
        if strided:  # the last case: every contiguous one passed
            hint = (
                "\nThe other cases, on contiguous inputs, passed, so look at the strides: these inputs are "
                "(B, T, H, d).transpose(1, 2) views, whose rows lie H * d apart. Step each pointer by its "
                "own tensor's strides: row i of q and dO at i * stride_qm and i * stride_dom, key j of k "
                "and v at j * stride_kn and j * stride_vn."
            )
        elif causal and passed_plain:
            hint = "\nThe cases with is_causal=False passed, so look at the causal part: " + (
                "the bound lo (the first query block with a query i that sees key pid_n * BLOCK_N, "
                "i + T_k − T_q >= pid_n * BLOCK_N) and the mask inside the tiles (key j allowed for "
                "query i when j <= i + T_k − T_q)."
                if name == DKDV
                else "the bound hi (one past the last key the block's last query sees, "
                "(pid_m + 1) * BLOCK_M + T_k − T_q, at most T_k) and the mask inside the tiles (key j "
                "allowed for query i when j <= i + T_k − T_q)."
            )
        _name_mistake(
            result, expected, inputs, case, mode, f"`{name}`", called, (block_m, block_n), owned, hint
        )
    generated = _expect_kernel_contract_cases(name, kernel, mode, owned)
    where = "interpreted on the CPU, every load traced" if mode.traced else mode.gpu_where
    grads = "dk and dv match" if name == DKDV else "dq matches"
    return (
        f"{grads} autograd on {len(_KERNEL_CASES)} shapes (ragged, causal, T_q ≠ T_k, BLOCK_M ≠ "
        f"BLOCK_N, strided), then on {generated} more from the exercise's contract (d = 24 padded to "
        f"32{'' if mode.gpu else ', float16 inputs'}, each of q, k, v and dO alone a view); {where}."
    )


_KERNEL_AXES = ("B", "H", "T_q", "d")


def _kernel_contract(name: str) -> Contract:
    """What Exercise 5a's or 5b's kernel must accept, launched as the wrapper launches it."""
    owned = (Returns("dk", ("B", "H", "T_k", "d")), Returns("dv", ("B", "H", "T_k", "d")))
    return Contract(
        name,
        args=(
            Arg("q_ptr", _KERNEL_AXES, views=VIEW_KINDS, expand_axis=1),
            Arg("k_ptr", ("B", "H", "T_k", "d"), views=VIEW_KINDS, expand_axis=1),
            Arg("v_ptr", ("B", "H", "T_k", "d"), views=VIEW_KINDS, expand_axis=1),
            Arg("do_ptr", _KERNEL_AXES, views=VIEW_KINDS, expand_axis=1),
        ),
        axes=(
            Axis("B", (1,)),
            Axis("H", (2,)),
            Axis("T_q", (20,), "one ragged block past the first: the hand-picked cases try the others"),
            Axis("T_k", (20,)),
            Axis("d", (16, 24), "a head dim that is not a power of two: HEAD_DIM = 24, BLOCK_D = 32"),
        ),
        returns=owned if name == DKDV else (Returns("dq", _KERNEL_AXES),),
        dtypes=(torch.float32, torch.float16),
        notes=(
            "causal, BLOCK_M = BLOCK_N = 16; lse and D float32 and contiguous, as the wrapper gives them",
            "each input alone a view (one kind each): every pointer stepped by its own tensor's strides",
        ),
    )


DKDV_CONTRACT = _kernel_contract(DKDV)
"""Exercise 5a: its generated cases each change one thing from d = 16, float32, contiguous."""

DQ_CONTRACT = _kernel_contract(DQ)
"""Exercise 5b: the same cases as 5a's."""

_TENSORS = ("q", "k", "v", "dO")
"""The tensors behind the kernels' q_ptr, k_ptr, v_ptr and do_ptr, as messages name them."""


def _expect_kernel_contract_cases(name: str, kernel: Any, mode: Mode, owned: tuple[int, ...]) -> int:
    """Run the kernel's generated cases once the hand-picked ones passed; return how many."""
    from attn_course.triton_flash import launchers

    contract = DKDV_CONTRACT if name == DKDV else DQ_CONTRACT
    cases = [
        *list(size_cases(contract))[1:],
        *([] if mode.gpu else dtype_cases(contract)),
        *view_cases(contract, one_kind_each=True),
    ]
    config = launchers.KernelConfig(16, 16)
    kernels = (kernel, None) if name == DKDV else (None, kernel)
    for case in cases:
        dtype = torch.float16 if mode.gpu else case.dtype

        def alloc(*shape: int, dtype: torch.dtype = dtype) -> torch.Tensor:
            return guarded(*shape, device=mode.device, dtype=dtype)

        q, k, v, grad_out = (make_arg(arg, case, alloc) for arg in contract.args)
        out, lse = flash.flash_attention_forward(q.float(), k.float(), v.float(), is_causal=True)
        inputs = (q, k, v, out.to(dtype), lse, grad_out)
        d = case.size["d"]
        viewed = ""
        if case.view is not None:
            index = [arg.name for arg in contract.args].index(case.view[0])
            viewed = view_words(inputs[(0, 1, 2, 5)[index]], contract.args[index], case.view[1])
            viewed = viewed.replace(f"`{case.view[0]}`", f"{_TENSORS[index]} (`{case.view[0]}`)", 1)
        padding = (
            f"The head dim here is d = {d}, not a power of two: the kernel gets HEAD_DIM = {d} and "
            f"BLOCK_D = 32; load and store only the lanes offs_d < HEAD_DIM (d_inside) of every tile."
            if d & (d - 1)
            else ""
        )
        strides = (
            f"Only one input is a view here, {viewed}; the others are contiguous. Step each pointer by "
            "its own tensor's strides: q by stride_q*, k by stride_k*, v by stride_v*, dO by stride_do*."
        )
        cast = (
            "The inputs here are float16: cast P and dS to the inputs' dtype before their tl.dot "
            "(p.to(do.dtype)), keep the accumulators in float32, and store in the gradient's dtype."
        )
        hint = padding or (strides if viewed else cast if case.changed == "dtype" else "")

        def launched(*inputs: torch.Tensor, config: Any = config, kernels: Any = kernels) -> Grads:
            q, k, v, out, lse, grad_out = inputs
            return launchers.launch_backward(q, k, v, out, lse, grad_out, True, config, *kernels)

        result, trace = traced_call(name, launched, mode, *inputs, hint=hint)
        expect_in_bounds(name, trace, hint)
        for index in owned:
            expect_all_written(trace, result[index], f"That is {NAMES[index]}, with {case.describe()}.")
        expected = _autograd_grads(q, k, v, grad_out, True)
        gpu = mode.gpu or dtype == torch.float16  # float16's tolerance
        if all(close(result[i], expected[i], gpu) for i in owned):
            continue
        called = f"{name} launched with BLOCK_M = BLOCK_N = 16, IS_CAUSAL=True for {case.describe()}"
        if case.view is not None:
            raise CheckFailed(
                _kernel_view_message(name, case, inputs, result, expected, owned, viewed, gpu)
                + f"\n(Called as {called}.)"
            )
        hint = f"\nThe cases before, with d = 16 and 32, passed: {padding}" if padding else ""
        if case.changed == "dtype":
            hint = f"\nThe cases before, in float32, passed. {cast}"
        legacy = (case.size["B"], case.size["H"], case.size["T_q"], case.size["T_k"], d, True, False)
        _name_mistake(
            result, expected, (q, k, v, grad_out), legacy, mode, f"`{name}`", called, (16, 16),
            owned, hint,
        )  # fmt: skip
    return len(cases)


def _kernel_view_message(
    name: str,
    case: Case,
    inputs: tuple[torch.Tensor, ...],
    grads: Grads,
    expected: Grads,
    owned: tuple[int, ...],
    viewed: str,
    gpu: bool,
) -> str:
    """Why a kernel's gradients are wrong with one input a view: read with another tensor's strides, or
    as if contiguous, where that is what matches; else what is observed."""
    assert case.view is not None
    index = [arg.name for arg in _kernel_contract(name).args].index(case.view[0])
    slot = (0, 1, 2, 5)[index]  # its place among (q, k, v, out, lse, grad_out)
    tensor = _TENSORS[index]
    others = [(_TENSORS[i], inputs[(0, 1, 2, 5)[i]]) for i in range(4) if i != index]
    readings = [(f"{other}'s strides", x.stride()) for other, x in others if x.shape == inputs[slot].shape]
    readings.append(("contiguous strides", contiguous_strides(tuple(inputs[slot].shape))))
    for words, strides in readings:
        misread = list(inputs)
        try:
            misread[slot] = read_as(inputs[slot], tuple(strides))
            wrong = _misread_grads(misread, causal=True)
        except RuntimeError:
            continue
        if all(close(grads[i], wrong[i], gpu) for i in owned) and not all(
            close(wrong[i], expected[i], gpu) for i in owned
        ):
            how = "as if it were contiguous" if words.startswith("contiguous") else f"with {words}"
            return (
                f"`{name}` reads {tensor} {how}: with {viewed} and the other inputs contiguous, "
                f"{' and '.join(NAMES[i] for i in owned)} are wrong (the cases with every input laid out "
                f"alike passed). Step each pointer by its own tensor's strides ({_STRIDES[index]})."
            )
    return (
        f"`{name}` is right when q, k, v and dO are laid out alike but wrong with {viewed}, the other "
        f"inputs contiguous: step each pointer by its own tensor's strides ({_STRIDES[index]})."
    )


_STRIDES = (
    "row i of q at i * stride_qm",
    "key j of k at j * stride_kn",
    "key j of v at j * stride_vn",
    "row i of dO at i * stride_dom",
)
"""Where each tensor's rows are, by its own strides."""


def _expect_kernel(name: str, kernel: Any) -> None:
    from triton.runtime.jit import KernelInterface

    if not isinstance(kernel, KernelInterface):
        raise CheckFailed(
            f"`{name}` should be a Triton kernel, a function decorated with @triton.jit, but it is "
            f"{type(kernel).__name__}. Pass the kernel itself: check_{name}({name})."
        )


@check
def check_triton_flash_attention_backward(candidate: Callable[..., Any]) -> str:
    """The learner's backward kernels against autograd: ragged, causal, T_q ≠ T_k and strided inputs."""
    mode = kernel_mode("triton_flash_attention_backward", candidate)
    kernels_passed = _kernels_passed(candidate)
    for case in _CASES:
        q, k, v, out, lse, grad_out = _inputs(case, mode)
        causal = case[5]
        with _AutogradCalls() as calls:
            result, trace = traced_call(
                "triton_flash_attention_backward",
                candidate,
                mode,
                q,
                k,
                v,
                out,
                lse,
                grad_out,
                is_causal=causal,
            )
        _refuse_autograd("triton_flash_attention_backward", calls)
        expect_launched("triton_flash_attention_backward", trace)
        expect_in_bounds(
            "triton_flash_attention_backward",
            trace,
            WRAPPER_HINT
            if kernels_passed
            else "When T is not a multiple of the block size the last query or key block runs past the end: "
            "load q, dO, lse and D with the query mask, k and v with the key mask (other=0.0), and store "
            "with the same masks.",
        )
        grads = _expect_grads(result, (q, k, v))
        for name, grad in zip(NAMES, grads, strict=True):
            expect_all_written(
                trace,
                grad,
                f"That is {name}: its kernel's grid needs triton.cdiv(T, BLOCK) programs along the "
                f"{'query' if name == 'dq' else 'key'} axis times B * H, and each stores its whole block.",
            )
        expected = _autograd_grads(q, k, v, grad_out, causal)
        if all(close(g, e, mode.gpu) for g, e in zip(grads, expected, strict=True)):
            continue
        b, h, t_q, t_k, d, _, strided = case
        called = (
            f"triton_flash_attention_backward(q, k, v, out, lse, grad_out, is_causal={causal}) with "
            f"B={b}, H={h}, T_q={t_q}, T_k={t_k}, d={d}"
            + (", (B, T, H, d).transpose(1, 2) views" if strided else "")
        )
        what = "`triton_flash_attention_backward`"
        hint = f"\n{WRAPPER_HINT}" if kernels_passed else ""
        _name_mistake(grads, expected, (q, k, v, grad_out), case, mode, what, called, hint=hint)
    generated = _expect_contract_cases(candidate, mode, kernels_passed)
    where = "interpreted on the CPU, every load traced" if mode.traced else mode.gpu_where
    return (
        f"dq, dk and dv match autograd on {len(_CASES)} shapes (ragged, causal, T_q ≠ T_k, strided), then on "
        f"{generated} more from the exercise's contract (d = 24 padded to 32, float16 inputs, each input "
        f"alone a view: q, k, v, lse, grad_out); {where}."
    )


_QKV_AXES = ("B", "H", "T_q", "d")
CONTRACT = Contract(
    "triton_flash_attention_backward",
    args=(
        Arg("q", _QKV_AXES, views=VIEW_KINDS, expand_axis=1),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS, expand_axis=1),
        Arg("v", ("B", "H", "T_k", "d"), views=VIEW_KINDS, expand_axis=1),
        Arg("out", _QKV_AXES),
        Arg("lse", ("B", "H", "T_q"), views=("sliced", "transposed"), slice_axis=-1),
        Arg("grad_out", _QKV_AXES, views=VIEW_KINDS, expand_axis=1),
    ),
    axes=(
        Axis("B", (1,)),
        Axis("H", (2,)),
        Axis("T_q", (20,), "one block: the hand-picked cases try the ragged and multi-block sizes"),
        Axis("T_k", (20,)),
        Axis("d", (16, 24), "a head dim that is not a power of two: padded to BLOCK_D = 32"),
    ),
    returns=(
        Returns("dq", _QKV_AXES),
        Returns("dk", ("B", "H", "T_k", "d")),
        Returns("dv", ("B", "H", "T_k", "d")),
    ),
    dtypes=(torch.float32, torch.float16),
    notes=("D and the lse, float32 and contiguous, as the kernels index them: pid_bh * T_q + row",),
)
"""What Exercise 5c's wrapper must accept and return: its generated cases (causal) each change one thing,
the head dim, the dtype, or one input alone a view (one kind each, the interpreter being slow). `out`
reaches the kernels only through D, which the wrapper computes with torch: no view of it is tried."""


def _contract_inputs(case: Case, mode: Mode) -> tuple[torch.Tensor, ...]:
    """(q, k, v, out, lse, grad_out) of a generated case; out and lse from the forward, laid out as asked."""
    dtype = torch.float16 if mode.gpu else case.dtype

    def alloc(*shape: int) -> torch.Tensor:
        return guarded(*shape, device=mode.device, dtype=dtype)

    q_arg, k_arg, v_arg, out_arg, lse_arg, grad_out_arg = CONTRACT.args
    q, k, v, grad_out = (make_arg(arg, case, alloc) for arg in (q_arg, k_arg, v_arg, grad_out_arg))
    out, lse = flash.flash_attention_forward(q.float(), k.float(), v.float(), is_causal=True)

    def laid_out(arg: Arg, value: torch.Tensor) -> torch.Tensor:
        tensor = make_arg(arg, case, lambda *shape: torch.empty(shape, device=mode.device, dtype=value.dtype))
        return tensor.copy_(value)

    return q, k, v, laid_out(out_arg, out.to(dtype)), laid_out(lse_arg, lse), grad_out


def _expect_contract_cases(candidate: Callable[..., Any], mode: Mode, kernels_passed: bool) -> int:
    """Run the contract's generated cases once the hand-picked ones passed; return how many."""
    name = "triton_flash_attention_backward"
    cases = [
        *list(size_cases(CONTRACT))[1:],
        *([] if mode.gpu else dtype_cases(CONTRACT)),
        *view_cases(CONTRACT, one_kind_each=True),
    ]
    for case in cases:
        inputs = _contract_inputs(case, mode)
        q, k, v, out, lse, grad_out = inputs
        d = case.size["d"]
        viewed = ""
        if case.view is not None:
            index = [arg.name for arg in CONTRACT.args].index(case.view[0])
            viewed = view_words(inputs[index], CONTRACT.args[index], case.view[1])
        padding = (
            f"The head dim here is d = {d}, not a power of two: pass HEAD_DIM = d ({d}) and "
            f"BLOCK_D = max(16, triton.next_power_of_2(d)) ({max(16, 1 << (d - 1).bit_length())}); the "
            "kernels load and store only offs_d < HEAD_DIM of the BLOCK_D lanes."
            if d & (d - 1)
            else ""
        )
        result, trace = traced_call(name, candidate, mode, *inputs, is_causal=True, hint=padding)
        expect_in_bounds(
            name,
            trace,
            padding
            or (
                f"Only one input is a view here, {viewed}; the others are contiguous. Pass each tensor's own "
                "strides (make the head dim contiguous where it is not), and make the lse contiguous, as the "
                "kernels index it at pid_bh * T_q + row."
            ),
        )
        grads = _expect_grads(result, (q, k, v))
        expected = _autograd_grads(q, k, v, grad_out, True)
        gpu = mode.gpu or case.dtype == torch.float16  # float16's tolerance
        if all(close(g, e, gpu) for g, e in zip(grads, expected, strict=True)):
            continue
        called = f"{name}(q, k, v, out, lse, grad_out, is_causal=True) with {case.describe()}"
        if case.view is not None:
            raise CheckFailed(
                _view_message(case, inputs, grads, expected, viewed, gpu) + f"\n(Called as {called}.)"
            )
        hint = f"\nThe cases before, with d = 16 and 32, passed: {padding}" if padding else ""
        if kernels_passed:
            hint += f"\n{WRAPPER_HINT}"
        legacy = (case.size["B"], case.size["H"], case.size["T_q"], case.size["T_k"], d, True, False)
        used: Inputs = (q, k, v, grad_out)
        _name_mistake(grads, expected, used, legacy, mode, f"`{name}`", called, hint=hint)
    return len(cases)


def _misread_grads(inputs: list[torch.Tensor], causal: bool = True) -> Grads:
    """What the kernels give from these (misread) inputs with the forward's own out and lse: the course's
    tiled backward in float64, which recomputes P = exp(S - lse) as the kernels do (autograd through the
    misread inputs would renormalise P)."""
    q, k, v, out, lse, grad_out = (x.detach().to("cpu", torch.float64) for x in inputs)
    return flash.flash_attention_backward(q, k, v, out, lse, grad_out, is_causal=causal)


def _read_with_the_views_strides(
    index: int, inputs: tuple[torch.Tensor, ...], grads: Grads, expected: Grads, gpu: bool
) -> tuple[str, ...]:
    """Which other inputs (q, k, v, grad_out) a wrapper reads with the one view's strides, if that matches."""
    names = ("q", "k", "v", "out", "lse", "grad_out")
    view = inputs[index]
    shaped = [i for i in (0, 1, 2, 5) if i != index and inputs[i].shape == view.shape]
    subsets = [list(c) for n in range(len(shaped), 0, -1) for c in itertools.combinations(shaped, n)]
    for subset in subsets:
        misread = list(inputs)
        try:
            for i in subset:
                misread[i] = read_as(inputs[i], tuple(view.stride()))
            wrong = _misread_grads(misread)
        except RuntimeError:
            continue
        if not all(close(w, e, gpu) for w, e in zip(wrong, expected, strict=True)) and all(
            close(g, w, gpu) for g, w in zip(grads, wrong, strict=True)
        ):
            return tuple(names[i] for i in subset)
    return ()


def _view_message(
    case: Case, inputs: tuple[torch.Tensor, ...], grads: Grads, expected: Grads, viewed: str, gpu: bool
) -> str:
    """Why the gradients are wrong with one input a view: read as if contiguous where that is what matches."""
    assert case.view is not None
    name = case.view[0]
    index = [arg.name for arg in CONTRACT.args].index(name)
    what = "`triton_flash_attention_backward`"
    if name in ("out", "lse"):
        return (
            f"{what} is right when every input is contiguous but wrong with {viewed}: the kernels read "
            f"{'D, computed from out,' if name == 'out' else 'the lse'} at pid_bh * T_q + row. Compute D = "
            "(grad_out.float() * out.float()).sum(-1) and pass lse.float().contiguous(), both contiguous "
            "float32 (B, H, T_q), whatever layout out and lse come in."
        )
    misread = list(inputs)
    try:
        misread[index] = read_as(inputs[index], contiguous_strides(tuple(inputs[index].shape)))
        wrong = _misread_grads(misread)
        reads_contiguous = all(close(g, w, gpu) for g, w in zip(grads, wrong, strict=True))
    except RuntimeError:
        reads_contiguous = False
    strides = f"{name}.stride(0), {name}.stride(1), {name}.stride(2)"
    others = _read_with_the_views_strides(index, inputs, grads, expected, gpu)
    if others:
        listed = " and ".join(f"`{other}`" for other in others)
        own = ", ".join(f"{o}.stride(0), {o}.stride(1), {o}.stride(2)" for o in others)
        return (
            f"{what} reads {listed} with `{name}`'s strides: with {viewed} and the other inputs contiguous, "
            "the gradients are wrong (the cases where every input had the same layout passed). Pass each "
            f"tensor's own strides: {own}."
        )
    if reads_contiguous:
        return (
            f"{what} reads `{name}` as if it were contiguous: with {viewed} the gradients are wrong (the "
            f"cases before, every input contiguous or all of q, k, v and grad_out views alike, passed). Pass "
            f"`{name}`'s own strides, {strides}, to the kernels, not another input's; or make it contiguous."
        )
    return (
        f"{what} is right when every input is contiguous but wrong with {viewed}: pass the kernels "
        f"`{name}`'s own strides, {strides}, whatever the other inputs' layout (or make it contiguous)."
    )


WRAPPER_HINT = (
    "Your two kernels passed their own checks (Exercises 5a and 5b), so look at what the wrapper gives "
    "them: D = (grad_out * out).sum(-1) in float32, (B, H, T_q), contiguous; the lse in float32, "
    "contiguous; each tensor's own strides (dv stored with dk's); heads, T_q, T_k in that order; "
    "sm_scale = 1/√d; the grids (cdiv(T_k, BLOCK_N), B * H) for the dK/dV kernel and "
    "(cdiv(T_q, BLOCK_M), B * H) for the dQ kernel, with the BLOCK_M and BLOCK_N you pass."
)
"""What the wrapper check adds when the kernels the wrapper launches passed their checks in this kernel."""


def _kernels_passed(candidate: Any) -> bool:
    """Whether the wrapper launches both of the learner's kernels, and each passed its own check."""
    found = {getattr(kernel, "__name__", ""): kernel for kernel in kernels_used(candidate)}
    return all(name in found and has_passed(name, found[name]) for name in (DKDV, DQ))


def _wrapper_slips(d: int) -> list[Slip]:
    """The wrapper's mistakes in what it gives the kernels: the scale, the lse, the tensor read as dO."""
    return [
        (
            f"gives the kernels sm_scale = 1/d ({1 / d:.4g}): the scale of S = QKᵀ/√d is 1 / math.sqrt(d) "
            f"({d**-0.5:.4g}), and the kernels use it for S, dQ and dK alike.",
            BackwardVariant(sm_scale=1 / d),
        ),
        (
            "gives the kernels sm_scale = 1: the scale of S = QKᵀ/√d is 1 / math.sqrt(d), and the kernels "
            "use it for S, dQ and dK alike.",
            BackwardVariant(sm_scale=1.0),
        ),
        (
            "hands the kernels the lse already in base 2 (× log2 e): they take the forward's natural-log lse "
            "and do their own conversion, so pass lse.float() as it is.",
            BackwardVariant(lse_factor=math.log2(math.e)),
        ),
        (
            "gives the dK/dV kernel the output where it reads dO: dV = Pᵀ dO and dP = dO Vᵀ need grad_out "
            "(the dQ kernel, given grad_out, is right).",
            BackwardVariant(do_for_kv="out"),
        ),
    ]


def _expect_grads(result: Any, like: tuple[torch.Tensor, ...]) -> Grads:
    name = "triton_flash_attention_backward"
    if not isinstance(result, tuple | list) or len(result) != 3:
        raise CheckFailed(f"`{name}` should return (dq, dk, dv), but returned {type(result).__name__}.")
    for got, x, n in zip(result, like, NAMES, strict=True):
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise CheckFailed(
                f"`{name}` returned {n} of shape {shape}; it should be shaped like its input, "
                f"{tuple(x.shape)}. Return (dq, dk, dv) in that order."
            )
        if got.device.type != x.device.type or got.dtype != x.dtype:
            raise CheckFailed(
                f"`{name}` returned {n} as {got.dtype} on {got.device.type}; the inputs are "
                f"{x.dtype} on {x.device.type}: allocate the gradients like the inputs "
                "(torch.empty_like) and accumulate in float32 inside the kernels only."
            )
    dq, dk, dv = result  # tensors shaped like (q, k, v), as checked above
    return dq, dk, dv


def _name_mistake(
    grads: Grads,
    expected: Grads,
    inputs: Inputs,
    case: tuple,
    mode: Mode,
    what: str,
    called: str,
    blocks: tuple[int, int] | None = None,
    owned: tuple[int, ...] = (0, 1, 2),
    hint: str = "",
) -> NoReturn:
    """Raise naming the known mistakes `grads` matches on the `owned` gradients; else locate it.

    The one diagnosis pipeline (`_diagnosis.py`), narrowed to the known mistakes and `_locate`. The
    tiled slips are tried with the kernel's (BLOCK_M, BLOCK_N) where the check chose them, `blocks`;
    else with every pair of `_BLOCK_SIZES`. `hint` is added to a located (unnamed) mistake.
    """
    t_q, t_k, causal, strided = case[2], case[3], case[5], case[6]

    def slip(message: str, variant: BackwardVariant, block_m: int, block_n: int) -> Mistake:
        return Mistake(
            message, functools.partial(_tiled_backward, *inputs, causal, block_m, block_n, variant)
        )

    block_free = [(message, variant) for message, variant in _COMMON_SLIPS if not variant.transposes]
    if owned == (0, 1, 2):  # the wrapper: what it hands the kernels
        block_free += _wrapper_slips(inputs[0].shape[-1])
    # A dK/dV kernel launched by the check cannot drop a key block (the grid is the check's): what
    # looks like it is a query loop that never reaches those keys.
    tiled = [(m, variant) for m, variant in _TILED_SLIPS if not (owned == (1, 2) and not variant.tail)]
    mistakes = [slip(message, variant, t_q, t_k) for message, variant in block_free]
    pairs = [blocks] if blocks is not None else itertools.product(_BLOCK_SIZES, repeat=2)
    for block_m, block_n in pairs:
        if blocks is None and (block_m >= 2 * max(t_q, 16) or block_n >= 2 * max(t_k, 16)):
            continue
        mistakes += [slip(message, variant, block_m, block_n) for message, variant in tiled]
    if strided:
        mistakes.append(Mistake(_views_message(owned), functools.partial(_read_contiguous, inputs, causal)))
    failure = Failure(
        grads,
        expected,
        what,
        f"\n(Called as {called}.)",
        functools.partial(close, gpu=mode.gpu),
        mistakes,
        parts=NAMES,
        owned=owned,
        locate=lambda: _locate(grads, expected, inputs, causal, blocks or (32, 32), owned=owned),
        first_slip_only=True,
        unnamed_hint=hint,
    )
    fail(failure, only=("known-mistake", "where-wrong"))


def _read_contiguous(inputs: Inputs, causal: bool) -> Grads:
    """The gradients of q, k, v and grad_out read as if they were contiguous (their own strides ignored)."""
    q_c, k_c, v_c, grad_out_c = (torch.as_strided(x, x.shape, torch.empty(x.shape).stride()) for x in inputs)
    with torch.enable_grad():
        return _autograd_grads(q_c, k_c, v_c, grad_out_c, causal)


def _views_message(owned: tuple[int, ...]) -> str:
    """What a backward that reads views as contiguous is told: by the wrapper, or by a kernel."""
    return (
        "is wrong for inputs that are views: q.transpose(1, 2) of a (B, T, H, d) tensor keeps its rows "
        "(B, T, H, d) apart. "
        + (
            "Pass the strides of q, k, v and grad_out (and of dq, dk, dv) to the kernels, or call "
            ".contiguous() first."
            if owned == (0, 1, 2)
            else "Step each pointer by its own tensor's strides: row i of q and dO at i * stride_qm "
            "and i * stride_dom, key j of k and v at j * stride_kn and j * stride_vn."
        )
    )
