"""Checks for notebook 06: online softmax and tiled (FlashAttention-style) attention.

The checks compare numbers with the reference and name known wrong variants, and they also watch
how the candidate computes: every tensor operation it runs passes through a `TorchDispatchMode`,
so a softmax that reduces whole rows at once, or an attention that creates a T_q×T_k tensor or
calls torch's fused attention, is rejected even when its numbers are right.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from attn_course import reference
from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Contract,
    Exercise,
    Returns,
    contract_cases,
    expect_contract_cases,
    expect_inputs_device,
)
from attn_course.checks._harness import (
    CheckFailed,
    Mistake,
    call,
    check,
    cuda_device,
    describe_args,
    diagnose_softmax,
    expect_close,
    expect_tensor,
    is_close,
    narrow_slips,
    randn,
)
from attn_course.checks._simulate import (
    CARRY_MAX_MESSAGE,
    SAFE_MAX_MESSAGE,
    STREAMING_SOFTMAX_MISTAKES,
    tiled_attention,
    tiled_attention_mistakes,
    tiled_lse,
    tiled_lse_mistakes,
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


_SOFTMAX_CASES = [  # (shape, block_size, scale, dtype, shift)
    ((3, 37), 8, 3.0, torch.float64, 0.0),
    ((2, 3, 50), 16, 3.0, torch.float64, 0.0),
    ((20,), 3, 3.0, torch.float64, 0.0),
    ((4, 9), 1, 3.0, torch.float64, 0.0),
    ((2, 7), 12, 3.0, torch.float64, 0.0),
    ((3, 40), 8, 60.0, torch.float32, 0.0),
    ((2, 30), 8, 3.0, torch.float64, -1000.0),
]
"""Ragged and exact tails, one to three leading axes, block_size 1 and longer than the row, and
float32 scores far beyond exp's range (so that the maximum must be subtracted), and rows of large
negative scores (so that the running maximum must start at -inf)."""


_CONTRACT_BLOCK = 8
"""The block_size of every generated case: the sizes of the contracts' axes are around it."""

SOFTMAX_CONTRACT = Contract(
    "online_softmax",
    args=(Arg("x", ("B", "H", "N"), views=VIEW_KINDS, slice_axis=-1),),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,)),
        Axis("N", (17, 7, 8, 9), "block_size is 8: a row below, at or above one block, or two and one"),
    ),
    returns=(Returns("output", ("B", "H", "N")),),
    dtypes=(torch.float32, torch.float64),
    notes=("block_size 8",),
)
"""Exercise 1 of 06 (block_size 8): rows below, at and above one block, two batch axes, float64, and x
a view (transposed: its rows strided; a slice of longer rows; expanded over the batch)."""


def _contract_exercise(
    name: str, candidate: Callable[..., Any], ref: Callable[..., Any], **more: Any
) -> Exercise:
    """`name` as the generated cases call it: the learner's function and the course's, the same on each."""
    return Exercise(name, lambda case: (candidate, ref), **more)


def _expect_contract(contract: Contract, exercise: Exercise) -> int:
    """The contract's generated cases, then one with the inputs on another device; how many ran."""
    ran = expect_contract_cases(contract, exercise, contract_cases(contract))
    return ran + expect_inputs_device(contract, exercise)


@check
def check_online_softmax(candidate: Callable[..., Any]) -> str:
    """Compare with softmax on ragged rows and block sizes; reject a softmax that is not streamed."""
    for shape, block_size, scale, dtype, shift in _SOFTMAX_CASES:
        x = randn(*shape, dtype=dtype, scale=scale) + shift
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
            mistakes=STREAMING_SOFTMAX_MISTAKES,
            args=(x, block_size),
            nonfinite_hint="Subtract the running maximum before exp: exp of a score of a few hundred "
            "overflows to inf, and inf / inf is NaN; for rows of large negative scores, a maximum that "
            "does not follow the row makes every exp underflow to 0, and 0 / 0 is NaN.",
            diagnose=functools.partial(diagnose_softmax, dim=-1),
        )
    for x, kinds, shown in (_far_apart_blocks(), _masked_blocks()):
        _expect_extreme_blocks(candidate, x, kinds, shown)
    _expect_streamed(candidate)
    exercise = _contract_exercise(
        "online_softmax", candidate, reference.online_softmax, after=lambda case: (_CONTRACT_BLOCK,)
    )
    generated = _expect_contract(SOFTMAX_CONTRACT, exercise)
    return (
        "7 shapes and block sizes (ragged, 1, longer than the row), large float32 scores, rows of "
        "large negative scores, blocks far below an earlier one, blocks of -inf, streamed; "
        f"{generated} more from the exercise's contract (rows below, at and above a block, float64, "
        "x a view, x's device)"
    )


_BLOCK = 8
"""The block size of the cases of whole blocks far apart or of -inf: rows of 3 blocks."""


