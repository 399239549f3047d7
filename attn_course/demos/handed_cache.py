"""A cached decoding step that is subtly wrong, handed to the learner of notebook 07 to diagnose.

`colleagues_cached_attention` looks right and matches the layer on a prompt fed in one chunk: both
of its mistakes vanish while the cache is empty. `chunk_differences` is the test that finds them,
feeding a sequence in chunks through one cache and comparing each chunk with the whole sequence.

Introduced in 07_kv_cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from einops import rearrange

from attn_course.kv_cache import KVCache
from attn_course.rope import RotaryMultiHeadAttention, apply_rope


def colleagues_cached_attention(
    attn: RotaryMultiHeadAttention, x: torch.Tensor, cache: KVCache, layer: int
) -> torch.Tensor:
    """A colleague's cached attention step (b, t_new, d_model): right on a prefill, wrong after it."""
    t_new = x.shape[1]
    positions = torch.arange(t_new, device=x.device)  # (t_new,)
    q, k, v = attn.project(x)  # each (b, h, t_new, d_k)
    q, k = apply_rope(q, positions, attn.base), apply_rope(k, positions, attn.base)  # each (b, h, t_new, d_k)
    keys, values = cache.append(layer, k, v)  # each (b, h, t_past + t_new, d_k)
    out = F.scaled_dot_product_attention(q, keys, values, is_causal=True)  # (b, h, t_new, d_k)
    return attn.out(rearrange(out, "b h t d -> b t (h d)"))  # (b, t_new, d_model)


def chunk_differences(
    attend: Callable[..., torch.Tensor],
    attn: RotaryMultiHeadAttention,
    x: torch.Tensor,
    chunks: Sequence[int],
) -> list[float]:
    """Feed x (b, t, d_model) to `attend` in chunks through one fresh cache; each chunk's largest difference.

    The difference is against `attn(x, is_causal=True)`, the layer on the whole sequence, at the
    chunk's positions: 0 (up to rounding) for every chunk when `attend` is right.

    >>> attn = RotaryMultiHeadAttention(8, 2)
    >>> from attn_course.kv_cache import cached_attention
    >>> [d < 1e-5 for d in chunk_differences(cached_attention, attn, torch.randn(1, 5, 8), [3, 1, 1])]
    [True, True, True]

    Introduced in 07_kv_cache.
    """
    if sum(chunks) != x.shape[1]:
        raise ValueError(
            f"the chunks {list(chunks)} add up to {sum(chunks)}, not the {x.shape[1]} positions of x"
        )
    cache, start, found = KVCache(), 0, []
    with torch.no_grad():
        whole = attn(x, is_causal=True)  # (b, t, d_model)
        for t_new in chunks:
            got = attend(attn, x[:, start : start + t_new], cache, 0)  # (b, t_new, d_model)
            found.append(float((got - whole[:, start : start + t_new]).abs().max()))
            start += t_new
    return found


def show_chunk_differences(
    attend: Callable[..., torch.Tensor],
    attn: RotaryMultiHeadAttention,
    x: torch.Tensor,
    chunks: Sequence[int],
) -> list[float] | None:
    """Print `chunk_differences` of `attend` in one line; or what stops it from running (a stub, an error).

    Notebook 07's own test of the learner's cached step, before its check: it runs the learner's
    function as it is now, so that each fix shows what it changed.

    >>> from attn_course.kv_cache import cached_attention
    >>> attn, x = RotaryMultiHeadAttention(8, 2), torch.randn(1, 4, 8)
    >>> found = show_chunk_differences(cached_attention, attn, x, [3, 1])  # doctest: +ELLIPSIS
    chunks [3, 1]: largest difference per chunk ...

    Introduced in 07_kv_cache.
    """
    try:
        found = chunk_differences(attend, attn, x, chunks)
    except NotImplementedError:
        print("Your cached_attention is not written yet: copy the colleague's function into its cell.")
        return None
    except Exception as error:  # noqa: BLE001 - the learner's code, mid-fix: its check says where
        print(f"Your cached_attention raised {type(error).__name__}: {error} (its check says where).")
        return None
    print(f"chunks {list(chunks)}: largest difference per chunk", ", ".join(f"{d:.1e}" for d in found))
    return found
