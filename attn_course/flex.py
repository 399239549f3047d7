"""FlexAttention: new attention variants as two small functions, compiled into one fused kernel.

`torch.nn.attention.flex_attention.flex_attention(q, k, v, score_mod=..., block_mask=...)` computes
softmax(score_mod(q·kᵀ/√d)) v where

- a `score_mod(score, b, h, q_idx, kv_idx) -> score` changes one scaled score (a bias such as ALiBi);
- a `mask_mod(b, h, q_idx, kv_idx) -> bool` says whether query q_idx may attend key kv_idx, and
  `create_block_mask(mask_mod, ...)` turns it into a `BlockMask`: which (query block, key block)
  tiles hold any allowed pair, so that the kernel skips the others, and which are full (no mask to
  apply inside).

Both are written for one (b, h, q_idx, kv_idx) at a time, on 0-d tensors; torch evaluates them with
`vmap` over every index, or compiles them into the kernel with `torch.compile`. Without compiling,
flex_attention runs an unfused reference that builds every score (fine for small sizes, and all this
module needs to check and draw).

Introduced in 10_modern_attention.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from attn_course.exercise import exercise
from attn_course.window import require_window

ScoreMod = Callable[..., torch.Tensor]
"""score_mod(score, b, h, q_idx, kv_idx) -> score."""
MaskMod = Callable[..., torch.Tensor]
"""mask_mod(b, h, q_idx, kv_idx) -> bool tensor."""


def flex_problem() -> str | None:
    """Why FlexAttention cannot run here (None when it can): it needs torch 2.5 or newer.

    >>> flex_problem() is None or flex_problem().startswith("FlexAttention")
    True
    """
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError as error:
        return (
            f"FlexAttention is not available in torch {torch.__version__} ({error}); it needs torch 2.5 "
            "or newer. The cells that use it say so and do nothing."
        )
    return None


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """flex_attention, called without torch.compile, runs its unfused op directly instead of tracing it.

    Uncompiled, flex_attention first traces each new score_mod and mask through torch.compile's eager
    backend (about half a second of CPU each), then runs the same unfused op; torch's own debug flag
    skips the tracing. The numbers are the same to the bit (tests/test_modern.py), so the checks run the
    learner's code this way: a check of 10's last exercise took 5 s of CPU traced and 1.7 s untraced.
    A flex_attention the learner wrapped in torch.compile is compiled as before.
    """
    try:
        from torch.nn.attention import flex_attention as module
    except ImportError:  # torch before 2.5: nothing to switch
        yield
        return
    before = getattr(module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", None)
    if before is None:  # a torch without the flag: traced as before
        yield
        return
    module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
    try:
        yield
    finally:
        module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = before


# ---------------------------------------------------------------------------------------------
# The mods of the notebook


def causal_mask_mod(
    b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
) -> torch.Tensor:
    """The causal mask as a mask_mod (as many queries as keys): key kv_idx at or before query q_idx.

    Introduced in 10_modern_attention.
    """
    return q_idx >= kv_idx


def sliding_window_mask_mod(window: int) -> MaskMod:
    """A mask_mod for `sliding_window_mask` (as many queries as keys): the last `window` positions.

    Introduced in 10_modern_attention.
    """
    require_window(window)

    def in_window(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    return in_window


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's slope per head, by the rule of the paper's code (Press et al., 2022; BLOOM, MPT, Falcon).

    For a power of two n, the slopes are the geometric sequence 2^(-8/n), 2^(-16/n), … , 2^-8:
    2^(-8(h+1)/n) for head h. For any other head count the paper's `get_slopes` takes the n slopes of
    the largest power of two n below it, then appends every other slope of 2n's sequence,
    2^(-4/n), 2^(-12/n), …, the first n_heads - n of them: each lies halfway (on a log scale)
    between two slopes of n's, so the heads still cover the range 2^(-4/n) … 2^-8 roughly
    geometrically. (The plain 2^(-8(h+1)/n_heads) agrees only for powers of two.)

    >>> alibi_slopes(4)
    tensor([0.2500, 0.0625, 0.0156, 0.0039])
    >>> alibi_slopes(3)  # the slopes of 2 heads, then the first odd one of 4 heads'
    tensor([0.0625, 0.0039, 0.2500])

    Introduced in 10_modern_attention.
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be at least 1, got {n_heads}")
    n = 2 ** math.floor(math.log2(n_heads))  # the largest power of two <= n_heads
    extra = _geometric_slopes(2 * n)[0::2][: n_heads - n]  # (n_heads - n,): between n's slopes
    return torch.cat([_geometric_slopes(n), extra])  # (n_heads,)


def _geometric_slopes(n: int) -> torch.Tensor:
    """2^(-8(h+1)/n) for h = 0 … n - 1: ALiBi's slopes when n is a power of two."""
    return 2.0 ** (-8.0 * torch.arange(1, n + 1) / n)  # (n,)


