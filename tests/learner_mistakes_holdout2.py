"""A second hold-out of learner mistakes, written blind (issue 15, part 4).

Each mistake is a text edit of the solution notebook's exercise cell, taken without its
`### BEGIN/END SOLUTION` marker lines (`old` replaced by `new`, `old` occurring exactly once),
with the idea of the mistake in one short phrase. They were written from the solution notebooks
and the topic modules only, before reading any check or any test of a check, and committed before
any measurement. The measurements are in tests/test_checks_holdout2.py.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
from pathlib import Path
from typing import Any, NamedTuple


class BlindMistake(NamedTuple):
    """One learner mistake: a text edit of the solution cell of `exercise`, and its idea."""

    exercise: str
    idea: str
    old: str
    new: str


HOLDOUT2: tuple[BlindMistake, ...] = (
    # 01 · dot-product attention
    BlindMistake(
        "dot_product_scores",
        "scores transposed: (T_k, T_q) instead of (T_q, T_k)",
        '"...qd,...kd->...qk"',
        '"...qd,...kd->...kq"',
    ),
    BlindMistake(
        "softmax",
        "modifies its input in place",
        "shifted = x - x.amax(dim=dim, keepdim=True)  # same shape as x, largest entry 0\n"
        "    exps = shifted.exp()",
        "x -= x.amax(dim=dim, keepdim=True)  # largest entry 0\n    exps = x.exp()",
    ),
    BlindMistake(
        "dot_product_attention",
        "softmax over the query axis instead of the key axis",
        "weights = softmax(dot_product_scores(q, k), dim=-1)",
        "weights = softmax(dot_product_scores(q, k), dim=-2)",
    ),
    # 02 · scaling
    BlindMistake(
        "score_variance",
        "scaled by d_k instead of √d_k",
        "scores = scores / math.sqrt(d_k)",
        "scores = scores / d_k",
    ),
    BlindMistake(
        "scaled_dot_product_attention",
        "scaled by √(number of keys) instead of √d_k",
        "d_k = q.shape[-1]",
        "d_k = k.shape[-2]",
    ),
    # 03 · causal masking
    BlindMistake(
        "causal_mask",
        "top-left aligned: the offset t_k - t_q is left out",
        "query_positions = torch.arange(t_q, device=device) + (t_k - t_q)",
        "query_positions = torch.arange(t_q, device=device)",
    ),
    BlindMistake(
        "padding_mask",
        "off by one: position lengths[b] counted as real",
        'rearrange(positions, "t -> 1 t") < rearrange(lengths, "b -> b 1")',
        'rearrange(positions, "t -> 1 t") <= rearrange(lengths, "b -> b 1")',
    ),
    BlindMistake(
        "attention",
        "mask polarity inverted: the allowed positions are hidden",
        'scores = scores.masked_fill(~allowed, float("-inf"))',
        'scores = scores.masked_fill(allowed, float("-inf"))',
    ),
    # 04 · multi-head attention
    BlindMistake(
        "split_heads",
        "heads interleaved (d h) instead of contiguous blocks (h d)",
        '"b t (h d) -> b h t d"',
        '"b t (d h) -> b h t d"',
    ),
    BlindMistake(
        "merge_heads",
        "reshape without moving the head axis back: positions and heads mixed",
        'return rearrange(x, "b h t d -> b t (h d)")',
        "b, h, t, d = x.shape\n    return x.reshape(b, t, h * d)",
    ),
    BlindMistake(
        "MultiHeadAttention",
        "mask not given a head axis: it broadcasts against the heads",
        'mask = rearrange(mask, "... q k -> ... 1 q k")',
        "mask = mask",
    ),
    # 05 · RoPE
    BlindMistake(
        "rope_frequencies",
        "exponent i/d instead of 2i/d",
        "two_i = torch.arange(0, d, 2, dtype=torch.float64)",
        "two_i = torch.arange(0, d // 2, dtype=torch.float64)",
    ),
    BlindMistake(
        "apply_rope",
        "rotates by minus the angle (sin sign flipped)",
        "torch.stack([even * cos - odd * sin, even * sin + odd * cos])",
        "torch.stack([even * cos + odd * sin, -even * sin + odd * cos])",
    ),
    BlindMistake(
        "RotaryMultiHeadAttention",
        "rotates the values too",
        "q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)",
        "q, k, v = (apply_rope(z, positions, self.base) for z in (q, k, v))",
    ),
    # 06 · FlashAttention
    BlindMistake(
        "online_softmax",
        "running sum not rescaled when the maximum grows",
        "denom = denom * torch.exp(m - m_safe) + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)",
        "denom = denom + torch.exp(block - m_safe).sum(dim=-1, keepdim=True)",
    ),
    BlindMistake(
        "flash_attention",
        "lse without the running max: log of the sum only",
        "lse[..., qs:qe] = (m + torch.log(denom)).squeeze(-1)",
        "lse[..., qs:qe] = torch.log(denom).squeeze(-1)",
    ),
    BlindMistake(
        "flash_attention",
        "causal mask in the tiles top-left aligned (offset dropped)",
        "rows = torch.arange(qs, qe, device=q.device) + offset",
        "rows = torch.arange(qs, qe, device=q.device)",
    ),
    # 07 · KV cache
    BlindMistake(
        "KVCache",
        "state shared across instances (class-level dicts)",
        '    """The keys and values of every position seen so far, per layer."""\n\n'
        "    def __init__(self) -> None:\n"
        "        self.keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
        "        self.values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)",
        '    """The keys and values of every position seen so far, per layer."""\n\n'
        "    keys: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n"
        "    values: dict[int, torch.Tensor] = {}  # layer -> (b, h, t_past, d_k)\n\n"
        "    def __init__(self) -> None:\n"
        "        pass",
    ),
    BlindMistake(
        "cached_attention",
        "new tokens rotated at positions from 0, not after the cached ones",
        "positions = torch.arange(t_past, t_past + t_new, device=x.device)",
        "positions = torch.arange(t_new, device=x.device)",
    ),
    # 08 · Triton
    BlindMistake(
        "triton_add",
        "grid rounds down: the last partial block is never computed",
        "grid = (triton.cdiv(n, block),)",
        "grid = (n // block,)",
    ),
    BlindMistake(
        "triton_softmax",
        "padding lanes loaded as 0 instead of -inf in the first pass: counted in the sum",
        'x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)  # (BLOCK,)\n'
        "        m_new",
        "x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)  # (BLOCK,)\n        m_new",
    ),
    BlindMistake(
        "triton_flash_attention",
        "causal loop bound without the offset: keys past T_q never visited when T_k > T_q",
        "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M + offset)",
        "hi = tl.minimum(t_k, (pid_m + 1) * BLOCK_M)",
    ),
    # 09 · backward
    BlindMistake(
        "softmax_backward",
        "D summed over the whole tensor, not per row",
        "D = (grad_p * p).sum(dim=dim, keepdim=True)",
        "D = (grad_p * p).sum()",
    ),
    BlindMistake(
        "attention_backward",
        "dK missing the 1/√d scale",
        "dk = ds.transpose(-1, -2) @ q * scale",
        "dk = ds.transpose(-1, -2) @ q",
    ),
    BlindMistake(
        "flash_attention_backward",
        "probabilities renormalised within each tile instead of exp(s - lse)",
        "p = torch.exp(s - lse[..., qs:qe, None])",
        "p = torch.softmax(s, dim=-1)",
    ),
    BlindMistake(
        "FlashAttentionFunction",
        "backward returns fewer gradients than forward has inputs",
        "return dq, dk, dv, None, None",
        "return dq, dk, dv",
    ),
    # 10 · modern attention
    BlindMistake(
        "repeat_kv",
        "heads tiled (r h) instead of grouped (h r)",
        '"b h t d -> b (h r) t d"',
        '"b h t d -> b (r h) t d"',
    ),
    BlindMistake(
        "sliding_window_mask",
        "window off by one: window + 1 keys seen",
        "return (distance >= 0) & (distance < window)",
        "return (distance >= 0) & (distance <= window)",
    ),
    BlindMistake(
        "alibi_score_mod",
        "bias sign flipped: distant keys favoured",
        "return score + slopes[h] * (kv_idx - q_idx)",
        "return score + slopes[h] * (q_idx - kv_idx)",
    ),
    BlindMistake(
        "document_mask_mod",
        "strict causal: a token does not see itself",
        "(q_idx >= kv_idx)",
        "(q_idx > kv_idx)",
    ),
)
"""30 mistakes over the exercises of notebooks 01-10, written blind."""


# ---------------------------------------------------------------------------------------------
# Loading a mistake: the solution notebook's cell, edited, written to a file and imported (Triton
# reads a kernel's source from its file), with the names the notebook's earlier cells define.

PRELUDE = """
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from einops import einsum, rearrange, repeat
from torch import nn

