"""Checks for notebook 06: online softmax and tiled (FlashAttention-style) attention.

Both checks compare numbers with the reference and name known wrong variants, and they also watch
how the candidate computes: every tensor operation it runs passes through a `TorchDispatchMode`,
so a softmax that reduces whole rows at once, or an attention that creates a T_q×T_k tensor or
calls torch's fused attention, is rejected even when its numbers are right.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from attn_course import reference
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    cuda_device,
    expect_close,
    expect_tensor,
    randn,
)


class _OpRecorder(TorchDispatchMode):
    """Record (op name, input tensors' shapes, first few args, output numels and dtypes) of each op."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple[Any, ...], list[tuple[int, torch.dtype]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        outputs = [(x.numel(), x.dtype) for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)]
        self.ops.append((str(func.overloadpacket.__name__), args, outputs))
        return out


_REDUCTIONS = {"amax", "max", "sum", "logsumexp", "_softmax", "softmax", "_log_softmax", "mean", "nansum"}
_FUSED = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")


def _reduced_sizes(name: str, args: tuple[Any, ...]) -> list[int]:
    """Sizes of the axes a reduction op reduces (all axes when it names none)."""
    tensor = args[0]
    dims: Any = args[1] if len(args) > 1 and not isinstance(args[1], torch.Tensor) else None
    if name in ("_softmax", "_log_softmax", "softmax") and isinstance(dims, int):
        dims = [dims]
    if dims is None or dims == []:
        return list(tensor.shape)
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [tensor.shape[d] for d in dims if isinstance(d, int)]


# ---------------------------------------------------------------------------------------------
# online_softmax


def _softmax_wrong(*, rescale: str = "right", block_max: bool = False, tail: bool = True) -> Callable:
    """A streaming softmax with one mistake: rescale "none" or "inverted", per-block max, dropped tail."""

    def wrong(x: torch.Tensor, block_size: int) -> torch.Tensor:
        n = x.shape[-1]
        stop = n if tail else n - n % block_size
        m = torch.full_like(x[..., :1], -math.inf)  # (..., 1)
        denom = torch.zeros_like(x[..., :1])  # (..., 1)
        block_maxes = []
        for start in range(0, stop, block_size):
            block = x[..., start : start + block_size]  # (..., B)
            block_m = block.amax(dim=-1, keepdim=True)  # (..., 1)
            block_maxes.append(block_m.expand_as(block))
            m_new = torch.maximum(m, block_m)  # (..., 1)
            if block_max:
                denom = denom + torch.exp(block - block_m).sum(dim=-1, keepdim=True)
            elif rescale == "none":
                denom = denom + torch.exp(block - m_new).sum(dim=-1, keepdim=True)
            elif rescale == "inverted":
                denom = denom * torch.exp(m_new - m).nan_to_num(posinf=0.0) + torch.exp(block - m_new).sum(
                    -1, True
                )
            else:
                denom = denom * torch.exp(m - m_new) + torch.exp(block - m_new).sum(dim=-1, keepdim=True)
            m = m_new
        if block_max:
            return torch.exp(x - torch.cat(block_maxes, dim=-1)) / denom  # (..., N)
        return torch.exp(x - m) / denom  # (..., N)

    return wrong


_SOFTMAX_MISTAKES = [
    Mistake(
        "does not rescale the running sum when the maximum grows: the exponentials summed so far were "
        "taken relative to the old maximum, so before adding a new block multiply the sum by "
        "exp(m_old - m_new), then add exp(block - m_new).sum().",
        _softmax_wrong(rescale="none"),
    ),
    Mistake(
        "rescales the running sum the wrong way round: when the maximum grows from m_old to m_new the "
        "old terms exp(x - m_old) become exp(x - m_new) = exp(x - m_old) · exp(m_old - m_new), a factor "
        "below 1; you multiplied by exp(m_new - m_old).",
        _softmax_wrong(rescale="inverted"),
    ),
    Mistake(
        "uses each block's own maximum and never brings the blocks to a common one: terms exp(x - m_b) "
        "of different blocks cannot be added. Keep one running maximum per row, rescale the running sum "
        "when it grows, and normalise every entry with the final maximum: exp(x - m) / denom.",
        _softmax_wrong(block_max=True),
    ),
    Mistake(
        "drops the ragged last block: when the length is not a multiple of block_size the last block is "
        "shorter, and it counts too. Loop with range(0, n, block_size) and slice x[..., start:start + "
        "block_size] (a slice past the end simply stops there).",
        _softmax_wrong(tail=False),
    ),
]

_SOFTMAX_CASES = [  # (shape, block_size, scale, dtype)
    ((3, 37), 8, 3.0, torch.float64),
    ((2, 3, 50), 16, 3.0, torch.float64),
    ((20,), 3, 3.0, torch.float64),
    ((4, 9), 1, 3.0, torch.float64),
    ((2, 7), 12, 3.0, torch.float64),
    ((3, 40), 8, 60.0, torch.float32),
]
"""Ragged and exact tails, one to three leading axes, block_size 1 and longer than the row, and
float32 scores far beyond exp's range (so that the maximum must be subtracted)."""


@check
def check_online_softmax(candidate: Callable[..., Any]) -> str:
    """Compare with softmax on ragged rows and block sizes; reject a softmax that is not streamed."""
    for shape, block_size, scale, dtype in _SOFTMAX_CASES:
        x = randn(*shape, dtype=dtype, scale=scale)
        # a few maxima in later blocks, so that the running maximum must grow
        x[..., -1] = x.amax(dim=-1) + 1.0
        result = call("online_softmax", candidate, x, block_size)
        n = shape[-1]
        what = f"Your online_softmax(x of shape {shape}, block_size={block_size})"
        hints = {
            (*shape[:-1], n - n % block_size): "The last, shorter block is missing: loop with "
            "range(0, n, block_size).",
            (*shape[:-1], 1): "That is one number per row (the running sum or maximum): return the "
            "probabilities exp(x - m) / denom, of the shape of x.",
        }
        out = expect_tensor(result, shape, what, finite=False, hints=hints)
        expect_close(
            out,
            torch.softmax(x, dim=-1),
            what,
            mistakes=_SOFTMAX_MISTAKES,
            args=(x, block_size),
            nonfinite_hint="Subtract the running maximum before exp: exp of a score of a few hundred "
            "overflows to inf, and inf / inf is NaN.",
        )
    _expect_streamed(candidate)
    return "6 shapes and block sizes (ragged, 1, longer than the row), large float32 scores, streamed"


def _expect_streamed(candidate: Callable[..., Any]) -> None:
    """Reject max, sum or softmax over more than block_size entries of a row at once."""
    x = randn(4, 50)
    block_size = 8
    with _OpRecorder() as recorder:
        call("online_softmax", candidate, x, block_size)
    for name, args, _ in recorder.ops:
        if name == "max" and len(args) > 1 and isinstance(args[1], torch.Tensor):
            continue  # torch.max(a, b) is the elementwise maximum
        if name in _REDUCTIONS and args and isinstance(args[0], torch.Tensor):
            sizes = _reduced_sizes(name, args)
            if any(size > block_size for size in sizes):
                verb = "a softmax" if "softmax" in name else f"torch.{name.strip('_')}"
                raise CheckFailed(
                    f"Your online_softmax computes {verb} over {max(sizes)} entries at once, with "
                    f"block_size={block_size}: the point is to read each row one block at a time. Take the "
                    "max and the sum of one block x[..., start:start + block_size] per step, and update "
                    "the running maximum and running sum from them."
                )


# ---------------------------------------------------------------------------------------------
# flash_attention


def _tiled_wrong(
    *,
    rescale_acc: bool = True,
    rescale_sum: bool = True,
    scale: bool = True,
    tail: bool = True,
    mask: str = "right",
    average_blocks: bool = False,
) -> Callable[..., torch.Tensor]:
    """A tiled attention (query blocks, then key blocks in ascending order) with one mistake.

    mask: "right" (bottom-right, j <= i + T_k - T_q), "strict" (j < i + T_k - T_q), "top-left"
    (j <= i), "skip-diagonal" (only key blocks entirely allowed for the whole query block),
    "blocks-only" (skips the blocks above the diagonal, no mask inside the others), "none".
    """

    def wrong(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, block_size: int = 64
    ) -> torch.Tensor:
        t_q, d = q.shape[-2:]
        t_k = k.shape[-2]
        stop = t_k if tail else t_k - t_k % block_size
        offset = 0 if mask == "top-left" else t_k - t_q
        s_scale = 1 / math.sqrt(d) if scale else 1.0
        outs = []
        for qs in range(0, t_q, block_size):
            qe = min(qs + block_size, t_q)
            rows = torch.arange(qs, qe)[:, None] + offset  # (Bq, 1): position of each query
            m = q.new_full((*q.shape[:-2], qe - qs, 1), -math.inf)  # (..., Bq, 1)
            denom = torch.zeros_like(m)  # (..., Bq, 1)
            acc = q.new_zeros((*q.shape[:-2], qe - qs, v.shape[-1]))  # (..., Bq, d_v)
            block_outs = []
            for ks in range(0, stop, block_size):
                ke = min(ks + block_size, t_k)
                causal = is_causal and mask != "none"
                if causal and mask == "skip-diagonal" and ke - 1 > qs + offset:
                    continue
                if causal and ks > qe - 1 + offset:
                    continue
                s = (q[..., qs:qe, :] @ k[..., ks:ke, :].transpose(-1, -2)) * s_scale  # (..., Bq, Bk)
                if causal and mask not in ("skip-diagonal", "blocks-only"):
                    cols = torch.arange(ks, ke)[None, :]  # (1, Bk)
                    allowed = cols < rows if mask == "strict" else cols <= rows  # (Bq, Bk)
                    s = s.masked_fill(~allowed, -math.inf)  # (..., Bq, Bk)
                if average_blocks:
                    block_outs.append(torch.softmax(s, dim=-1) @ v[..., ks:ke, :])  # (..., Bq, d_v)
                    continue
                m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., Bq, 1)
                m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
                p = torch.exp(s - m_safe)  # (..., Bq, Bk)
                alpha = torch.exp(m - m_safe)  # (..., Bq, 1)
                denom = (denom * alpha if rescale_sum else denom) + p.sum(dim=-1, keepdim=True)
                acc = (acc * alpha if rescale_acc else acc) + p @ v[..., ks:ke, :]
                m = m_new
            outs.append(torch.stack(block_outs).mean(dim=0) if average_blocks else acc / denom)
        return torch.cat(outs, dim=-2)  # (..., T_q, d_v)

    return wrong


