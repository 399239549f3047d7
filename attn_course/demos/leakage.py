"""Proofs that nothing leaks from the future: gradients and perturbations of sequence models.

A sequence function maps inputs (T, d_in) to outputs (T, d_out), one row per position. It is
causal when output i depends on inputs j <= i only. Two ways to see it: the gradient of output i
with respect to input j > i is exactly zero, and changing the inputs after a position leaves
every output up to that position bit-for-bit unchanged.

Introduced in 03_causal_masking.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from einops import reduce

SequenceFn = Callable[[torch.Tensor], torch.Tensor]
"""A function from inputs (T, d_in) to outputs (T, d_out), one row per position."""


def jacobian_block_norms(fn: SequenceFn, x: torch.Tensor) -> torch.Tensor:
    """(T_out, T_in) Frobenius norms of d fn(x)[i] / d x[j], computed with autograd.

    >>> jacobian_block_norms(lambda x: x.cumsum(dim=0), torch.ones(3, 2))
    tensor([[1.4142, 0.0000, 0.0000],
            [1.4142, 1.4142, 0.0000],
            [1.4142, 1.4142, 1.4142]])

    Introduced in 03_causal_masking.
    """
    if x.dim() != 2:
        raise ValueError(f"expected inputs of shape (T, d_in), got {tuple(x.shape)}")
    jacobian = torch.autograd.functional.jacobian(fn, x)  # (T_out, d_out, T_in, d_in)
    if jacobian.dim() != 4:
        shape = tuple(jacobian.shape)
        raise ValueError(f"expected fn to return (T, d_out), got a Jacobian of shape {shape}")
    return reduce(jacobian**2, "i o j d -> i j", "sum").sqrt()  # (T_out, T_in)


def leaked_gradient(norms: torch.Tensor) -> float:
    """Largest Jacobian block norm above the diagonal (output i, input j > i): 0.0 when causal.

    >>> leaked_gradient(torch.tensor([[1.0, 0.0], [2.0, 3.0]]))
    0.0

    Introduced in 03_causal_masking.
    """
    return norms.triu(diagonal=1).abs().max().item()


def perturb_future(x: torch.Tensor, position: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Copy of x (..., T, d) whose rows after `position` are replaced by fresh normal noise.

    >>> x = torch.zeros(4, 2)
    >>> bool((perturb_future(x, 1)[:2] == 0).all()), bool((perturb_future(x, 1)[2:] != 0).all())
    (True, True)

    Introduced in 03_causal_masking.
    """
    perturbed = x.clone()  # (..., T, d)
    future_shape = perturbed[..., position + 1 :, :].shape  # (..., T - position - 1, d)
    noise = torch.randn(future_shape, generator=generator, dtype=x.dtype, device=x.device)
    perturbed[..., position + 1 :, :] = noise
    return perturbed


def past_outputs_unchanged(
    fn: SequenceFn, x: torch.Tensor, position: int, generator: torch.Generator | None = None
) -> bool:
    """Whether fn's outputs up to `position` stay bit-for-bit equal when the future is perturbed.

    >>> past_outputs_unchanged(lambda x: x.cumsum(dim=-2), torch.zeros(4, 2), position=1)
    True

    Introduced in 03_causal_masking.
    """
    before = fn(x)[..., : position + 1, :]  # (..., position + 1, d_out)
    perturbed = perturb_future(x, position, generator)  # (..., T, d_in)
    after = fn(perturbed)[..., : position + 1, :]  # (..., position + 1, d_out)
    return torch.equal(before, after)