def _far_apart_blocks() -> tuple[torch.Tensor, list[str], str]:
    """Rows with one block 800 above the others: first, last, in the middle (exp(800) overflows)."""
    x = randn(3, 3 * _BLOCK)  # (3, 24) float64
    for row, block in enumerate((0, 2, 1)):
        x[row, block * _BLOCK : (block + 1) * _BLOCK] += 800.0
    shown = f"rows of 3 blocks of {_BLOCK}, one block 800 above the others (block 0, 2, 1)"
    return x, ["far below", "rising", "far below"], shown


def _masked_blocks() -> tuple[torch.Tensor, list[str], str]:
    """Rows of -inf blocks (masked scores): the first, the first two, the middle one, all of them."""
    x = randn(4, 3 * _BLOCK)  # (4, 24) float64
    x[0, :_BLOCK] = x[1, : 2 * _BLOCK] = x[2, _BLOCK : 2 * _BLOCK] = x[3] = -math.inf
    x[0, -3] = x[2, 1] = -math.inf  # and single masked scores among finite ones
    shown = f"rows of 3 blocks of {_BLOCK}, with -inf in the first block, the first two, the middle one, all"
    return x, ["masked first", "masked first", "masked between", "all masked"], shown


def _expect_extreme_blocks(
    candidate: Callable[..., Any], x: torch.Tensor, kinds: list[str], shown: str
) -> None:
    """Compare on whole blocks far apart or of -inf; a row of -inf only may give NaN (as softmax) or 0."""
    what = f"Your online_softmax(x of shape {tuple(x.shape)}, block_size={_BLOCK})"
    result = call("online_softmax", candidate, x, _BLOCK)
    out = expect_tensor(result, x.shape, what, finite=False)
    expected = torch.softmax(x, dim=-1)  # (rows, n): NaN in a row of -inf only
    all_masked = torch.tensor([kind == "all masked" for kind in kinds])[:, None].to(out.device)  # (rows, 1)
    out = torch.where(all_masked & ((out == 0) | out.isnan()), math.nan, out)

    def diagnose(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
        wrong = {kinds[row] for row in range(len(kinds)) if not is_close(actual[row], expected[row])}
        if wrong == {"masked first"}:
            return SAFE_MAX_MESSAGE
        if wrong and wrong <= {"far below", "masked between"}:
            return CARRY_MAX_MESSAGE
        return None

    expect_close(
        out,
        expected,
        what,
        mistakes=STREAMING_SOFTMAX_MISTAKES,
        args=(x, _BLOCK),
        diagnose=diagnose,
        called_as=f"x with {shown}",
    )


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


_SLICE_HINT = (
    "A size mismatch inside the loops usually comes from a tile sliced with the wrong indices: a tile's "
    "scores are the query block against k[..., ks:ke, :], and p @ v takes the same key rows, "
    "v[..., ks:ke, :] (not the query block's rows qs:qe)."
)
_QUERY_BLOCK_SLICE_HINT = (  # one query block: no query rows are sliced, only the keys' and values'
    "A size mismatch inside the loop usually comes from a tile sliced with the wrong indices: a tile's "
    "scores are q_blk against the key rows k[..., ks:ke, :], and p @ v takes the same rows of v, "
    "v[..., ks:ke, :]: rows on axis -2, with every feature kept."
)


def _call_tiled(name: str, candidate: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call`, adding what a size mismatch in a tiled loop usually means."""
    try:
        return call(name, candidate, *args, **kwargs)
    except CheckFailed as failed:
        text = str(failed)
        if "raised RuntimeError" in text and ("size" in text or "shape" in text):
            block = kwargs.get("block_size", args[3] if len(args) > 3 else None)
            lengths = {x.shape[-2] for x in args[:3] if isinstance(x, torch.Tensor)}
            sizes = {int(n) for n in re.findall(r"\((\d+)\)", text.split("\n")[0])}
            tails = {t % block for t in lengths if isinstance(block, int) and block > 0 and t % block}
            if isinstance(block, int) and block in sizes and sizes & tails:
                tail = min(sizes & tails)
                raise CheckFailed(
                    f"{text.split(chr(10))[0]}\nThe last block is shorter: {tail} rows, not block_size = "
                    f"{block}, when the length is not a multiple of block_size. End every block at "
                    "ke = min(ks + block_size, T_k) (qe likewise), and build its slices and its mask "
                    "positions (torch.arange(ks, ke)) from that end."
                ) from None
            hint = _QUERY_BLOCK_SLICE_HINT if name == "flash_attention_query_block" else _SLICE_HINT
            raise CheckFailed(f"{text}\n{hint}") from None
        raise


# ---------------------------------------------------------------------------------------------
# flash_attention_query_block


_QUERY_BLOCK_CASES = [  # (q_blk shape, T_k, d_v, block_size, scale of the inputs, dtype)
    ((2, 3, 16, 8), 64, 8, 16, 1.0, torch.float64),
    ((2, 16, 8), 37, 5, 8, 1.0, torch.float64),
    ((5, 4), 20, 4, 1, 1.0, torch.float64),
    ((1, 2, 8, 8), 20, 8, 64, 1.0, torch.float64),
    ((2, 8, 8), 40, 8, 8, 8.0, torch.float32),
]
"""Key counts that are and are not multiples of block_size, d_v != d, block_size 1 and longer than
T_k, no batch axis, and float32 scores of a few hundred (exp overflows unless m is subtracted)."""


QUERY_BLOCK_CONTRACT = Contract(
    "flash_attention_query_block",
    args=(
        Arg("q_blk", ("B", "H", "B_q", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
        Arg("v", ("B", "H", "T_k", "d_v"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,)),
        Axis("B_q", (5, 1), "a block of one query"),
        Axis("T_k", (17, 7, 8, 9), "block_size is 8: keys below, at or above one block, or two and one"),
        Axis("d", (6,), "a head dim that is not a power of two"),
        Axis("d_v", (5,)),
    ),
    returns=(Returns("out", ("B", "H", "B_q", "d_v")), Returns("lse", ("B", "H", "B_q"))),
    dtypes=(torch.float32, torch.float64),
    notes=("block_size 8",),
)
"""Exercise 2 of 06 (block_size 8): key counts below, at and above a block, two batch axes, float64, and
each of q_blk, k, v alone a view (transposed as a multi-head layer makes it, sliced, expanded)."""


@check
def check_flash_attention_query_block(candidate: Callable[..., Any]) -> str:
    """Compare (out, lse) of one query block with attention; reject a candidate that does not stream."""
    for q_shape, t_k, d_v, block_size, scale, dtype in _QUERY_BLOCK_CASES:
        q = randn(*q_shape, dtype=dtype, scale=scale)  # (..., Bq, d)
        k = randn(*q_shape[:-2], t_k, q_shape[-1], dtype=dtype, scale=scale)  # (..., T_k, d)
        v = randn(*q_shape[:-2], t_k, d_v, dtype=dtype)  # (..., T_k, d_v)
        _compare_query_block(candidate, q, k, v, block_size)
    q, k, v = _far_below_zero_scores()
    _compare_query_block(candidate, q, k, v, 8, nonfinite_hint=_BELOW_ZERO_HINT, nan_means_unknown=True)
    _expect_query_block_streamed(candidate)
    exercise = _contract_exercise(
        "flash_attention_query_block",
        candidate,
        reference.flash_attention_query_block,
        after=lambda case: (_CONTRACT_BLOCK,),
        unpack=_pair,
    )
    generated = _expect_contract(QUERY_BLOCK_CONTRACT, exercise)
    return (
        "6 query blocks (ragged key tail, block_size 1 and > T_k, float32, scores far below 0), "
        f"out and lse, streamed; {generated} more from the exercise's contract (keys below, at and above "
        "a block, one query, float64, each input alone a view, the inputs' device)"
    )


def _pair(result: Any, expected: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
    """(out, lse) as returned (the hand-written cases have required a pair already)."""
    return tuple(result) if isinstance(result, tuple | list) else (result,)


_BELOW_ZERO_HINT = (
    "Every score of these rows is about -880 (all keys point away from the queries): a running "
    "maximum that starts at 0 instead of -inf stays 0, exp(s - 0) underflows to 0 for every key, and "
    "acc / denom is 0 / 0. Start m at float('-inf') (torch.full(..., float('-inf'))), so that the first "
    "block's maximum replaces it."
)


def _far_below_zero_scores() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 q, k, v whose every score is near -880, below exp's range from 0 (exp(-746) is 0)."""
    q, k = randn(2, 8, 8), randn(2, 20, 8)  # (2, B_q, d), (2, T_k, d)
    q[..., 0], k[..., 0] = 50.0, -50.0  # one channel adds -2500 / √8 to every score
    return q, k, randn(2, 20, 8)  # v: (2, T_k, d_v)


def _compare_query_block(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int,
    nonfinite_hint: str = "inf or NaN comes from exp of scores that were not shifted by the running "
    "maximum: p = exp(s - m_new) with m_new = max(m, the block's row maximum).",
    nan_means_unknown: bool = False,
) -> None:
    result = _call_tiled("flash_attention_query_block", candidate, q, k, v, block_size)
    shape = f"q_blk {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    what = f"Your flash_attention_query_block({shape}, block_size={block_size})"
    if isinstance(result, torch.Tensor):
        raise CheckFailed(
            f"{what} returned one tensor: return the pair (out, lse), out = acc / denom (..., B_q, d_v) "
            "and lse = m + log(denom) (..., B_q), from the running state after the last key block."
        )
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise CheckFailed(
            f"{what} should return the pair (out, lse), but returned {_describe_value(result)}."
        )
    out, lse = result
    b_q, t_k = q.shape[-2], k.shape[-2]
    hints = {
        (*q.shape[:-1], t_k): "That is one weight per key: multiply the probabilities by the values.",
        (*q.shape[:-1], 1): "That is the running sum or maximum: return acc / denom, one row of d_v "
        "numbers per query.",
    }
    expected = reference.attention(q.double(), k.double(), v.double())[0].to(q.dtype)  # (..., Bq, d_v)
    out = expect_tensor(
        out, expected.shape, f"{what}[0] (the output)", device=q.device, finite=False, hints=hints
    )
    simulate = functools.partial(tiled_attention, q, k, v, causal=False, block_m=b_q, block_n=block_size)
    mistakes = [
        Mistake(_SCALE_MESSAGE, functools.partial(simulate, scale=1.0)),
        Mistake(
            "scales the scores by 1/√d_v, the width of the values: the scale is 1/√d with d = "
            "q_blk.shape[-1], the width of the queries and keys.",
            functools.partial(simulate, scale=v.shape[-1] ** -0.5),
        ),
        Mistake(
            "applies the 1/√d scale twice (on q and on the scores, 1/d in all): scale once, "
            "s = q_blk @ k_blkᵀ / √d.",
            functools.partial(simulate, scale=1.0 / q.shape[-1]),
        ),
        Mistake(
            "multiplies every key block's p by the same first rows of v: p @ v takes the key block's own "
            "rows, v[..., ks:ks + block_size, :] (the rows its scores came from), not the query block's "
            "rows or v's first rows.",
            functools.partial(_values_from_the_start, q, k, v, block_size),
        ),
        *tiled_attention_mistakes(simulate, False, python=True),
    ]
    expect_close(
        out,
        expected,
        f"{what}[0] (the output)",
        mistakes=mistakes,
        called_as=describe_args((q, k, v), {"block_size": block_size}),
        nonfinite_hint=nonfinite_hint,
        nan_means_unknown=nan_means_unknown,
    )
    lse_hints = {
        (*q.shape[:-1], 1): "Drop the last axis: lse has one number per query row, shape (..., B_q) "
        "(squeeze(-1) of the (..., B_q, 1) running statistics).",
    }
    lse = expect_tensor(
        lse, q.shape[:-1], f"{what}[1] (the lse)", device=q.device, finite=False, hints=lse_hints
    )
    exact = tiled_lse(q.double(), k.double(), causal=False, block_m=b_q, block_n=block_size).to(q.dtype)
    simulate_lse = functools.partial(tiled_lse, q, k, causal=False, block_m=b_q, block_n=block_size)
    expect_close(
        lse,
        exact.to(lse.dtype) if lse.is_floating_point() else exact,
        f"{what}[1], the log-sum-exp,",
        mistakes=tiled_lse_mistakes(simulate_lse),
        called_as="",
        nonfinite_hint="Every query attends every key here, so its lse m + log(denom) is finite.",
    )


def _values_from_the_start(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Attention whose every key block multiplies v[..., :width] instead of v[..., ks:ke]."""
    weights = reference.attention(q, k, v)[1]  # (..., B_q, T_k)
    out = torch.zeros_like(q[..., :1]) * v[..., :1, :]  # (..., B_q, d_v)
    for ks in range(0, k.shape[-2], block_size):
        ke = min(ks + block_size, k.shape[-2])
        out = out + weights[..., ks:ke] @ v[..., : ke - ks, :]  # (..., B_q, d_v)
    return out


def _expect_query_block_streamed(candidate: Callable[..., Any]) -> None:
    """Run once under an op recorder: no fused attention, no tensor of B_q·T_k scores or more."""
    b_q, t_k, block_size = 32, 192, 32
    q, k, v = (randn(1, 2, t, 8) for t in (b_q, t_k, t_k))  # (1, 2, 32, 8), (1, 2, 192, 8) twice
    with _OpRecorder() as recorder:
        call("flash_attention_query_block", candidate, q, k, v, block_size)
    for name, _, outputs in recorder.ops:
        if any(part in name for part in _FUSED):
            raise CheckFailed(
                f"Your flash_attention_query_block calls torch's fused attention ({name}): the exercise "
                "is to stream the keys yourself, one block k[..., ks:ks + block_size, :] per step."
            )
        for numel, _dtype in outputs:
            if numel >= 2 * b_q * t_k:  # the batch (1, 2) holds two heads
                raise CheckFailed(
                    f"Your flash_attention_query_block, called with B_q = {b_q} queries, T_k = {t_k} keys "
                    f"and block_size={block_size}, created a tensor of {numel} elements ({name}), as many "
                    f"as the scores of the block against all {t_k} keys or more: compute one (B_q, "
                    "block_size) tile of scores per step, q_blk @ k[..., ks:ks + block_size, :]"
                    ".transpose(-1, -2), and fold it into the running maximum, sum and accumulator."
                )


# ---------------------------------------------------------------------------------------------
# flash_attention


_SCALE_MESSAGE = (
    "forgets the 1/√d scale: multiply the scores q_block @ k_blockᵀ by 1 / math.sqrt(d), d = "
    "q.shape[-1] (the width of the queries and keys, not of the values)."
)


_ATTENTION_CASES = [  # (q shape, T_k, d_v, is_causal, block_size)
    ((2, 3, 37, 8), 37, 5, False, 8),
    ((2, 29, 8), 45, 6, False, 16),
    ((1, 2, 37, 8), 37, 8, True, 8),
    ((2, 2, 19, 8), 45, 4, True, 8),
    ((2, 21, 8), 45, 4, True, 8),
    ((3, 20, 4), 20, 4, True, 1),
    ((2, 20, 8), 20, 8, True, 64),
    ((30, 8), 30, 8, True, 7),
    ((2, 30, 8), 12, 4, True, 8),
]
"""Ragged tails, T_q < T_k and T_q > T_k (causal last: its first 18 rows attend no key, and give 0 as
attention and SDPA do, with an lse of -inf), causal with
a diagonal that falls inside blocks, a causal offset T_k - T_q that is not a multiple of the block
size (26 = 3·8 + 2) before one that is (24: there a top-left mask in the diagonal tiles looks like a
loop that stops a block early, so the ragged offset must come first to name it), block_size 1 and
longer than the sequence, and no batch axis."""


_ATTENTION_CASES += [  # just above one and two blocks of 8: T_q < T_k, T_q > T_k (no key), T_q = T_k
    ((2, 9, 6), 17, 5, True, 8),
    ((2, 18, 6), 17, 5, True, 8),
    ((2, 9, 6), 9, 5, True, 8),
]


ATTENTION_CONTRACT = Contract(
    "flash_attention",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS),
        Arg("v", ("B", "H", "T_k", "d_v"), views=VIEW_KINDS),
    ),
    axes=(
        Axis("B", (2,)),
        Axis("H", (3,)),
        Axis("T_q", (9, 7, 8, 18), "block_size is 8; with T_q > T_k (18 > 17) the first rows see no key"),
        Axis("T_k", (17, 8, 9), "block_size is 8; with T_k < T_q (8 < 9) the first rows see no key"),
        Axis("d", (6,), "a head dim that is not a power of two"),
        Axis("d_v", (5,)),
    ),
    returns=(Returns("out", ("B", "H", "T_q", "d_v")), Returns("lse", ("B", "H", "T_q"))),
    dtypes=(torch.float32, torch.float64),
    notes=(
        "is_causal=True, block_size 8, return_lse=True: bottom-right aligned",
        "a row that sees no key gets output 0 and lse -inf",
    ),
)
"""Exercise 3 of 06 (causal, block_size 8, return_lse=True in every generated case): ragged query and key
blocks, T_q > T_k with rows that see no key, two batch axes, float64, each of q, k, v alone a view, and
every tensor on the inputs' device. Holding T_q × T_k is refused by `_expect_tiled`, at T = 192."""


@check
def check_flash_attention(candidate: Callable[..., Any]) -> str:
    """Compare with attention over shapes and block sizes; reject a candidate that does not tile.

    Then call again with return_lse=True and compare the log-sum-exp with torch.logsumexp.
    """
    outputs = []
    inputs = []
    for q_shape, t_k, d_v, is_causal, block_size in _ATTENTION_CASES:
        q = randn(*q_shape)
        k = randn(*q_shape[:-2], t_k, q_shape[-1])
        v = randn(*q_shape[:-2], t_k, d_v)
        inputs.append((q, k, v, is_causal, block_size))
    for q, k, v, is_causal, block_size in inputs:
        try:
            outputs.append(
                (q, k, v, is_causal, block_size, _compare(candidate, q, k, v, is_causal, block_size))
            )
        except (
            CheckFailed
        ) as failure:  # slips that give the same result here: keep those every case agrees with
            raise narrow_slips(failure, [_case(candidate, *case) for case in inputs]) from None
    outputs.append(_compare_float32(candidate))
    _expect_tiled(candidate)
    _expect_runs_on_cuda(candidate)
    for case in outputs:  # the output is right: now the log-sum-exp that return_lse=True gives with it
        _compare_lse(candidate, *case)
    exercise = _contract_exercise(
        "flash_attention",
        candidate,
        reference.flash_attention,
        extra=lambda case, tensors: {"is_causal": True, "block_size": _CONTRACT_BLOCK, "return_lse": True},
        unpack=_pair,
    )
    generated = _expect_contract(ATTENTION_CONTRACT, exercise)
    return (
        f"{len(_ATTENTION_CASES)} shapes (ragged, T_q != T_k, block_size 1 and > T, rows with no key), "
        "causal, float32, never T_q×T_k; with return_lse=True the log-sum-exp of every row; "
        f"{generated} more from the exercise's contract (query and key blocks below, at and above one "
        "block, two batch axes, float64, each of q, k, v alone a view, the inputs' device)"
        + _causal_work(candidate)
    )


def _compare(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int,
) -> torch.Tensor:
    kwargs: dict[str, Any] = {"is_causal": is_causal, "block_size": block_size}
    result = _call_tiled("flash_attention", candidate, q, k, v, **kwargs)
    exact = (q.double(), k.double(), v.double())
    expected = reference.attention(*exact, is_causal=is_causal)[0].to(q.dtype)  # (..., T_q, d_v)
    if isinstance(result, tuple | list):
        raise CheckFailed(
            f"flash_attention returned a {type(result).__name__} of {len(result)} items with "
            "return_lse=False (the default): return only the output tensor (..., T_q, d_v) then, and "
            "(out, lse) only when return_lse=True."
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
        mistakes=_mistakes(q, k, v, is_causal, block_size),
        called_as=describe_args((q, k, v), kwargs),
        diagnose=functools.partial(_diagnose_blocks, block_size=block_size, is_causal=is_causal),
        nan_means_unknown=is_causal and t_q > t_k,  # a slip that leaves the rows with no key NaN is not named
        nonfinite_hint=_NO_KEY_HINT
        if is_causal and t_q > t_k
        else "Every query here may attend at least one key. NaN often comes from "
        "exp(-inf - (-inf)) when a row has seen only masked keys so far: use a running maximum that "
        "starts at -inf and replace it by 0 where it is still -inf before subtracting; inf comes from exp "
        "of unshifted scores.",
    )
    return out


def _case(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int,
) -> tuple[list[Mistake], torch.Tensor, Callable[[], Any]]:
    """One case of check_flash_attention as `narrow_slips` reads it: its slips, the answer, the learner's."""
    expected = reference.attention(q.double(), k.double(), v.double(), is_causal=is_causal)[0].to(q.dtype)
    return (
        _mistakes(q, k, v, is_causal, block_size),
        expected,
        lambda: candidate(q.clone(), k.clone(), v.clone(), is_causal=is_causal, block_size=block_size),
    )


def _mistakes(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool, block_size: int
) -> list[Mistake]:
    """The named slips of flash_attention on these inputs, each bound to them."""
    simulate = functools.partial(
        tiled_attention, q, k, v, causal=is_causal, block_m=block_size, block_n=block_size
    )
    return [
        Mistake(_SCALE_MESSAGE, functools.partial(simulate, scale=1.0)),
        Mistake(
            "scales the scores by 1/√d_v, the width of the values: the scale is 1/√d with d = "
            "q.shape[-1], the width of the queries and keys.",
            functools.partial(simulate, scale=v.shape[-1] ** -0.5),
        ),
        *([_top_left_in_diagonal_tiles(q, k, v, block_size)] if is_causal else []),
        *tiled_attention_mistakes(simulate, is_causal, python=True),
    ]


_NO_KEY_ROWS = (
    "With is_causal and T_q > T_k the first T_q − T_k query rows may attend no key: attention (and "
    "torch's SDPA) gives 0 there, so such a row ends with l = 0 and acc = 0, and acc / l is 0 / 0."
)
_NO_KEY_HINT = {
    "div": f"{_NO_KEY_ROWS} Divide by 1 where l is 0 (torch.where(denom == 0, 1.0, denom)).",
    "sub": "With is_causal and T_q > T_k the first T_q − T_k query rows may attend no key, and a row's "
    "running maximum stays -inf until it meets one: subtract a safe 0 where the running maximum is "
    "still -inf, never -inf itself.",
    "": f"{_NO_KEY_ROWS} Divide by 1 where l is 0 (torch.where(denom == 0, 1.0, denom)), and subtract "
    "a safe 0 where the running maximum is still -inf, never -inf itself.",
}
"""Why a row with no key is NaN, by where the first NaN is made (0/0, or -inf - (-inf))."""


def _compare_lse(
    candidate: Callable[..., Any],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    block_size: int,
    out: torch.Tensor,
) -> None:
    """Call again with return_lse=True: the same output, and the log-sum-exp of each row's scores."""
    kwargs: dict[str, Any] = {"is_causal": is_causal, "block_size": block_size, "return_lse": True}
    result = _call_tiled("flash_attention", candidate, q, k, v, **kwargs)
    shape = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    what = f"Your flash_attention({shape}, is_causal={is_causal}, block_size={block_size}, return_lse=True)"
    if isinstance(result, torch.Tensor):
        raise CheckFailed(
            f"{what} returned one tensor: it ignores return_lse=True. Then return the pair (out, lse), "
            "lse (..., T_q) the log-sum-exp of each query row's scaled scores, m + log(l) from the "
            "final running maximum m and running sum l of the row."
        )
    if not isinstance(result, tuple | list) or len(result) != 2:
        returned = _describe_value(result)
        raise CheckFailed(f"{what} should return the pair (out, lse), but returned {returned}.")
    out_again, lse = result
    expect_tensor(out_again, out.shape, f"{what}[0] (the output)", device=q.device, finite=False)
    expect_close(
        out_again,
        out,
        f"{what}[0] (the output)",
        called_as="",
    )
    t_q = q.shape[-2]
    hints = {
        (*q.shape[:-1], 1): "Drop the last axis: lse has one number per query row, shape (..., T_q) "
        "(squeeze(-1) of a (..., T_q, 1) running statistic).",
        (*q.shape[:-2], t_q - t_q % block_size): "The last, shorter query block's rows are missing.",
    }
    lse = expect_tensor(lse, q.shape[:-1], f"{what}[1] (the lse)", device=q.device, finite=False, hints=hints)
    exact = (q.double(), k.double())
    expected = tiled_lse(*exact, causal=is_causal, block_m=block_size, block_n=block_size).to(q.dtype)
    simulate = functools.partial(tiled_lse, q, k, causal=is_causal, block_m=block_size, block_n=block_size)
    expect_close(
        lse,
        expected.to(lse.dtype) if lse.is_floating_point() else expected,
        f"{what}[1], the log-sum-exp,",
        mistakes=tiled_lse_mistakes(simulate),
        called_as="",
        diagnose=functools.partial(_diagnose_lse_rows, block_size=block_size),
        nonfinite_hint="A row that attends no key has the lse -inf (log 0); any other row's is finite."
        if is_causal and q.shape[-2] > k.shape[-2]
        else "Every query here may attend at least one key, so its lse m + log(l) is finite.",
    )


def _top_left_in_diagonal_tiles(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int
) -> Mistake:
    """A right loop bound and tile test with rows = torch.arange(qs, qe) inside: the offset forgotten."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    offset = t_k - t_q
    rows = torch.arange(t_q)[:, None]  # (T_q, 1)
    cols = torch.arange(t_k)[None, :]  # (1, T_k)
    first_row = rows - rows % block_size  # (T_q, 1): qs of each row's query block
    tile_end = torch.clamp(cols - cols % block_size + block_size, max=t_k) - 1  # (1, T_k): ke - 1
    crosses = tile_end > first_row + offset  # (T_q, T_k): the tile crosses the diagonal
    last_row = torch.clamp(first_row + block_size, max=t_q)  # (T_q, 1): qe
    looped = cols < torch.clamp(last_row + offset, max=t_k)  # (T_q, T_k): before the loop's bound
    visible = looped & (~crosses | (cols <= rows))  # (T_q, T_k)
    message = (
        "aligns the causal mask top-left inside the tiles that cross the diagonal: rows = "
        "torch.arange(qs, qe) are the queries' indices, but query i sits at key position i + T_k - T_q "
        "(bottom-right alignment, as in attention and causal_mask), so compare the keys with "
        "torch.arange(qs, qe) + (T_k - T_q), as the key loop's bound must."
    )
    return Mistake(message, lambda: reference.attention(q, k, v, mask=visible)[0])


def _describe_value(value: Any) -> str:
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    return type(value).__name__


def _diagnose_lse_rows(actual: torch.Tensor, expected: torch.Tensor, block_size: int) -> str | None:
    """Name an lse that is right in some query blocks only."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    bad = ~torch.isclose(a, e, rtol=1e-4, atol=2e-5)  # (..., T_q)
    wrong = bad.flatten(0, -2).any(dim=0) if bad.dim() > 1 else bad  # (T_q,)
    if wrong.all() or not wrong.any():
        return None
    rows = wrong.nonzero().flatten().tolist()
    no_key = torch.isneginf(e).flatten(0, -2).all(dim=0) if e.dim() > 1 else torch.isneginf(e)  # (T_q,)
    if no_key.any() and not bool((wrong & ~no_key).any()):  # wrong only where a row sees no key
        first, last = rows[0], rows[-1]
        got = a.flatten(0, -2)[:, rows[0]] if a.dim() > 1 else a[rows[:1]]
        every = bool((wrong == no_key).all())
        some = "" if every else f", {len(rows)} of the {int(no_key.sum())} that see none"
        return (
            f"is wrong only {'for the' if every else 'in'} rows that see no key ({_rows(first, last)}{some}: "
            "with is_causal and "
            f"T_q > T_k they come before every key), where it gives {float(got[0]):g} instead of -inf: "
            "a row that attends no key has the log-sum-exp of an empty sum, log 0 = -inf. Its m stays "
            "-inf; anything that stands in for that m or for l (a 0 to subtract safely, a 1 to divide "
            "by) must not reach the lse."
        )
    return (
        f"is right for some query rows but wrong for others (the first wrong row is {rows[0]}, "
        f"{len(rows)} of {wrong.numel()} wrong{_lse_pattern(wrong, block_size)}). Check where and when "
        "each query block's lse is written: at its absolute rows, lse[..., qs:qe], after its key loop, "
        "from the block's final m and l."
    )


def _lse_pattern(wrong: torch.Tensor, block_size: int) -> str:
    """How the wrong rows of an lse lie against the query blocks, in words (", ..."), or ""."""
    t_q = wrong.numel()
    starts = range(0, t_q, block_size)
    blocks = [wrong[s : s + block_size] for s in starts]  # each (≤ block_size,)
    if all(bool(b.all()) or not b.any() for b in blocks):
        bad = [str(s) for s, b in zip(starts, blocks, strict=True) if b.any()]
        which = f"the block starting at row {bad[0]}" if len(bad) == 1 else f"those at rows {', '.join(bad)}"
        return f": whole query blocks of {block_size} rows, {which}"
    if all(bool(b.any()) for b in blocks):
        return ": some rows in every query block"
    return ""


def _diagnose_blocks(
    actual: torch.Tensor, expected: torch.Tensor, block_size: int, is_causal: bool
) -> str | None:
    """Name an error that follows the query blocks: right in the first block only, or in the last only."""
    t_q = actual.shape[-2]
    if t_q <= block_size or not torch.isfinite(actual).all():
        return None
    wrong = _wrong_rows(actual, expected)  # (T_q,)
    first, rest = wrong[:block_size], wrong[block_size:]
    last = (t_q - 1) // block_size * block_size
    suffix = int(wrong.int().argmax()) if wrong.any() else t_q  # the first wrong row
    if 0 < suffix and bool(wrong[suffix:].all()) and bool((actual[..., suffix:, :] == 0).all()):
        return (
            f"never writes {_rows(suffix, t_q - 1)} (they are 0): the query loop stops before T_q = "
            f"{t_q}; loop over range(0, T_q, block_size) and write out[..., qs:qe, :] with "
            "qe = min(qs + block_size, T_q)."
        )
    if (
        not first.any()
        and rest.any()
        and not (wrong[last:].all() and not wrong[:last].any() and t_q % block_size)
    ):
        where = "the causal mask" if is_causal else "anything that depends on the row"
        return (
            f"is right for the first query block (rows 0–{block_size - 1}) but wrong in later blocks "
            f"(the first wrong row is {int(rest.nonzero()[0]) + block_size}): {where} must use the "
            "block's absolute rows qs … qe - 1 (torch.arange(qs, qe), plus T_k - T_q for the causal "
            "position), not its rows counted from 0 within the block."
        )
    if wrong[last:].all() and not wrong[:last].any() and t_q % block_size:
        return (
            f"is wrong only in the last, shorter query block (rows {last}–{t_q - 1}): when T_q is not "
            "a multiple of block_size that block has T_q - qs rows; slice q[..., qs:qs + block_size, :] "
            "and write out[..., qs:qe, :] with qe = min(qs + block_size, T_q)."
        )
    return None


def _rows(first: int, last: int) -> str:
    return f"row {first}" if first == last else f"rows {first}–{last}"


def _wrong_rows(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    bad = ~torch.isclose(a, e, rtol=1e-4, atol=2e-5)  # (..., T_q, d_v)
    return bad.flatten(0, -3).any(dim=0).any(dim=-1) if bad.dim() > 2 else bad.any(dim=-1)


def _compare_float32(candidate: Callable[..., Any]) -> tuple[Any, ...]:
    """Scores of a few hundred in float32: exp overflows unless the running maximum is subtracted."""
    q = randn(2, 24, 8, dtype=torch.float32, scale=8.0)  # (B, T, d)
    k = randn(2, 24, 8, dtype=torch.float32, scale=8.0)
    v = randn(2, 24, 8, dtype=torch.float32)
    return q, k, v, True, 8, _compare(candidate, q, k, v, True, 8)


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


def _causal_work(candidate: Callable[..., Any]) -> str:
    """How much of the causal pass's matmul work the candidate skips: the pass line's last words.

    A right answer is never refused for computing the tiles above the diagonal (only to mask them),
    but the pass line says so, with the share of the work it could skip (question 06.4). The FLOPs
    are counted by torch's FlopCounterMode (matmuls only); without matmuls nothing is said.
    """
    t, block_size = 192, 32
    n = t // block_size
    q, k, v = (randn(1, 2, t, 8) for _ in range(3))  # each (1, 2, 192, 8)
    flops = {}
    for is_causal in (False, True):
        with FlopCounterMode(display=False) as counter:
            call("flash_attention", candidate, q, k, v, is_causal=is_causal, block_size=block_size)
        flops[is_causal] = counter.get_total_flops()
    if not flops[False]:
        return ""
    share = flops[True] / flops[False]
    if share > 0.8:
        needed = n * (n + 1) // 2  # query block r visits key blocks 0 … r
        return (
            f"; but is_causal=True does {share:.0%} of the matmul work of is_causal=False: the tiles "
            f"above the diagonal are computed, then masked ({needed} of {n * n} tiles needed, question 06.4)"
        )
    return f"; is_causal=True does {share:.0%} of the matmul work of is_causal=False (tiles skipped)"


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