_ATTENTION_MISTAKES = [
    Mistake(
        "does not rescale the output accumulator when the running maximum grows: acc holds sums of "
        "exp(s - m_old)·v, so multiply it by alpha = exp(m_old - m_new) before adding p @ v_block, "
        "exactly as you rescale the running sum.",
        _tiled_wrong(rescale_acc=False),
    ),
    Mistake(
        "does not rescale the running sum (the softmax denominator) when the running maximum grows: "
        "multiply it by alpha = exp(m_old - m_new) before adding p.sum(-1), as you do for the accumulator.",
        _tiled_wrong(rescale_sum=False),
    ),
    Mistake(
        "rescales neither the running sum nor the accumulator when the maximum grows: terms computed "
        "with an old maximum must be multiplied by alpha = exp(m_old - m_new) before new ones are added.",
        _tiled_wrong(rescale_acc=False, rescale_sum=False),
    ),
    Mistake(
        "averages a softmax per key block: each block's softmax sums to 1 on its own, so averaging them "
        "weighs a block of unimportant keys like a block of important ones. Keep a running maximum, sum "
        "and accumulator per query row across the blocks and divide by the sum once at the end.",
        _tiled_wrong(average_blocks=True),
    ),
    Mistake(
        "drops the ragged last key block: when T_k is not a multiple of block_size the last block is "
        "shorter and still counts. Loop with range(0, T_k, block_size) and slice "
        "k[..., start:start + block_size].",
        _tiled_wrong(tail=False),
    ),
    Mistake(
        "forgets the 1/√d scale: multiply the scores q_block @ k_blockᵀ by 1 / math.sqrt(d), d = "
        "q.shape[-1] (the width of the queries and keys, not of the values).",
        _tiled_wrong(scale=False),
    ),
    Mistake(
        "ignores is_causal=True: inside each block, mask with -inf the keys after the query's position.",
        _tiled_wrong(mask="none"),
    ),
    Mistake(
        "masks the diagonal too: query i may attend key i itself. Keep key j when j <= i + T_k - T_q "
        "(<=, not <).",
        _tiled_wrong(mask="strict"),
    ),
    Mistake(
        "aligns the causal mask top-left: with T_q != T_k the queries are the LAST T_q positions "
        "(bottom-right alignment, as in attention and causal_mask), so query i sits at position "
        "i + T_k - T_q and may attend key j when j <= i + T_k - T_q.",
        _tiled_wrong(mask="top-left"),
    ),
    Mistake(
        "skips the blocks that cross the diagonal: only blocks entirely above the diagonal may be "
        "skipped. A block that crosses it is computed and masked inside: key j allowed when "
        "j <= i + T_k - T_q.",
        _tiled_wrong(mask="skip-diagonal"),
    ),
    Mistake(
        "skips the blocks above the diagonal but does not mask inside the blocks that cross it: a block "
        "holding the diagonal still contains keys after some of its queries; mask them with -inf "
        "(key j allowed when j <= i + T_k - T_q).",
        _tiled_wrong(mask="blocks-only"),
    ),
]