@exercise("10_modern_attention", 5)
def alibi_score_mod(n_heads: int) -> ScoreMod:
    """A score_mod adding ALiBi's bias: slope_h · (kv_idx - q_idx), 0 on the diagonal, negative in the past.

    Positive for future keys, which the causal mask ALiBi runs with removes; `alibi_bias` gives the
    same bias for every (query, key) pair, future ones included.

    Introduced in 10_modern_attention.
    """
    slopes = alibi_slopes(n_heads)  # (n_heads,)

    def alibi(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return score + slopes[h] * (kv_idx - q_idx)

    return alibi


def alibi_bias(n_heads: int, t: int) -> torch.Tensor:
    """ALiBi's bias as a dense tensor (n_heads, t, t), to hand to SDPA as a float attn_mask.

    slope_h · (j - i) for every query i and key j: what `alibi_score_mod` adds, pair by pair. Above the
    diagonal it is positive; the causal mask (-inf there) removes it, as it removes the score_mod's.

    >>> alibi_bias(2, 3)[0]
    tensor([[ 0.0000,  0.0625,  0.1250],
            [-0.0625,  0.0000,  0.0625],
            [-0.1250, -0.0625,  0.0000]])

    Introduced in 10_modern_attention.
    """
    positions = torch.arange(t)  # (t,)
    distance = positions[None, :] - positions[:, None]  # (t, t): kv - q
    return alibi_slopes(n_heads)[:, None, None] * distance  # (n_heads, t, t)


@exercise("10_modern_attention", 6)
def document_mask_mod(document_ids: torch.Tensor) -> MaskMod:
    """A mask_mod for packed sequences: causal, and only within the query's own document.

    `document_ids` (T,) gives the document of each position of the packed sequence.

    Introduced in 10_modern_attention.
    """

    def same_document(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return (document_ids[q_idx] == document_ids[kv_idx]) & (q_idx >= kv_idx)

    return same_document


def document_ids_from_lengths(lengths: list[int]) -> torch.Tensor:
    """The document of each position when documents of these lengths are packed one after another.

    >>> document_ids_from_lengths([2, 3, 1])
    tensor([0, 0, 1, 1, 1, 2])

    Introduced in 10_modern_attention.
    """
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))  # (T,)


# ---------------------------------------------------------------------------------------------
# Evaluating mods outside the kernel


def evaluate_mask_mod(mask_mod: MaskMod, n_heads: int, t_q: int, t_k: int) -> torch.Tensor:
    """The (n_heads, t_q, t_k) boolean mask a mask_mod describes, evaluated the way flex_attention does.

    >>> evaluate_mask_mod(causal_mask_mod, 1, 2, 2)
    tensor([[[ True, False],
             [ True,  True]]])
    """
    args = _indices(1, n_heads, t_q, t_k)
    return _vmapped(mask_mod, args, score=None)[0]  # (n_heads, t_q, t_k)


def evaluate_score_mod(score_mod: ScoreMod, scores: torch.Tensor) -> torch.Tensor:
    """score_mod applied to every entry of scores (B, H, T_q, T_k), as flex_attention applies it.

    >>> evaluate_score_mod(alibi_score_mod(2), torch.zeros(1, 2, 2, 2))[0, 0]
    tensor([[ 0.0000,  0.0625],
            [-0.0625,  0.0000]])
    """
    args = _indices(*scores.shape)
    return _vmapped(score_mod, args, score=scores)


def _indices(b: int, h: int, t_q: int, t_k: int) -> tuple[torch.Tensor, ...]:
    return torch.arange(b), torch.arange(h), torch.arange(t_q), torch.arange(t_k)


def _vmapped(
    mod: Callable[..., torch.Tensor], args: tuple[torch.Tensor, ...], score: torch.Tensor | None
) -> Any:
    """Call `mod` once per (b, h, q, kv) through torch's vmap, with indexing by 0-d tensors allowed."""
    try:
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
        from torch.nn.attention.flex_attention import _vmap_for_bhqkv
    except ImportError:  # an older torch: broadcast the indices instead, which most mods accept
        b, h, q, kv = args[0][:, None, None, None], args[1][None, :, None, None], args[2][:, None], args[3]
        return mod(b, h, q, kv) if score is None else mod(score, b, h, q, kv)
    with TransformGetItemToIndex():
        if score is None:
            return _vmap_for_bhqkv(mod, prefix=())(*args)
        return _vmap_for_bhqkv(mod, prefix=(0,))(score, *args)


# ---------------------------------------------------------------------------------------------
# Running flex_attention, compiled where possible


