"""Tests of attn_course/demos/saturation.py: what large scores do to softmax."""

from __future__ import annotations

import math

import pytest
import torch

from attn_course.attention import softmax
from attn_course.demos.saturation import (
    entropy,
    measure_saturation,
    paired_scores,
    random_scores,
    softmax_grad_norm,
    softmax_jacobian,
)


def test_entropy_of_uniform_and_one_hot() -> None:
    weights = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(
        entropy(weights), torch.tensor([math.log(4), 0.0], dtype=torch.float64), atol=1e-12, rtol=0
    )


def test_entropy_reduces_the_chosen_dim() -> None:
    weights = softmax(torch.randn(3, 5, 7), dim=1)  # (3, 5, 7), distributions along dim 1
    assert entropy(weights, dim=1).shape == (3, 7)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [2, 5, 16])
def test_softmax_jacobian_matches_autograd(seed: int, n: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=generator, dtype=torch.float64) * 3
    expected = torch.autograd.functional.jacobian(lambda s: softmax(s, dim=-1), scores)  # (n, n)
    actual = softmax_jacobian(softmax(scores, dim=-1))  # (n, n)
    torch.testing.assert_close(actual, expected, atol=1e-12, rtol=1e-10)


def test_softmax_jacobian_is_batched_symmetric_and_rows_sum_to_zero() -> None:
    p = softmax(torch.randn(4, 3, 6, dtype=torch.float64), dim=-1)  # (4, 3, 6)
    jacobian = softmax_jacobian(p)  # (4, 3, 6, 6)
    assert jacobian.shape == (4, 3, 6, 6)
    torch.testing.assert_close(jacobian, jacobian.transpose(-1, -2), atol=0, rtol=0)
    torch.testing.assert_close(
        jacobian.sum(dim=-1), torch.zeros(4, 3, 6, dtype=torch.float64), atol=1e-15, rtol=0
    )


def test_softmax_jacobian_vanishes_for_one_hot() -> None:
    one_hot = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    assert torch.count_nonzero(softmax_jacobian(one_hot)) == 0


@pytest.mark.parametrize("seed", [0, 3])
def test_softmax_grad_norm_is_jacobian_times_upstream(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(5, 8, generator=generator, dtype=torch.float64)  # (5, 8)
    upstream = torch.randn(5, 8, generator=generator, dtype=torch.float64)  # (5, 8)
    jacobian = softmax_jacobian(softmax(scores, dim=-1))  # (5, 8, 8)
    expected = torch.einsum("tij,tj->ti", jacobian, upstream).norm(dim=-1)  # (5,)
    torch.testing.assert_close(softmax_grad_norm(scores, upstream), expected, atol=1e-12, rtol=1e-10)


def test_softmax_grad_norm_leaves_its_inputs_alone() -> None:
    scores = torch.randn(3, 4, requires_grad=True)
    softmax_grad_norm(scores, torch.ones(3, 4))
    assert scores.grad is None


def test_softmax_grad_norm_works_under_no_grad() -> None:
    with torch.no_grad():
        norms = softmax_grad_norm(torch.randn(3, 4), torch.randn(3, 4))
    assert norms.shape == (3,) and bool((norms > 0).all())


def test_random_scores_have_variance_d_k_or_one() -> None:
    raw = random_scores(256, 400, 50, scaled=False, generator=torch.Generator().manual_seed(0))
    scaled = random_scores(256, 400, 50, scaled=True, generator=torch.Generator().manual_seed(0))
    assert raw.shape == (400, 50)
    torch.testing.assert_close(scaled, raw / 16, atol=1e-12, rtol=0)
    assert 0.9 * 256 < raw.var().item() < 1.1 * 256
    assert 0.9 < scaled.var().item() < 1.1


def test_paired_scores_are_one_score_per_pair_with_variance_d_k() -> None:
    scores = paired_scores(64, 20_000, generator=torch.Generator().manual_seed(0))
    again = paired_scores(64, 20_000, generator=torch.Generator().manual_seed(0))
    assert scores.shape == (20_000,) and scores.dtype == torch.float64
    torch.testing.assert_close(scores, again, atol=0, rtol=0)
    assert 0.95 * 64 < scores.var().item() < 1.05 * 64


def test_measure_saturation_is_deterministic_given_the_seed() -> None:
    first = measure_saturation((4, 64), scaled=False, n_queries=64, seed=5)
    second = measure_saturation((4, 64), scaled=False, n_queries=64, seed=5)
    other = measure_saturation((4, 64), scaled=False, n_queries=64, seed=6)
    torch.testing.assert_close(first.entropy, second.entropy, atol=0, rtol=0)
    torch.testing.assert_close(first.grad_norm, second.grad_norm, atol=0, rtol=0)
    assert not torch.equal(first.entropy, other.entropy)


def test_unscaled_scores_saturate_as_d_k_grows() -> None:
    d_ks = (1, 16, 256, 1024)
    n_keys = 16
    raw = measure_saturation(d_ks, scaled=False, n_keys=n_keys)
    assert raw.d_ks == d_ks
    assert raw.entropy.shape == raw.max_weight.shape == raw.grad_norm.shape == (4,)
    assert bool((raw.entropy.diff() < 0).all()), raw.entropy
    assert bool((raw.max_weight.diff() > 0).all()), raw.max_weight
    assert raw.entropy[0] > 0.8 * math.log(n_keys)
    assert raw.max_weight[-1] > 0.9
    # the typical query's Jacobian all but vanishes: far below the 1/sqrt(n) of a uniform row
    assert raw.jacobian_norm[-1] < 1e-3 < 0.2 < raw.jacobian_norm[0]
    assert raw.grad_norm[-1] < 1e-3 < 0.2 < raw.grad_norm[0]


def test_scaled_scores_keep_softmax_out_of_saturation() -> None:
    scaled = measure_saturation((1, 16, 256, 1024), scaled=True)
    assert float(scaled.entropy.max() - scaled.entropy.min()) < 0.15
    assert float(scaled.max_weight.max()) < 0.35
    assert float(scaled.jacobian_norm.min()) > 0.2
    assert float(scaled.grad_norm.min()) > 0.2


def test_jacobian_and_gradient_norms_agree_in_size() -> None:
    for scaled in (False, True):
        s = measure_saturation((1, 16, 256), scaled=scaled)
        ratio = s.grad_norm / s.jacobian_norm
        assert bool(((ratio > 0.2) & (ratio < 5)).all()), ratio