_ATTENTION_CASES = [  # (q shape, T_k, d_v, is_causal, block_size)
    ((2, 3, 37, 8), 37, 5, False, 8),
    ((2, 29, 8), 45, 6, False, 16),
    ((1, 2, 37, 8), 37, 8, True, 8),
    ((2, 21, 8), 45, 4, True, 8),
    ((3, 20, 4), 20, 4, True, 1),
    ((2, 20, 8), 20, 8, True, 64),
    ((30, 8), 30, 8, True, 7),
]
"""Ragged tails, T_q < T_k and T_q > T_k (not causal: some rows would attend no key), causal with
a diagonal that falls inside blocks, block_size 1 and longer than the sequence, and no batch axis."""


@check
def check_flash_attention(candidate: Callable[..., Any]) -> str:
    """Compare with attention over shapes and block sizes; reject a candidate that does not tile."""
    for q_shape, t_k, d_v, is_causal, block_size in _ATTENTION_CASES:
        q = randn(*q_shape)
        k = randn(*q_shape[:-2], t_k, q_shape[-1])
        v = randn(*q_shape[:-2], t_k, d_v)
        _compare(candidate, q, k, v, is_causal, block_size)
    _compare_float32(candidate)
    _expect_tiled(candidate)
    _expect_runs_on_cuda(candidate)
    return "7 shapes (ragged, T_q != T_k, block_size 1 and > T), causal, float32, never T_q×T_k"


