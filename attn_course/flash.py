"""Online softmax and tiled (FlashAttention-style) attention: exact, without the T×T matrix.

Introduced in 06_flash_attention.
"""

from __future__ import annotations

import torch


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """softmax(x) over the last axis, streaming that axis in blocks with a running max and sum."""
    raise NotImplementedError  # filled in by issue 4


def flash_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False, block_size: int = 64
) -> torch.Tensor:
    """Attention (..., T_q, d_v) computed block by block, never holding T_q·T_k scores per head."""
    raise NotImplementedError  # filled in by issue 4
