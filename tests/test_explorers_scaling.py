"""Tests of attn_course/explorers/scaling.py: the scaling explorer, without a browser."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attn_course.attention import dot_product_scores, softmax  # noqa: E402
from attn_course.demos.sentence import TOKENS, example_sentence  # noqa: E402
from attn_course.explorers.scaling import (  # noqa: E402
    ScalingExplorer,
    figure_png,
    query_weights,
    scaling_grid,
    token_button_width,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BANK, RIVER = TOKENS.index("bank"), TOKENS.index("river")


@pytest.fixture
def sentence():
    return example_sentence(d_k=64)


@pytest.mark.parametrize("query", range(len(TOKENS)))
@pytest.mark.parametrize("factor", [0.5, 1.0, 8.0, 64.0])
def test_query_weights_is_one_row_of_scaled_softmax(sentence, query: int, factor: float) -> None:
    expected = softmax(dot_product_scores(sentence.q, sentence.k) / factor, dim=-1)[query]  # (T,)
    actual = query_weights(sentence.q, sentence.k, query, factor)  # (T,)
    assert actual.shape == (len(TOKENS),)
    torch.testing.assert_close(actual, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(actual.sum(), torch.tensor(1.0), atol=1e-6, rtol=0)


def test_query_weights_at_sqrt_d_k_are_the_readable_ones(sentence) -> None:
    readable = example_sentence()  # 6 readable dimensions, no spreading
    expected = softmax(dot_product_scores(readable.q, readable.k)[BANK], dim=-1)  # (T,)
    actual = query_weights(sentence.q, sentence.k, BANK, math.sqrt(64))  # (T,)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)
    assert int(actual.argmax()) == RIVER


def test_query_weights_sharpen_as_the_factor_shrinks(sentence) -> None:
    factors = [64.0, 32.0, 8.0, 4.0, 1.0, 0.5]
    top = [query_weights(sentence.q, sentence.k, BANK, f).max().item() for f in factors]
    assert all(a < b for a, b in zip(top, top[1:], strict=False)), top
    assert top[-1] > 0.999  # one-hot on "river"
    assert top[0] < 0.2  # close to uniform 1/7


def test_query_weights_rejects_a_non_positive_factor(sentence) -> None:
    with pytest.raises(ValueError, match="positive"):
        query_weights(sentence.q, sentence.k, BANK, 0.0)


def test_explorer_starts_at_sqrt_d_k_on_bank(sentence) -> None:
    explorer = ScalingExplorer(sentence.q, sentence.k, sentence.tokens)
    assert explorer.slider.value == pytest.approx(8.0)
    assert explorer.slider.min <= math.log2(0.5) and explorer.slider.max >= math.log2(64)
    assert explorer.token_picker.value == BANK
    assert [label for label, _ in explorer.token_picker.options] == list(TOKENS)
    torch.testing.assert_close(explorer.weights, query_weights(sentence.q, sentence.k, BANK, 8.0))
    assert bytes(explorer.image.value).startswith(PNG_SIGNATURE)
    assert "river" in explorer.readout.value
    assert explorer.slider in explorer.widget.children
    assert explorer.token_picker in explorer.widget.children
    plt.close("all")


def test_moving_the_slider_updates_the_weights_and_the_chart(sentence) -> None:
    explorer = ScalingExplorer(sentence.q, sentence.k, sentence.tokens)
    at_sqrt_d_k, image_before = explorer.weights.clone(), bytes(explorer.image.value)

    explorer.slider.value = 1.0
    sharp = explorer.weights.clone()
    torch.testing.assert_close(sharp, query_weights(sentence.q, sentence.k, BANK, 1.0))
    assert sharp.max() > at_sqrt_d_k.max()
    assert bytes(explorer.image.value) != image_before
    heights = [patch.get_height() for patch in explorer.ax.patches]
    torch.testing.assert_close(torch.tensor(heights), sharp.double(), atol=1e-6, rtol=0)

    explorer.slider.value = 64.0
    assert explorer.factor == pytest.approx(64.0)
    assert explorer.weights.max() < at_sqrt_d_k.max()
    assert "64.00" in explorer.readout.value


def test_picking_another_token_shows_its_row(sentence) -> None:
    explorer = ScalingExplorer(sentence.q, sentence.k, sentence.tokens)
    explorer.token_picker.value = TOKENS.index("was")
    assert explorer.query == TOKENS.index("was")
    expected = query_weights(sentence.q, sentence.k, TOKENS.index("was"), 8.0)
    torch.testing.assert_close(explorer.weights, expected)
    assert "'was'" in explorer.ax.get_title()


def test_token_buttons_are_wide_enough_for_the_longest_token(sentence) -> None:
    """Issue 46: at 64 px the button of "muddy" read "mud…"."""
    explorer = ScalingExplorer(sentence.q, sentence.k, sentence.tokens)
    width = explorer.token_picker.style.button_width
    assert width == token_button_width(sentence.tokens)
    assert int(width.removesuffix("px")) >= 9 * len("muddy") + 30
    widths = [int(token_button_width(["a", word]).removesuffix("px")) for word in ("muddy", "considerably")]
    assert widths[1] > widths[0]


def test_explorer_rejects_mismatched_tokens(sentence) -> None:
    with pytest.raises(ValueError, match="one token per query"):
        ScalingExplorer(sentence.q, sentence.k, sentence.tokens[:-1])


def test_explorer_does_not_leave_pyplot_figures_behind(sentence) -> None:
    plt.close("all")
    ScalingExplorer(sentence.q, sentence.k, sentence.tokens).slider.value = 2.0
    assert plt.get_fignums() == []  # nothing for the inline backend to show twice


def test_scaling_grid_draws_one_panel_per_factor(sentence) -> None:
    factors = (1.0, 4.0, 8.0, 32.0)
    fig = scaling_grid(sentence.q, sentence.k, sentence.tokens, query=BANK, factors=factors)
    assert len(fig.axes) == len(factors)
    for ax, factor in zip(fig.axes, factors, strict=True):
        heights = torch.tensor([patch.get_height() for patch in ax.patches])
        expected = query_weights(sentence.q, sentence.k, BANK, factor).double()
        torch.testing.assert_close(heights, expected, atol=1e-6, rtol=0)
        assert f"{factor:g}" in ax.get_title()
    assert "√d_k" in fig.axes[2].get_title()
    plt.close(fig)


def test_figure_png_renders_a_figure_without_pyplot() -> None:
    figure = Figure(figsize=(2, 1))
    FigureCanvasAgg(figure)
    figure.add_subplot().plot([0, 1], [1, 0])
    assert figure_png(figure).startswith(PNG_SIGNATURE)
