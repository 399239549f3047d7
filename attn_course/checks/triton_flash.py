"""The checks of notebook 08's FlashAttention kernel and of its first step, one tile of scores.

`triton_scores` (one BLOCK_M × BLOCK_N tile of QKᵀ/√d per program) is compared with q kᵀ/√d in
float64 on ragged, strided and T_q ≠ T_k inputs; from the trace the check names loads and stores
past the ragged ends and tiles no program wrote. `triton_flash_attention` is compared with attention.

For `triton_flash_attention` it compares with the float64 reference on ragged, causal, T_q < T_k
and strided inputs, and names
mistakes by simulating them block by block (`_blockwise`) with the learner's block sizes, read off
the trace where the kernel is interpreted, else searched. From the trace it also names keys a
program never reads (a causal loop that stops early, a ragged block left out) and key blocks a
causal program loads though they lie wholly above its diagonal.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attn_course.checks._contracts import (
    VIEW_KINDS,
    Arg,
    Axis,
    Case,
    Contract,
    Returns,
    contiguous_strides,
    make_arg,
    read_as,
    size_cases,
    view_cases,
    view_words,
)
from attn_course.checks._harness import CheckFailed, Mistake, check, expect_close, expect_tensor
from attn_course.checks._simulate import (
    tiled_attention,
    tiled_attention_mistakes,
    tiled_lse,
    tiled_lse_mistakes,
)
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
# triton_scores: one tile of QKᵀ/√d per program, the first step of the FlashAttention kernel


@dataclass(frozen=True)
class _ScoresCase:
    """One input shape of the scores check."""

    b: int
    h: int
    t_q: int
    t_k: int
    d: int
    strided: bool = False
    """q and k as transposes of (B, T, H, d) tensors: rows H·d apart, heads d apart."""

    def describe(self) -> str:
        """The call in words, for messages."""
        layout = ", q and k (B, T, H, d).transpose(1, 2) views" if self.strided else ""
        sizes = f"B={self.b}, H={self.h}, T_q={self.t_q}, T_k={self.t_k}, d={self.d}"
        return f"triton_scores(q, k) with {sizes}{layout}"


_SCORES_CASES = (
    _ScoresCase(1, 2, 32, 64, 16),
    _ScoresCase(2, 3, 37, 45, 16),
    _ScoresCase(1, 1, 5, 7, 32),
    _ScoresCase(2, 2, 20, 40, 32, strided=True),
)

_SCORES_BOUNDS_HINT = (
    "When T_q or T_k is not a multiple of the block size the last tiles run past the end: load q with "
    "mask=offs_m[:, None] < T_q and k with mask=offs_n[:, None] < T_k (other=0.0), and store with both, "
    "mask=(offs_m[:, None] < T_q) & (offs_n[None, :] < T_k)."
)


def _scores_bounds_hint(trace: KernelTrace | None) -> str:
    """How to stay in bounds: masks for a tile at a ragged end, else the tile's base pointer."""
    if trace is None or not trace.out_of_bounds:
        return _SCORES_BOUNDS_HINT

    def at_a_ragged_end(access: Any) -> bool:
        grid = trace.launches[access.launch].grid
        return access.program[0] == grid[0] - 1 or access.program[1] == grid[1] - 1

    inner = [access for access in trace.out_of_bounds if not at_a_ragged_end(access)]
    if not inner:  # (programs may run in any order: look at all, not the first)
        return _SCORES_BOUNDS_HINT
    bad = inner[0]
    return (
        f"Program {bad.program} holds neither the last query tile nor the last key tile, so no mask is "
        "missing: its base pointer is off. Program axis 2 is z = b·H + h, so b = pid_bh // H and "
        "h = pid_bh % H, and a tile starts at q_ptr + b * stride_qb + h * stride_qh (k's with k's strides)."
    )


_TRANSPOSED_TILES = (
    "stores each tile transposed: tl.dot(k, tl.trans(q)) is the (BLOCK_N, BLOCK_M) tile of k·qᵀ, one "
    "key per row. The scores have one query per row: s = tl.dot(q, tl.trans(k)), (BLOCK_M, d) times "
    "(d, BLOCK_N), stored at rows offs_m and columns offs_n."
)

_DOT_HINT = (
    "tl.dot(a, b) multiplies a (M, K) block by a (K, N) block. The key tile you load is (BLOCK_N, d), "
    "one key per row, so the scores are tl.dot(q, tl.trans(k)): (BLOCK_M, d) times (d, BLOCK_N)."
)


def _scores_inputs(case: _ScoresCase, mode: Mode) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = torch.float16 if mode.gpu else torch.float32

    def make(t: int) -> torch.Tensor:
        if case.strided:
            return guarded(case.b, t, case.h, case.d, device=mode.device, dtype=dtype).transpose(1, 2)
        return guarded(case.b, case.h, t, case.d, device=mode.device, dtype=dtype)

    return make(case.t_q), make(case.t_k)


