"""Small numerical experiments behind the derivations.

Introduced in 02_scaling.
"""

from __future__ import annotations

import math

import torch

from attn_course.exercise import exercise


@exercise("02_scaling", 1)
def score_variance(d_k: int, n_samples: int = 20_000, scaled: bool = False) -> float:
    """Sample variance of q·k for q, k with independent N(0, 1) components of width d_k.

    With `scaled`, the scores are divided by sqrt(d_k) first. Theory: d_k unscaled, 1 scaled.

    >>> round(score_variance(64) / 64, 1)
    1.0

    Introduced in 02_scaling.
    """
    q = torch.randn(n_samples, d_k, dtype=torch.float64)  # (n, d_k)
    k = torch.randn(n_samples, d_k, dtype=torch.float64)  # (n, d_k)
    scores = (q * k).sum(dim=-1)  # (n,)
    if scaled:
        scores = scores / math.sqrt(d_k)
    return scores.var().item()