def _compare(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int,
) -> None:
    kwargs = {"is_causal": is_causal, "block_size": block_size}
    result = call("flash_attention", candidate, q, k, v, **kwargs)
    exact = (q.double(), k.double(), v.double())
    expected = reference.attention(*exact, is_causal=is_causal)[0].to(q.dtype)  # (..., T_q, d_v)
    if isinstance(result, tuple | list):
        raise CheckFailed(
            f"flash_attention returned a {type(result).__name__} of {len(result)} items: return only the "
            "output tensor (..., T_q, d_v). (The package's flash_attention_forward also returns the "
            "log-sum-exp; the exercise does not.)"
        )
    shape = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    what = f"Your flash_attention({shape}, is_causal={is_causal}, block_size={block_size})"
    t_q, t_k = q.shape[-2], k.shape[-2]
    hints = {
        (*q.shape[:-1], t_k): "That is one weight per key: multiply the probabilities by the values.",
        (*q.shape[:-2], t_q - t_q % block_size, v.shape[-1]): "The last, shorter query block is "
        "missing: loop with range(0, T_q, block_size).",
    }
    out = expect_tensor(result, expected.shape, what, device=q.device, finite=False, hints=hints)
    expect_close(
        out,
        expected,
        what,
        mistakes=_ATTENTION_MISTAKES,
        args=(q, k, v),
        kwargs=kwargs,
        nonfinite_hint="Every query here may attend at least one key. NaN often comes from "
        "exp(-inf - (-inf)) when a row has seen only masked keys so far: use a running maximum that "
        "starts at -inf and replace it by 0 where it is still -inf before subtracting; inf comes from exp "
        "of unshifted scores.",
    )