def _scores_of(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """q kᵀ · scale in float64 (scale 1/√d by default): (B, H, T_q, T_k)."""
    q, k = (x.detach().to("cpu", torch.float64) for x in (q, k))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return q @ k.transpose(-1, -2) * scale  # (B, H, T_q, T_k)


def _with_strides(x: torch.Tensor, strides: Sequence[int]) -> torch.Tensor:
    """What a kernel reads from x's memory when it walks x's shape with these strides."""
    return torch.as_strided(x, x.shape, tuple(strides))


def _scores_mistakes(q: torch.Tensor, k: torch.Tensor, case: _ScoresCase) -> list[Mistake]:
    d = case.d
    found = [
        Mistake(
            "does not scale the scores: multiply q·kᵀ by sm_scale = 1 / math.sqrt(d), attention's 1/√d.",
            functools.partial(_scores_of, q, k, 1.0),
        ),
        Mistake(
            "scales the scores by 1/d: the scale is 1/√d (math.sqrt(d), not d).",
            functools.partial(_scores_of, q, k, 1 / d),
        ),
        Mistake(
            "multiplies the scores by √d: the scale is 1/√d.",
            functools.partial(_scores_of, q, k, d**0.5),
        ),
    ]
    if case.strided:
        contiguous_q = torch.empty(q.shape).stride()
        contiguous_k = torch.empty(k.shape).stride()
        row_step = (
            "reads q and k rows d elements apart (offs[:, None] * HEAD_DIM), which is right for a "
            "contiguous (B, H, T, d) tensor only: in these views rows lie H·d apart. Multiply the row "
            "offsets by the row stride, offs_m[:, None] * stride_qm and offs_n[:, None] * stride_kn."
        )

        def rows_d_apart(x: torch.Tensor) -> torch.Tensor:
            return _with_strides(x, (*x.stride()[:2], d, 1))

        found += [
            Mistake(
                "is wrong for inputs that are views: q.transpose(1, 2) of a (B, T, H, d) tensor keeps its "
                "data in (B, T, H, d) order, so row t of head h of batch b is not at ((b·H + h)·T + t)·d. "
                "Pass q.stride(0), q.stride(1), q.stride(2) and k's three strides to the kernel and use "
                "them, or call .contiguous() first.",
                lambda: _scores_of(_with_strides(q, contiguous_q), _with_strides(k, contiguous_k)),
            ),
            *(
                Mistake(
                    f"reads {name} as if it were contiguous: {name}.transpose(1, 2) of a (B, T, H, d) tensor "
                    "keeps its data in (B, T, H, d) order, and your kernel steps through it with the strides "
                    f"of a (B, H, T, d) one. Pass {name}.stride(0), {name}.stride(1), {name}.stride(2) to "
                    "the kernel, as you do for the other input.",
                    reading,
                )
                for name, reading in (
                    ("q", lambda: _scores_of(_with_strides(q, contiguous_q), k)),
                    ("k", lambda: _scores_of(q, _with_strides(k, contiguous_k))),
                )
            ),
            Mistake(row_step, lambda: _scores_of(rows_d_apart(q), rows_d_apart(k))),
            Mistake(row_step, lambda: _scores_of(rows_d_apart(q), k)),
            Mistake(row_step, lambda: _scores_of(q, rows_d_apart(k))),
        ]
    elif case.t_q != case.t_k and case.b * case.h > 1:
        found.append(
            Mistake(
                "reads k with q's strides: with T_k != T_q the heads of k lie T_k·d apart in "
                "memory, not T_q·d, so every batch·head after the first reads the wrong keys. Pass "
                "k.stride(0), k.stride(1), k.stride(2) for k.",
                lambda: _scores_of(q, _with_strides(k, q.stride())),
            )
        )
    return found


def _tiles_transposed(q: torch.Tensor, k: torch.Tensor, block: int) -> torch.Tensor:
    """What square tiles of tl.dot(k, tl.trans(q)) give when stored as tiles of q·kᵀ/√d."""
    t_q, t_k = q.shape[-2], k.shape[-2]
    rows, cols = -(-t_q // block) * block, -(-t_k // block) * block  # padded to whole tiles
    q = torch.nn.functional.pad(q.detach().to("cpu", torch.float64), (0, 0, 0, rows - t_q))
    k = torch.nn.functional.pad(k.detach().to("cpu", torch.float64), (0, 0, 0, cols - t_k))
    s = _scores_of(q, k)  # (B, H, rows, cols); zero where a masked load gave zeros
    tiles = s.unflatten(-1, (cols // block, block)).unflatten(-3, (rows // block, block))  # (B,H,R,b,C,b)
    return tiles.transpose(-3, -1).flatten(-2).flatten(-3, -2)[..., :t_q, :t_k]  # (B, H, T_q, T_k)


def _scores_coverage_hint(trace: KernelTrace | None, out: torch.Tensor) -> str:
    """Why some scores were never stored: tile offsets without the block size, or too small a grid."""
    grid = (
        "The grid needs (triton.cdiv(T_q, BLOCK_M), triton.cdiv(T_k, BLOCK_N), B * H) programs, and "
        "each stores its whole tile (masked at the ragged ends)."
    )
    if trace is None:
        return grid
    t_q, t_k = out.shape[-2:]
    for access in trace.accesses_to(out, store=True):
        if not access.elements.size:
            continue
        pid_m, pid_n, _ = access.program
        first_row = int((access.elements // t_k % t_q).min())
        first_col = int((access.elements % t_k).min())
        starts = ((pid_m, first_row, "offs_m", "BLOCK_M"), (pid_n, first_col, "offs_n", "BLOCK_N"))
        for pid, first, axis, block in starts:
            if pid >= 1 and first == pid:
                return (
                    f"Program {access.program[:3]} starts its tile at {axis} = {pid}, its program id: a tile "
                    f"starts at pid * {block}, so {axis} = pid * {block} + tl.arange(0, {block})."
                )
    return grid


def _scores_blocks(trace: KernelTrace | None, q: torch.Tensor, k: torch.Tensor) -> tuple[int, int] | None:
    """(BLOCK_M, BLOCK_N) read off the shapes of the first q and k loads."""
    if trace is None:
        return None
    d = q.shape[-1]

    def rows(x: torch.Tensor) -> int | None:
        for access in trace.accesses_to(x, store=False):
            shape = [s for s in access.block_shape if s != 1]
            if len(shape) == 2:
                return shape[0] if shape[1] == d else shape[1]
        return None

    block_m, block_n = rows(q), rows(k)
    return (block_m, block_n) if block_m and block_n else None


def _diagnose_scores(actual: torch.Tensor, expected: torch.Tensor, gpu: bool) -> str | None:
    """Name scores that are right for some batch·heads, rows or key columns only."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    atol, rtol = (1e-2, 1e-2) if gpu else (2e-5, 1e-4)
    bad = ~torch.isclose(a, e, atol=atol, rtol=rtol)  # (B, H, T_q, T_k)
    if not bad.any():
        return None
    heads = bad.flatten(0, 1).flatten(1).any(dim=-1)  # (B·H,)
    if not heads.all():
        first = int(heads.nonzero()[0, 0])
        return (
            f"is right for some batch·heads but wrong for others (the first wrong is batch·head {first}): "
            "program axis 2 is z = b·H + h, so b = pid_bh // H and h = pid_bh % H, and the tile starts at "
            "q_ptr + b * stride_qb + h * stride_qh (k's with k's own strides)."
        )
    rows = bad.any(dim=-1).flatten(0, 1).any(dim=0)  # (T_q,)
    cols = bad.any(dim=-2).flatten(0, 1).any(dim=0)  # (T_k,)
    if not rows.all():
        return (
            f"is right in some query rows and wrong in others ({int(rows.sum())} of {rows.numel()} rows "
            f"wrong, the first is row {int(rows.nonzero()[0, 0])}): look at how offs_m and the q pointers "
            "follow pid_m, and at the store's row offsets."
        )
    if not cols.all():
        return (
            f"is right in some key columns and wrong in others ({int(cols.sum())} of {cols.numel()} "
            f"wrong, the first is column {int(cols.nonzero()[0, 0])}): look at how offs_n and the k pointers "
            "follow pid_n, and at the store's column offsets."
        )
    return None


@check
def check_triton_scores(candidate: Callable[..., Any]) -> str:
    """The learner's scores kernel against q kᵀ/√d in float64: ragged, several heads, T_q ≠ T_k, views."""
    name = "triton_scores"
    mode = kernel_mode(name, candidate)
    blocks_seen: set[tuple[int, int]] = set()
    for case in _SCORES_CASES:
        q, k = _scores_inputs(case, mode)
        try:
            result, trace = traced_call(name, candidate, mode, q, k)
        except CheckFailed as failed:
            text = str(failed)
            if "reduction dimension" in text or "compatible" in text and "dot" in text:
                raise CheckFailed(f"{text}\n{_DOT_HINT}") from None
            raise
        expect_launched(name, trace)
        expect_in_bounds(name, trace, _scores_bounds_hint(trace))
        if isinstance(result, tuple | list):
            raise CheckFailed(
                f"`{name}` returned a {type(result).__name__} of {len(result)} items: return the scores only."
            )
        if result is None:
            raise CheckFailed(f"`{name}` returned None: end it with `return scores` (what the kernel wrote).")
        shape = (case.b, case.h, case.t_q, case.t_k)
        hints = {
            (case.b, case.h, case.t_k, case.t_q): "That is (B, H, T_k, T_q): the scores have one row per "
            "query and one column per key, (B, H, T_q, T_k).",
            (case.b * case.h, case.t_q, case.t_k): "Keep the batch and head axes apart: (B, H, T_q, T_k).",
        }
        out = expect_tensor(result, shape, "the scores", device=q.device, finite=False, hints=hints)
        if out.dtype not in (torch.float32, q.dtype):
            raise CheckFailed(
                f"the scores have dtype {out.dtype}: allocate them in float32 (tl.dot accumulates in "
                "float32), torch.empty(B, H, T_q, T_k, device=q.device, dtype=torch.float32)."
            )
        expect_all_written(trace, out, _scores_coverage_hint(trace, out))
        blocks = _scores_blocks(trace, q, k)
        if blocks:
            blocks_seen.add(blocks)
        mistakes = _scores_mistakes(q, k, case)
        if blocks and blocks[0] == blocks[1]:
            mistakes.append(Mistake(_TRANSPOSED_TILES, functools.partial(_tiles_transposed, q, k, blocks[0])))
        compare(
            "`triton_scores`", out, _scores_of(q, k), mode, mistakes, case.describe(),
            diagnose=functools.partial(_diagnose_scores, gpu=mode.gpu),
        )  # fmt: skip
    generated = _expect_scores_contract_cases(name, candidate, mode)
    detail = f" in tiles of {' and '.join(f'{m}×{n}' for m, n in sorted(blocks_seen))}" if blocks_seen else ""
    where = (
        "every score written, no access out of bounds; interpreted on the CPU, every load traced"
        if mode.traced
        else mode.gpu_where
    )
    return (
        f"q·kᵀ/√d on {len(_SCORES_CASES)} shapes (ragged on both axes, several batch·heads, T_q ≠ T_k, "
        f"views){detail}, then on {generated} more from the exercise's contract (3 heads, q or k alone a "
        f"view); {where}."
    )


SCORES_CONTRACT = Contract(
    "triton_scores",
    args=(
        Arg("q", ("B", "H", "T_q", "d"), views=VIEW_KINDS, expand_axis=1),
        Arg("k", ("B", "H", "T_k", "d"), views=VIEW_KINDS, expand_axis=1),
    ),
    axes=(
        Axis("B", (1,)),
        Axis("H", (2, 3), "a head count that is not a power of two"),
        Axis("T_q", (33,), "one block and one for blocks of 16 or 32"),
        Axis("T_k", (33,)),
        Axis("d", (16,), "a power of two, at least 16, as the exercise says"),
    ),
    returns=(Returns("scores", ("B", "H", "T_q", "T_k"), dtype="float32"),),
    notes=("any strides with the head dim contiguous, for q and k independently",),
)
"""What `triton_scores` must accept: its generated cases each add a head or make q or k alone a view."""


def _expect_scores_contract_cases(name: str, candidate: Callable[..., Any], mode: Mode) -> int:
    """Run the scores contract's generated cases (once the hand-picked ones passed); return how many."""
    dtype = torch.float16 if mode.gpu else torch.float32
    alloc = functools.partial(guarded, device=mode.device, dtype=dtype)
    cases = [*list(size_cases(SCORES_CONTRACT))[1:], *view_cases(SCORES_CONTRACT, _ONE_BLOCK)]
    for case in cases:
        q, k = (make_arg(arg, case, alloc) for arg in SCORES_CONTRACT.args)
        viewed = _viewed(case, (q, k), SCORES_CONTRACT)
        result, trace = traced_call(name, candidate, mode, q, k)
        expect_in_bounds(
            name,
            trace,
            f"Only one input is a view here, {viewed}; the other is contiguous. Step each input's pointers "
            "by that input's own strides (a key at k_ptr + j * stride_kn, not at q's row stride)."
            if viewed
            else _scores_bounds_hint(trace),
        )
        size = case.size
        shape = (size["B"], size["H"], size["T_q"], size["T_k"])
        out = expect_tensor(result, shape, "the scores", device=q.device, finite=False)
        mistakes = (
            _view_mistakes(SCORES_CONTRACT, case, (q, k), viewed, _scores_of, "the scores") if viewed else []
        )
        compare(
            f"`{name}`", out, _scores_of(q, k), mode, mistakes, f"{name}(q, k) with {case.describe()}",
            diagnose=functools.partial(_diagnose_contract_case, case=case, viewed=viewed),
        )  # fmt: skip
    return len(cases)


# ---------------------------------------------------------------------------------------------
# triton_flash_attention

_BLOCK_SIZES = (16, 32, 64, 128)


def _sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(QKᵀ/√d)V in float64 with the bottom-right causal mask; NaN for rows that see no key."""
    from attn_course.attention import attention
    from attn_course.masking import causal_mask

    q, k, v = (x.detach().to("cpu", torch.float64) for x in (q, k, v))
    mask = causal_mask(q.shape[-2], k.shape[-2]) if causal else None
    return attention(q, k, v, mask=mask)[0]


def _flash_mistakes(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, blocks: Sequence[tuple[int, int]]
) -> list[Mistake]:
    """The kernel's named mistakes, simulated lazily: block-size-free ones first, then per block shape."""
    d = q.shape[-1]

    def whole(**knobs: Any) -> torch.Tensor:
        return tiled_attention(q, k, v, causal=causal, block_m=q.shape[-2], block_n=k.shape[-2], **knobs)

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
    found = [Mistake(message, functools.partial(whole, scale=scale)) for scale, message in scales]
    if k.shape == v.shape:  # a tile loaded through the other pointer: the keys mixed, or the values scored
        found += [
            Mistake(
                "mixes the keys instead of the values: the value tile is loaded through k's pointer (or "
                "with k's strides); load it from v_ptr with v's strides, out = softmax(s) @ v.",
                lambda: tiled_attention(q, k, k, causal=causal, block_m=q.shape[-2], block_n=k.shape[-2]),
            ),
            Mistake(
                "scores the queries against the values: the key tile is loaded through v's pointer (or with "
                "v's strides); load it from k_ptr with k's strides, s = q kᵀ.",
                lambda: tiled_attention(q, v, v, causal=causal, block_m=q.shape[-2], block_n=k.shape[-2]),
            ),
        ]
    found += tiled_attention_mistakes(whole, causal, python=False, blocked=False)
    per_shape = [
        tiled_attention_mistakes(
            functools.partial(tiled_attention, q, k, v, causal=causal, block_m=block_m, block_n=block_n),
            causal,
            python=False,
            blocked=True,
        )
        for block_m, block_n in blocks
    ]
    found += [mistake for same_kind in zip(*per_shape, strict=True) for mistake in same_kind]
    return found


@dataclass(frozen=True)
class _FlashCase:
    """One input shape of the FlashAttention check."""

    b: int
    h: int
    t_q: int
    t_k: int
    d: int
    causal: bool
    strided: bool = False
    """q, k and v as transposes of (B, T, H, d) tensors: not contiguous."""
    lse: bool = True
    """Whether the log-sum-exp is compared too (a second, return_lse=True call)."""

    def describe(self) -> str:
        """The shape in words, for messages."""
        layout = ", (B, T, H, d).transpose(1, 2) views" if self.strided else ""
        sizes = f"B={self.b}, H={self.h}, T_q={self.t_q}, T_k={self.t_k}, d={self.d}"
        return f"{sizes}, is_causal={self.causal}{layout}"


_FLASH_CASES = (
    _FlashCase(1, 2, 64, 64, 32, False),
    _FlashCase(1, 2, 50, 50, 32, False),
    _FlashCase(2, 1, 64, 64, 16, True),
    _FlashCase(1, 2, 50, 50, 32, True),
    _FlashCase(1, 1, 20, 90, 32, True),  # T_k - T_q over two key blocks: a bound without it shows
    _FlashCase(1, 1, 20, 50, 32, True),
    # The two shapes of many blocks hold three quarters of the tiles: their second, return_lse=True
    # call would double the check's interpreted time, and every lse mistake shows on the shapes of
    # two or three query blocks above them (absolute rows, a ragged last block, rows with no key).
    _FlashCase(1, 1, 300, 300, 32, False, lse=False),
    _FlashCase(1, 1, 260, 260, 16, True, lse=False),
    _FlashCase(2, 2, 24, 56, 16, True),
    _FlashCase(2, 2, 40, 72, 16, False),
    _FlashCase(2, 2, 40, 40, 32, True, strided=True),
)


_LSE_SHAPES = sum(case.lse for case in _FLASH_CASES)


def _flash_inputs(case: _FlashCase, mode: Mode) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dtype = torch.float16 if mode.gpu else torch.float32

    def make(t: int) -> torch.Tensor:
        if case.strided:
            return guarded(case.b, t, case.h, case.d, device=mode.device, dtype=dtype).transpose(1, 2)
        return guarded(case.b, case.h, t, case.d, device=mode.device, dtype=dtype)

    return make(case.t_q), make(case.t_k), make(case.t_k)


CONTRACT = Contract(
    "triton_flash_attention",
    args=(
        # each may be any view; the generated cases try one kind each (taken in turn: q expanded, k
        # transposed, v sliced), as the interpreter is slow
        Arg("q", ("B", "H", "T_q", "d"), views=("expanded", "transposed", "sliced"), expand_axis=1),
        Arg("k", ("B", "H", "T_k", "d"), views=("sliced", "transposed", "expanded"), expand_axis=1),
        Arg("v", ("B", "H", "T_k", "d"), views=("transposed", "expanded", "sliced"), expand_axis=1),
    ),
    axes=(
        Axis("B", (1,)),
        Axis("H", (2, 3), "a head count that is not a power of two"),
        Axis("T_q", (33, 65), "one block and one (blocks of 32 on the CPU); 65 > T_k: rows that see no key"),
        Axis("T_k", (33, 65), "one block and one, two blocks and one"),
        Axis("d", (16,)),
    ),
    returns=(
        Returns("out", ("B", "H", "T_q", "d")),
        Returns("lse", ("B", "H", "T_q"), dtype="float32", contiguous=True),
    ),
    dtypes=(torch.float32,),
    notes=(
        "the causal mask is bottom-right aligned",
        "a query row that sees no key (causal, T_q > T_k) gets output 0 and lse -inf",
        "any strides with the head dim contiguous, for each of q, k and v independently",
    ),
)
"""What `triton_flash_attention` (and `fast_flash_attention`) must accept: the cases after the hand-picked
ones are generated from it, causal, each changing one size or making one input alone a view."""

_ONE_BLOCK = {"B": 1, "H": 2, "T_q": 20, "T_k": 20, "d": 16}
"""The sizes of the view cases: one block per program, as the interpreter is slow (layouts, not sizes)."""


def _expect_contract_cases(
    name: str, candidate: Callable[..., Any], mode: Mode, blocks_seen: set[tuple[int, int]]
) -> int:
    """Run the contract's generated cases (once the hand-picked ones passed); return how many."""
    dtype = torch.float16 if mode.gpu else torch.float32
    alloc = functools.partial(guarded, device=mode.device, dtype=dtype)
    cases = [*list(size_cases(CONTRACT))[1:], *view_cases(CONTRACT, _ONE_BLOCK, one_kind_each=True)]
    for case in cases:
        q, k, v = (make_arg(arg, case, alloc) for arg in CONTRACT.args)
        called_as = f"{name}(q, k, v, is_causal=True) with {case.describe()}"
        viewed = _viewed(case, (q, k, v))
        result, trace = traced_call(name, candidate, mode, q, k, v, is_causal=True)
        expect_in_bounds(
            name,
            trace,
            f"Only one input is a view here, {viewed}; the others are contiguous. Step each input's "
            "pointers by that input's own strides (a key at k_ptr + j * stride_kn, not at q's row "
            "stride), and never assume an input is contiguous."
            if viewed
            else "When T is not a multiple of the block size the last query or key block runs past the "
            "end: load with mask=offs[:, None] < T (other=0.0) and store with the query mask.",
        )
        out = expect_result(name, result, q, "the attention output")
        expected = _sdpa_reference(q, k, v, True).nan_to_num(nan=0.0)  # a row that sees no key: 0
        _expect_no_key_rows_zero(name, out, expected, mode, case, called_as)
        if case.view is not None:
            mistakes = _view_mistakes(CONTRACT, case, (q, k, v), viewed, _causal_reference)
        else:
            mistakes = _flash_mistakes(q, k, v, True, sorted(blocks_seen) or [(32, 32)])
        compare(
            f"`{name}`", out, expected, mode, mistakes, called_as,
            diagnose=functools.partial(_diagnose_contract_case, case=case, viewed=viewed),
        )  # fmt: skip
    return len(cases)


def _expect_no_key_rows_zero(
    name: str, out: torch.Tensor, expected: torch.Tensor, mode: Mode, case: Case, called_as: str
) -> None:
    """Name NaN (or anything but 0) in exactly the rows that see no key, the rest right."""
    no_key = case.size["T_q"] - case.size["T_k"]
    if (
        no_key <= 0
        or close(out, expected, mode.gpu)
        or not close(out[..., no_key:, :], expected[..., no_key:, :], mode.gpu)
    ):
        return
    got = "NaN" if torch.isnan(out[..., :no_key, :]).any() else "values other than 0"
    raise CheckFailed(
        f"`{name}` is right in every row that sees a key but gives {got} in the first {no_key} query rows, "
        f"which see no key (causal with T_q = {case.size['T_q']} > T_k = {case.size['T_k']}, bottom-right "
        "aligned): their running sum stays 0. Divide by 1 in its place, total_safe = tl.where(total == 0.0, "
        "1.0, total), out = acc / total_safe[:, None], so that they get 0, as SDPA and the course's "
        f"attention give them (and lse = m + tl.log(total_safe) is -inf).\n(Called as {called_as}.)"
    )


def _causal_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention in float64, 0 in the rows that see no key."""
    return _sdpa_reference(q, k, v, True).nan_to_num(nan=0.0)


def _viewed(case: Case, tensors: Sequence[torch.Tensor], contract: Contract | None = None) -> str:
    """The view of `case` in words with its strides, or "" when every input is contiguous."""
    contract = contract or CONTRACT
    if case.view is None:
        return ""
    names = [arg.name for arg in contract.args]
    index = names.index(case.view[0])
    return view_words(tensors[index], contract.args[index], case.view[1])


def _view_mistakes(
    contract: Contract,
    case: Case,
    tensors: Sequence[torch.Tensor],
    viewed: str,
    reference: Callable[..., torch.Tensor],
    what: str = "the output",
) -> list[Mistake]:
    """A kernel that reads the one view as if contiguous, or reads other inputs with the view's strides.

    `reference(*tensors)` is the right result (float64), here computed from what such a kernel reads.
    """
    assert case.view is not None
    name = case.view[0]
    names = [arg.name for arg in contract.args]
    index = names.index(name)
    alike = f"{', '.join(names[:-1])} and {names[-1]}"

    def misread(which: Sequence[int], strides: tuple[int, ...] | None) -> torch.Tensor:
        read = [*tensors]
        for i in which:
            read[i] = read_as(tensors[i], strides or contiguous_strides(tuple(tensors[i].shape)))
        return reference(*read)

    found = [
        Mistake(
            f"reads `{name}` as if it were contiguous: with {viewed} {what} is wrong (the cases "
            f"before, with {alike} contiguous, passed). Step `{name}`'s pointers by its own strides, "
            f"{name}.stride(0), {name}.stride(1), {name}.stride(2), not by another input's or by "
            "the sizes.",
            functools.partial(misread, [index], None),
        )
    ]
    shaped = [i for i, x in enumerate(tensors) if i != index and x.shape == tensors[index].shape]
    for n in range(len(shaped), 0, -1):
        for which in itertools.combinations(shaped, n):
            listed = " and ".join(f"`{names[i]}`" for i in which)
            own = "; ".join(
                f"{names[i]}.stride(0), {names[i]}.stride(1), {names[i]}.stride(2)" for i in which
            )
            found.append(
                Mistake(
                    f"reads {listed} with `{name}`'s strides: with {viewed} and the other inputs contiguous, "
                    f"{what} is wrong (the cases where {alike} had one layout passed). Step each input's "
                    f"pointers by its own strides: {own}.",
                    functools.partial(misread, which, tuple(tensors[index].stride())),
                )
            )
    return found


def _diagnose_contract_case(
    actual: torch.Tensor, expected: torch.Tensor, case: Case, viewed: str
) -> str | None:
    """What a generated case shows: which input's layout or which size it fails on."""
    size = case.size
    if viewed:
        name = case.view[0] if case.view else ""
        return (
            f"is right when every input is contiguous (the cases before passed) but wrong with {viewed}: "
            "each input's pointers must step by that input's own strides (q's by q.stride(0), q.stride(1), "
            f"q.stride(2), k's by k's), whatever the layout of the others; here `{name}`'s differ from the "
            "others'."
        )
    if case.changed == "H":
        return (
            f"is right for 2 heads but wrong for H = {size['H']}: the batch·head program id is "
            "pid_bh = b·H + h, so b = pid_bh // H and h = pid_bh % H, with H the number of heads the "
            "wrapper passes."
        )
    return None


@check
def check_triton_flash_attention(candidate: Callable[..., Any]) -> str:
    """The learner's FlashAttention kernel against SDPA: ragged, causal, T_q ≠ T_k and strided inputs.

    For each input but the two of many blocks, once the output is right, call again with
    return_lse=True and compare the log-sum-exp with `tiled_lse`.
    """
    return expect_flash_attention(candidate, "triton_flash_attention")


def expect_flash_attention(candidate: Callable[..., Any], name: str) -> str:
    """Check a FlashAttention wrapper, called `name` in the messages; return the pass line."""
    mode = kernel_mode(name, candidate)
    blocks_seen: set[tuple[int, int]] = set()
    for case in _FLASH_CASES:
        q, k, v = _flash_inputs(case, mode)
        kwargs: dict[str, Any] = {"is_causal": case.causal}
        result, trace = traced_call(name, candidate, mode, q, k, v, **kwargs)
        expect_launched(name, trace)
        expect_in_bounds(
            name,
            trace,
            "When T is not a multiple of the block size the last query or key block runs past the "
            "end: load with mask=offs[:, None] < T (other=0.0) and store with the query mask. The lse "
            "(B, H, T_q) of query row i of batch·head z lies at lse_ptr + z * T_q + i.",
        )
        if isinstance(result, tuple | list):
            raise CheckFailed(
                f"`{name}` returned a {type(result).__name__} of {len(result)} items with "
                "return_lse=False (the default): return the attention output only then, and the pair "
                "(out, lse) only when return_lse=True."
            )
        out = expect_result(name, result, q, "the attention output")
        expect_all_written(
            trace,
            out,
            "The grid needs (triton.cdiv(T_q, BLOCK_M), B * H) programs, and each stores its whole "
            "(BLOCK_M, d) block of the output (masked for the ragged last block).",
        )
        blocks = _flash_blocks(trace, q, k) if not case.strided else None
        if blocks:
            blocks_seen.add(blocks)
        expected = _sdpa_reference(q, k, v, case.causal)
        tried = [blocks] if blocks else list(itertools.product(_BLOCK_SIZES, _BLOCK_SIZES))
        mistakes = _flash_mistakes(q, k, v, case.causal, tried)
        if case.strided:
            mistakes += _stride_mistakes(q, k, v, case)
        elif case.t_q != case.t_k and case.b * case.h > 1:
            mistakes.append(Mistake(_KV_STRIDE_MESSAGE, functools.partial(_kv_with_q_strides, q, k, v, case)))
        called_as = f"{name}(q, k, v, is_causal={case.causal}) with {case.describe()}"
        compare(
            f"`{name}`", out, expected, mode, mistakes, called_as,
            explain=functools.partial(_expect_keys_visited, trace, q, k, case, blocks),
        )  # fmt: skip
        _expect_no_blocks_above_diagonal(trace, q, k, case)
        if case.lse:
            _compare_lse(name, candidate, mode, case, q, k, v, out, blocks)
    generated = _expect_contract_cases(name, candidate, mode, blocks_seen)
    detail = (
        f" in blocks of {' and '.join(f'{m}×{n}' for m, n in sorted(blocks_seen))}" if blocks_seen else ""
    )
    where = "interpreted on the CPU, every load traced" if mode.traced else mode.gpu_where
    return (
        f"matches attention on {len(_FLASH_CASES)} shapes (ragged, causal, T_q < T_k, strided){detail}, "
        f"and with return_lse=True the log-sum-exp of every row of {_LSE_SHAPES} of them; then on "
        f"{generated} more from the exercise's contract (one block and one, T_q > T_k with rows that see "
        "no key, 3 heads, each of q, k and v alone a view: q expanded, k transposed, v sliced); "
        f"{where}."
    )


# ---------------------------------------------------------------------------------------------
# the log-sum-exp that triton_flash_attention(..., return_lse=True) returns with the output

_LSE_STORE_HINT = (
    "lse is (B, H, T_q) and contiguous: the lse of query row i of batch·head z lies at "
    "lse_ptr + z * T_q + i, so each program stores its BLOCK_M values m + tl.log(l) at "
    "lse_ptr + pid_bh * T_q + offs_m (offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M), the block's "
    "absolute query rows), masked with offs_m < T_q."
)


def _compare_lse(
    name: str,
    candidate: Callable[..., Any],
    mode: Mode,
    case: _FlashCase,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    blocks: tuple[int, int] | None,
) -> None:
    """Call again with return_lse=True: the same output, and the natural log-sum-exp of each row's scores."""
    called_as = f"{name}(q, k, v, is_causal={case.causal}, return_lse=True) with {case.describe()}"
    where = f"\n(Called as {called_as}.)"
    result, trace = traced_call(
        name, candidate, mode, q, k, v, is_causal=case.causal, return_lse=True,
        hint="With return_lse=True the wrapper returns the pair (out, lse): give it the parameter "
        "`return_lse: bool = False` and end it with `return (out, lse) if return_lse else out`.",
    )  # fmt: skip
    if isinstance(result, torch.Tensor):
        raise CheckFailed(
            f"`{name}` returned one tensor with return_lse=True: it ignores return_lse. "
            "Then return the pair (out, lse), lse the float32 (B, H, T_q) tensor your kernel writes: each "
            f"query row's m + log(l), from its final running maximum m and running sum l.{where}"
        )
    if not isinstance(result, tuple | list) or len(result) != 2:
        got = (
            f"a {type(result).__name__} of {len(result)} items"
            if isinstance(result, tuple | list)
            else (type(result).__name__)
        )
        raise CheckFailed(
            f"`{name}` with return_lse=True should return the pair (out, lse), not {got}.{where}"
        )
    expect_in_bounds(
        name,
        trace,
        f"Without return_lse it stayed in bounds, so this is likely the lse store: {_LSE_STORE_HINT}",
    )
    out_again, lse = result
    expect_tensor(out_again, out.shape, "with return_lse=True, out", device=q.device, finite=False)
    if not close(out_again, out, mode.gpu):
        raise CheckFailed(
            "with return_lse=True your output differs from the output without it: return_lse only adds the "
            f"lse, the output stays the same.{where}"
        )
    hints = {
        tuple(q.shape): "That is q's shape: lse has one number per query row, (B, H, T_q).",
        (*q.shape[:-1], 1): "Drop the last axis: lse has one number per query row, (B, H, T_q).",
    }
    what = "with return_lse=True, lse"
    lse = expect_tensor(lse, q.shape[:-1], what, device=q.device, finite=False, hints=hints)
    if lse.dtype != torch.float32:
        raise CheckFailed(
            f"with return_lse=True, lse has dtype {lse.dtype}: allocate it in float32, "
            "torch.empty(B, H, T_q, device=q.device, dtype=torch.float32), whatever the inputs' dtype; "
            "the kernel keeps m and l in float32, and notebook 09's backward pass reads the lse so.{where}"
        )
    expect_all_written(trace, lse, f"(Of the lse, (B, H, T_q).) {_LSE_STORE_HINT}", name_overlap=False)
    expected = tiled_lse(q, k, causal=case.causal, block_m=q.shape[-2], block_n=k.shape[-2])  # (B, H, T_q)
    tried = [blocks] if blocks else list(itertools.product(_BLOCK_SIZES, _BLOCK_SIZES))
    expect_close(
        lse,
        expected,
        "with return_lse=True, the lse (the log-sum-exp of each query row)",
        mistakes=_lse_mistakes(q, k, case.causal, tried),
        close=functools.partial(close, gpu=mode.gpu),
        diagnose=functools.partial(_diagnose_lse, gpu=mode.gpu),
        called_as=called_as,
        nonfinite_hint="Every query here may attend at least one key, so its lse m + log(l) is finite; "
        "an lse element that no program stored is whatever torch.empty left there.",
    )


def _lse_mistakes(
    q: torch.Tensor, k: torch.Tensor, causal: bool, blocks: Sequence[tuple[int, int]]
) -> list[Mistake]:
    """The named mistakes of the kernel's lse: the kernel's own wording first, then those of notebook 06."""
    whole = functools.partial(tiled_lse, q, k, causal=causal, block_m=q.shape[-2], block_n=k.shape[-2])

    def natural_log_of_base2_max() -> torch.Tensor:
        m = whole(kind="max-only")  # (B, H, T_q)
        return m * math.log2(math.e) + (whole() - m)

    found = [
        Mistake(
            "is in base 2 (it is the natural log-sum-exp times log2(e)), as the exp2 trick leaves it: with "
            "log2(e) folded into sm_scale, m and tl.log2(l) are base-2 quantities, so store "
            "(m + tl.log2(l)) * 0.6931471805599453 (ln 2). The lse is in natural log, "
            "torch.logsumexp of the scaled scores, as notebook 09 reads it.",
            functools.partial(whole, kind="base2"),
        ),
        Mistake(
            "adds the natural tl.log(l) to a base-2 running maximum: with log2(e) folded into sm_scale for "
            "tl.exp2, m is log2(e) times the natural maximum; store m * 0.6931471805599453 + tl.log(l), "
            "or (m + tl.log2(l)) * 0.6931471805599453 (ln 2 = 0.693…).",
            natural_log_of_base2_max,
        ),
        Mistake(
            "mixes natural log and log2: with tl.exp, m is a natural-log quantity, so the lse is "
            "m + tl.log(l), not m + tl.log2(l).",
            functools.partial(whole, kind="log2"),
        ),
    ]
    for block_m, block_n in blocks:
        simulate = functools.partial(tiled_lse, q, k, causal=causal, block_m=block_m, block_n=block_n)
        found += tiled_lse_mistakes(simulate)
    return found


def _diagnose_lse(actual: torch.Tensor, expected: torch.Tensor, gpu: bool) -> str | None:
    """Name an lse that is right for some batch·heads or query rows only."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    atol, rtol = (1e-2, 1e-2) if gpu else (2e-5, 1e-4)
    bad = ~torch.isclose(a, e, atol=atol, rtol=rtol)  # (B, H, T_q)
    heads = bad.flatten(0, 1).any(dim=-1)  # (B·H,)
    rows = bad.flatten(0, 1).any(dim=0)  # (T_q,)
    if not bad.any():
        return None
    if not heads.all():
        first = int(heads.nonzero()[0, 0])
        return (
            f"is right for some batch·heads but wrong for others (the first wrong is batch·head {first}): "
            f"{_LSE_STORE_HINT}"
        )
    if not rows.all():
        first = int(rows.nonzero()[0, 0])
        return (
            f"is right for some query rows but wrong for others (the first wrong row is {first}, "
            f"{int(rows.sum())} of {rows.numel()} wrong): {_LSE_STORE_HINT}"
        )
    return None


_STRIDE_MESSAGE = (
    "is wrong for inputs that are views: q.transpose(1, 2) of a (B, T, H, d) tensor keeps its data in "
    "(B, T, H, d) order, so row t of head h is not at (b·H + h)·T·d + t·d. Pass q.stride(0), "
    "q.stride(1), q.stride(2) (and k's, v's, out's) to the kernel, or call .contiguous() first."
)


_KV_STRIDE_MESSAGE = (
    "reads k and v with q's strides: with T_k != T_q the heads of k and v lie T_k·d apart in memory, "
    "not T_q·d, so every batch·head after the first reads the wrong keys and values. Pass k.stride(0), "
    "k.stride(1), k.stride(2) for k and v's own strides for v."
)


def _kv_with_q_strides(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: _FlashCase) -> torch.Tensor:
    """What a kernel that indexes k and v with q's strides reads."""

    def misread(x: torch.Tensor) -> torch.Tensor:
        return torch.as_strided(x, x.shape, q.stride())

    return _sdpa_reference(q, misread(k), misread(v), case.causal)


def _stride_mistakes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: _FlashCase) -> list[Mistake]:
    return [Mistake(_STRIDE_MESSAGE, functools.partial(_as_if_contiguous, q, k, v, case))]


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
