"""A tiny decoder-only transformer built from the course's parts, and greedy generation with a KV cache.

Read top to bottom like the architecture: the config, the MLP, a Block (pre-norm causal
multi-head attention with RoPE, then an MLP, each around a residual), the TinyDecoder (token
embedding, blocks, final norm, output head; RoPE gives the positions, so there is no position
embedding), then generation with and without the cache and its measurement.

Introduced in 07_kv_cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from attn_course.exercise import exercise
from attn_course.kv_cache import KVCache, cached_attention
from attn_course.rope import RotaryMultiHeadAttention

CachedAttention = Callable[[RotaryMultiHeadAttention, torch.Tensor, KVCache, int], torch.Tensor]
"""cached_attention(attn, x, cache, layer) -> (b, t_new, d_model): one layer's attention with a cache."""


@dataclass
class DecoderConfig:
    """The sizes of a TinyDecoder."""

    vocab_size: int = 32
    """Number of distinct tokens."""
    n_layers: int = 2
    """Number of blocks."""
    n_heads: int = 4
    """Attention heads per block."""
    d_model: int = 64
    """Width of the residual stream."""
    d_mlp: int = 256
    """Hidden width of each block's MLP."""
    rope_base: float = 10000.0
    """RoPE's base, for every attention layer."""


class MLP(nn.Module):
    """Position-wise feed-forward network: Linear, GELU, Linear."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(config.d_model, config.d_mlp)
        self.proj = nn.Linear(config.d_mlp, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(b, t, d_model) -> (b, t, d_model)."""
        return self.proj(F.gelu(self.fc(x)))  # (b, t, d_model)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = RotaryMultiHeadAttention(config.d_model, config.n_heads, base=config.rope_base)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The whole sequence at once, causally: (b, t, d_model) -> (b, t, d_model)."""
        return block_forward(self, x)  # (b, t, d_model)

    def step(self, x: torch.Tensor, cache: KVCache, layer: int, attend: CachedAttention) -> torch.Tensor:
        """New positions only, attending to the cache: (b, t_new, d_model) -> (b, t_new, d_model)."""
        x = x + attend(self.attn, self.ln1(x), cache, layer)  # (b, t_new, d_model)
        return x + self.mlp(self.ln2(x))  # (b, t_new, d_model)


BlockForward = Callable[[Block, torch.Tensor], torch.Tensor]
"""block_forward(block, x) -> (b, t, d_model): one block over the whole sequence."""


@exercise("07_kv_cache", 1)
def block_forward(block: Block, x: torch.Tensor) -> torch.Tensor:
    """The pre-norm block over the whole sequence x (b, t, d_model), causally -> (b, t, d_model).

    >>> block = Block(DecoderConfig(d_model=16, n_heads=2, d_mlp=32))
    >>> block_forward(block, torch.ones(3, 5, 16)).shape
    torch.Size([3, 5, 16])

    Introduced in 07_kv_cache.
    """
    x = x + block.attn(block.ln1(x), is_causal=True)  # (b, t, d_model)
    return x + block.mlp(block.ln2(x))  # (b, t, d_model)


class TinyDecoder(nn.Module):
    """Decoder-only transformer: token embedding, blocks, final LayerNorm, output head.

    >>> model = TinyDecoder(DecoderConfig(vocab_size=10, n_layers=2, n_heads=2, d_model=16, d_mlp=32))
    >>> model(torch.zeros(3, 7, dtype=torch.long)).shape
    torch.Size([3, 7, 10])

    `block_forward(block, x)` runs every block over a whole sequence (default: the course's
    `block_forward`; the notebook passes the learner's). Cached steps use `Block.step`.

    Introduced in 07_kv_cache.
    """

    def __init__(self, config: DecoderConfig, block_forward: BlockForward = block_forward) -> None:
        super().__init__()
        self.config = config
        self.block_forward = block_forward
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits of the next token at every position: idx (b, t) -> (b, t, vocab_size)."""
        x = self.embed(idx)  # (b, t, d_model)
        for block in cast("list[Block]", self.blocks):  # nn.ModuleList is not generic
            x = self.block_forward(block, x)  # (b, t, d_model)
        return self.head(self.ln_f(x))  # (b, t, vocab_size)

    def step(
        self, idx: torch.Tensor, cache: KVCache, attend: CachedAttention = cached_attention
    ) -> torch.Tensor:
        """Logits for new tokens idx (b, t_new) that follow the cached ones -> (b, t_new, vocab_size)."""
        x = self.embed(idx)  # (b, t_new, d_model)
        for layer, block in enumerate(cast("list[Block]", self.blocks)):  # nn.ModuleList is not generic
            x = block.step(x, cache, layer, attend)  # (b, t_new, d_model)
        return self.head(self.ln_f(x))  # (b, t_new, vocab_size)

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Every head's causal attention weights on idx (b, t): (n_layers, b, n_heads, t, t)."""
        x = self.embed(idx)  # (b, t, d_model)
        maps = []
        for block in cast("list[Block]", self.blocks):
            maps.append(block.attn.head_weights(block.ln1(x), is_causal=True))  # (b, h, t, t)
            x = self.block_forward(block, x)  # (b, t, d_model)
        return torch.stack(maps)  # (n_layers, b, h, t, t)


