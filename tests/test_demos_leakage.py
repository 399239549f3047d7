"""Tests of attn_course.demos.leakage: Jacobian block norms and perturb-the-future."""

from __future__ import annotations

import pytest
import torch

from attn_course.demos.leakage import (
    jacobian_block_norms,
    leaked_gradient,
    past_outputs_unchanged,
    perturb_future,
)
from attn_course.reference import attention


def self_attention_layer(d_model: int, seed: int, dtype: torch.dtype, is_causal: bool):
    """A seeded single-head self-attention layer x (..., T, d_model) -> (..., T, d_model)."""
    generator = torch.Generator().manual_seed(seed)
    w_q, w_k, w_v = torch.randn(3, d_model, d_model, generator=generator, dtype=dtype)

    def layer(x: torch.Tensor) -> torch.Tensor:
        out, _ = attention(x @ w_q, x @ w_k, x @ w_v, is_causal=is_causal)  # (..., T, d_model)
        return out

    return layer


@pytest.mark.parametrize("seed, t, d", [(0, 1, 1), (1, 4, 3), (2, 7, 5)])
def test_jacobian_block_norms_of_a_position_mixing_matrix(seed: int, t: int, d: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    mixing = torch.randn(t, t, generator=generator, dtype=torch.float64)
    x = torch.randn(t, d, generator=generator, dtype=torch.float64)
    norms = jacobian_block_norms(lambda x: mixing @ x, x)  # d out[i, o] / d x[j, o] = mixing[i, j]
    torch.testing.assert_close(norms, mixing.abs() * d**0.5, atol=1e-12, rtol=1e-12)


def test_jacobian_block_norms_handles_different_widths() -> None:
    x = torch.ones(3, 2, dtype=torch.float64)
    norms = jacobian_block_norms(lambda x: torch.cat([x, x, x], dim=-1).cumsum(dim=0), x)
    expected = torch.ones(3, 3, dtype=torch.float64).tril() * 6**0.5
    torch.testing.assert_close(norms, expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4)])
def test_jacobian_block_norms_rejects_inputs_that_are_not_t_by_d(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\(T, d_in\)"):
        jacobian_block_norms(lambda x: x, torch.ones(shape))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed, t, d_model", [(0, 5, 4), (1, 7, 6), (2, 9, 3)])
def test_causal_attention_leaks_exactly_zero_gradient(
    seed: int, t: int, d_model: int, dtype: torch.dtype
) -> None:
    layer = self_attention_layer(d_model, seed, dtype, is_causal=True)
    x = torch.randn(t, d_model, generator=torch.Generator().manual_seed(seed + 100), dtype=dtype)
    norms = jacobian_block_norms(layer, x)  # (T, T)
    assert leaked_gradient(norms) == 0.0
    assert torch.equal(norms, norms.tril())
    assert (norms.diagonal() > 0).all()


@pytest.mark.parametrize("seed, t, d_model", [(0, 5, 4), (1, 7, 6)])
def test_unmasked_attention_leaks(seed: int, t: int, d_model: int) -> None:
    layer = self_attention_layer(d_model, seed, torch.float64, is_causal=False)
    x = torch.randn(t, d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    norms = jacobian_block_norms(layer, x)  # (T, T)
    assert leaked_gradient(norms) > 1e-3
    above_diagonal = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)  # (T, T)
    assert (norms[above_diagonal] > 0).all()


def test_leaked_gradient_reads_only_above_the_diagonal() -> None:
    norms = torch.tensor([[1.0, 0.0, 0.0], [5.0, 1.0, 0.0], [5.0, 5.0, 1.0]])
    assert leaked_gradient(norms) == 0.0
    norms[0, 2] = 0.25
    assert leaked_gradient(norms) == 0.25


@pytest.mark.parametrize("shape, position", [((5, 3), 0), ((5, 3), 2), ((2, 4, 6, 3), 4)])
def test_perturb_future_changes_only_the_rows_after_position(shape: tuple[int, ...], position: int) -> None:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    original = x.clone()
    perturbed = perturb_future(x, position, torch.Generator().manual_seed(1))
    assert torch.equal(x, original), "the input must not be modified"
    assert perturbed.shape == x.shape and perturbed.dtype == x.dtype
    assert torch.equal(perturbed[..., : position + 1, :], x[..., : position + 1, :])
    assert (perturbed[..., position + 1 :, :] != x[..., position + 1 :, :]).all()


def test_perturb_future_is_reproducible_with_a_generator() -> None:
    x = torch.zeros(4, 2)
    first = perturb_future(x, 0, torch.Generator().manual_seed(3))
    second = perturb_future(x, 0, torch.Generator().manual_seed(3))
    assert torch.equal(first, second)


def test_perturbing_the_last_position_changes_nothing() -> None:
    x = torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(perturb_future(x, 3), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed, shape", [(0, (6, 4)), (1, (3, 9, 5)), (2, (2, 2, 7, 3))])
def test_causal_attention_past_outputs_are_bitwise_unchanged(
    seed: int, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    layer = self_attention_layer(shape[-1], seed, dtype, is_causal=True)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    for position in range(shape[-2]):
        generator = torch.Generator().manual_seed(seed + position)
        assert past_outputs_unchanged(layer, x, position, generator), f"position {position}"


def test_unmasked_attention_past_outputs_change() -> None:
    layer = self_attention_layer(4, 0, torch.float64, is_causal=False)
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert not any(past_outputs_unchanged(layer, x, position) for position in range(5))


def test_a_function_reading_the_future_is_caught() -> None:
    def reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
        return x.flip(-2).cumsum(dim=-2).flip(-2)  # (..., T, d): row i sums rows i..T-1

    x = torch.randn(5, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert not past_outputs_unchanged(reverse_cumsum, x, position=2)
    assert leaked_gradient(jacobian_block_norms(reverse_cumsum, x)) > 0