def _compare_float32(candidate: Callable[..., Any]) -> None:
    """Scores of a few hundred in float32: exp overflows unless the running maximum is subtracted."""
    q = randn(2, 24, 8, dtype=torch.float32, scale=8.0)  # (B, T, d)
    k = randn(2, 24, 8, dtype=torch.float32, scale=8.0)
    v = randn(2, 24, 8, dtype=torch.float32)
    _compare(candidate, q, k, v, True, 8)


def _expect_tiled(candidate: Callable[..., Any]) -> None:
    """Run once under an op recorder: no fused attention, no tensor of T_q·T_k elements or more."""
    t_q = t_k = 192
    block_size = 32
    for is_causal in (False, True):
        q, k, v = (randn(1, 2, t, 8) for t in (t_q, t_k, t_k))  # each (1, 2, T, 8)
        with _OpRecorder() as recorder:
            call("flash_attention", candidate, q, k, v, is_causal=is_causal, block_size=block_size)
        for name, _, outputs in recorder.ops:
            if any(part in name for part in _FUSED):
                raise CheckFailed(
                    f"Your flash_attention calls torch's fused attention ({name}): that computes the "
                    "result, but the exercise is to write the tiling yourself. Loop over blocks of "
                    "queries and of keys with a running maximum, sum and accumulator."
                )
            for numel, dtype in outputs:
                if numel >= t_q * t_k:
                    what = "a causal mask" if dtype == torch.bool else "a tensor"
                    fix = (
                        "Build the mask of each block from the positions of its rows and columns "
                        "(torch.arange(ks, ke) and torch.arange(qs, qe) + T_k - T_q)."
                        if dtype == torch.bool
                        else "Compute one (block, block) tile of scores at a time: "
                        "q[..., qs:qe, :] @ k[..., ks:ke, :].transpose(-1, -2)."
                    )
                    raise CheckFailed(
                        f"Your flash_attention, called with T_q = T_k = {t_q} and block_size={block_size} "
                        f"(is_causal={is_causal}), created {what} of {numel} elements, as many as the "
                        f"whole {t_q}×{t_k} score matrix or more ({name}): the point of tiling is never to "
                        f"hold all the scores of a head at once. {fix}"
                    )


def _expect_runs_on_cuda(candidate: Callable[..., Any]) -> None:
    """Where there is a GPU: inputs there give an output there that agrees with the reference."""
    device = cuda_device()
    if device is None:
        return
    q, k, v = (randn(2, 2, 40, 8, dtype=torch.float32).to(device) for _ in range(3))  # each (B, H, T, d)
    result = call(
        "flash_attention",
        candidate,
        q,
        k,
        v,
        is_causal=True,
        block_size=16,
        hint="Create new tensors (running max, sum, accumulator, masks) on q.device.",
    )
    what = "Your flash_attention on cuda (is_causal=True, block_size=16)"
    out = expect_tensor(result, (2, 2, 40, 8), what, device=device, finite=False)
    expect_close(out, reference.attention(q, k, v, is_causal=True)[0], what)
