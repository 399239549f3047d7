"""Generation with the KV cache: prefill, one token per step, and how each token is picked.

`generate_with_cache` runs the prompt through the model once (the prefill) and then feeds only the
newest token; `pick(logits)` chooses each token: greedily (`greedy`) or by sampling from
`next_token_probs` (softmax at a temperature, restricted to the top k) with `sample_next`.

Introduced in 07_kv_cache.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attn_course.decoder import CachedAttention, TinyDecoder
from attn_course.exercise import exercise
from attn_course.kv_cache import KVCache, cached_attention

Pick = Callable[[torch.Tensor], torch.Tensor]
"""pick(logits (b, vocab_size)) -> the chosen tokens (b, 1), dtype long."""


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The most likely token of each row: logits (b, vocab_size) -> (b, 1).

    >>> greedy(torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.0]])).tolist()
    [[1], [0]]

    Introduced in 07_kv_cache.
    """
    return logits.argmax(dim=-1, keepdim=True)  # (b, 1)


@exercise("07_kv_cache", 5)
@torch.no_grad()
def generate_with_cache(
    model: TinyDecoder,
    prompt: torch.Tensor,
    n_new: int,
    pick: Pick,
    cache: KVCache,
    attend: CachedAttention = cached_attention,
) -> torch.Tensor:
    """Extend prompt (b, t) by n_new tokens chosen by `pick`, with the cache -> (b, t + n_new).

    The whole prompt goes through `model.step` once (the prefill); every later step feeds only the
    token just picked, (b, 1), and reads the logits of the last position.

    >>> from attn_course.decoder import DecoderConfig
    >>> model = TinyDecoder(DecoderConfig(vocab_size=10, n_layers=2, n_heads=2, d_model=16, d_mlp=32))
    >>> generate_with_cache(model, torch.zeros(2, 3, dtype=torch.long), 5, greedy, KVCache()).shape
    torch.Size([2, 8])

    Introduced in 07_kv_cache.
    """
    tokens = prompt  # (b, t)
    logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): the prefill
    for i in range(n_new):
        next_token = pick(logits)  # (b, 1)
        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)
        if i < n_new - 1:
            logits = model.step(next_token, cache, attend)[:, -1]  # (b, vocab_size): the new token only
    return tokens


@exercise("07_kv_cache", 6)
def next_token_probs(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None
) -> torch.Tensor:
    """softmax(logits / temperature) over each row's top_k largest logits, others 0: (b, vocab) -> (b, vocab).

    >>> next_token_probs(torch.tensor([[2.0, 1.0, 0.0]]), temperature=1.0, top_k=2)
    tensor([[0.7311, 0.2689, 0.0000]])

    Introduced in 07_kv_cache.
    """
    scaled = logits / temperature  # (b, vocab_size)
    if top_k is not None:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (b, 1): the k-th largest of each row
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))  # (b, vocab_size)
    return torch.softmax(scaled, dim=-1)  # (b, vocab_size)


@exercise("07_kv_cache", 7)
def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator
) -> torch.Tensor:
    """One token per row drawn from next_token_probs(logits, temperature, top_k): (b, vocab) -> (b, 1).

    >>> g = torch.Generator().manual_seed(0)
    >>> sample_next(torch.tensor([[0.0, 5.0, 0.0]]), 1.0, 1, g).tolist()
    [[1]]

    Introduced in 07_kv_cache.
    """
    probs = next_token_probs(logits, temperature, top_k)  # (b, vocab_size)
    return torch.multinomial(probs, 1, generator=generator)  # (b, 1)


def sampler(temperature: float, top_k: int | None, generator: torch.Generator) -> Pick:
    """A `pick` for generate_with_cache that samples at this temperature and top_k.

    Introduced in 07_kv_cache.
    """

    def pick(logits: torch.Tensor) -> torch.Tensor:
        return sample_next(logits, temperature, top_k, generator)  # (b, 1)

    return pick
