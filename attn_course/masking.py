"""Boolean attention masks: True marks a position a query may attend.

Introduced in 03_causal_masking.
"""

from __future__ import annotations

import torch

from attn_course.exercise import exercise


@exercise("03_causal_masking", 1)
def causal_mask(t_q: int, t_k: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Causal mask (t_q, t_k), True where query i may attend key j.

    With t_k > t_q the queries are the last t_q positions (bottom-right aligned), as when
    decoding with a cache: query i sits at absolute position i + t_k - t_q. With t_q > t_k the
    first t_q - t_k rows are all False (those queries sit before the first key): the course's
    attention gives them output 0, as PyTorch's SDPA does.

    >>> causal_mask(2, 4)
    tensor([[ True,  True,  True, False],
            [ True,  True,  True,  True]])

    Introduced in 03_causal_masking.
    """
    t_k = t_q if t_k is None else t_k
    ones = torch.ones(t_q, t_k, dtype=torch.bool, device=device)  # (t_q, t_k)
    return torch.tril(ones, diagonal=t_k - t_q)  # (t_q, t_k)


@exercise("03_causal_masking", 2)
def padding_mask(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """Padding mask (B, t), True for the first lengths[b] (real) tokens of each sequence.

    >>> padding_mask(torch.tensor([1, 3]), 4)
    tensor([[ True, False, False, False],
            [ True,  True,  True, False]])

    Introduced in 03_causal_masking.
    """
    lengths = torch.as_tensor(lengths)
    positions = torch.arange(t, device=lengths.device)  # (t,)
    return positions[None, :] < lengths[:, None]  # (B, t)
