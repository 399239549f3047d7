"""The check of notebook 09's Triton backward: `triton_flash_attention_backward` against autograd.

Like notebook 08's check, it runs the learner's kernels through Triton's interpreter where no GPU
compiles them, tracing every load and store: reads and writes outside the tensors and gradient
elements no program wrote are named first. Then dq, dk and dv are compared with autograd through
the course's attention in float64; a difference is named by simulating the known mistakes with
`checks.backward._tiled_backward` at every pair of block sizes a kernel might use, and otherwise
located (which gradient, which rows).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch

from attn_course import flash
from attn_course.checks._harness import CheckFailed, check
from attn_course.checks._triton_harness import (
    Mode,
    expect_all_written,
    expect_in_bounds,
    expect_launched,
    guarded,
    kernel_mode,
    traced_call,
)
from attn_course.checks.backward import (
    _COMMON_SLIPS,
    _TILED_SLIPS,
    NAMES,
    Grads,
    Inputs,
    _autograd_grads,
    _AutogradCalls,
    _locate,
    _refuse_autograd,
    _slip_grads,
)

_BLOCK_SIZES = (16, 32, 64)

_CASES = (  # (B, H, T_q, T_k, d, is_causal, strided)
    (1, 2, 64, 64, 32, False, False),
    (1, 2, 64, 64, 16, True, False),
    (1, 2, 50, 50, 32, True, False),
    (1, 1, 20, 50, 32, True, False),
    (1, 1, 50, 37, 16, False, False),
    (1, 1, 130, 130, 16, True, False),
    (2, 2, 40, 40, 32, True, True),
)
"""Square and ragged lengths, causal with T_q < T_k, T_q > T_k, several blocks, (B, T, H, d) views."""


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
def check_triton_flash_attention_backward(candidate: Callable[..., Any]) -> str:
    """The learner's backward kernels against autograd: ragged, causal, T_q ≠ T_k and strided inputs."""
    mode = kernel_mode("triton_flash_attention_backward", candidate)
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
            "When T is not a multiple of the block size the last query or key block runs past the end: "
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
        _name_mistake(grads, expected, (q, k, v, grad_out), case, mode)
    where = (
        "interpreted on the CPU, every load traced" if mode.traced else f"on {mode.device.type} in float16"
    )
    return (
        f"dq, dk and dv match autograd on {len(_CASES)} shapes (ragged, causal, T_q ≠ T_k, strided); {where}."
    )


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


def _name_mistake(grads: Grads, expected: Grads, inputs: Inputs, case: tuple, mode: Mode) -> None:
    b, h, t_q, t_k, d, causal, strided = case
    called = (
        f"triton_flash_attention_backward(q, k, v, out, lse, grad_out, is_causal={causal}) with "
        f"B={b}, H={h}, "
        f"T_q={t_q}, T_k={t_k}, d={d}" + (", (B, T, H, d).transpose(1, 2) views" if strided else "")
    )
    what = "`triton_flash_attention_backward`"

    def matches(slip: dict[str, Any], block_m: int, block_n: int) -> bool:
        try:
            wrong = _slip_grads(slip, *inputs, causal, block_m, block_n)
        except RuntimeError:  # a slip that cannot run with these blocks (the lse of a key block's rows)
            return False
        return not all(close(w, e, mode.gpu) for w, e in zip(wrong, expected, strict=True)) and all(
            close(g, w, mode.gpu) for g, w in zip(grads, wrong, strict=True)
        )

    block_free = [(message, slip) for message, slip in _COMMON_SLIPS if "transpose" not in str(slip)]
    for message, slip in block_free:
        if matches(slip, t_q, t_k):
            raise CheckFailed(f"{what} {message}\n(Called as {called}.)")
    for block_m, block_n in itertools.product(_BLOCK_SIZES, repeat=2):
        if block_m >= 2 * max(t_q, 16) or block_n >= 2 * max(t_k, 16):
            continue
        for message, slip in _TILED_SLIPS:
            if matches(slip, block_m, block_n):
                raise CheckFailed(f"{what} {message}\n(Called as {called}.)")
    if strided:
        q_c, k_c, v_c, grad_out_c = (
            torch.as_strided(x, x.shape, torch.empty(x.shape).stride()) for x in inputs
        )
        wrong = _autograd_grads(q_c, k_c, v_c, grad_out_c, causal)
        if not all(close(w, e, mode.gpu) for w, e in zip(wrong, expected, strict=True)) and all(
            close(g, w, mode.gpu) for g, w in zip(grads, wrong, strict=True)
        ):
            raise CheckFailed(
                f"{what} is wrong for inputs that are views: q.transpose(1, 2) of a (B, T, H, d) tensor "
                "keeps its rows (B, T, H, d) apart. Pass the strides of q, k, v and grad_out (and of dq, dk, "
                "dv) to "
                f"the kernels, or call .contiguous() first.\n(Called as {called}.)"
            )
    raise CheckFailed(f"{what} {_locate(grads, expected, inputs, causal, (32, 32))}\n(Called as {called}.)")
