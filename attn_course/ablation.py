"""Ablation: switch attention heads off and measure what the model loses.

A head's output is the slice h·d_k … (h+1)·d_k of the merged heads that the layer's output
projection reads; zeroing those columns of `attn.out.weight` removes the head's contribution to the
residual stream and leaves everything else as it was.

Introduced in 07_kv_cache.
"""

from __future__ import annotations

import copy
from typing import cast

import torch

from attn_course.decoder import Block, TinyDecoder
from attn_course.exercise import exercise


@exercise("07_kv_cache", 2)
def ablate_heads(model: TinyDecoder, heads: list[tuple[int, int]]) -> TinyDecoder:
    """A copy of `model` with each (layer, head) of `heads` switched off; `model` stays as it was.

    >>> from attn_course.decoder import DecoderConfig
    >>> model = TinyDecoder(DecoderConfig(vocab_size=10, n_layers=2, n_heads=2, d_model=16, d_mlp=32))
    >>> ablated = ablate_heads(model, [(1, 0)])
    >>> ablated.blocks[1].attn.out.weight[:, :8].abs().sum().item(), model is ablated
    (0.0, False)

    Introduced in 07_kv_cache.
    """
    ablated = copy.deepcopy(model)
    d_k = model.config.d_model // model.config.n_heads
    blocks = cast("list[Block]", ablated.blocks)  # nn.ModuleList is not generic
    with torch.no_grad():
        for layer, head in heads:
            blocks[layer].attn.out.weight[:, head * d_k : (head + 1) * d_k] = 0.0  # the columns head h writes
    return ablated
