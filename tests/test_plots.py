"""Tests for attn_course/plots/: each plot returns its Axes, labelled, drawn from the data."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from attn_course.demos.cost import CostRow
from attn_course.plots.attention import (
    _convex_hull,
    attention_heatmap,
    convex_hull_plot,
    cost_plot,
    feature_heatmap,
    token_bars,
)
from attn_course.plots.masking import mask_heatmap

TOKENS = ["The", "bank", "of", "river"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_token_bars_draws_one_labelled_bar_per_token() -> None:
    values = torch.tensor([0.1, 0.6, 0.0, 0.3])
    ax = token_bars(values, TOKENS, title="weights of bank", ylabel="weight", highlight=1)
    assert ax.get_title() == "weights of bank"
    assert ax.get_ylabel() == "weight"
    assert ax.get_xlabel() == "key (token)"
    assert [label.get_text() for label in ax.get_xticklabels()] == TOKENS
    heights = [patch.get_height() for patch in ax.patches]
    assert heights == pytest.approx(values.tolist())
    assert ax.patches[1].get_facecolor() != ax.patches[0].get_facecolor()


def test_token_bars_rejects_a_length_mismatch() -> None:
    with pytest.raises(ValueError, match="one value per label"):
        token_bars(torch.zeros(3), TOKENS)


def test_convex_hull_plot_labels_and_points() -> None:
    values = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.2, 0.2]])
    outputs = torch.tensor([[0.3, 0.3], [0.1, 0.5]])
    ax = convex_hull_plot(values, outputs, title="outputs stay inside")
    assert ax.get_title() == "outputs stay inside"
    assert ax.get_xlabel() == "value dimension 0"
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["convex hull of the values", "values $v_j$", "outputs $o_i$"]
    assert ax.collections[0].get_offsets().shape == (4, 2)
    assert ax.collections[1].get_offsets().shape == (2, 2)


def test_convex_hull_plot_rejects_non_2d_points() -> None:
    with pytest.raises(ValueError, match=r"\(T_k, 2\)"):
        convex_hull_plot(torch.zeros(4, 3), torch.zeros(2, 3))


def test_convex_hull_keeps_only_the_corners() -> None:
    square = [[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5], [0.5, 0.0]]
    assert _convex_hull(square) == [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)]


def _quadratic_rows() -> list[CostRow]:
    return [
        CostRow(
            t=t,
            d=64,
            seconds=1e-9 * t**2,
            allocated_bytes=16 * t**2,
            largest_bytes=4 * t**2,
            score_bytes=4 * t**2,
        )
        for t in (128, 256, 512, 1024)
    ]


def test_cost_plot_draws_log_log_axes_with_the_fitted_slope() -> None:
    time_ax, memory_ax = cost_plot(_quadratic_rows())
    for ax in (time_ax, memory_ax):
        assert ax.get_xscale() == "log"
        assert ax.get_yscale() == "log"
        assert ax.get_xlabel() == "sequence length T"
        texts = [text.get_text() for text in ax.texts]
        assert "fitted slope ≈ 2.00" in texts
    assert time_ax.get_ylabel() == "time per call (ms)"
    assert memory_ax.get_ylabel() == "memory (MiB)"
    assert [label.get_text() for label in time_ax.get_xticklabels()] == ["128", "256", "512", "1024"]
    memory_legend = [text.get_text() for text in memory_ax.get_legend().get_texts()]
    assert "formula: 4·T² bytes" in memory_legend
    fit_label = [text.get_text() for text in time_ax.get_legend().get_texts()][1]
    assert fit_label == "fit: slope 2.00"


def test_cost_plot_draws_on_given_axes_and_needs_two_rows() -> None:
    _, axes = plt.subplots(1, 2)
    assert cost_plot(_quadratic_rows(), axes=(axes[0], axes[1])) == (axes[0], axes[1])
    with pytest.raises(ValueError, match="at least two"):
        cost_plot(_quadratic_rows()[:1])


def test_attention_heatmap_still_labels_tokens() -> None:
    ax = attention_heatmap(torch.full((4, 4), 0.25), TOKENS, TOKENS, title="uniform")
    assert ax.get_title() == "uniform"
    assert [label.get_text() for label in ax.get_yticklabels()] == TOKENS


def test_feature_heatmap_labels_tokens_and_features() -> None:
    features = ["noun", "water"]
    ax = feature_heatmap(torch.tensor([[0.0, 1.0], [1.0, 0.2], [0.0, 0.0], [1.0, 1.0]]), TOKENS, features)
    assert ax.get_xlabel() == "feature"
    assert ax.get_ylabel() == "token"
    assert [label.get_text() for label in ax.get_xticklabels()] == features
    assert [label.get_text() for label in ax.get_yticklabels()] == TOKENS


def test_mask_heatmap_draws_two_colours_named_attends_and_masked() -> None:
    mask = torch.ones(4, 4, dtype=torch.bool).tril()  # (T_q, T_k)
    ax = mask_heatmap(mask, TOKENS, TOKENS, title="causal")
    (image,) = ax.get_images()
    assert image.cmap.N == 2  # two colours, not a continuous scale
    drawn = image.to_rgba(image.get_array())  # (T_q, T_k, 4)
    colours = {tuple(rgba) for rgba in drawn.reshape(-1, 4).tolist()}
    assert len(colours) == 2
    assert tuple(drawn[0, 0]) == tuple(drawn[3, 3]) != tuple(drawn[0, 3])  # attends / masked
    (bar,) = [other for other in ax.figure.axes if other is not ax]
    assert [label.get_text() for label in bar.get_yticklabels()] == ["masked", "attends"]
    assert ax.get_title() == "causal"
    assert [label.get_text() for label in ax.get_yticklabels()] == TOKENS


def test_token_bars_in_shared_rows_name_the_keys_once() -> None:
    _, axes = plt.subplots(2, 1, sharex=True)
    for ax in axes:
        token_bars(torch.tensor([0.1, 0.6, 0.0, 0.3]), TOKENS, ax=ax)
    assert [ax.get_xlabel() for ax in axes] == ["", "key (token)"]


def test_causal_tiles_skip_above_the_diagonal_and_mask_across_it() -> None:
    from attn_course.plots.flash import FULL, MASKED, SKIPPED, causal_tiles

    # T_q = 10, T_k = 16, blocks of 4: query block 0 sits at positions 6-9 (bottom-right aligned)
    assert causal_tiles(10, 16, 4).tolist() == [
        [FULL, MASKED, MASKED, SKIPPED],
        [FULL, FULL, MASKED, MASKED],
        [FULL, FULL, FULL, MASKED],
    ]
    square = causal_tiles(4096, 4096, 256)  # (16, 16): r + 1 tiles in query block r, the last masked
    assert int((square > SKIPPED).sum()) == 16 * 17 // 2
    assert int((square == MASKED).sum()) == 16
    assert (causal_tiles(8, 2, 4)[0] == SKIPPED).all()  # T_q > T_k: the first block sees no key


def test_plot_causal_tiles_labels_every_tile_and_block() -> None:
    from attn_course.plots.flash import plot_causal_tiles

    ax = plot_causal_tiles(10, 16, 4)
    assert [t.get_text() for t in ax.texts] == ["full", "mask", "mask", "skip"] + ["full"] * 2 + [
        "mask"
    ] * 2 + ["full"] * 3 + ["mask"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["keys 0-3", "keys 4-7", "keys 8-11", "keys 12-15"]
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == "queries 8-9"


def test_label_log_axis_labels_a_line_within_one_decade() -> None:
    from attn_course.plots.flash import label_log_axis

    _, ax = plt.subplots()
    ax.plot([256, 2048], [0.16, 68.0])
    ax.set_yscale("log")
    label_log_axis(ax)
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if 0.16 <= t.get_position()[1] <= 0.6]
    assert labels == ["0.2", "0.5"]
