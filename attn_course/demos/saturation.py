"""What large scores do to softmax: sharper weights, smaller gradients.

Scores of random unit-variance queries and keys have variance d_k. Unscaled, they grow with d_k
and softmax saturates: the weights go one-hot (entropy to 0, largest weight to 1) and its Jacobian
J = diag(p) - p pᵀ goes to zero, so almost no gradient flows back to the scores.

>>> measure_saturation((4, 256), scaled=False).max_weight.shape
torch.Size([2])

Introduced in 02_scaling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from einops import einsum

from attn_course.attention import dot_product_scores, softmax


def entropy(weights: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats of distributions along `dim` (0 log 0 counts as 0).

    >>> entropy(torch.tensor([[0.5, 0.5], [1.0, 0.0]]))
    tensor([0.6931, 0.0000])

    Introduced in 02_scaling.
    """
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))  # same shape
    return (-weights * logs).sum(dim=dim) + 0.0  # weights.shape without `dim`; + 0.0 clears -0.0


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """Jacobian J[i, j] = dp_i/ds_j = p_i (δ_ij - p_j) of p = softmax(s), from p: diag(p) - p pᵀ.

    >>> softmax_jacobian(torch.full((3, 4), 0.25)).shape
    torch.Size([3, 4, 4])

    Introduced in 02_scaling.
    """
    outer = einsum(p, p, "... i, ... j -> ... i j")  # (..., n, n)
    return torch.diag_embed(p) - outer  # (..., n, n)


def softmax_grad_norm(scores: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    """Norm of dL/dscores per row, by autograd, for L = sum(upstream * softmax(scores)).

    The gradient is J · upstream row by row, so it measures how much of a downstream signal
    softmax lets through to the scores.

    >>> softmax_grad_norm(torch.zeros(5, 3), torch.randn(5, 3)).shape
    torch.Size([5])

    Introduced in 02_scaling.
    """
    leaf = scores.detach().clone().requires_grad_(True)  # (..., n)
    with torch.enable_grad():
        loss = (upstream.detach() * softmax(leaf, dim=-1)).sum()
        (grad,) = torch.autograd.grad(loss, leaf)  # (..., n)
    return grad.norm(dim=-1)  # (...,)


def random_scores(
    d_k: int,
    n_queries: int,
    n_keys: int,
    *,
    scaled: bool,
    generator: torch.Generator,
) -> torch.Tensor:
    """Scores q·kᵀ (divided by sqrt(d_k) when `scaled`) of N(0, 1) queries and keys of width d_k.

    >>> random_scores(64, 5, 7, scaled=True, generator=torch.Generator().manual_seed(0)).shape
    torch.Size([5, 7])

    Introduced in 02_scaling.
    """
    q = torch.randn(n_queries, d_k, generator=generator, dtype=torch.float64)  # (T_q, d_k)
    k = torch.randn(n_keys, d_k, generator=generator, dtype=torch.float64)  # (T_k, d_k)
    scores = dot_product_scores(q, k)  # (T_q, T_k)
    return scores / math.sqrt(d_k) if scaled else scores


def paired_scores(d_k: int, n_pairs: int, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """One score q·k for each of `n_pairs` independent pairs q, k with N(0, 1) components of width d_k.

    The scores themselves, for a histogram of what `score_variance` summarises in one number.

    >>> paired_scores(64, 5, generator=torch.Generator().manual_seed(0)).shape
    torch.Size([5])

    Introduced in 02_scaling.
    """
    q = torch.randn(n_pairs, d_k, generator=generator, dtype=torch.float64)  # (n, d_k)
    k = torch.randn(n_pairs, d_k, generator=generator, dtype=torch.float64)  # (n, d_k)
    return einsum(q, k, "n d, n d -> n")  # (n,)


@dataclass(frozen=True)
class Saturation:
    """How saturated softmax is over random scores, one entry per d_k (float64 tensors)."""

    d_ks: tuple[int, ...]
    """The widths measured, in order."""
    entropy: torch.Tensor
    """(n_d,) mean entropy of a query's weights, in nats; log(n_keys) is uniform, 0 one-hot."""
    max_weight: torch.Tensor
    """(n_d,) mean largest weight of a query; 1/n_keys is uniform, 1 one-hot."""
    jacobian_norm: torch.Tensor
    """(n_d,) median over queries of the Frobenius norm of J = diag(p) - p pᵀ."""
    grad_norm: torch.Tensor
    """(n_d,) median over queries of |dL/dscores| by autograd, for N(0, 1) upstream gradients."""


def measure_saturation(
    d_ks: Sequence[int],
    *,
    scaled: bool,
    n_queries: int = 512,
    n_keys: int = 16,
    seed: int = 0,
) -> Saturation:
    """Entropy, largest weight, Jacobian norm and gradient norm of softmax over random scores.

    Deterministic given `seed`; every d_k uses its own generator seeded with `seed`, so the
    scaled and unscaled measurements see the same queries, keys and upstream gradients.
    The norms are medians, the typical query: a few near-ties would dominate a mean. For N(0, 1)
    upstream gradients g, E|J g|² = |J|²_F, so grad_norm and jacobian_norm have the same size.

    >>> s = measure_saturation((4, 1024), scaled=False)
    >>> bool(s.max_weight[1] > s.max_weight[0])
    True

    Introduced in 02_scaling.
    """
    entropies, max_weights, jacobian_norms, grad_norms = [], [], [], []
    for d_k in d_ks:
        generator = torch.Generator().manual_seed(seed)
        scores = random_scores(d_k, n_queries, n_keys, scaled=scaled, generator=generator)  # (T_q, T_k)
        upstream = torch.randn(n_queries, n_keys, generator=generator, dtype=torch.float64)  # (T_q, T_k)
        p = softmax(scores, dim=-1)  # (T_q, T_k)
        jacobian = softmax_jacobian(p)  # (T_q, T_k, T_k)
        entropies.append(entropy(p).mean())
        max_weights.append(p.amax(dim=-1).mean())
        jacobian_norms.append(torch.linalg.matrix_norm(jacobian).median())  # Frobenius per query
        grad_norms.append(softmax_grad_norm(scores, upstream).median())
    return Saturation(
        d_ks=tuple(int(d) for d in d_ks),
        entropy=torch.stack(entropies),  # (n_d,)
        max_weight=torch.stack(max_weights),  # (n_d,)
        jacobian_norm=torch.stack(jacobian_norms),  # (n_d,)
        grad_norm=torch.stack(grad_norms),  # (n_d,)
    )
