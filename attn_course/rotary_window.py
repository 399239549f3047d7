"""One real layer: Mistral 7B's attention, grouped heads with RoPE and a sliding window, in FlexAttention.

Mistral 7B's attention layer puts together what notebooks 05 and 10 built: 32 query heads sharing 8
key/value heads, RoPE on queries and keys (never values), and a sliding window of 4096 keys on top of
the causal mask. Written with FlexAttention, the window is a mask_mod and grouped heads are
`enable_gqa=True`; written densely, the same layer is a repeat and a boolean mask.

Introduced in 10_modern_attention.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from attn_course.exercise import exercise
from attn_course.flex import flex_problem, sliding_window_mask_mod
from attn_course.heads import merge_heads, split_heads
from attn_course.rope import apply_rope
from attn_course.window import require_window, sliding_window_mask


@exercise("10_modern_attention", 7)
def rotary_window_attention(
    layer: Any, x: torch.Tensor, window: int, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """Causal attention of x (b, t, d_model) within the last `window` keys, with RoPE -> (b, t, d_model).

    `layer` is a `GroupedQueryAttention` (its projections q, k, v, out and its n_heads, n_kv_heads);
    `positions` (t,) are the tokens' positions for RoPE, 0 … t-1 by default. Runs FlexAttention
    (unfused, as the check and the notebook's small sizes need) where torch has it, else the dense path.
    FlexAttention has no backward on a CPU: there, call it under `torch.no_grad()`.

    >>> from attn_course.gqa import GroupedQueryAttention
    >>> with torch.no_grad():
    ...     rotary_window_attention(GroupedQueryAttention(16, 4, 2), torch.ones(2, 5, 16), window=3).shape
    torch.Size([2, 5, 16])

    Introduced in 10_modern_attention.
    """
    require_window(window)
    if flex_problem():
        return rotary_window_dense(layer, x, window, positions)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    t = x.shape[-2]
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)  # (b, h, t, d_head)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)  # (b, h_kv, t, d_head)
    v = split_heads(layer.v(x), layer.n_kv_heads)  # (b, h_kv, t, d_head): values are not rotated
    block_mask = create_block_mask(sliding_window_mask_mod(window), None, None, t, t, device=x.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile": unfused on purpose
        out = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)  # (b, h, t, d_head)
    return layer.out(merge_heads(out))  # (b, t, d_model)


def rotary_window_dense(
    layer: Any, x: torch.Tensor, window: int, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """`rotary_window_attention` without FlexAttention: keys repeated, every score built, a boolean mask.

    >>> from attn_course.gqa import GroupedQueryAttention
    >>> rotary_window_dense(GroupedQueryAttention(16, 4, 2), torch.ones(2, 5, 16), window=3).shape
    torch.Size([2, 5, 16])

    Introduced in 10_modern_attention.
    """
    require_window(window)
    t, n_rep = x.shape[-2], layer.n_heads // layer.n_kv_heads
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), positions)  # (b, h, t, d_head)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), positions)  # (b, h_kv, t, d_head)
    v = split_heads(layer.v(x), layer.n_kv_heads)  # (b, h_kv, t, d_head)
    k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (b, h, t, d_head) each
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (b, h, t, t)
    allowed = sliding_window_mask(t, t, window, device=x.device)  # (t, t)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (b, h, t, t)
    return layer.out(merge_heads(weights @ v))  # (b, t, d_model)


class RollingBuffer:
    """Mistral's rolling KV cache of one layer: `window` slots, the token at position p in slot p mod W.

    `keys` and `values` are (b, n_kv_heads, window, d_head), zeros until written: a decoding step
    writes the new token's key (rotated) and value into its slot, over the token `window` positions
    before it, so the buffer never grows.

    >>> buffer = RollingBuffer(batch=2, n_kv_heads=2, window=4, d_head=8)
    >>> buffer.keys.shape, buffer.window, buffer.nbytes()
    (torch.Size([2, 2, 4, 8]), 4, 1024)

    Introduced in 10_modern_attention.
    """

    def __init__(
        self,
        batch: int,
        n_kv_heads: int,
        window: int,
        d_head: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        require_window(window)
        self.keys = torch.zeros(batch, n_kv_heads, window, d_head, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)  # (b, h_kv, window, d_head)

    @classmethod
    def for_layer(
        cls, layer: Any, batch: int, window: int, dtype: torch.dtype = torch.float32
    ) -> RollingBuffer:
        """An empty buffer shaped for `layer`'s key/value heads (a `GroupedQueryAttention`)."""
        d_head = layer.k.out_features // layer.n_kv_heads
        return cls(batch, layer.n_kv_heads, window, d_head, dtype=dtype, device=layer.k.weight.device)

    @property
    def window(self) -> int:
        """How many slots: the window W."""
        return self.keys.shape[-2]

    def nbytes(self) -> int:
        """Bytes held by the keys and the values, whatever the number of tokens written."""
        return self.keys.nbytes + self.values.nbytes


@exercise("10_modern_attention", 8)
def rolling_window_step(layer: Any, x: torch.Tensor, buffer: RollingBuffer, position: int) -> torch.Tensor:
    """One decoding step of `rotary_window_attention` through a rolling buffer: (b, 1, d_model) -> same.

    `x` is the token at absolute `position`; `buffer` holds the keys (rotated) and values of the
    positions before it, the last W of them. Writes this token's key and value into slot
    position mod W, then attends its query to the slots written so far.

    >>> from attn_course.gqa import GroupedQueryAttention
    >>> layer, buffer = GroupedQueryAttention(16, 4, 2), RollingBuffer(2, 2, window=3, d_head=4)
    >>> with torch.no_grad():
    ...     outs = [rolling_window_step(layer, torch.ones(2, 1, 16), buffer, p) for p in range(5)]
    >>> outs[-1].shape
    torch.Size([2, 1, 16])

    Introduced in 10_modern_attention.
    """
    window = buffer.window
    at = torch.tensor([position], device=x.device)  # (1,): the token's position, for RoPE
    q = apply_rope(split_heads(layer.q(x), layer.n_heads), at)  # (b, h, 1, d_head)
    k = apply_rope(split_heads(layer.k(x), layer.n_kv_heads), at)  # (b, h_kv, 1, d_head)
    v = split_heads(layer.v(x), layer.n_kv_heads)  # (b, h_kv, 1, d_head)
    slot = position % window
    buffer.keys[:, :, slot] = k[:, :, 0]  # over the token at position - window
    buffer.values[:, :, slot] = v[:, :, 0]
    filled = min(position + 1, window)  # slots written so far; all of them once the buffer is full
    n_rep = layer.n_heads // layer.n_kv_heads
    keys = buffer.keys[:, :, :filled].repeat_interleave(n_rep, dim=1)  # (b, h, filled, d_head)
    values = buffer.values[:, :, :filled].repeat_interleave(n_rep, dim=1)  # (b, h, filled, d_head)
    weights = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)  # (b, h, 1, filled)
    return layer.out(merge_heads(weights @ values))  # (b, 1, d_model)


def decode_differences(
    step: Any, layer: Any, x: torch.Tensor, window: int, buffer: RollingBuffer | None = None
) -> list[float]:
    """Feed x (b, t, d_model) to `step` token by token through one rolling buffer; each position's error.

    The difference is against `rotary_window_attention(layer, x, window)` on the whole sequence, at
    that position: 0 (up to rounding) for every position when `step` is right.

    >>> from attn_course.gqa import GroupedQueryAttention
    >>> layer, x = GroupedQueryAttention(16, 4, 2), torch.randn(1, 7, 16)
    >>> found = decode_differences(rolling_window_step, layer, x, 3)
    >>> [d < 1e-5 for d in found]
    [True, True, True, True, True, True, True]

    Introduced in 10_modern_attention.
    """
    b, t, _ = x.shape
    buffer = RollingBuffer.for_layer(layer, b, window, dtype=x.dtype) if buffer is None else buffer
    with torch.no_grad():
        whole = rotary_window_dense(layer, x, window)  # (b, t, d_model)
        outs = [step(layer, x[:, p : p + 1], buffer, p) for p in range(t)]  # each (b, 1, d_model)
    return [float((out - whole[:, p : p + 1]).abs().max()) for p, out in enumerate(outs)]
