"""Tests for attn_course/demos/cost.py: measured memory matches the formula, fits find the exponent."""

from __future__ import annotations

import math

import pytest
import torch

from attn_course.attention import dot_product_attention, dot_product_scores
from attn_course.demos.cost import (
    AllocationTracker,
    CostRow,
    PowerLaw,
    fit_power_law,
    measure_cost,
    median_seconds,
    score_matrix_bytes,
)


@pytest.mark.parametrize("t", [8, 64, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tracker_measures_the_score_matrix(t: int, dtype: torch.dtype) -> None:
    q, k = torch.randn(2, t, 16, dtype=dtype)  # 2 × (T, 16)
    with AllocationTracker() as tracker:
        scores = dot_product_scores(q, k)  # (T, T)
    assert scores.shape == (t, t)
    # The score matrix is the only T×T tensor; other allocations (if any) are smaller.
    assert max(tracker.allocations) == score_matrix_bytes(t, t, dtype) == dtype.itemsize * t * t


def test_tracker_ignores_views_and_in_place_results() -> None:
    x = torch.randn(32, 32)  # (32, 32)
    with AllocationTracker() as tracker:
        y = x.transpose(0, 1)  # (32, 32) view
        y.mul_(2.0)
        z = x[:4]  # (4, 32) view
        w = x + 1.0  # (32, 32), new
    assert y.shape == (32, 32) and z.shape == (4, 32) and w.shape == (32, 32)
    assert tracker.allocations == [4 * 32 * 32]


def test_score_matrix_bytes_formula() -> None:
    assert score_matrix_bytes(1024) == 4 * 1024**2
    assert score_matrix_bytes(3, 5, torch.float16) == 2 * 3 * 5
    assert score_matrix_bytes(3, 5, torch.float64) == 8 * 3 * 5


def test_measure_cost_rows_match_the_formula() -> None:
    lengths = [32, 64, 128]
    rows = measure_cost(dot_product_attention, lengths, d=8, repeats=2, warmup=1)
    assert [row.t for row in rows] == lengths
    for row in rows:
        assert isinstance(row, CostRow)
        assert row.d == 8
        assert row.seconds > 0
        assert row.score_bytes == 4 * row.t**2
        assert row.largest_bytes == row.score_bytes
        # A plain softmax(q kᵀ) v materialises several T×T matrices, never fewer than one.
        assert row.score_bytes < row.allocated_bytes < 8 * row.score_bytes
    memory = fit_power_law(lengths, [row.largest_bytes for row in rows])
    assert memory.exponent == pytest.approx(2.0, abs=1e-9)


def test_measure_cost_does_not_change_the_global_random_state() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    measure_cost(dot_product_scores_of_qkv, [4], d=2, repeats=1, warmup=0)
    torch.testing.assert_close(torch.rand(3), expected, atol=0.0, rtol=0.0)


def dot_product_scores_of_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return dot_product_scores(q, k)  # (T, T)


def test_median_seconds_counts_calls() -> None:
    calls = []
    seconds = median_seconds(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5
    assert seconds >= 0
    with pytest.raises(ValueError, match="repeats"):
        median_seconds(lambda: None, repeats=0)


@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0])
def test_fit_power_law_recovers_a_synthetic_power_law(exponent: float) -> None:
    x = [128, 256, 512, 1024, 2048]
    y = [3e-9 * t**exponent for t in x]
    fit = fit_power_law(x, y)
    assert fit.exponent == pytest.approx(exponent, abs=1e-9)
    assert fit.prefactor == pytest.approx(3e-9, rel=1e-6)
    assert fit(4096) == pytest.approx(3e-9 * 4096**exponent, rel=1e-6)


def test_fit_power_law_of_noisy_quadratic_is_about_two() -> None:
    generator = torch.Generator().manual_seed(0)
    x = [2.0**p for p in range(7, 12)]
    noise = (1.0 + 0.1 * torch.rand(len(x), generator=generator)).tolist()
    fit = fit_power_law(x, [t**2 * n for t, n in zip(x, noise, strict=True)])
    assert fit.exponent == pytest.approx(2.0, abs=0.05)


@pytest.mark.parametrize(
    ("x", "y", "phrase"),
    [
        ([1.0], [1.0], "at least two"),
        ([1.0, 2.0], [0.0, 1.0], "positive"),
        ([2.0, 2.0], [1.0, 3.0], "different"),
    ],
)
def test_fit_power_law_rejects_bad_input(x: list[float], y: list[float], phrase: str) -> None:
    with pytest.raises(ValueError, match=phrase):
        fit_power_law(x, y)


def test_power_law_is_callable() -> None:
    assert PowerLaw(exponent=2.0, prefactor=4.0)(3.0) == 36.0
    assert math.isclose(PowerLaw(exponent=0.5, prefactor=1.0)(16.0), 4.0)


@pytest.mark.parametrize("threads", [1, None])
def test_measure_cost_restores_the_number_of_threads(threads: int | None) -> None:
    before = torch.get_num_threads()
    seen = []

    def record_threads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return dot_product_scores(q, k)  # (T, T)

    measure_cost(record_threads, [4], d=2, repeats=1, warmup=0, threads=threads)
    assert set(seen) == {before if threads is None else threads}
    assert torch.get_num_threads() == before