def flex_gpu_note(
    capability: tuple[int, int], name: str, dtype: torch.dtype, *, tf32: bool = False
) -> str | None:
    """What compiled FlexAttention lacks on a CUDA card of `capability` for `dtype` (None: nothing).

    torch.compile writes FlexAttention's kernel in Triton, so the card's Triton path decides: no
    tensor cores before Ampere (a T4), no compile at all before 7.0; bfloat16 inputs are not
    compiled before Ampere; and float32 products run as float32 multiply-adds on every card unless
    tf32 is allowed (`torch.backends.cuda.matmul.fp32_precision = "tf32"`, `tf32=True` here).
    docs/gpu-support.md has the file and line of each rule.

    >>> flex_gpu_note((9, 0), "NVIDIA H100", torch.float16) is None
    True
    >>> print(flex_gpu_note((7, 5), "Tesla T4", torch.bfloat16))
    Tesla T4 (compute capability 7.5) has no native bfloat16: torch.compile skips bfloat16 inputs
    there and FlexAttention runs unfused; use float16
    """
    from attn_course.device import EAGER, FMA, gpu_paths

    path = next(path for path in gpu_paths(capability, name) if path.name == "flex")
    cc = f"{capability[0]}.{capability[1]}"
    if path.how == EAGER:
        return path.why
    if dtype == torch.bfloat16 and capability < (8, 0):
        return (
            f"{name} (compute capability {cc}) has no native bfloat16: torch.compile skips bfloat16 "
            "inputs there and FlexAttention runs unfused; use float16"
        )
    if path.how == FMA:
        return (
            f"compiled for {name} (compute capability {cc}) without tensor cores: its products are "
            "float32 multiply-adds on the CUDA cores, so expect it well behind SDPA's fused kernel"
        )
    if dtype == torch.float32 and not tf32:
        return (
            "float32 inputs: its products are float32 multiply-adds, not tensor cores "
            '(torch.backends.cuda.matmul.fp32_precision = "tf32" allows them; float16 and bfloat16 use them)'
        )
    return None


class Flex:
    """flex_attention, compiled with torch.compile when asked and possible, else unfused; says which.

    The first compiled call of each new score_mod or mask compiles a kernel (seconds on a CPU); the
    time of each compile is kept in `compile_seconds`. When compiling fails (no C++ compiler, an
    unsupported platform, a kernel that needs more shared memory than the GPU has), the call falls
    back to the unfused version and `problem` says why. On a CUDA GPU, `note` says what the compiled
    kernel lacks there (`flex_gpu_note`: tensor cores on a T4).
    """

    def __init__(self, compile: bool) -> None:
        from torch.nn.attention.flex_attention import flex_attention

        self._eager = flex_attention
        self._compiled: Callable[..., torch.Tensor] | None = (
            torch.compile(flex_attention, dynamic=False) if compile else None
        )
        self.problem: str | None = None if compile else "not compiled (quick run)"
        self.compile_seconds: list[float] = []
        self._seen: set[tuple[Any, ...]] = set()
        self.note: str | None = None
        """What the compiled kernel lacks on the GPU of the last call (`flex_gpu_note`), or None."""

    @property
    def compiled(self) -> bool:
        """Whether calls run the compiled kernel."""
        return self._compiled is not None and self.problem is None

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """flex_attention(q, k, v, **kwargs) -> (B, H, T_q, d_v)."""
        if self.compiled and q.device.type == "cuda":
            precision = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
            highest = torch.get_float32_matmul_precision() == "highest"
            tf32 = precision == "tf32" or (precision == "none" and not highest)
            properties = torch.cuda.get_device_properties(q.device)
            capability = (properties.major, properties.minor)
            self.note = flex_gpu_note(capability, properties.name, q.dtype, tf32=tf32)
        if self.compiled and self._compiled is not None:  # compiled implies the second: it narrows the type
            key = (
                kwargs.get("score_mod"),
                id(kwargs.get("block_mask")),
                q.shape,
                q.dtype,
                kwargs.get("enable_gqa"),
            )
            start = time.perf_counter()
            try:
                out = self._compiled(q, k, v, **kwargs)  # (B, H, T_q, d_v)
            except Exception as error:  # no compiler, or a platform inductor does not support
                self.problem = f"torch.compile failed ({type(error).__name__}: {str(error)[:200]})"
                print(f"FlexAttention runs unfused from here on: {self.problem}.")
            else:
                if key not in self._seen:
                    self._seen.add(key)
                    self.compile_seconds.append(time.perf_counter() - start)
                return out
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "called without torch.compile": we know
            return self._eager(q, k, v, **kwargs)  # (B, H, T_q, d_v)

    def describe(self) -> str:
        """One line: compiled or not, and why."""
        if self.compiled:
            note = f"; {self.note}" if self.note else ""
            return (
                "FlexAttention compiled with torch.compile (one fused kernel per score_mod and mask)" + note
            )
        return f"FlexAttention unfused, every score built ({self.problem})"


def block_states(block_mask: Any) -> torch.Tensor:
    """Per (query block, key block) of the first batch and head: 0 skipped, 1 masked inside, 2 full.

    Introduced in 10_modern_attention.
    """
    dense = block_mask.to_dense()[0, 0]  # (n_q, n_k): 1 where the block is visited
    states = dense.clone().long()  # (n_q, n_k)
    if block_mask.full_kv_num_blocks is not None:
        for row in range(states.shape[0]):
            n_full = int(block_mask.full_kv_num_blocks[0, 0, row])
            states[row, block_mask.full_kv_indices[0, 0, row, :n_full].long()] = 2
    return states