def parameter_count(model: nn.Module) -> int:
    """Number of trainable numbers in the model.

    >>> parameter_count(TinyDecoder(DecoderConfig(vocab_size=10, n_layers=1, n_heads=2, d_model=8, d_mlp=16)))
    776

    Introduced in 07_kv_cache.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ---------------------------------------------------------------------------------------------
# Greedy generation, with and without the cache


@torch.no_grad()
def generate(
    model: TinyDecoder,
    prompt: torch.Tensor,
    n_new: int,
    *,
    use_cache: bool = True,
    attend: CachedAttention = cached_attention,
    make_cache: Callable[[], KVCache] = KVCache,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedily extend prompt (b, t) by n_new tokens; return the tokens (b, t + n_new) and the logits
    (b, n_new, vocab_size) each new token was chosen from.

    Without the cache every step runs the model over the whole sequence so far (O(T²) attention per
    token); with it, the prompt fills the cache in one prefill step and every later step feeds the
    newest token only, through `attend` (default: the package's cached_attention).

    >>> model = TinyDecoder(DecoderConfig(vocab_size=10, n_layers=2, n_heads=2, d_model=16, d_mlp=32))
    >>> tokens, logits = generate(model, torch.zeros(2, 3, dtype=torch.long), n_new=5)
    >>> tokens.shape, logits.shape
    (torch.Size([2, 8]), torch.Size([2, 5, 10]))

    Introduced in 07_kv_cache.
    """
    tokens, all_logits = prompt, []
    if n_new == 0:
        return prompt, prompt.new_zeros(prompt.shape[0], 0, model.config.vocab_size, dtype=torch.float32)
    if use_cache:
        cache = make_cache()
        logits = model.step(prompt, cache, attend)[:, -1]  # (b, vocab_size): prefill the whole prompt
    else:
        logits = model(prompt)[:, -1]  # (b, vocab_size)
    for i in range(n_new):
        next_token = logits.argmax(dim=-1, keepdim=True)  # (b, 1)
        tokens = torch.cat([tokens, next_token], dim=1)  # (b, t + i + 1)
        all_logits.append(logits)
        if i == n_new - 1:
            break
        if use_cache:
            logits = model.step(next_token, cache, attend)[:, -1]  # (b, vocab_size): the new token only
        else:
            logits = model(tokens)[:, -1]  # (b, vocab_size): the whole sequence again
    return tokens, torch.stack(all_logits, dim=1)  # (b, t + n_new), (b, n_new, vocab_size)


def tokens_per_second(
    model: TinyDecoder,
    prompt: torch.Tensor,
    n_new: int,
    *,
    use_cache: bool,
    repeats: int = 3,
    generate_cached: Callable[[TinyDecoder, torch.Tensor, int], object] | None = None,
) -> float:
    """Generated tokens per second (all sequences of the batch), from the median of `repeats` runs.

    With `use_cache` and `generate_cached(model, prompt, n_new)` given (a learner's generation loop and
    cache, say), that is what runs and is timed; otherwise `generate`.

    Introduced in 07_kv_cache.
    """

    @torch.no_grad()
    def run(n: int) -> None:
        if use_cache and generate_cached is not None:
            generate_cached(model, prompt, n)
        else:
            generate(model, prompt, n, use_cache=use_cache)

    run(min(n_new, 4))  # warm-up
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(n_new)
        seconds.append(time.perf_counter() - start)
    return prompt.shape[0] * n_new / sorted(seconds)[len(seconds) // 2]