from attn_course.attention import attention, dot_product_scores, softmax
from attn_course.flash import flash_attention_backward, flash_attention_forward
from attn_course.gqa import repeat_kv
from attn_course.heads import MultiHeadAttention, merge_heads, split_heads
from attn_course.kv_cache import KVCache
from attn_course.masking import causal_mask
from attn_course.rope import RotaryMultiHeadAttention, apply_rope, rope_frequencies
"""

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
_counter = itertools.count()


def solution_cells() -> dict[str, str]:
    """Exercise name -> its solution cell's source, without the BEGIN/END SOLUTION marker lines."""
    cells: dict[str, str] = {}
    for notebook in sorted(SOLUTIONS.glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "### BEGIN SOLUTION" not in source:
                continue
            source = "\n".join(line for line in source.split("\n") if "### BEGIN SOLUTION" not in line
                               and "### END SOLUTION" not in line)  # fmt: skip
            for name in re.findall(r"^(?:def|class) (\w+)", source, re.MULTILINE):
                cells[name] = source
    return cells


def load(mistake: BlindMistake | tuple[str, str | None, str, str], folder: Path) -> Any:
    """The learner's `exercise` with the mistake's edit (none where `old` is empty), from a file."""
    exercise, _, old, new = mistake
    source = solution_cells()[exercise]
    if old:
        assert source.count(old) == 1, f"{old!r} should occur once in the solution of {exercise}"
        source = source.replace(old, new)
    path = folder / f"holdout2_{exercise}_{next(_counter)}.py"
    path.write_text(PRELUDE + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, exercise)
